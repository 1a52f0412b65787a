"""The evaluation sets: a dev split to tune on and a frozen test split to report.

    sets/<split>/read.txt     one sentence per line: varied English prose, 6-25 words
    sets/<split>/service.txt  one customer-service line per line, three fields split by
                              tabs: written text, spoken reference, categories (comma-
                              separated; e.g. "money,date")

Written for polyvox (not from any published sentence list), disjoint from every other
sentence set in the repository and from the training generator's output
(tests/eval/test_sets.py). The service references are the words a listener should hear,
written by hand, never produced by the normalizer.

NOTE: the test split is frozen: tests/eval/test_sets.py checks its SHA-256. Choose
settings (sampling temperature, normalizer rules, ...) on dev; report on test.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

SPLITS = ("test", "dev")
KINDS = ("read", "service")
SETS_DIR = Path(__file__).parent / "sets"


@dataclass(frozen=True)
class EvalItem:
    """One sentence to speak and the words it should be heard as."""

    kind: str  # "read" or "service"
    number: int  # its line in the file, from 1
    text: str  # what the voice is given
    # Read: the text itself (scored with normalize_for_wer). Service: the hand-written
    # spoken form (scored with the spoken-form scorer, polyvox.asr.spoken).
    reference: str
    categories: tuple[str, ...] = ()


def set_path(split: str, kind: str) -> Path:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}: use one of {', '.join(SPLITS)}")
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}: use one of {', '.join(KINDS)}")
    return SETS_DIR / split / f"{kind}.txt"


def file_digest(split: str, kind: str) -> str:
    """SHA-256 of one set file, as hex: what a reported figure was measured on."""
    return hashlib.sha256(set_path(split, kind).read_bytes()).hexdigest()


def _parse(kind: str, number: int, line: str, path: Path) -> EvalItem:
    where = f"{path}:{number}"
    if kind == "read":
        if "\t" in line or not line.strip():
            raise ValueError(f"{where}: a read line is one sentence, no tabs, not empty")
        return EvalItem(kind, number, line, line)
    fields = line.split("\t")
    if len(fields) != 3 or not all(field.strip() for field in fields):
        raise ValueError(f"{where}: want 'written<TAB>spoken<TAB>categories', got {line!r}")
    text, spoken, categories = fields
    if any(char.isdigit() for char in spoken):
        raise ValueError(f"{where}: the spoken reference must be words only: {spoken!r}")
    return EvalItem(kind, number, text, spoken, tuple(categories.split(",")))


def load_items(split: str, kind: str = "all") -> tuple[EvalItem, ...]:
    """The sentences of one split: `kind` read, service, or all (read first)."""
    kinds = KINDS if kind == "all" else (kind,)
    items: list[EvalItem] = []
    for one_kind in kinds:
        path = set_path(split, one_kind)
        lines = path.read_text(encoding="utf-8").splitlines()
        items += [_parse(one_kind, number, line, path) for number, line in enumerate(lines, 1)]
    return tuple(items)
