"""When each word of a Piper clause is spoken, from the duration predictor's output.

Stage 1 gives every phoneme id a duration in frames; espeak-ng's words are the runs of
phonemes between spaces (`Phonemizer.phoneme_words`), so each of its words has exact
frames. Often they are the text's words, one to one; where they are not (espeak-ng runs
"of the" or "that it" together, or splits an abbreviation), the two sequences are aligned
by length in phonemes (a small dynamic program over each text word phonemized alone), a
merged word's frames shared between its text words in proportion to their phonemes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from polyvox.models.piper.phonemes import PhonemeWord

# Moves of the alignment: (text words, espeak words) taken together, and their extra cost.
_MOVES = ((1, 1, 0.0), (2, 1, 1.0), (3, 1, 2.0), (1, 2, 1.0), (1, 0, 2.0), (0, 1, 2.0))


def clause_word_frames(text: str, sentences: Sequence[tuple[list[PhonemeWord], torch.Tensor]],
                       phonemize: Callable[[str], str]) -> tuple[tuple[int, int], ...]:
    """For each whitespace-separated word of `text`, the frames [start, end) it is spoken
    in, from the clause's first frame. `sentences`: each espeak-ng sentence of the clause,
    its words and its durations [T_ids] (frames per id), in order; `phonemize`: a word's
    phonemes (called only when the words do not pair up one to one)."""
    spoken: list[tuple[str, int, int]] = []  # espeak words: phonemes, start, end frame
    offset = 0
    for words, durations in sentences:
        bounds = [0, *torch.cumsum(durations.long(), 0).tolist()]
        last = len(bounds) - 1
        spoken += [(w.phonemes, offset + bounds[w.start], offset + bounds[min(w.end, last)])
                   for w in words]
        offset += max(1, bounds[-1])  # VITS makes at least one frame
    words = text.split()
    if len(words) == len(spoken):
        return tuple((start, end) for _, start, end in spoken)
    if not spoken:
        return tuple((0, offset) for _ in words)
    return _align([_length(phonemize(word)) for word in words],
                  [(_length(p), start, end) for p, start, end in spoken])


def _length(phonemes: str) -> int:
    """Phonemes, not counting stress, length marks or punctuation."""
    return sum(char.isalpha() and char not in "ˈˌː" for char in phonemes)


def _align(lengths: list[int], spoken: list[tuple[int, int, int]]
           ) -> tuple[tuple[int, int], ...]:
    """Text words (their lengths in phonemes) against espeak-ng's words (length, start
    frame, end frame): the frames of each text word."""
    num_words, num_spoken = len(lengths), len(spoken)
    inf = float("inf")
    cost = [[inf] * (num_spoken + 1) for _ in range(num_words + 1)]
    back: list[list[tuple[int, int] | None]] = [[None] * (num_spoken + 1)
                                                for _ in range(num_words + 1)]
    cost[0][0] = 0.0
    for i in range(num_words + 1):
        for j in range(num_spoken + 1):
            if cost[i][j] == inf:
                continue
            for di, dj, extra in _MOVES:
                if i + di > num_words or j + dj > num_spoken:
                    continue
                text_length = sum(lengths[i: i + di])
                spoken_length = sum(length for length, _, _ in spoken[j: j + dj])
                step = cost[i][j] + extra + abs(text_length - spoken_length) / max(
                    1.0, spoken_length)
                if step < cost[i + di][j + dj]:
                    cost[i + di][j + dj], back[i + di][j + dj] = step, (di, dj)
    moves = []
    i, j = num_words, num_spoken
    while (i, j) != (0, 0):
        move = back[i][j]
        assert move is not None
        moves.append((i - move[0], j - move[1], move[0], move[1]))
        i, j = i - move[0], j - move[1]
    frames: list[tuple[int, int]] = []
    last_end = 0
    for i, j, di, dj in reversed(moves):
        if dj == 0:  # a word espeak-ng did not speak: no time, where it stands
            frames += [(last_end, last_end)] * di
            continue
        start, end = spoken[j][1], spoken[j + dj - 1][2]
        if di == 0:
            continue
        shares = [max(1, length) for length in lengths[i: i + di]]
        edges = [start + round((end - start) * sum(shares[:k]) / sum(shares))
                 for k in range(di + 1)]
        frames += list(zip(edges[:-1], edges[1:]))
        last_end = end
    return tuple(frames)
