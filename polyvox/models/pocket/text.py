"""Text handling of the Pocket family: tokenizers, prompt clean-up and clause chunking.

The clean-up and chunking rules reproduce pocket-tts 4.0.1 exactly (its models were
trained on text shaped this way, and the parity tests depend on the same chunks):

- prepare: strip, rewrite characters per config, collapse newlines, optional `;` -> `,`,
  capitalize the first letter, make sure the text ends like a sentence, optionally pad
  short inputs with spaces; short texts (<= 4 words) get more frames after EOS.
- chunk: split on sentence-end tokens (not on a decimal point), sub-split sentences longer
  than the token cap on `,;:`, then greedily regroup pieces up to the cap.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import sentencepiece
import tokenizers

from polyvox.models.pocket.config import PocketConfig

TERMINAL = ".!?\u2026"
WEAK = ",;:-\u2013\u2014"
CLOSERS = "\"'\u201d\u2019)]\u00bb"
MAX_TOKENS_PER_CHUNK = 50


class Tokenizer:
    """A SentencePiece `.model` or a `tokenizers` JSON file behind one small interface."""

    def __init__(self, path: str | Path, kind: str, vocab_size: int) -> None:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"tokenizer file not found: {path}")
        if kind in ("tokenizers", "json") or path.suffix == ".json":
            self._json: tokenizers.Tokenizer | None = tokenizers.Tokenizer.from_file(str(path))
            self._sp = None
            size = self._json.get_vocab_size()
        else:
            self._json = None
            self._sp = sentencepiece.SentencePieceProcessor(model_file=str(path))
            size = self._sp.vocab_size()
        if size != vocab_size:
            raise ValueError(f"tokenizer {path} has {size} pieces, the config expects {vocab_size}")
        self.path = path

    def encode(self, text: str) -> list[int]:
        if self._json is not None:
            return list(self._json.encode(text).ids)
        assert self._sp is not None
        return list(self._sp.encode(text, out_type=int))

    def decode(self, ids: list[int]) -> str:
        if self._json is not None:
            return str(self._json.decode(ids))
        assert self._sp is not None
        return str(self._sp.decode(ids))


@dataclass(frozen=True)
class PreparedText:
    text: str
    frames_after_eos_guess: int  # before the +2 pocket-tts adds


def _terminate(text: str) -> str:
    core = text.rstrip(CLOSERS + " ")
    closers = text[len(core):].strip()
    if not core or core[-1] in TERMINAL:
        return text
    if core[-1] in WEAK:
        return core.rstrip(WEAK + " ") + "." + closers
    return text + "."


def prepare_text(text: str, config: PocketConfig) -> PreparedText:
    """Shape one prompt the way the model was trained on. Raises ValueError when empty."""
    text = text.strip()
    if config.replace_characters:
        text = " ".join(text.translate(str.maketrans(config.replace_characters)).split())
        text = re.sub(r"([.!?\u2026])\s*[,;:]", r"\1", text)
    if not text:
        raise ValueError("text is empty: give at least one word to speak")
    text = text.replace("\n", " ").replace("\r", " ").replace("  ", " ")
    if config.remove_semicolons:
        text = text.replace(";", ",")
    guess = 3 if len(text.split()) <= 4 else 1
    if config.capitalize_first_letter and not text[0].isupper():
        text = text[0].upper() + text[1:]
    if config.append_terminal_punctuation:
        text = _terminate(text)
    if config.pad_with_spaces_for_short_inputs and len(text.split()) < 5:
        text = " " * 8 + text
    return PreparedText(text, guess)


def _boundaries(ids: list[int], marks: set[int], tokenizer: Tokenizer | None) -> list[int]:
    """Start indices of segments: a segment starts at the first non-mark token after a run
    of marks. With a tokenizer, a period between two digits ("3.5") is not a boundary."""
    starts = [0]
    after_mark = False
    for index, token in enumerate(ids):
        if token in marks:
            after_mark = True
            continue
        if after_mark and not (tokenizer is not None and _is_decimal(ids, index, tokenizer)):
            starts.append(index)
        after_mark = False
    return starts + [len(ids)]


def _is_decimal(ids: list[int], index: int, tokenizer: Tokenizer) -> bool:
    before, after = tokenizer.decode(ids[:index]), tokenizer.decode(ids[index:])
    return len(before) >= 2 and before[-1] == "." and before[-2].isdigit() and after[:1].isdigit()


def _segments(ids: list[int], starts: list[int], tokenizer: Tokenizer) -> list[tuple[int, str]]:
    return [(end - start, tokenizer.decode(ids[start:end])) for start, end in zip(starts, starts[1:])]


def split_into_chunks(text: str, tokenizer: Tokenizer, config: PocketConfig,
                      max_tokens: int = MAX_TOKENS_PER_CHUNK) -> list[str]:
    """Split a text into the chunks pocket-tts generates one at a time."""
    ids = tokenizer.encode(prepare_text(text, config).text.strip())
    sentence_marks = set(tokenizer.encode(".!...?")[1:])
    pieces = _segments(ids, _boundaries(ids, sentence_marks, tokenizer), tokenizer)
    clause_marks = set(tokenizer.encode(",;:")[1:])
    refined: list[tuple[int, str]] = []
    for count, sentence in pieces:
        if count > max_tokens:
            sub_ids = tokenizer.encode(sentence.strip())
            subs = _segments(sub_ids, _boundaries(sub_ids, clause_marks, None), tokenizer)
            if len(subs) > 1:
                refined.extend(subs)
                continue
        refined.append((count, sentence))
    chunks: list[str] = []
    current, current_count = "", 0
    for count, piece in refined:
        if not current:
            current, current_count = piece, count
        elif current_count + count > max_tokens:
            chunks.append(current.strip())
            current, current_count = piece, count
        else:
            current, current_count = current + " " + piece, current_count + count
    if current:
        chunks.append(current.strip())
    return chunks
