"""The tokenizer trained here for random-weight Pocket models: it should cut English about
as a real English tokenizer does, since prefill cost follows tokens per word."""

from __future__ import annotations

from pathlib import Path

import sentencepiece
import tokenizers

from polyvox.asr.sentences import SENTENCES
from polyvox.models.pocket.local_tokenizer import train_local_tokenizer


def _tokens_per_word(encode, sentences) -> float:
    return sum(len(encode(s)) for s in sentences) / sum(len(s.split()) for s in sentences)


def test_english_costs_under_two_tokens_per_word(tokenizer_dir: Path) -> None:
    # Sentences the corpus never saw (the ASR check's list, not the benchmark's). A
    # 4,000-piece tokenizer trained on English cuts them into ~1.3-1.6 pieces per word;
    # the pseudo-English corpus used before gave ~2.9.
    sp = sentencepiece.SentencePieceProcessor(
        model_file=str(train_local_tokenizer(tokenizer_dir, "sentencepiece")))
    hf = tokenizers.Tokenizer.from_file(str(train_local_tokenizer(tokenizer_dir, "tokenizers")))
    assert _tokens_per_word(sp.encode, SENTENCES) < 2.0
    assert _tokens_per_word(lambda s: hf.encode(s).ids, SENTENCES) < 2.0
    # Every printable ASCII character is a piece (nothing maps to <unk>).
    printable = "".join(chr(c) for c in range(33, 127))
    assert sp.unk_id() not in sp.encode(printable)


def test_a_copy_is_the_cached_tokenizer(tokenizer_dir: Path, tmp_path: Path) -> None:
    first = train_local_tokenizer(tokenizer_dir, "sentencepiece")
    again = train_local_tokenizer(tmp_path / "elsewhere", "sentencepiece")
    assert first.name == again.name and first.read_bytes() == again.read_bytes()


def test_without_a_writable_cache_it_trains_where_asked(tmp_path: Path, monkeypatch) -> None:
    from polyvox.models.pocket import local_tokenizer

    blocked = tmp_path / "read-only"
    blocked.write_text("a file where the cache directory should be")
    monkeypatch.setattr(local_tokenizer, "CACHE_DIR", blocked / "tokenizers")
    monkeypatch.setattr(local_tokenizer, "_NUM_LINES", 500)  # a small tokenizer is enough
    path = train_local_tokenizer(tmp_path / "wanted", "sentencepiece", vocab_size=300)
    assert path.parent == tmp_path / "wanted" and path.stat().st_size > 0
    assert sentencepiece.SentencePieceProcessor(model_file=str(path)).get_piece_size() == 300
