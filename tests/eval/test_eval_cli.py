"""`polyvox eval`'s options: mistakes are clear errors, found before any model loads."""

from __future__ import annotations

import json

import pytest

from polyvox.cli import build_parser, main
from polyvox.eval.cli import select


def _fails(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Run `polyvox eval ARGS`; it must exit with status 2 and no traceback."""
    try:
        status = main(["eval", *args])
    except SystemExit as exit:  # argparse's own errors
        status = int(exit.code or 0)
    assert status == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_defaults_are_the_default_voice_on_the_whole_test_split() -> None:
    args = build_parser().parse_args(["eval"])
    assert (args.model, args.split, args.kind, args.normalize) == ("pocket/joe-ar", "test", "all",
                                                                  True)
    assert not args.teacher and not args.compare_normalize and args.limit is None


@pytest.mark.parametrize(("args", "message"), [
    (["--limit", "0"], "must be >= 1"),
    (["--threads", "0"], "must be >= 1"),
    (["--set", "train"], "invalid choice: 'train'"),
    (["--kind", "poetry"], "invalid choice: 'poetry'"),
    (["--model", "piper/joe", "--teacher"], "piper/joe has no teacher"),
    (["--model", "pocket/joe-ar", "--teacher", "--compare-normalize"], "choose one"),
    (["--compare-normalize", "--no-normalize"], "drop --no-normalize"),
    (["--model", "pocket/joe-ar", "--temperature", "-0.5"], "between 0 and 10"),
    (["--model", "pocket/joe-ar", "--head-draws", "3"], "1 or even"),
    (["--model", "pocket/joe-ar", "--speed", "9"], "between 0.25 and 4.0"),
    (["--model", "piper/joe", "--head-draws", "2", "--limit", "1"], "distilled student"),
])
def test_bad_options_are_clear_errors(capsys: pytest.CaptureFixture[str], args: list[str],
                                      message: str) -> None:
    assert message in _fails(capsys, *args)


def test_a_model_on_random_weights_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    err = _fails(capsys, "--model", "pocket/english_2m", "--limit", "1")
    assert "random weights" in err and "--weights" in err


def test_limit_takes_the_first_sentences_of_each_kind() -> None:
    items = select("test", "all", 3)
    assert [(item.kind, item.number) for item in items] == [
        ("read", 1), ("read", 2), ("read", 3), ("service", 1), ("service", 2), ("service", 3)]
    assert [item.kind for item in select("dev", "service", 2)] == ["service", "service"]
    assert len(select("test", "read", None)) >= 100


def test_precision_reaches_the_model_and_the_report(tmp_path, capsys) -> None:
    pytest.importorskip("faster_whisper")
    path = tmp_path / "run.json"
    assert main(["eval", "--model", "pocket/joe-ar", "--set", "dev", "--kind", "read",
                 "--limit", "1", "--precision", "bfloat16", "--threads", "1",
                 "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "seed 0, bfloat16, whisper" in out  # the header
    (run,) = json.loads(path.read_text())["runs"]
    assert run["label"] == "pocket/joe-ar, bfloat16"
