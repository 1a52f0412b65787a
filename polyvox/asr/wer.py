"""Word error rate: normalize both texts to plain words, then count word edits.

    corpus WER = (substitutions + deletions + insertions) / reference words,
                 summed over all utterances (not the mean of per-utterance rates)

Normalization lowercases, spells numbers as words (`numbers.spell_numbers`), splits on
hyphens, joins dotted letters ("p.m.") and drops all other punctuation, so "It's 3:45." and "its three forty-five"
score 0.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from polyvox.asr.numbers import drop_number_and, spell_numbers

# Curly quotes and the various dashes, folded to ASCII before anything else.
_FOLD = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u02bc": "'",
        "\u2010": "-",
        "\u2011": "-",
        "\u2012": "-",
        "\u2013": "-",
        "\u2014": "-",
        "\u2212": "-",
    }
)
_APOSTROPHE = re.compile(r"(?<=\w)'(?=\w)")  # inside a word: don't -> dont
_DOTTED_LETTERS = re.compile(r"(?<!\w)[a-z](?:\.[a-z])+\.?(?!\w)")  # p.m. -> pm, u.s. -> us
_SEPARATOR = re.compile(r"[^a-z0-9]+")  # all that is left between words


def _strip_accents(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(char for char in decomposed if not unicodedata.combining(char))


def normalize_for_wer(text: str) -> list[str]:
    """Text -> the words WER compares: "The 3rd time, it's $5!" ->
    ['the', 'third', 'time', 'its', 'five', 'dollars']."""
    text = _strip_accents(text.translate(_FOLD))
    text = text.replace("&", " and ")
    text = spell_numbers(text).lower()  # before punctuation goes: "$", ":", "%", "."
    text = _APOSTROPHE.sub("", text)
    text = _DOTTED_LETTERS.sub(lambda match: match[0].replace(".", ""), text)
    return drop_number_and(_SEPARATOR.sub(" ", text).split())


@dataclass(frozen=True)
class UtteranceErrors:
    """One reference / hypothesis pair, as normalized words and minimal edit counts."""

    reference: tuple[str, ...]
    hypothesis: tuple[str, ...]
    substitutions: int
    deletions: int  # reference words the hypothesis lacks
    insertions: int  # hypothesis words the reference lacks

    @property
    def num_edits(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    @property
    def num_reference_words(self) -> int:
        return len(self.reference)

    @property
    def wer(self) -> float:
        return _rate(self.num_edits, self.num_reference_words)


@dataclass(frozen=True)
class CorpusErrors:
    """All utterances of a corpus; `wer` is total edits over total reference words."""

    utterances: tuple[UtteranceErrors, ...]

    @property
    def num_edits(self) -> int:
        return sum(utterance.num_edits for utterance in self.utterances)

    @property
    def num_reference_words(self) -> int:
        return sum(utterance.num_reference_words for utterance in self.utterances)

    @property
    def wer(self) -> float:
        return _rate(self.num_edits, self.num_reference_words)


def _rate(num_edits: int, num_reference_words: int) -> float:
    """Edits per reference word; with no reference words, 0 if nothing was inserted,
    else infinity (any insertion into nothing is infinitely wrong)."""
    if num_reference_words == 0:
        return 0.0 if num_edits == 0 else float("inf")
    return num_edits / num_reference_words


def align(reference: Sequence[str], hypothesis: Sequence[str]) -> tuple[int, int, int]:
    """Minimal (substitutions, deletions, insertions) turning reference into hypothesis.

    Levenshtein distance over words, all edits cost 1. Each cell keeps the counts of one
    cheapest path; among equally cheap paths, the one with the most substitutions wins
    (fewest separate deletions and insertions), a deterministic and conventional choice.
    """
    # NOTE: row[j] = (cost, substitutions, deletions, insertions) for reference[:i]
    # against hypothesis[:j]; tuples compare cost first, then prefer more substitutions
    # via the negated count.
    previous = [(j, 0, 0, j) for j in range(len(hypothesis) + 1)]
    for i, reference_word in enumerate(reference, start=1):
        current = [(i, 0, i, 0)]
        for j, hypothesis_word in enumerate(hypothesis, start=1):
            cost, subs, dels, ins = previous[j - 1]
            is_match = reference_word == hypothesis_word
            diagonal = (cost + (0 if is_match else 1), subs + (0 if is_match else 1), dels, ins)
            cost, subs, dels, ins = previous[j]
            deletion = (cost + 1, subs, dels + 1, ins)
            cost, subs, dels, ins = current[j - 1]
            insertion = (cost + 1, subs, dels, ins + 1)
            current.append(min(diagonal, deletion, insertion, key=lambda c: (c[0], -c[1])))
        previous = current
    _, subs, dels, ins = previous[-1]
    return subs, dels, ins


def utterance_errors(reference: str, hypothesis: str) -> UtteranceErrors:
    """Normalize both texts and count the word edits between them."""
    reference_words = normalize_for_wer(reference)
    hypothesis_words = normalize_for_wer(hypothesis)
    subs, dels, ins = align(reference_words, hypothesis_words)
    return UtteranceErrors(tuple(reference_words), tuple(hypothesis_words), subs, dels, ins)


def corpus_errors(references: Sequence[str], hypotheses: Sequence[str]) -> CorpusErrors:
    """Per-utterance edit counts of paired references and hypotheses."""
    if len(references) != len(hypotheses):
        raise ValueError(
            f"{len(references)} references but {len(hypotheses)} hypotheses; "
            "pass one hypothesis per reference, in the same order."
        )
    return CorpusErrors(
        tuple(utterance_errors(ref, hyp) for ref, hyp in zip(references, hypotheses))
    )


def word_error_rate(references: Sequence[str], hypotheses: Sequence[str]) -> float:
    """Corpus WER: total word edits / total reference words (see `corpus_errors` for the
    per-utterance details)."""
    return corpus_errors(references, hypotheses).wer
