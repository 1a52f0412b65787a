"""Text made safe for every front end before any model sees it.

Clients send what they have: text pasted from documents (zero-width spaces, byte order
marks, bidi marks), strings with a stray NUL, JSON escapes that decode to lone UTF-16
surrogates. None of it carries speech, and some of it breaks front ends: espeak-ng (the
Piper voices) refuses an embedded NUL, and a lone surrogate cannot even be encoded as
UTF-8. `clean_text` removes all of it and NFC-normalizes the rest, so "é" written as "e"
plus a combining accent is spoken like the precomposed "é".

Removed: control characters (C0, DEL, C1) other than whitespace; lone surrogates (a valid
high/low pair is joined into its character first); format characters (category Cf: bidi
controls U+200E/F, U+202A-202E, U+2066-2069, U+061C, zero-width U+200B-200D, U+2060,
U+FEFF, the soft hyphen, ...). Tab, newline and carriage return stay; the other
whitespace controls (VT, FF, U+001C-001F, NEL) become spaces.

`TextCleaner` does the same for text arriving in pieces, with the same result for any
split: "".join(cleaner.feed(p) for p in pieces) + cleaner.flush() == clean_text(whole).
"""

from __future__ import annotations

import re
import unicodedata

_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")
_KEPT_CONTROLS = frozenset("\t\n\r")
# NOTE: where pending text may be cut for NFC. No ASCII character or whitespace is the
# second part of a canonical composition, and none but the ASCII letters and "<=>" is the
# first part of one (tests/text/test_sanitize.py checks this against the Unicode
# database). So cutting before an ASCII character, or after whitespace or ASCII other
# than those, leaves the NFC form unchanged whatever follows.
_STARTS_A_COMPOSITION = frozenset("<=>")


def clean_text(text: str) -> str:
    """`text` without control, format or surrogate characters, NFC-normalized.

    >>> clean_text("Hello\\x00 there\\u200b.")
    'Hello there.'
    """
    return unicodedata.normalize("NFC", _strip(text))


def has_speech(text: str) -> bool:
    """True when `text` holds something other than whitespace once cleaned."""
    return bool(clean_text(text).strip())


def encodable(text: str) -> str:
    """`text` with lone surrogates replaced by U+FFFD, so it encodes as UTF-8 (for error
    messages that quote what a client sent)."""
    if _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub("\ufffd", _SURROGATE_PAIR.sub(_join_pair, text))


class TextCleaner:
    """`clean_text` for one stream of pieces. It holds back the few characters at the end
    of the input that the next piece could still change (the high half of a surrogate
    pair, a letter a combining accent may follow); `flush` releases them."""

    def __init__(self) -> None:
        self._high_surrogate = ""  # raw input: the first half of a pair split by a piece
        self._pending = ""  # stripped, not yet NFC-normalized

    def feed(self, piece: str) -> str:
        """Add a piece of raw text; return the cleaned text that has become final."""
        raw, self._high_surrogate = self._high_surrogate + piece, ""
        if raw and "\ud800" <= raw[-1] <= "\udbff":
            raw, self._high_surrogate = raw[:-1], raw[-1]
        num_old = len(self._pending)
        self._pending += _strip(raw)
        cut = _last_safe_cut(self._pending, num_old)
        ready, self._pending = self._pending[:cut], self._pending[cut:]
        return unicodedata.normalize("NFC", ready)

    def flush(self) -> str:
        """The end of the stream: the rest, cleaned. Resets the cleaner for reuse."""
        rest = self._pending + _strip(self._high_surrogate)
        self._high_surrogate = self._pending = ""
        return unicodedata.normalize("NFC", rest)


def _strip(text: str) -> str:
    if text.isprintable():
        return text  # the common case: nothing to remove
    if _SURROGATE.search(text) is not None:
        text = _SURROGATE_PAIR.sub(_join_pair, text)
    return "".join(char if char.isprintable() else _replacement(char) for char in text)


def _join_pair(match: re.Match[str]) -> str:
    high, low = (ord(char) for char in match[0])
    return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))


def _replacement(char: str) -> str:
    """What a non-printable character becomes: itself, a space or nothing."""
    category = unicodedata.category(char)
    if category == "Cc":
        if char in _KEPT_CONTROLS:
            return char
        return " " if char.isspace() else ""
    if category in ("Cf", "Cs"):
        return ""
    return char  # spaces other than " ", line and paragraph separators, private use


def _last_safe_cut(text: str, num_old: int) -> int:
    """The largest index where `text` may be cut without changing its NFC form, whatever
    follows: after whitespace or ASCII that starts no composition, or before ASCII. The
    first `num_old` characters were pending already and held no cut but 0, so only what
    came after them is searched (which keeps a long stream without one linear)."""
    for index in range(len(text) - 1, num_old - 1, -1):
        char = text[index]
        if char.isspace() or (char.isascii() and not char.isalpha()
                              and char not in _STARTS_A_COMPOSITION):
            return index + 1
        if char.isascii():
            return index
    return 0
