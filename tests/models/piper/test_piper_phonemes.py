"""Text -> phoneme ids must be exactly what piper-tts feeds the voice."""

from __future__ import annotations

import dataclasses
import json

import pytest

from polyvox.models.piper.phonemes import Phonemizer
from polyvox.models.piper.voice_files import PiperVoiceConfig, VoiceFiles

SENTENCES = [
    "Hello world. How are you today?",
    "Dr. Smith paid $3.50 for 2 apples; wow!",
    "Streaming speech, one chunk at a time: it should sound the same",
    'Isn\'t it "quoted" (and parenthesized)?',
    "",
]


def test_ids_equal_piper_tts(joe_files: VoiceFiles) -> None:
    piper = pytest.importorskip("piper")
    from piper.config import PiperConfig

    raw = json.loads(joe_files.config_path.read_text(encoding="utf-8"))
    # PiperVoice's text path needs no ONNX session.
    reference = piper.PiperVoice(session=None, config=PiperConfig.from_dict(raw))
    phonemizer = Phonemizer(joe_files.read_config())
    for text in SENTENCES:
        expected = [reference.phonemes_to_ids(s) for s in reference.phonemize(text) if s]
        assert phonemizer.text_to_ids(text) == expected, text
    assert len(phonemizer.text_to_ids(SENTENCES[0])) == 2  # one sequence per sentence


def _text_config() -> PiperVoiceConfig:
    id_map = {"_": [0], "^": [1], "$": [2], "a": [5, 6], "b": [7]}
    return PiperVoiceConfig.from_dict(
        {"audio": {"sample_rate": 16000}, "phoneme_type": "text", "phoneme_id_map": id_map}
    )


def test_id_layout_bos_pad_between_phonemes_eos() -> None:
    phonemizer = Phonemizer(_text_config())
    # BOS PAD, each phoneme's ids then PAD, EOS; unknown phonemes ("c") are dropped.
    assert phonemizer.text_to_ids("abc") == [[1, 0, 5, 6, 0, 7, 0, 2]]
    assert phonemizer.phonemes_to_ids([]) == [1, 0, 2]


def test_unsupported_phoneme_type_and_missing_specials_fail() -> None:
    config = _text_config()
    with pytest.raises(NotImplementedError, match="pinyin"):
        Phonemizer(dataclasses.replace(config, phoneme_type="pinyin"))
    no_eos = {k: v for k, v in config.phoneme_id_map.items() if k != "$"}
    with pytest.raises(ValueError, match="'\\$'"):
        Phonemizer(dataclasses.replace(config, phoneme_id_map=no_eos))
