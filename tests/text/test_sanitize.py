"""clean_text: no control, format or surrogate character reaches a model; streamed text is
cleaned exactly as if it had arrived whole."""

from __future__ import annotations

import itertools
import sys
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polyvox.text.sanitize import TextCleaner, clean_text, encodable, has_speech

CLEANED = [
    ("Hello there.", "Hello there."),
    ("Hello\x00 there.", "Hello there."),
    ("\x00\x01\x07\x1b\x7f", ""),
    ("Tab\tnew\nline\r\n", "Tab\tnew\nline\r\n"),
    ("a\x0bb\x0cc\x1cd\x85e", "a b c d e"),  # other whitespace controls become spaces
    ("C1\x80\x9f here", "C1 here"),
    ("lone \ud800 high, lone \udfff low", "lone  high, lone  low"),
    ("a pair \ud83d\ude00 joined", "a pair \U0001f600 joined"),
    ("reversed \ude00\ud83d pair", "reversed  pair"),
    ("bidi \u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u061c marks",
     "bidi  marks"),
    ("zero\u200bwidth\u200c\u200d\u2060\ufeff", "zerowidth"),
    ("\ufeffbyte order mark", "byte order mark"),
    ("soft\u00adhyphen", "softhyphen"),
    ("tag \U000e0041\U000e007f chars", "tag  chars"),
    ("cafe\u0301", "caf\u00e9"),  # NFC
    ("e\u200b\u0301", "\u00e9"),  # a removed character no longer separates the accent
    ("\u1100\u1161", "\uac00"),  # Hangul jamo compose
    ("non\u00a0breaking\u3000space\u2028line", "non\u00a0breaking\u3000space\u2028line"),
    ("private \ue000 use", "private \ue000 use"),
    ("", ""),
]


@pytest.mark.parametrize(("raw", "cleaned"), CLEANED, ids=[ascii(raw) for raw, _ in CLEANED])
def test_clean_text(raw: str, cleaned: str) -> None:
    assert clean_text(raw) == cleaned


def test_no_control_format_or_surrogate_character_survives() -> None:
    every_character = "".join(chr(code) for code in range(sys.maxunicode + 1))
    cleaned = clean_text(every_character)
    categories = {unicodedata.category(char) for char in cleaned if char not in "\t\n\r"}
    assert not categories & {"Cc", "Cf", "Cs"}
    cleaned.encode("utf-8")  # a lone surrogate would raise


@pytest.mark.parametrize("text", ["", " \n\t", "\x00", "\u200b\ufeff\u202e", "\ud800 \x00"])
def test_only_whitespace_control_or_format_characters_is_no_speech(text: str) -> None:
    assert not has_speech(text)


def test_any_visible_character_is_speech() -> None:
    assert has_speech("\x00a\u200b")
    assert has_speech("\u00e9")


def test_encodable_keeps_pairs_and_replaces_lone_surrogates() -> None:
    assert encodable("unknown voice '\ud800'") == "unknown voice '\ufffd'"
    assert encodable("\ud83d\ude00") == "\U0001f600"
    assert encodable("plain") == "plain"
    encodable("\udc00\ud800").encode("utf-8")


def test_cleaning_twice_changes_nothing() -> None:
    for raw, _ in CLEANED:
        assert clean_text(clean_text(raw)) == clean_text(raw)


def test_where_nfc_may_cut_matches_the_unicode_database() -> None:
    """The cleaner cuts pending text before ASCII and after whitespace or ASCII other than
    letters and "<=>": no canonical composition may join across such a cut."""
    firsts, seconds = set(), set()
    for code in range(sys.maxunicode + 1):
        decomposition = unicodedata.decomposition(chr(code)).split()
        if len(decomposition) == 2 and not decomposition[0].startswith("<"):
            first, second = (chr(int(part, 16)) for part in decomposition)
            firsts.add(first)
            seconds.add(second)
    assert not {c for c in seconds if c.isascii() or c.isspace()}
    assert {c for c in firsts if c.isascii() or c.isspace()} <= set(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz<=>")


def _streamed(pieces: list[str]) -> str:
    cleaner = TextCleaner()
    return "".join(cleaner.feed(piece) for piece in pieces) + cleaner.flush()


# Characters that interact across a cut: pairs, accents, jamo, controls, whitespace.
ALPHABET = ("ab e<=>;.1 \t\n\x00\x0b\x85\u200b\u202e\ufeff\u0301\u0308\u0327\u0338"
            "\u1100\u1161\u11a8\u0b47\u0b3e\ud800\udbff\udc00\udfff\ud83d\ude00\u00e9\u00a0")


@st.composite
def split_text(draw: st.DrawFn) -> tuple[str, list[str]]:
    text = draw(st.text(alphabet=ALPHABET, max_size=30) | st.text(max_size=20))
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=10)))
    bounds = [0, *cuts, len(text)]
    return text, [text[start:end] for start, end in itertools.pairwise(bounds)]


@settings(max_examples=500, deadline=None)
@given(split_text())
def test_any_split_cleans_like_the_whole(case: tuple[str, list[str]]) -> None:
    text, pieces = case
    assert _streamed(pieces) == clean_text(text)


def test_a_surrogate_pair_split_between_pieces_is_joined() -> None:
    assert _streamed(["Hi \ud83d", "\ude00 there"]) == "Hi \U0001f600 there"


def test_feed_releases_text_up_to_the_last_safe_cut() -> None:
    cleaner = TextCleaner()
    assert cleaner.feed("Hello there. ") == "Hello there. "  # nothing can change it now
    assert cleaner.feed("cafe") == "caf"  # an accent may still follow the "e"
    assert cleaner.feed("\u0301 ok") == "\u00e9 o"
    assert cleaner.flush() == "k"
    assert cleaner.flush() == ""
