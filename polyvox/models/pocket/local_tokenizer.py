"""A 4000-piece tokenizer trained here, for random-weight models when the real tokenizer of
a Pocket config is not on this machine (tests, benchmarks, the CLI's noise mode).

The corpus is generated from a fixed seed: pseudo-English words, digits and the
punctuation the chunker looks for, so the same file comes out on every machine.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

CACHE_DIR = Path.home() / ".cache" / "polyvox" / "tokenizers"
_ONSETS = "b c d f g h j k l m n p r s t v w x y z ch sh th st pl gr br tr qu sp".split()
_COMMON = ("I a the of and to in is it you that he was for on are with as his they be at one "
           "have this from or had by hot word but what some we can out other were all there "
           "when up use your how said an each she which do their time if will way about many "
           "then them write would like so these her long make thing see him two has look more "
           "day could go come did number sound no most people my over know water than call "
           "first who may down side been now find any new work part take get place made live "
           "where after back little only round man year came show every good me give our "
           "under name very through just form sentence great think say help low line differ "
           "turn cause much mean before move right boy old too same tell does set three want "
           "air well also play small end put home read hand port large spell add even land "
           "here must big high such follow act why ask men change went light kind off need "
           "house picture try us again animal point mother world near build self earth father "
           "fox jumps quick brown lazy dog zebra quiz box yes OK Hello").split()
_VOWELS = "a e i o u ai ea ou oo ie y".split()
_CODAS = ["", "n", "r", "s", "t", "nd", "ng", "ck", "ll", "st", "m"]
_ENDS = [".", "!", "?", "...", ".", ",", ";", ":", "."]


def _corpus(num_lines: int, seed: int) -> Iterator[str]:
    rng = random.Random(seed)
    words = sorted({
        "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)
                for _ in range(rng.randint(1, 3)))
        for _ in range(6000)
    })
    yield " ".join(chr(c) for c in range(33, 127))
    yield " ".join(_COMMON)
    for _ in range(num_lines):
        pool = _COMMON if rng.random() < 0.5 else words
        sentence = " ".join(rng.choice(pool) for _ in range(rng.randint(3, 14)))
        sentence = sentence[0].upper() + sentence[1:] + rng.choice(_ENDS)
        if rng.random() < 0.3:
            sentence += f" {rng.randint(0, 9999)}.{rng.randint(0, 99)}"
        if rng.random() < 0.2:
            sentence = f'"{sentence}" {rng.choice(words)} (said) - {rng.choice(words)}\''
        yield sentence


def train_local_tokenizer(dest_dir: Path | None = None, kind: str = "sentencepiece",
                          vocab_size: int = 4000) -> Path:
    """Train (once; reused when present) and return the tokenizer file of `kind`."""
    dest_dir = dest_dir or CACHE_DIR
    dest_dir.mkdir(parents=True, exist_ok=True)
    if kind == "sentencepiece":
        path = dest_dir / f"local-{vocab_size}.model"
        if not path.exists():
            import sentencepiece

            prefix = dest_dir / f"local-{vocab_size}.tmp"
            sentencepiece.SentencePieceTrainer.train(
                sentence_iterator=_corpus(20000, seed=0), model_prefix=str(prefix),
                vocab_size=vocab_size, model_type="unigram", character_coverage=1.0,
                num_threads=1, minloglevel=2,
            )
            Path(f"{prefix}.model").rename(path)
            Path(f"{prefix}.vocab").unlink(missing_ok=True)
        return path
    path = dest_dir / f"local-{vocab_size}.json"
    if not path.exists():
        import tokenizers

        tokenizer = tokenizers.SentencePieceUnigramTokenizer()
        tokenizer.train_from_iterator(_corpus(20000, seed=0), vocab_size=vocab_size,
                                      show_progress=False, unk_token="<unk>",
                                      special_tokens=["<unk>"])
        tokenizer.save(str(path))
    return path
