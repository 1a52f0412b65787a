"""`polyvox serve` options, and a model that cannot load: a clear error, exit status 2."""

from __future__ import annotations

import argparse
import subprocess
import sys

from polyvox.server.cli import add_serve_parser, config_from_args


def test_serve_parser_defaults_and_limits() -> None:
    parser = argparse.ArgumentParser(prog="polyvox")
    add_serve_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["serve", "--model", "pocket/english_2m", "--max-running", "8",
                              "--max-queued", "3", "--api-key", "k"])
    assert (args.host, args.port) == ("127.0.0.1", 8000)  # this machine only, by default
    config = config_from_args(args)
    assert (config.max_streams, config.max_queued, config.api_key) == (8, 3, "k")
    assert config.engine.max_running == 8
    assert config.engine.chaining is None  # the model's preference
    args = parser.parse_args(["serve", "--chaining", "audio"])
    assert config_from_args(args).engine.chaining == "audio"
    assert config.ttfa_floor_seconds == 0.25  # first audio within 2x idle or 250 ms
    args = parser.parse_args(["serve", "--ttfa-floor-ms", "0"])
    assert config_from_args(args).ttfa_floor_seconds == 0.0  # 2x idle alone


def test_an_unknown_chaining_is_refused_by_the_parser(capsys) -> None:
    import pytest

    parser = argparse.ArgumentParser(prog="polyvox")
    add_serve_parser(parser.add_subparsers(dest="command"))
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--chaining", "sometimes"])
    assert "invalid choice: 'sometimes'" in capsys.readouterr().err


def test_a_model_that_cannot_load_stops_the_server(tmp_path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "polyvox.server", "--model", "pocket/nope", "--port", "0",
         "--data-dir", str(tmp_path), "--log-level", "warning"],
        capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2, result.stderr
    assert "error: cannot load model 'pocket/nope': unknown Pocket TTS config" in result.stderr
    assert "Traceback" not in result.stderr
