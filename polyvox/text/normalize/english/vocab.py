"""Word tables for English normalization: months, currencies, units, abbreviations."""

from __future__ import annotations

from typing import NamedTuple

MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip

# Written month name (full or short, without the period) -> month number.
MONTH_NUMBERS = {name: index + 1 for index, name in enumerate(MONTHS)} | {
    "Jan": 1, "Feb": 2, "Mar": 3, "Apr": 4, "Jun": 6, "Jul": 7, "Aug": 8,
    "Sep": 9, "Sept": 9, "Oct": 10, "Nov": 11, "Dec": 12,
}  # fmt: skip

WEEKDAYS = {
    "Monday": "Mon", "Tuesday": "Tue", "Wednesday": "Wed", "Thursday": "Thu",
    "Friday": "Fri", "Saturday": "Sat", "Sunday": "Sun",
}  # fmt: skip
# Short weekday names as written in opening hours ("Mon-Fri") -> full names.
WEEKDAY_NAMES = {short: name for name, short in WEEKDAYS.items()} | {
    "Tues": "Tuesday", "Thur": "Thursday", "Thurs": "Thursday",
}  # fmt: skip

# A bare number right after one of these words is a year ("since 1999", "Q3 2024").
YEAR_CONTEXT_WORDS = frozenset((
    "in", "since", "by", "of", "from", "until", "till", "before", "after", "during", "circa",
    "year", "class", "spring", "summer", "fall", "autumn", "winter", "early", "late", "mid",
    "q1", "q2", "q3", "q4", "fy", "fiscal",
))  # fmt: skip

# "x/y" right after one of these words is a date, not a fraction ("due 3/4").
DATE_CONTEXT_WORDS = frozenset((
    "on", "by", "until", "till", "due", "before", "after", "from", "since", "through", "thru",
    "dated", "date", *(name.lower() for name in (*WEEKDAYS, *WEEKDAY_NAMES)),
))  # fmt: skip

# A number right after one of these words is an identifier read digit by digit
# ("order 48213", "ending in 4242", "PIN 0917").
IDENTIFIER_WORDS = frozenset((
    "number", "no", "num", "order", "confirmation", "code", "account", "acct", "ticket",
    "reference", "ref", "case", "pin", "id", "zip", "extension", "ext", "member", "policy",
    "invoice", "tracking", "claim", "routing", "serial", "sku", "card", "passcode", "otp",
    "ending", "flight",
))  # fmt: skip
# ... or right after "number is", "code was", or one of the phrases below.
IDENTIFIER_LINK_WORDS = frozenset(("is", "was"))
IDENTIFIER_PHRASES = frozenset(
    (("ending", "in"), ("ends", "in"), ("ending", "with"), ("last", "four"), ("four", "digits"))
)


class Currency(NamedTuple):
    """How to say an amount of one currency."""

    unit: str
    units: str
    subunit: str | None  # None: amounts are never split into a smaller unit
    subunits: str | None


