"""The built-in texts: enough distinct natural sentences, picked deterministically."""

from __future__ import annotations

import pytest

from polyvox.bench.texts import SENTENCES, pick_texts


def test_sentences_are_distinct_and_5_to_30_words() -> None:
    assert len(SENTENCES) >= 60
    assert len(set(SENTENCES)) == len(SENTENCES)
    for sentence in SENTENCES:
        assert 5 <= len(sentence.split()) <= 30, sentence
        assert sentence[0].isupper() and sentence[-1] in ".?!", sentence


def test_pick_is_deterministic() -> None:
    assert pick_texts(20, seed=3) == pick_texts(20, seed=3)
    assert pick_texts(20, seed=3) != pick_texts(20, seed=4)
    assert pick_texts(5, seed=3) == pick_texts(20, seed=3)[:5]


def test_pick_uses_every_sentence_before_repeating() -> None:
    picked = pick_texts(len(SENTENCES) + 10, seed=0)
    assert set(picked[: len(SENTENCES)]) == set(SENTENCES)
    assert pick_texts(0) == []
    with pytest.raises(ValueError):
        pick_texts(-1)
