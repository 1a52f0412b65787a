"""Where a sentence splitter may cut *normalized* text.

Split after normalization, never before: in spoken output every number, time, email,
code and abbreviation is already words ("3.5" -> "three point five", "Dr." -> "Doctor",
"j.smith@example.com" -> "j dot smith at example dot com"), so a period, "!" or "?"
followed by whitespace is a real sentence end. Commas are not split points: the
normalizer uses them for pauses inside phone numbers and codes.
"""

from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"[.!?…]+['\")\]]*(?=\s|\Z)")


def sentence_boundaries(spoken: str, *, is_final: bool = True) -> list[int]:
    """Indices just past each sentence end in normalized text.

    "Hi. Call five five five, one two three." -> [3, 40]. With `is_final=False` (the text
    may still grow, as with `StreamingNormalizer.feed` output so far) a sentence end at the
    very end of `spoken` is not reported: more punctuation ("...") might follow.
    """
    ends = [match.end() for match in _SENTENCE_END.finditer(spoken)]
    if not is_final and ends and ends[-1] == len(spoken):
        ends.pop()
    return ends


def split_sentences(spoken: str) -> list[str]:
    """Normalized text cut at its sentence ends; whitespace stays with the next sentence,
    so "".join(split_sentences(spoken)) == spoken.
    """
    pieces, start = [], 0
    for end in sentence_boundaries(spoken):
        pieces.append(spoken[start:end])
        start = end
    if start < len(spoken):
        pieces.append(spoken[start:])
    return pieces
