"""Rules for things read piece by piece: phone numbers, card numbers, confirmation codes,
words spelled with hyphens, email addresses and web addresses.

A wrong digit here is the worst mistake a support voice can make, so digits are read one
at a time as words ("zero", not "oh") and groups are separated by commas, which a voice
says as short pauses.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..base import Spoken, is_word_char
from . import spell
from .context import at_word_start
from .vocab import TOP_LEVEL_DOMAINS, URL_SYMBOLS

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_EMAIL = re.compile(
    rf"[A-Za-z0-9](?:[A-Za-z0-9._%+-]*[A-Za-z0-9_])?@{_LABEL}(?:\.{_LABEL})+(?![\w@])"
)
_URL = re.compile(
    rf"(?P<scheme>https?://)?(?P<www>www\.)?(?P<host>(?:{_LABEL}\.)+(?P<tld>[A-Za-z]{{2,}}))"
    r"(?P<port>:\d{1,5})?(?P<path>/\S*)?(?![\w@])"
)
_TRAILING_PUNCTUATION = ".,;:!?)]}'\""
# Two-letter domains said letter by letter ("dot i o"); longer ones as words ("dot com").
_SPELLED_DOMAINS = frozenset((
    "io", "us", "uk", "ai", "tv", "ca", "au", "de", "fr", "eu", "jp", "ly", "gg", "nl", "es",
))  # fmt: skip

_NANP = re.compile(
    r"(?P<country>\+?1[\s.-]?)?(?:\((?P<area_in_parens>\d{3})\)\s?|(?P<area>\d{3})[\s.-])"
    r"(?P<exchange>\d{3})[\s.-](?P<line>\d{4})(?:\s?x(?P<extension>\d{1,6}))?(?![\w])"
)
_INTERNATIONAL = re.compile(
    r"\+(?P<country>\d{1,3})(?P<rest>(?:[\s.-]?\(?\d{1,5}\)?){1,4})(?![\w])"
)
_LOCAL = re.compile(r"(?P<exchange>[2-9]\d{2})-(?P<line>\d{4})(?![\w-])")
_CARD = re.compile(r"\d{4}(?P<separator>[ -])\d{4,6}(?:(?P=separator)\d{4,5}){1,2}(?![\w])")
_DIGIT_GROUPS = re.compile(r"\d+(?:-\d+){2,}(?![\w-])|\d{5}-\d{4}(?![\w-])")
_DOTTED_NUMBERS = re.compile(r"\d+(?:\.\d+){2,}(?![\w])")
_CODE = re.compile(r"[A-Z0-9]+(?:-[A-Z0-9]+)*(?![\w-])")
# Single letters and digits joined by hyphens: "J-O-N-E-S", "A-B-C-1-2-3".
_SPELLED = re.compile(r"[A-Za-z0-9](?:-[A-Za-z0-9])+(?![\w-])")
_SHORT_CODE = re.compile(r"(?P<lead>\d{1,2})(?P<tail>[A-Z])|(?P<head>[A-Z])(?P<trail>\d{1,2})")
_ALPHANUMERIC = re.compile(r"[^\W_]*\d[^\W_]*")
_PIECES = re.compile(r"[^\W\d_]+|\d+|.", re.DOTALL)


def _say_address_part(written: str) -> str:
    """Words as words, digits one by one, symbols by name: "j.smith42" -> "j dot smith
    four two".
    """
    words = []
    for piece in _PIECES.findall(written):
        if piece.isdecimal():
            words.append(spell.digits(piece))
        elif piece in URL_SYMBOLS:
            words.append(URL_SYMBOLS[piece])
        else:
            words.append(piece)
    return " ".join(words)


def _say_host(host: str) -> str:
    words = [_say_address_part(label) for label in host.split(".")]
    if words[-1].lower() in _SPELLED_DOMAINS:
        words[-1] = say_characters(list(words[-1]))  # "i o"; "ai" -> "a-i"
    return " dot ".join(words)


def email_address(text: str, pos: int) -> Spoken | None:
    """ "j.smith@example.com" -> "j dot smith at example dot com"."""
    match = _EMAIL.match(text, pos)
    if match is None or not at_word_start(text, pos):
        return None
    local, _, host = match[0].rpartition("@")
    return Spoken(match.end(), f"{_say_address_part(local)} at {_say_host(host)}")


def web_address(text: str, pos: int) -> Spoken | None:
    """ "https://www.example.com/help" -> "w w w dot example dot com slash help".

    Without "http" or "www" the name must end in a known lowercase domain ("example.com"),
    so "file.txt" or "St.Louis" are left alone.
    """
    match = _URL.match(text, pos)
    if match is None or not at_word_start(text, pos):
        return None
    is_known_domain = match["tld"] in TOP_LEVEL_DOMAINS  # lowercase only: not "end.It"
    if not (match["scheme"] or match["www"] or is_known_domain):
        return None
    end, path = match.end(), match["path"] or ""
    while path and path[-1] in _TRAILING_PUNCTUATION:  # "see example.com/help." ends a sentence
        path, end = path[:-1], end - 1
    words = ["w w w dot"] if match["www"] else []
    words.append(_say_host(match["host"]))
    if match["port"]:
        words.append(f"colon {spell.digits(match['port'])}")
    if path:
        words.append(_say_address_part(path))
    return Spoken(end, " ".join(words))


def phone_number(text: str, pos: int) -> Spoken | None:
    """ "(555) 123-4567" -> "five five five, one two three, four five six seven";
    "+1 800-555-0199x12", "+44 20 7946 0958" and "555-1234" likewise, group by group.
    """
    if not at_word_start(text, pos):
        return None
    match = _NANP.match(text, pos)
    if match is not None:
        country = match["country"]
        groups = [match["area_in_parens"] or match["area"], match["exchange"], match["line"]]
        words = ", ".join(spell.digits(group) for group in groups)
        if country:
            words = f"{'plus ' if '+' in country else ''}one, {words}"
        if match["extension"]:
            words += f", extension {spell.digits(match['extension'])}"
        return Spoken(match.end(), words)
    match = _INTERNATIONAL.match(text, pos)
    if match is not None:
        groups = [match["country"], *re.findall(r"\d+", match["rest"])]
        if sum(len(group) for group in groups) >= 8:
            return Spoken(match.end(), "plus " + ", ".join(spell.digits(g) for g in groups))
    match = _LOCAL.match(text, pos)
    if match is not None and int(match["line"]) % 1000 != 0:  # "500-1000" is a range
        words = f"{spell.digits(match['exchange'])}, {spell.digits(match['line'])}"
        return Spoken(match.end(), words)
    return None


def _say_digit_groups(written: str, separator: str) -> str:
    return ", ".join(spell.digits(group) for group in written.split(separator))


def card_number(text: str, pos: int) -> Spoken | None:
    """ "4111 1111 1111 1111" -> "four one one one, one one one one, ..."."""
    match = _CARD.match(text, pos)
    if match is None or not at_word_start(text, pos):
        return None
    return Spoken(match.end(), _say_digit_groups(match[0], match["separator"]))


def digit_groups(text: str, pos: int) -> Spoken | None:
    """Hyphenated digit groups ("392-118-004", ZIP+4 "62704-1234") group by group; dotted
    ones ("192.168.1.1", "2.1.3") part by part with "dot".
    """
    if not at_word_start(text, pos):
        return None
    match = _DIGIT_GROUPS.match(text, pos)
    if match is not None:
        return Spoken(match.end(), _say_digit_groups(match[0], "-"))
    match = _DOTTED_NUMBERS.match(text, pos)
    if match is not None:
        parts = (spell.cardinal(int(part)) for part in match[0].split("."))
        return Spoken(match.end(), " dot ".join(parts))
    return None


def say_characters(pieces: Sequence[str]) -> str:
    """Join spelled-out characters with spaces, tying a lone letter A to what follows it.

    Front ends read "A" before another word as the article ("A seven X" -> "uh seven X"),
    but "A-seven" as the letter ("ay seven"), as in "A-list". Two A's in a row are kept
    apart by a comma: "A, A-seven".
    """
    words: list[str] = []
    index = 0
    while index < len(pieces):
        piece = pieces[index]
        if piece in ("A", "a") and index + 1 < len(pieces):
            following = pieces[index + 1]
            if following in ("A", "a"):
                words.append(f"{piece},")
                index += 1
            else:
                words.append(f"{piece}-{following}")
                index += 2
            continue
        words.append(piece)
        index += 1
    return " ".join(words)


def _say_code_group(group: str) -> str:
    return say_characters(
        [spell.DIGIT_WORDS[int(char)] if char.isdecimal() else char for char in group]
    )


def spelled_word(text: str, pos: int) -> Spoken | None:
    """A word spelled out with hyphens, letter by letter as a code group: "J-O-N-E-S" ->
    "J O N E S", "A-B-C-1-2-3" -> "A-B C one two three". It takes two letters or more, each
    alone between hyphens, so "X-ray", "T-shirt", "e-mail" and "K-9" are not spelled words.
    """
    if pos > 0 and (is_word_char(text[pos - 1]) or text[pos - 1] == "-"):
        return None
    match = _SPELLED.match(text, pos)
    if match is None:
        return None
    characters = match[0].split("-")
    if sum(char.isalpha() for char in characters) < 2:
        return None
    return Spoken(match.end(), _say_code_group("".join(characters).upper()))


def code(text: str, pos: int) -> Spoken | None:
    """Capital letters mixed with digits, character by character: "A7X-392-KQ" -> "A-seven
    X, three nine two, K Q". Short ones like "4B" or "B12" keep the number whole.
    """
    match = _CODE.match(text, pos)
    if match is None or not at_word_start(text, pos):
        return None
    written = match[0]
    if not (any(c.isdecimal() for c in written) and any(c.isalpha() for c in written)):
        return None
    short = _SHORT_CODE.fullmatch(written)
    if short is not None and (short["lead"] or short["trail"])[0] != "0":
        number = spell.cardinal(int(short["lead"] or short["trail"]))
        pieces = [number, short["tail"]] if short["lead"] else [short["head"], number]
        return Spoken(match.end(), say_characters(pieces))
    return Spoken(match.end(), ", ".join(_say_code_group(g) for g in written.split("-")))


def mixed_alphanumeric(text: str, pos: int) -> Spoken | None:
    """Any other word with digits in it: letters kept, short numbers as numbers, longer
    ones digit by digit ("iPhone15" -> "iPhone fifteen", "abc123" -> "abc one two three").
    """
    match = _ALPHANUMERIC.match(text, pos)
    if match is None or not at_word_start(text, pos):
        return None
    words = []
    for piece in _PIECES.findall(match[0]):
        if not piece.isdecimal():
            words.append(piece)
        elif len(piece) <= 2 and not (len(piece) == 2 and piece.startswith("0")):
            words.append(spell.cardinal(int(piece)))
        else:
            words.append(spell.digits(piece))
    return Spoken(match.end(), say_characters(words))
