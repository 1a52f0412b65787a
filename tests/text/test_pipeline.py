"""TextPipeline: every request's text is cleaned before normalization and splitting, with
normalization on or off, whole or in pieces."""

from __future__ import annotations

import pytest

from polyvox.text.pipeline import TextPipeline

DIRTY = "\ufeffMy name is J-O-N\x00-E-S.\u200b Call me at 3\u202e PM\u202c, caf\u200be\u0301. "
CLEAN = "My name is J-O-N-E-S. Call me at 3 PM, cafe\u0301. "


def _count_words(text: str) -> int:
    return len(text.split())


def _clauses(pieces: list[str], normalize: bool) -> list[str]:
    pipeline = TextPipeline(_count_words, max_tokens=50, normalize=normalize)
    clauses = [clause for piece in pieces for clause in pipeline.feed(piece)]
    return clauses + pipeline.flush()


@pytest.mark.parametrize("normalize", [True, False])
def test_control_and_format_characters_are_removed_with_or_without_normalization(
        normalize: bool) -> None:
    assert _clauses([DIRTY], normalize) == _clauses([CLEAN], normalize)


def test_clean_normalized_text() -> None:
    assert _clauses([DIRTY], normalize=True) == [
        "My name is J O N E S.", "Call me at three PM, caf\u00e9."]
    assert _clauses([DIRTY], normalize=False) == [
        "My name is J-O-N-E-S.", "Call me at 3 PM, caf\u00e9."]


@pytest.mark.parametrize("normalize", [True, False])
def test_pieces_give_the_clauses_of_the_whole(normalize: bool) -> None:
    whole = _clauses([DIRTY], normalize)
    for cut in range(len(DIRTY) + 1):
        assert _clauses([DIRTY[:cut], DIRTY[cut:]], normalize) == whole, cut
    assert _clauses(list(DIRTY), normalize) == whole


def test_only_control_and_format_characters_give_no_clause() -> None:
    assert _clauses(["\x00\u200b", "\ud800 \u202e", "\n"], normalize=True) == []
