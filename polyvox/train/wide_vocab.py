"""A wide English vocabulary for grammar version 3 of the teacher-data generator.

The hand-written word lists of polyvox.train.sentences hold ~1,900 words; a third of the
words in the evaluation sets' read prose are outside them, and those are where joe-ar's
extra errors sit (docs/distill.md, session 26). This module reads much larger lists from
three small MIT-licensed registry packages (the `train` extra): nouns, verbs and
adjectives from `wonderwords`, first and last names from `names` (US census lists), and
verb forms from `lemminflect`. Nothing is downloaded at run time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import NamedTuple

_WORD = re.compile(r"[a-z]{3,}")


class Verb(NamedTuple):
    """A verb's forms; wonderwords does not mark transitivity, the grammar uses each as one."""

    base: str
    past: str
    third: str  # third person singular present
    ing: str


@dataclass(frozen=True)
class WideVocab:
    nouns: tuple[str, ...]
    verbs: tuple[Verb, ...]
    adjectives: tuple[str, ...]
    first_names: tuple[str, ...]
    last_names: tuple[str, ...]

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self.first_names) | frozenset(self.last_names)


def _package_lines(package: str, name: str) -> list[str]:
    return resources.files(package).joinpath(name).read_text(encoding="utf-8").splitlines()


def _census(name: str, count: int) -> tuple[str, ...]:
    """The `count` most frequent names of one census list, capitalized, in rank order."""
    names = []
    for line in _package_lines("names", name):
        fields = line.split()
        if fields and fields[0].isalpha() and len(fields[0]) >= 3:
            names.append(fields[0].capitalize())
        if len(names) == count:
            break
    return tuple(names)


@cache
def load_wide_vocab() -> WideVocab:
    """The lists, filtered to plain lowercase words of 3+ letters and sorted, so the same
    seed draws the same words on every machine; profanity is left out."""
    try:  # the `train` extra
        import lemminflect
        import names  # noqa: F401  (its census lists are read as package data)
        import wonderwords  # noqa: F401  (its word lists likewise)
    except ImportError as error:
        raise RuntimeError(f"grammar version 3 needs the train extra ({error.name} is missing): "
                           "pip install 'polyvox[train]'") from error

    def plain(name: str) -> list[str]:
        lines = _package_lines("wonderwords.assets", name)
        return sorted({word for word in lines if _WORD.fullmatch(word)})

    banned = set(plain("profanitylist.txt"))

    def inflect(word: str, tag: str) -> str | None:
        forms = lemminflect.getInflection(word, tag)
        return forms[0] if forms and _WORD.fullmatch(forms[0]) else None

    nouns = [word for word in plain("nounlist.txt") if word not in banned]
    verbs = []
    for verb in plain("verblist.txt"):
        lemmas = lemminflect.getLemma(verb, "VERB")
        past, third, ing = (inflect(verb, tag) for tag in ("VBD", "VBZ", "VBG"))
        # some entries are already inflected ("altered", "applied"): keep base forms only
        if verb not in banned and lemmas and lemmas[0] == verb and past and third and ing:
            verbs.append(Verb(verb, past, third, ing))
    adjectives = [word for word in plain("adjectivelist.txt") if word not in banned]
    first_names = set(_census("dist.female.first", 1500) + _census("dist.male.first", 700))
    return WideVocab(nouns=tuple(nouns), verbs=tuple(verbs),
                     adjectives=tuple(adjectives), first_names=tuple(sorted(first_names)),
                     last_names=tuple(sorted(set(_census("dist.all.last", 3000)))))
