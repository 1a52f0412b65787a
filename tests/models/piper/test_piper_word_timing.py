"""Piper word timings: espeak-ng's words against the text's, when they do not pair up."""

from __future__ import annotations

from polyvox.models.piper.word_timing import _align


def test_merged_words_share_their_frames_and_the_rest_pair_up() -> None:
    # "of the milk": espeak-ng says "ʌvðə" for "of the".
    lengths = [2, 2, 4]  # each text word phonemized alone
    spoken = [(4, 10, 20), (4, 20, 40)]  # (phonemes, start, end frame)
    assert _align(lengths, spoken) == ((10, 15), (15, 20), (20, 40))


def test_a_word_espeak_splits_spans_its_parts() -> None:
    lengths = [3, 6]
    spoken = [(3, 0, 5), (3, 6, 10), (3, 11, 15)]
    assert _align(lengths, spoken) == ((0, 5), (6, 15))
