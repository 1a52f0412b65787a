"""Text normalization: written text in, the words a voice should say out.

    >>> from polyvox.text.normalize import make_normalizer
    >>> make_normalizer("en").normalize("Dr. Patel sees you March 14th at 3:45 PM.")
    'Doctor Patel sees you March fourteenth at three forty-five PM.'

Streaming (text arriving as LLM tokens)::

    stream = StreamingNormalizer(make_normalizer("en"))
    for piece in pieces:
        speak(stream.feed(piece))
    speak(stream.flush())

Split normalized text into sentences with `sentence_boundaries`. Add a language by
writing its rules and registering it in `_LANGUAGES`.
"""

from __future__ import annotations

from collections.abc import Callable

from .base import NoOpNormalizer, Normalized, Normalizer, Rule, RuleNormalizer, Spoken
from .boundaries import sentence_boundaries, split_sentences
from .english import EnglishNormalizer
from .streaming import StreamingNormalizer

_LANGUAGES: dict[str, Callable[[], Normalizer]] = {"en": EnglishNormalizer}
_NO_OP = NoOpNormalizer()


def make_normalizer(language: str = "en", *, enabled: bool = True) -> Normalizer:
    """The normalizer for a language code, or one that changes nothing if not `enabled`.

    Normalizers hold no per-request state; use one `StreamingNormalizer` per stream.
    """
    if not enabled:
        return _NO_OP
    factory = _LANGUAGES.get(language.lower().split("-")[0])
    if factory is None:
        raise ValueError(
            f"no text normalizer for language {language!r}; supported: "
            f"{', '.join(sorted(_LANGUAGES))}. Pass enabled=False to send text unchanged."
        )
    return factory()


__all__ = [
    "EnglishNormalizer",
    "NoOpNormalizer",
    "Normalized",
    "Normalizer",
    "Rule",
    "RuleNormalizer",
    "Spoken",
    "StreamingNormalizer",
    "make_normalizer",
    "sentence_boundaries",
    "split_sentences",
]
