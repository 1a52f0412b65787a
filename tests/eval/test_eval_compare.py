"""polyvox.eval.compare: two eval files compared sentence by sentence (paired sign test)."""

from __future__ import annotations

import json
import math

import pytest

from polyvox.eval.compare import compare, main, sign_test


def _document(edits: list[tuple[str, int]], texts: list[str] | None = None) -> dict:
    sentences = [{"kind": kind, "number": i + 1, "text": (texts or [])[i] if texts else
                  f"{kind} sentence {i}", "substitutions": count, "deletions": 0,
                  "insertions": 0} for i, (kind, count) in enumerate(edits)]
    return {"runs": [{"label": "x", "sentences": sentences}]}


def test_the_sign_test_is_the_exact_binomial_tail() -> None:
    assert sign_test(0, 0) == 1.0
    assert sign_test(5, 5) == 1.0
    assert sign_test(10, 0) == pytest.approx(2 / 2**10)
    assert sign_test(0, 10) == sign_test(10, 0)
    # 8 of 10 one way: P(X <= 2) = (1 + 10 + 45) / 1024, doubled
    assert sign_test(8, 2) == pytest.approx(2 * 56 / 1024)
    assert math.isclose(sign_test(14, 14), 1.0)


def test_counts_per_kind_leave_ties_out() -> None:
    before = _document([("read", 2), ("read", 0), ("read", 1), ("service", 3)])
    after = _document([("read", 0), ("read", 0), ("read", 4), ("service", 1)])
    rows = {row.kind: row for row in compare(before, after)}
    assert (rows["read"].better, rows["read"].worse) == (1, 1)  # the tie left out
    assert (rows["read"].edits_before, rows["read"].edits_after) == (3, 4)
    assert (rows["service"].better, rows["service"].worse) == (1, 0)
    assert (rows["all"].sentences, rows["all"].better, rows["all"].worse) == (4, 2, 1)
    assert rows["all"].p_value == pytest.approx(1.0)


def test_different_sentences_are_refused(tmp_path, capsys) -> None:
    before = _document([("read", 1), ("read", 0)])
    after = _document([("read", 1), ("read", 0)], texts=["another", "text"])
    with pytest.raises(ValueError, match="same sentences"):
        compare(before, after)
    with pytest.raises(ValueError, match="no per-sentence"):
        compare({"runs": [{"sentences": []}]}, after)
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for path, document in zip(paths, (before, after)):
        path.write_text(json.dumps(document))
    with pytest.raises(SystemExit, match="same sentences"):
        main([str(p) for p in paths])
    paths[1].write_text(json.dumps(_document([("read", 0), ("read", 0)])))
    main([str(p) for p in paths])
    out = capsys.readouterr().out
    assert "| read | 2 | 1 | 0 | 1 -> 0 | 1.000 |" in out


def test_a_file_with_several_runs_needs_one_picked(tmp_path, capsys) -> None:
    """`polyvox eval --teacher` writes the voice and its teacher in one file: compared
    with each other by index."""
    student = _document([("read", 3), ("read", 1), ("service", 0)])
    teacher = _document([("read", 1), ("read", 1), ("service", 2)])
    both = {"runs": student["runs"] + teacher["runs"]}
    with pytest.raises(ValueError, match="holds 2 runs"):
        compare(both, both)
    with pytest.raises(ValueError, match="no run 2"):
        compare(both, both, runs=(0, 2))
    rows = {row.kind: row for row in compare(both, both, runs=(1, 0))}
    assert (rows["read"].better, rows["read"].worse) == (0, 1)
    assert (rows["service"].better, rows["service"].worse) == (1, 0)
    path = tmp_path / "both.json"
    path.write_text(json.dumps(both))
    main([str(path), str(path), "--before-run", "1", "--after-run", "0"])
    assert "| read | 2 | 0 | 1 | 2 -> 4 | 1.000 |" in capsys.readouterr().out
