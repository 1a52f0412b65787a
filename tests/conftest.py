"""Suite-wide rules. With POLYVOX_STRICT_SKIPS=1 (set by .ci/run) a skipped test outside
tests/gpu fails the run: CI must not pass by silently not testing the browser page, the
compiled kernels or the Piper voice. tests/gpu skips only where there is no CUDA GPU."""

from __future__ import annotations

import os

import pytest

_skipped: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not report.nodeid.replace("\\", "/").startswith("tests/gpu/"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        _skipped.append(f"{report.nodeid}: {reason}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _skipped and os.environ.get("POLYVOX_STRICT_SKIPS") == "1" and exitstatus == 0:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"\nPOLYVOX_STRICT_SKIPS: {len(_skipped)} test(s) skipped "
                                "outside tests/gpu; install what they need:", red=True)
            for line in _skipped:
                reporter.write_line(f"  {line}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