CURRENCY_SYMBOLS = {
    "$": Currency("dollar", "dollars", "cent", "cents"),
    "US$": Currency("dollar", "dollars", "cent", "cents"),
    "C$": Currency("Canadian dollar", "Canadian dollars", "cent", "cents"),
    "CA$": Currency("Canadian dollar", "Canadian dollars", "cent", "cents"),
    "A$": Currency("Australian dollar", "Australian dollars", "cent", "cents"),
    "€": Currency("euro", "euros", "cent", "cents"),
    "£": Currency("pound", "pounds", "penny", "pence"),
    "¥": Currency("yen", "yen", None, None),
    "₹": Currency("rupee", "rupees", "paisa", "paise"),
}
CURRENCY_CODES = {
    "USD": CURRENCY_SYMBOLS["$"],
    "CAD": CURRENCY_SYMBOLS["C$"],
    "AUD": CURRENCY_SYMBOLS["A$"],
    "EUR": CURRENCY_SYMBOLS["€"],
    "GBP": CURRENCY_SYMBOLS["£"],
    "JPY": CURRENCY_SYMBOLS["¥"],
    "INR": CURRENCY_SYMBOLS["₹"],
}
# Short scale words after an amount: "$5M", "$2.5 million", "€3bn".
MONEY_SCALES = {
    "k": "thousand", "K": "thousand", "thousand": "thousand",
    "m": "million", "M": "million", "mm": "million", "million": "million",
    "b": "billion", "B": "billion", "bn": "billion", "billion": "billion",
    "t": "trillion", "T": "trillion", "trillion": "trillion",
}  # fmt: skip
# "$20/mo" -> "twenty dollars per month".
PER_PERIODS = {
    "hr": "hour", "hour": "hour", "h": "hour", "day": "day", "night": "night",
    "wk": "week", "week": "week", "mo": "month", "month": "month",
    "yr": "year", "year": "year", "person": "person", "user": "user",
}  # fmt: skip

# Unit after a number -> (singular, plural). Matched case-sensitively, longest first.
UNITS = {
    "kg": ("kilogram", "kilograms"), "g": ("gram", "grams"), "mg": ("milligram", "milligrams"),
    "lb": ("pound", "pounds"), "lbs": ("pounds", "pounds"), "oz": ("ounce", "ounces"),
    "km": ("kilometer", "kilometers"), "m": ("meter", "meters"),
    "cm": ("centimeter", "centimeters"),
    "mm": ("millimeter", "millimeters"), "mi": ("mile", "miles"), "ft": ("foot", "feet"),
    "yd": ("yard", "yards"), "sq ft": ("square foot", "square feet"),
    "mph": ("mile per hour", "miles per hour"),
    "km/h": ("kilometer per hour", "kilometers per hour"),
    "kph": ("kilometer per hour", "kilometers per hour"),
    "ml": ("milliliter", "milliliters"), "mL": ("milliliter", "milliliters"),
    "gal": ("gallon", "gallons"), "KB": ("kilobyte", "kilobytes"), "MB": ("megabyte", "megabytes"),
    "GB": ("gigabyte", "gigabytes"), "TB": ("terabyte", "terabytes"),
    "Mbps": ("megabit per second", "megabits per second"),
    "Gbps": ("gigabit per second", "gigabits per second"),
    "Hz": ("hertz", "hertz"), "kHz": ("kilohertz", "kilohertz"),
    "MHz": ("megahertz", "megahertz"),
    "GHz": ("gigahertz", "gigahertz"), "W": ("watt", "watts"), "kW": ("kilowatt", "kilowatts"),
    "kWh": ("kilowatt hour", "kilowatt hours"), "V": ("volt", "volts"),
    "°F": ("degree Fahrenheit", "degrees Fahrenheit"),
    "°C": ("degree Celsius", "degrees Celsius"),
    "°": ("degree", "degrees"), "ms": ("millisecond", "milliseconds"),
    "sec": ("second", "seconds"), "secs": ("seconds", "seconds"),
    "min": ("minute", "minutes"), "mins": ("minutes", "minutes"),
    "hr": ("hour", "hours"), "hrs": ("hours", "hours"), "h": ("hour", "hours"),
}  # fmt: skip


class Abbreviation(NamedTuple):
    """One abbreviation's readings.

    `title` is the reading before a name ("Dr. Patel" -> doctor), `place` the reading after
    a name or number ("Elm Dr." -> drive). One of them may be None.
    """

    title: str | None
    place: str | None
    needs_period: bool  # "Co" or "No" without a period are ordinary words


