"""Building the compiled CPU kernels: an interrupted or concurrent build never blocks a start.

Each start runs in its own process against a temporary cache (POLYVOX_KERNEL_CACHE), with
a timeout, so a start that would wait forever fails the test instead of hanging it. One
real build (~30-70 s) is shared by the module: it restarts after a build killed midway.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from polyvox.models.layers import cpu_kernels

pytestmark = pytest.mark.skipif(not cpu_kernels.can_build(),
                                reason="no C++ compiler: the engine keeps the plain-torch paths")

_BUILD_TIMEOUT_S = 400  # a build takes ~30 s alone, a few times that on a loaded machine

# A start: asks for both kernels, times the asking (not torch's import), and with
# kernels checks them on small inputs against plain torch. One JSON line on stdout.
_START = r"""
import json, logging, sys, time
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
import torch
import torch.nn.functional as F
import torch.utils.cpp_extension
if "--no-compiler" in sys.argv:
    def refuse(*args, **kwargs):
        raise AssertionError("rebuilt although the cache held a finished build")
    torch.utils.cpp_extension.load_inline = refuse
from polyvox.models.layers import cpu_kernels
began = time.monotonic()
elu, paged = cpu_kernels.elu_bf16(), cpu_kernels.paged_decode_attention()
seconds = time.monotonic() - began
correct = None
if elu is not None and paged is not None:
    x = torch.randn(4096).to(torch.bfloat16)
    ulps = (elu(x).view(torch.int16).int() - F.elu(x).view(torch.int16).int()).abs().max()
    q, k, v = torch.randn(2, 4, 8), torch.randn(16, 2, 8), torch.randn(16, 2, 8)
    slots, offsets = torch.tensor([3, 9, 1, 4, 12, 7, 0]), torch.tensor([0, 3, 7])
    rows = []
    for row in range(2):
        mine = slots[offsets[row]:offsets[row + 1]]
        keys, values = (t[mine].repeat_interleave(2, dim=1) for t in (k, v))  # [N, H, D]
        weights = torch.einsum("hd,nhd->hn", q[row], keys).mul(0.3).softmax(-1)
        rows.append(torch.einsum("hn,nhd->hd", weights, values))
    correct = bool(ulps <= 1) and torch.allclose(paged(q, k, v, slots, offsets, 0.3),
                                                 torch.stack(rows), atol=1e-5)
print(json.dumps({"seconds": seconds, "elu": elu is not None, "paged": paged is not None,
                  "correct": correct}))
"""


def _environment(cache: Path, **extra: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name != "POLYVOX_CPU_KERNELS"}
    return {**env, "POLYVOX_KERNEL_CACHE": str(cache), **extra}


def _spawn(cache: Path, *args: str, **extra: str) -> subprocess.Popen[str]:
    # NOTE: its own session, so a kill reaches the compiler it started as well.
    return subprocess.Popen([sys.executable, "-c", _START, *args], env=_environment(cache, **extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _start(cache: Path, *args: str, timeout: float = 120, **extra: str) -> tuple[dict, str]:
    """Runs one start to its end; its JSON line and its log."""
    process = _spawn(cache, *args, **extra)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"a start hung for {timeout} s:\n{err[-3000:]}")
    assert process.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1]), err


def _build_directory(cache: Path) -> Path:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("POLYVOX_KERNEL_CACHE", str(cache))
        return cpu_kernels.cache_directory()


def _kill_midway(cache: Path, directory: Path) -> int:
    """Starts a build and kills it (and its compiler) once torch's own build lock exists
    in the temporary directory: what Ctrl-C or a killed first `make serve` leaves."""
    process = _spawn(cache)
    deadline = time.monotonic() + _BUILD_TIMEOUT_S
    try:
        while not list(directory.parent.glob(directory.name + ".build-*/lock")):
            assert process.poll() is None, "the build finished before it could be interrupted"
            assert time.monotonic() < deadline, "the build never started"
            time.sleep(0.05)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
    return process.pid


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, str]:
    """A cache where a build was killed midway, an unmarked directory sits where the
    finished build goes, and then a start built the kernels: its result and log."""
    cache = tmp_path_factory.mktemp("kernels")
    directory = _build_directory(cache)
    dead = _kill_midway(cache, directory)
    lock = directory.with_name(directory.name + ".lock")
    assert lock.read_text().startswith(f"pid {dead} ")  # the dead builder's lock file stays
    directory.mkdir()
    (directory / f"{directory.name}.so").write_bytes(b"half written")
    result, log = _start(cache, timeout=_BUILD_TIMEOUT_S)
    return cache, result, log


def test_start_after_an_interrupted_build_builds_instead_of_waiting(built_cache) -> None:
    """A build killed midway leaves our lock file, torch's lock in its temporary and an
    unmarked directory: the next start clears them, builds and gets working kernels."""
    cache, result, log = built_cache
    directory = _build_directory(cache)
    assert (result["elu"], result["paged"], result["correct"]) == (True, True, True), log
    assert (directory / "BUILT").is_file()
    assert not list(directory.parent.glob("*.build-*"))  # the killed build's temporary is gone
    assert "being built by" not in log


def test_start_after_a_build_loads_the_cache_without_building(built_cache) -> None:
    """A later start (any virtual environment: the cache is not under the venv) loads the
    finished build as it is: no compiler run, no temporary, the same library file."""
    cache, _, _ = built_cache
    directory = _build_directory(cache)
    library = directory / f"{directory.name}.so"
    before = library.stat()
    result, log = _start(cache, "--no-compiler")
    assert (result["elu"], result["paged"], result["correct"]) == (True, True, True), log
    assert result["seconds"] < 10
    after = library.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert not list(directory.parent.glob("*.build-*"))


def test_start_during_a_live_build_takes_the_plain_path_at_once(tmp_path: Path) -> None:
    """While another live process holds the build lock, a start does not wait for it: no
    kernels in that process, one line naming the builder, nothing built."""
    directory = _build_directory(tmp_path)
    directory.parent.mkdir(parents=True)
    lock = directory.with_name(directory.name + ".lock")
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, os, sys, time\n"
         "lock = open(sys.argv[1], 'a+')\n"
         "fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
         "lock.write(f'pid {os.getpid()} on here\\n'); lock.flush()\n"
         "print('locked', flush=True); time.sleep(300)\n", str(lock)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        result, log = _start(tmp_path, timeout=60)
    finally:
        holder.kill()
        holder.wait()
    assert (result["elu"], result["paged"]) == (False, False)
    assert result["seconds"] < 5
    assert f"being built by pid {holder.pid} on here" in log
    assert not directory.exists() and not list(directory.parent.glob("*.build-*"))


def test_switched_off_kernels_never_touch_the_cache(tmp_path: Path) -> None:
    """POLYVOX_CPU_KERNELS=0 keeps the plain paths without building or locking anything."""
    result, _ = _start(tmp_path, timeout=60, POLYVOX_CPU_KERNELS="0")
    assert (result["elu"], result["paged"]) == (False, False)
    assert not list(tmp_path.iterdir())
