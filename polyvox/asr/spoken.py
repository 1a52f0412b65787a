"""The spoken-form scorer: a transcript against a hand-written reference of spoken words.

    spoken_errors("your balance is one thousand two hundred forty nine dollars and fifty "
                  "cents", "Your balance is $1,249.50.")   # 0 edits

Used for customer-service text (polyvox.eval's service sets, polyvox.asr.customer_service),
where one written form has several correct readings.

## Scoring by spoken words, fairly

References are spoken words ("one thousand two hundred forty nine dollars and fifty
cents"); whisper writes what it hears in its own style ("$1,249.50", "3:45 PM", "Dr.",
"j.smith@example.com"). `spoken_errors` compares the two after `normalize_for_wer` (which
spells digits) and a few more steps, applied to both texts alike, so that a correct
reading written in whisper's style costs nothing:

- e-mail and web addresses are said: "j.smith@example.com" -> "j dot smith at example dot
  com", "www.acme.io/help" -> "www dot acme dot io slash help";
- runs of single letters join: "w w w" = "www", "p m" = "pm", "k q" = "kq", "i d" = "id";
- "dollars and fifty cents" = "dollars fifty cents" (the "and" is optional);
- "3:00 PM" = "3 PM", "3.45 p.m." = "3:45 p.m."; "€20" = "20 euros", "£3.99" = "3 pounds
  99 pence"; "#12" = "number 12"; "5 kg" = "5 kilograms" (and other unit symbols);
- letters and digits written together are split: "A7X" = "A 7 X", "Apt 3B" = "Apt 3 B";
- a bare integer whisper writes in digits may stand for any of its usual readings, and
  the one closest to the reference is scored: 2024 = "two thousand twenty four" or
  "twenty twenty four" or "two zero two four"; 221 = "two hundred twenty one" or "two
  twenty one"; 14 after a month = "fourteen" or "fourteenth"; 7.30 = "seven point three
  zero" or "seven thirty"; "5-7" = "five seven" or "five to seven";
- "Dr." = doctor or drive, "St." = street or saint, "Mr."/"Mrs."/"Ms." = mister/missus/
  miz, "Apt."/"Ave."/"Blvd."/"Ste." = apartment/avenue/boulevard/suite.

The choice among readings is exact: a word lattice (one slot per ambiguous token) is
aligned against the reference and the cheapest path is scored. A wrong reading still
costs: "14th" heard as "40" is "forty" in every reading, and "fourteenth" in none.

NOTE: the benefit of the doubt favours normalization *off*: when espeak reads "Elm Dr."
as "Elm doctor" and whisper writes "Elm Dr.", or reads a phone number as cardinals and
whisper writes "555-123-4567", the off transcript scores as if said right. The measured
reduction is therefore a lower bound.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from polyvox.asr import numbers as wer_numbers
from polyvox.asr.wer import CorpusErrors, UtteranceErrors, normalize_for_wer

# --- text-level rewrites, applied to reference and hypothesis alike -------------------

_DASHES = str.maketrans({"\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-",
                         "\u2014": "-", "\u2212": "-"})  # fmt: skip
_TLDS = "com|org|net|edu|gov|io|co|us|uk|ca|ai|app|dev|info|biz|me|tv|ly|help|support|store|shop"
_WEB = re.compile(rf"(?:https?://)?(?:www\.)?(?:[a-z0-9-]+\.)+(?:{_TLDS})(?:/\S*)?", re.IGNORECASE)
_DOTTED_NAME = re.compile(r"[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*\.[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*")
_ADDRESS_SYMBOLS = {".": " dot ", "@": " at ", "/": " slash ", "-": " dash ", "_": " underscore ",
                    ":": " colon "}  # fmt: skip
_RUN = re.compile(r"\S+")
_LEADING = "\"'(["
_TRAILING = ".,;:!?)]}\"'"

_POUNDS_OR_EUROS = re.compile(
    r"(?P<symbol>[€£])\s?(?P<whole>\d[\d,]*)(?:\.(?P<cents>\d{2}))?(?!\d)"
)
_NUMBER_SIGN = re.compile(r"#\s?(?=\d)")
_UNITS = {
    "kg": "kilograms", "lb": "pounds", "lbs": "pounds", "oz": "ounces", "mph": "miles per hour",
    "km": "kilometers", "mi": "miles", "ft": "feet", "GB": "gigabytes", "MB": "megabytes",
    "TB": "terabytes", "Mbps": "megabits per second", "Gbps": "gigabits per second",
    "°F": "degrees fahrenheit", "°C": "degrees celsius", "°": "degrees", "W": "watts",
    "kW": "kilowatts", "kWh": "kilowatt hours",
}  # fmt: skip
_UNIT = re.compile(
    r"(?<=\d)\s?(?P<unit>"
    + "|".join(re.escape(u) for u in sorted(_UNITS, key=len, reverse=True))
    + r")(?![\w])",
    re.IGNORECASE,  # whisper writes "10 MPH", "300 MBPS"
)
_UNITS_BY_CASE = {unit.lower(): words for unit, words in _UNITS.items()}
_MERIDIEM_AHEAD = r"(?=\s?[AaPp]\.?\s?[Mm](?![A-Za-z]))"
_ROUND_HOUR = re.compile(rf"(?<![\d.:])(?P<hour>\d{{1,2}}):00{_MERIDIEM_AHEAD}")
_DOTTED_TIME = re.compile(rf"(?<![\d.:])(?P<hour>\d{{1,2}})\.(?P<minute>\d{{2}}){_MERIDIEM_AHEAD}")
_LETTER_DIGIT = re.compile(
    r"(?<=[A-Za-z])(?=\d)|(?<=\d)(?=[A-Za-z])(?!(?:st|nd|rd|th|s)(?![A-Za-z]))", re.IGNORECASE
)
_OPTIONAL_AND = re.compile(
    r"\b(?P<currency>dollars?|euros?|pounds?)\s+and\s+(?=(?:[\w-]+\s+){0,4}?(?:cents?|pence|penny)\b)",
    re.IGNORECASE,
)


def _say_address(run: str) -> str:
    run = re.sub(r"^https?://", "", run, flags=re.IGNORECASE)
    return "".join(_ADDRESS_SYMBOLS.get(char, char) for char in run)


def _is_address(core: str) -> bool:
    if "@" in core or _WEB.fullmatch(core):
        return True
    # "j.smith", "first.last2": dotted names, but not "p.m", "u.s", "3.5" or "3.45pm".
    if _DOTTED_NAME.fullmatch(core) is None:
        return False
    parts = re.split(r"[._-]", core)
    return all(part[0].isalpha() for part in parts) and any(len(part) > 1 for part in parts)


def _say_addresses(text: str) -> str:
    def replace(match: re.Match[str]) -> str:
        run = match[0]
        start = len(run) - len(run.lstrip(_LEADING))
        core = run[start:].rstrip(_TRAILING)
        end = start + len(core)
        if not core or not _is_address(core):
            return run
        return run[:start] + _say_address(core) + run[end:]

    return _RUN.sub(replace, text)


def _say_pounds_or_euros(match: re.Match[str]) -> str:
    whole, cents = match["whole"], match["cents"]
    is_pound = match["symbol"] == "£"
    unit = ("pound" if is_pound else "euro") + ("" if whole == "1" else "s")
    words = f"{whole} {unit}"
    if cents and int(cents):
        subunit = (
            ("penny" if cents == "01" else "pence")
            if is_pound
            else ("cent" if cents == "01" else "cents")
        )
        words += f" {cents} {subunit}"
    return words


def _say_unit(match: re.Match[str]) -> str:
    return " " + _UNITS_BY_CASE[match["unit"].lower()]


def rewrite(text: str) -> str:
    """The text-level steps of the spoken-form comparison (see the module docstring)."""
    text = text.translate(_DASHES)
    text = _ROUND_HOUR.sub(lambda m: m["hour"], text)
    text = _DOTTED_TIME.sub(lambda m: f"{m['hour']}:{m['minute']}", text)
    text = _say_addresses(text)
    text = _POUNDS_OR_EUROS.sub(_say_pounds_or_euros, text)
    text = _NUMBER_SIGN.sub("number ", text)
    text = _UNIT.sub(_say_unit, text)
    text = _LETTER_DIGIT.sub(" ", text)
    return _OPTIONAL_AND.sub(lambda m: m["currency"] + " ", text)


# --- ambiguous tokens: slots of alternative readings ---------------------------------

Alternatives = tuple[tuple[str, ...], ...]  # one slot: each alternative a word sequence

_MONTHS = frozenset((
    "january", "february", "march", "april", "may", "june", "july", "august", "september",
    "october", "november", "december", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep",
    "sept", "oct", "nov", "dec",
))  # fmt: skip
_ABBREVIATIONS: dict[str, tuple[str, ...]] = {
    "Dr": ("doctor", "drive"), "St": ("street", "saint"), "Mr": ("mister",),
    "Mrs": ("missus",), "Ms": ("miz",), "Apt": ("apartment",), "Ave": ("avenue",),
    "Blvd": ("boulevard",), "Ste": ("suite",), "Rd": ("road",), "Ln": ("lane",),
    "Jr": ("junior",), "Bldg": ("building",), "Hwy": ("highway",), "Pkwy": ("parkway",),
}  # fmt: skip
_SLOT = re.compile(
    r"""
    (?P<connector>(?<=\d)\ ?-\ ?(?=\d))
  | (?P<dotted>(?<![\w$£€¥.:])(?<!\d,)\d{1,2}\.\d{2}(?![\d%]|[.,]\d|\s?%))
  | (?P<integer>(?<![\w$£€¥.:])(?<!\d,)\d+(?![\d:%]|[.,]\d|\s%|(?:st|nd|rd|th|s)(?![A-Za-z])|'s))
  | (?P<abbreviation>(?<![\w.])(?:"""
    + "|".join(sorted(_ABBREVIATIONS, key=len, reverse=True))
    + r""")\.?(?![\w]))
    """,
    re.VERBOSE,
)
_LAST_WORD = re.compile(r"([A-Za-z]+)\W*\Z")


def _words(text: str) -> tuple[str, ...]:
    return tuple(normalize_for_wer(text))


def _integer_readings(written: str, previous_word: str) -> list[str]:
    from polyvox.text.normalize.english import spell  # the normalizer's year/house readings

    value = int(written)
    readings = [" ".join(wer_numbers.cardinal(value)), spell.digits(written)]
    if "0" in written and len(written) > 1:
        readings.append(spell.digits(written).replace("zero", "oh"))
    if len(written) == 3:  # "two twenty one", "three oh five"
        readings.append(
            f"{spell.DIGIT_WORDS[int(written[0])]} {spell.clock_minutes(int(written[1:]))}"
        )
    if len(written) == 4 and written[0] != "0":
        readings.append(spell.year(value))
        high, low = divmod(value, 100)
        if low == 0:
            readings.append(f"{spell.cardinal(high)} hundred")
    if previous_word in _MONTHS and 1 <= value <= 31:
        readings.append(spell.ordinal(value))
    return readings


def _slot(match: re.Match[str], text: str) -> Alternatives:
    kind = match.lastgroup
    written = match[0]
    if kind == "connector":  # "5-7": "five to seven"; "555-0142": just a pause
        return ((), ("to",))
    if kind == "abbreviation":
        return tuple((word,) for word in _ABBREVIATIONS[written.rstrip(".")])
    if kind == "dotted":  # "7.30": a decimal, or a time written with a dot
        hour, minute = written.split(".")
        time_words = f"{hour}:{minute}" if int(hour) <= 24 and int(minute) < 60 else written
        return tuple(dict.fromkeys((_words(written), _words(time_words))))
    previous = _LAST_WORD.search(text, 0, match.start())
    previous_word = previous[1].lower() if previous else ""
    return tuple(dict.fromkeys(_words(r) for r in _integer_readings(written, previous_word)))


def _join_letters(words: Sequence[str]) -> list[str]:
    """Runs of two or more single letters become one word: "w w w" -> "www"."""
    joined: list[str] = []
    run: list[str] = []
    for word in [*words, ""]:
        if len(word) == 1 and word.isalpha():
            run.append(word)
            continue
        if len(run) >= 2:
            joined.append("".join(run))
        else:
            joined.extend(run)
        run = []
        if word:
            joined.append(word)
    return joined


def spoken_slots(text: str) -> list[Alternatives]:
    """Text -> word slots: a plain word is a slot with one alternative of one word."""
    text = rewrite(text)
    slots: list[Alternatives] = []
    position = 0

    def add_literal(chunk: str) -> None:
        slots.extend(((word,),) for word in _join_letters(normalize_for_wer(chunk)))

    for match in _SLOT.finditer(text):
        add_literal(text[position : match.start()])
        slots.append(_slot(match, text))
        position = match.end()
    add_literal(text[position:])
    return slots


def reference_words(spoken: str) -> list[str]:
    """A spoken-form reference -> the words it is scored as. References hold no digits."""
    if any(char.isdecimal() for char in spoken):
        raise ValueError(f"a spoken-form reference must be words only: {spoken!r}")
    slots = spoken_slots(spoken)
    assert all(len(slot) == 1 for slot in slots), "no ambiguity without digits or abbreviations"
    return [word for slot in slots for word in slot[0]]


# --- lattice alignment ----------------------------------------------------------------

# (cost, substitutions, deletions, insertions, hypothesis words on this path)
_State = tuple[int, int, int, int, tuple[str, ...]]


def _better(a: _State, b: _State) -> _State:
    """Cheapest first; among equal costs the most substitutions (as `wer.align`)."""
    return a if (a[0], -a[1]) <= (b[0], -b[1]) else b


def _consume(column: list[_State], word: str, reference: Sequence[str]) -> list[_State]:
    first = column[0]
    out: list[_State] = [(first[0] + 1, first[1], first[2], first[3] + 1, (*first[4], word))]
    for i, reference_word in enumerate(reference, start=1):
        diagonal, above, left = column[i - 1], column[i], out[i - 1]
        miss = int(reference_word != word)
        best = (diagonal[0] + miss, diagonal[1] + miss, diagonal[2], diagonal[3],
                (*diagonal[4], word))  # fmt: skip
        best = _better(best, (above[0] + 1, above[1], above[2], above[3] + 1, (*above[4], word)))
        best = _better(best, (left[0] + 1, left[1], left[2] + 1, left[3], left[4]))
        out.append(best)
    return out


def align_slots(reference: Sequence[str], slots: Sequence[Alternatives]) -> _State:
    """The cheapest alignment of `reference` with any path through `slots`."""
    column: list[_State] = [(i, 0, i, 0, ()) for i in range(len(reference) + 1)]
    for alternatives in slots:
        best_column: list[_State] | None = None
        for words in alternatives:
            candidate = column
            for word in words:
                candidate = _consume(candidate, word, reference)
            best_column = (
                candidate
                if best_column is None
                else [_better(a, b) for a, b in zip(best_column, candidate)]
            )
        assert best_column is not None, "a slot has at least one alternative"
        column = best_column
    return column[-1]


def spoken_errors(reference: str, hypothesis: str) -> UtteranceErrors:
    """Score a transcript against a spoken-form reference (see the module docstring)."""
    words = reference_words(reference)
    _, subs, dels, ins, chosen = align_slots(words, spoken_slots(hypothesis))
    return UtteranceErrors(tuple(words), chosen, subs, dels, ins)


def spoken_corpus_errors(references: Sequence[str], hypotheses: Sequence[str]) -> CorpusErrors:
    """`spoken_errors` for paired references and hypotheses; `.wer` is the corpus WER."""
    if len(references) != len(hypotheses):
        raise ValueError(
            f"{len(references)} references but {len(hypotheses)} hypotheses; "
            "pass one hypothesis per reference, in the same order."
        )
    return CorpusErrors(tuple(spoken_errors(r, h) for r, h in zip(references, hypotheses)))
