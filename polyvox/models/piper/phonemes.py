"""Text -> Piper phoneme ids, the way piper-tts feeds its voices.

Piper voices were trained on espeak-ng IPA, so phonemization goes through piper-tts'
bundled espeak-ng (GPL-3.0; the optional extra `polyvox[piper]`). espeak-ng splits the
text into sentences; each sentence becomes one id sequence laid out as

    BOS PAD  p1 PAD  p2 PAD  ...  pn PAD  EOS

where a phoneme is one Unicode codepoint of the NFD-decomposed IPA (or a merged vowel
cluster when the voice lists them). Phonemes missing from the voice's map are dropped,
as piper-tts does.
"""

from __future__ import annotations

import logging
import threading
import unicodedata
from typing import TYPE_CHECKING, NamedTuple, Protocol

from polyvox.models.piper.voice_files import INSTALL_HINT, PiperVoiceConfig

if TYPE_CHECKING:
    from collections.abc import Iterable

BOS = "^"
EOS = "$"
PAD = "_"

_LOGGER = logging.getLogger(__name__)


class _SentencePhonemizer(Protocol):
    def phonemize(
        self, voice: str, text: str, vowel_clusters: set[tuple[str, ...]] | None = None
    ) -> list[list[str]]: ...


# NOTE: espeak-ng is process-global state (one selected voice), so one phonemizer per
# process, used under a lock.
_ESPEAK_LOCK = threading.Lock()
_espeak: _SentencePhonemizer | None = None


def _espeak_phonemizer() -> _SentencePhonemizer:
    global _espeak
    if _espeak is None:
        try:
            from piper.phonemize_espeak import EspeakPhonemizer
        except ImportError as error:
            raise ImportError(
                "Piper voices phonemize with espeak-ng from the 'piper-tts' package "
                f"(GPL-3.0), which is not installed. Install it with: {INSTALL_HINT}"
            ) from error
        _espeak = EspeakPhonemizer()
    return _espeak


class Phonemizer:
    """Turns text into one phoneme-id sequence per sentence for one voice."""

    def __init__(self, config: PiperVoiceConfig) -> None:
        if config.phoneme_type not in ("espeak", "text"):
            raise NotImplementedError(
                f"Piper phoneme type {config.phoneme_type!r} is not supported by polyvox "
                "(supported: 'espeak', 'text')."
            )
        for symbol in (BOS, EOS, PAD):
            if symbol not in config.phoneme_id_map:
                raise ValueError(f"The voice's phoneme_id_map has no {symbol!r} entry.")
        self.config = config

    def phonemize(self, text: str) -> list[list[str]]:
        """Text -> phonemes, one list per sentence (empty sentences dropped)."""
        if self.config.phoneme_type == "text":
            sentences = [list(unicodedata.normalize("NFD", text))]
        else:
            clusters = set(self.config.vowel_clusters) or None
            with _ESPEAK_LOCK:
                sentences = _espeak_phonemizer().phonemize(
                    self.config.espeak_voice, text, vowel_clusters=clusters
                )
        return [sentence for sentence in sentences if sentence]

    def phonemes_to_ids(self, phonemes: Iterable[str]) -> list[int]:
        """One sentence's phonemes -> ids: BOS PAD, then each phoneme followed by PAD, EOS."""
        id_map = self.config.phoneme_id_map
        pad = id_map[PAD]
        ids = [*id_map[BOS], *pad]
        for phoneme in phonemes:
            phoneme_ids = id_map.get(phoneme)
            if phoneme_ids is None:
                _LOGGER.warning("Phoneme %r is not in the voice's id map; dropped", phoneme)
                continue
            ids.extend(phoneme_ids)
            ids.extend(pad)
        ids.extend(id_map[EOS])
        return ids

    def text_to_ids(self, text: str) -> list[list[int]]:
        """Text -> one phoneme-id sequence per sentence."""
        return [self.phonemes_to_ids(sentence) for sentence in self.phonemize(text)]

    def text_to_ids_and_words(self, text: str) -> list[tuple[list[int], list[PhonemeWord]]]:
        """Text -> per sentence, its phoneme ids (as `text_to_ids`) and its words as
        espeak-ng spoke them: runs of phonemes between spaces."""
        return [(self.phonemes_to_ids(sentence), self.phoneme_words(sentence))
                for sentence in self.phonemize(text)]

    def phoneme_words(self, phonemes: Iterable[str]) -> list[PhonemeWord]:
        """The words of one sentence's phonemes, with the ids each covers in
        `phonemes_to_ids(phonemes)`: a phoneme's ids and the PAD after them."""
        id_map = self.config.phoneme_id_map
        words: list[PhonemeWord] = []
        position = len(id_map[BOS]) + len(id_map[PAD])
        start, text = position, ""
        for phoneme in phonemes:
            phoneme_ids = id_map.get(phoneme)
            if phoneme_ids is None:
                continue  # dropped, as phonemes_to_ids drops it
            if phoneme == " ":
                if text:
                    words.append(PhonemeWord(text, start, position))
                text = ""
            elif not text:
                start = position
            if phoneme != " ":
                text += phoneme
            position += len(phoneme_ids) + len(id_map[PAD])
        if text:
            words.append(PhonemeWord(text, start, position))
        return words


class PhonemeWord(NamedTuple):
    """A word as espeak-ng spoke it: its phonemes and the ids [start, end) it covers."""

    phonemes: str
    start: int
    end: int
