"""scripts/vocab_errors.py: its word-by-word alignment agrees with the judge's edit count."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from polyvox.asr.wer import align

_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "vocab_errors.py"
_spec = importlib.util.spec_from_file_location("vocab_errors", _SCRIPT)
vocab_errors = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(vocab_errors)

_words = st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=8)


@given(_words, _words)
def test_wrong_words_plus_insertions_is_the_edit_distance(reference, hypothesis) -> None:
    wrong, insertions = vocab_errors.wrong_words(reference, hypothesis)
    assert len(wrong) == len(reference)
    assert sum(wrong) + insertions == sum(align(reference, hypothesis))


def test_errors_are_put_on_the_words_that_were_missed() -> None:
    wrong, insertions = vocab_errors.wrong_words(
        ["josephine", "baked", "a", "lemon", "tart"], ["justine", "baked", "a", "lemon", "tart", "today"])
    assert wrong == [True, False, False, False, False] and insertions == 1
    inside, outside, inserted = vocab_errors.tally(
        [{"reference": "Josephine baked a lemon tart.", "transcript": "Justine baked a lemon."}],
        known={"baked", "a", "lemon"})
    assert inside == [0, 3] and outside == [2, 2] and inserted == 0
