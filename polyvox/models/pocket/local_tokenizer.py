"""A 4000-piece tokenizer trained here, for random-weight models when the real tokenizer of
a Pocket config is not on this machine (tests, benchmarks, the CLI's noise mode).

It should cut English the way a real English tokenizer does, because prefill cost (and so
time to first audio) grows with the tokens per word. The corpus is generated from a fixed
seed: sentences of English words drawn by their frequency (the `wordfreq` package's
English list), with the capitals, digits and punctuation the chunker and normalizer meet,
so the same file comes out on every machine with the same wordfreq version. On the
benchmark sentences it gives ~1.5 tokens per word (the pseudo-English corpus used before
session 9 gave ~2.9).
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Iterator
from pathlib import Path

# POLYVOX_TOKENIZER_DIR: where trained files are kept (scripts/gpu_check.sh points it at
# files trained on another machine, where wordfreq is not installed).
CACHE_DIR = Path(os.environ.get("POLYVOX_TOKENIZER_DIR")
                 or Path.home() / ".cache" / "polyvox" / "tokenizers")
CORPUS_VERSION = "en1"  # part of the file name: a changed corpus never reuses a stale file
_NUM_WORDS = 30000
_NUM_LINES = 20000
_ENDS = [".", "!", "?", "...", ".", ",", ";", ":", "."]


def _english_words() -> tuple[list[str], list[float]]:
    """The most frequent English words and their frequencies."""
    import wordfreq

    words = wordfreq.top_n_list("en", _NUM_WORDS)
    return words, [wordfreq.word_frequency(word, "en") for word in words]


def _corpus(num_lines: int, seed: int) -> Iterator[str]:
    rng = random.Random(seed)
    words, weights = _english_words()
    yield " ".join(chr(c) for c in range(33, 127))  # every printable ASCII character
    for _ in range(num_lines):
        drawn = rng.choices(words, weights, k=rng.randint(3, 20))
        drawn = ["I" if word == "i" else word for word in drawn]
        if rng.random() < 0.3:  # a name or a place inside the sentence
            at = rng.randrange(len(drawn))
            drawn[at] = drawn[at].capitalize()
        sentence = " ".join(drawn)
        sentence = sentence[0].upper() + sentence[1:] + rng.choice(_ENDS)
        if rng.random() < 0.3:
            sentence += f" {rng.randint(0, 9999)}.{rng.randint(0, 99)}"
        if rng.random() < 0.2:
            sentence = f'"{sentence}" ({rng.choice(words).capitalize()}) - {rng.choice(words)}\''
        yield sentence


def train_local_tokenizer(dest_dir: Path | None = None, kind: str = "sentencepiece",
                          vocab_size: int = 4000) -> Path:
    """Return the tokenizer file of `kind` (sentencepiece or tokenizers) in `dest_dir`.

    Trained once into CACHE_DIR and copied from there: training is deterministic, so a
    file of the same name is the same tokenizer."""
    name = f"local-{CORPUS_VERSION}-{vocab_size}.{'model' if kind == 'sentencepiece' else 'json'}"
    try:
        cached = _train_into(CACHE_DIR, name, kind, vocab_size)
    except OSError:  # no writable cache (read-only home): train where it is wanted
        if dest_dir is None:
            raise
        return _train_into(dest_dir, name, kind, vocab_size)
    if dest_dir is None:
        return cached
    dest_dir.mkdir(parents=True, exist_ok=True)
    path = dest_dir / name
    if not path.exists():
        shutil.copyfile(cached, path)
    return path


def _train_into(directory: Path, name: str, kind: str, vocab_size: int) -> Path:
    """directory / name, trained there unless it is already."""
    path = directory / name
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        partial = directory / f"{name}.{os.getpid()}.tmp"
        _train(kind, vocab_size, partial)
        partial.replace(path)  # atomic: a concurrent trainer never sees half a file
    return path


def _train(kind: str, vocab_size: int, path: Path) -> None:
    if kind == "sentencepiece":
        import sentencepiece

        prefix = path.with_name(path.name + "-sp")
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=_corpus(_NUM_LINES, seed=0), model_prefix=str(prefix),
            vocab_size=vocab_size, model_type="unigram", character_coverage=1.0,
            num_threads=1, minloglevel=2,
        )
        Path(f"{prefix}.model").replace(path)
        Path(f"{prefix}.vocab").unlink(missing_ok=True)
    else:
        import tokenizers

        tokenizer = tokenizers.SentencePieceUnigramTokenizer()
        tokenizer.train_from_iterator(_corpus(_NUM_LINES, seed=0), vocab_size=vocab_size,
                                      show_progress=False, unk_token="<unk>",
                                      special_tokens=["<unk>"])
        tokenizer.save(str(path))