ABBREVIATIONS = {
    "Dr": Abbreviation("doctor", "drive", False),
    "St": Abbreviation("saint", "street", False),
    "Mr": Abbreviation("mister", None, False),
    "Mrs": Abbreviation("missus", None, False),
    "Ms": Abbreviation("miz", None, False),
    "Mx": Abbreviation("mix", None, True),
    "Prof": Abbreviation("professor", None, True),
    "Rev": Abbreviation("reverend", None, True),
    "Capt": Abbreviation("captain", None, True),
    "Sgt": Abbreviation("sergeant", None, True),
    "Lt": Abbreviation("lieutenant", None, True),
    "Gen": Abbreviation("general", None, True),
    "Gov": Abbreviation("governor", None, True),
    "Sen": Abbreviation("senator", None, True),
    "Mt": Abbreviation("mount", None, True),
    "Ft": Abbreviation("fort", None, True),
    "Jr": Abbreviation(None, "junior", False),
    "Sr": Abbreviation(None, "senior", False),
    "Ave": Abbreviation(None, "avenue", False),
    "Blvd": Abbreviation(None, "boulevard", False),
    "Rd": Abbreviation(None, "road", False),
    "Ln": Abbreviation(None, "lane", False),
    "Ct": Abbreviation(None, "court", True),
    "Pl": Abbreviation(None, "place", True),
    "Hwy": Abbreviation(None, "highway", False),
    "Pkwy": Abbreviation(None, "parkway", False),
    "Sq": Abbreviation(None, "square", True),
    "Apt": Abbreviation("apartment", None, False),
    "Ste": Abbreviation("suite", None, True),
    "Bldg": Abbreviation("building", None, False),
    "Dept": Abbreviation("department", None, False),
    "Inc": Abbreviation(None, "incorporated", False),
    "Corp": Abbreviation(None, "corporation", False),
    "Ltd": Abbreviation(None, "limited", False),
    "Co": Abbreviation(None, "company", True),
    "LLC": Abbreviation(None, "L L C", False),
    "etc": Abbreviation(None, "et cetera", True),
    "vs": Abbreviation("versus", None, False),
    "approx": Abbreviation("approximately", None, True),
    "No": Abbreviation("number", None, True),
    "no": Abbreviation("number", None, True),
    "ext": Abbreviation("extension", None, False),
    "Ext": Abbreviation("extension", None, False),
    "tel": Abbreviation("telephone", None, True),
    "Tel": Abbreviation("telephone", None, True),
}
# Abbreviations that only expand before a number ("No. 5", "ext 204", "Apt 4B").
BEFORE_NUMBER_ONLY = frozenset(("No", "no", "ext", "Ext", "tel", "Tel"))
DOTTED_WORDS = {"e.g.": "for example", "i.e.": "that is", "a.k.a.": "also known as"}

# Top-level domains a bare "name.tld" must end with to be read as a web address.
TOP_LEVEL_DOMAINS = frozenset((
    "com", "org", "net", "edu", "gov", "mil", "int", "io", "co", "us", "uk", "ca", "au", "de",
    "fr", "es", "it", "nl", "eu", "in", "jp", "ai", "app", "dev", "info", "biz", "me", "tv",
    "ly", "gg", "xyz", "health", "help", "support", "store", "shop", "online", "site",
))  # fmt: skip
URL_SYMBOLS = {
    ".": "dot", "/": "slash", "-": "dash", "_": "underscore", "@": "at", "+": "plus",
    "?": "question mark", "=": "equals", "&": "and", "#": "hash", "%": "percent",
    "~": "tilde", ":": "colon",
}  # fmt: skip
# Standalone symbols (spaces on both sides) and their words.
SYMBOL_WORDS = {"&": "and", "@": "at", "+": "plus", "=": "equals", "w/": "with", "w/o": "without"}
UNICODE_FRACTIONS = {
    "½": (1, 2), "⅓": (1, 3), "⅔": (2, 3), "¼": (1, 4), "¾": (3, 4),
    "⅕": (1, 5), "⅛": (1, 8), "⅜": (3, 8), "⅝": (5, 8), "⅞": (7, 8),
}  # fmt: skip
