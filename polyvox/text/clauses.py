"""Incremental clause splitting for streamed text.

Text arrives in pieces; a clause is ready once it provably ends: a sentence mark
(. ! ? …, possibly followed by closing quotes/brackets) followed by whitespace. A sentence
longer than the token cap is cut further after `,` `;` `:` followed by whitespace. The
rest waits for more text or for `flush()` at the end of the input.

The first clause of a text may have a smaller cap (`first_max_tokens`): a family whose
prefill cost grows with the clause (Piper's front) starts speaking sooner when its first
clause ends at the first comma. Without a comma the sentence stays whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_SENTENCE_END = re.compile(r"[.!?\u2026]+[\"'\u201d\u2019)\]\u00bb]*\s+")
_CLAUSE_END = re.compile(r"[,;:]\s+")
# Words the normalizer uses when it reads a phone number, code or card character by
# character, with commas between the groups: never cut a clause between two of those.
_SPELLED = {"zero", "oh", "one", "two", "three", "four", "five", "six", "seven", "eight",
            "nine", "dash", "dot", "at", "slash"}


def _is_spelled(word: str) -> bool:
    word = word.strip(",;:.").lower()
    return word in _SPELLED or len(word) == 1 or (len(word) == 3 and word[1] == "-")


class ClauseSplitter:
    def __init__(self, count_tokens: Callable[[str], int], max_tokens: int = 50,
                 first_max_tokens: int | None = None) -> None:
        self.count_tokens, self.max_tokens = count_tokens, max_tokens
        self.first_max_tokens = min(first_max_tokens or max_tokens, max_tokens)
        self.buffer = ""
        self.num_clauses = 0  # emitted so far

    def feed(self, text: str) -> list[str]:
        """Add text; return the clauses it completed (possibly none)."""
        self.buffer += text
        clauses: list[str] = []
        while True:
            match = _SENTENCE_END.search(self.buffer)
            if match is None:
                break
            sentence, self.buffer = self.buffer[: match.end()], self.buffer[match.end():]
            clauses += self._emit(self._cut_long(sentence))
        return clauses

    def flush(self) -> list[str]:
        """The end of the input: whatever is left is the last clause(s)."""
        rest, self.buffer = self.buffer, ""
        return self._emit(self._cut_long(rest))

    def _emit(self, clauses: list[str]) -> list[str]:
        clauses = [c for c in clauses if c]
        self.num_clauses += len(clauses)
        return clauses

    def _cut_long(self, sentence: str) -> list[str]:
        sentence = sentence.strip()
        first_cap = self.first_max_tokens if self.num_clauses == 0 else self.max_tokens
        if not sentence or self.count_tokens(sentence) <= first_cap:
            return [sentence]
        pieces, start = [], 0
        for match in _CLAUSE_END.finditer(sentence):
            before = sentence[: match.start()].split()[-1:]
            after = sentence[match.end():].split()[:1]
            if before and after and _is_spelled(before[0]) and _is_spelled(after[0]):
                continue  # inside a number or code read out group by group
            pieces.append(sentence[start: match.end()].strip())
            start = match.end()
        pieces.append(sentence[start:].strip())
        # Regroup consecutive pieces while they fit under the cap.
        clauses: list[str] = []
        for piece in pieces:
            cap = first_cap if len(clauses) == 1 else self.max_tokens
            if clauses and self.count_tokens(clauses[-1] + " " + piece) <= cap:
                clauses[-1] = clauses[-1] + " " + piece
            else:
                clauses.append(piece)
        return clauses


def split_text(text: str, count_tokens: Callable[[str], int], max_tokens: int = 50,
               first_max_tokens: int | None = None) -> list[str]:
    """All clauses of a complete text."""
    splitter = ClauseSplitter(count_tokens, max_tokens, first_max_tokens)
    return splitter.feed(text) + splitter.flush()
