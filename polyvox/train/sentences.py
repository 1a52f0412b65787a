"""A seeded generator of varied English sentences for teacher data (our own grammar and
word lists, Apache-2.0 like the rest of polyvox; nothing downloaded).

Statements, questions, commands, exclamations, lists, subordinate clauses, short replies
and long chained sentences, over ~1,500 words; a fifth carry numbers, times, money or
percentages, read out by polyvox's English normalizer exactly as the engine would before
the text reaches a model. The project's held-out sentences (polyvox.asr.sentences,
polyvox.bench.texts) are never produced, so they stay fit for measuring.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from polyvox.text.normalize import make_normalizer
from polyvox.train.wide_vocab import WideVocab, load_wide_vocab

_NAMES = """Anna Ben Clara David Elena Frank Grace Henry Isla Jack Karen Leo Maria Noah Olivia
Peter Quinn Rosa Samuel Tara Umar Vera Walter Xavier Yusuf Zoe Amelia Bruno Chloe Daniel Emma
Felix Gloria Hugo Irene James Kofi Lucy Marcus Nina Oscar Priya Ravi Sofia Thomas Ursula Victor
Wendy Yara Aaron Bianca Carlos Diana Ethan Fatima George Hannah Ivan Julia Kevin Laura Mohammed
Naomi Owen Paula Rachel Simon Tessa Liam Mei Kenji Aisha Mateo Ingrid Dmitri Fiona Gabriel""".split()
_PLACES = """Boston Chicago Denver Seattle Portland Austin Miami Dallas Phoenix Atlanta Toronto
Vancouver Dublin London Paris Berlin Madrid Rome Vienna Prague Oslo Stockholm Helsinki Warsaw
Athens Cairo Nairobi Lagos Mumbai Delhi Tokyo Osaka Seoul Sydney Melbourne Auckland Lima Santiago
Montreal Edinburgh Glasgow Lisbon Geneva Zurich Amsterdam Brussels Copenhagen Budapest Istanbul
Bangkok Singapore Manila Jakarta Havana Mexico Canada Brazil Norway Japan Kenya Peru Iceland
Scotland Ireland Spain Italy Greece Egypt India Chile Texas Oregon Vermont Alaska Florida""".split()
_PEOPLE = """teacher doctor nurse farmer baker driver pilot student neighbor friend cousin
uncle aunt brother sister father mother grandmother grandfather manager engineer painter
writer singer dancer lawyer chef waiter mechanic plumber carpenter gardener librarian
scientist reporter photographer captain soldier officer judge clerk cashier tourist stranger
child boy girl baby customer passenger guest visitor host coach player referee musician
architect dentist pharmacist professor director assistant volunteer landlord tenant""".split()
_THINGS = """book letter key phone lamp chair table window door bottle glass cup plate bowl
spoon knife fork basket bag box ticket map coin wallet umbrella jacket coat hat scarf glove
shoe boot bicycle car truck train boat ship plane bus engine wheel ladder hammer nail rope
candle mirror clock watch radio camera computer keyboard screen picture painting poster
blanket pillow towel soap brush comb ribbon button needle thread kettle oven fridge sink
stove pan pot jar sandwich apple orange banana lemon cherry peach potato carrot onion tomato
cabbage pepper cheese bread cake cookie pie soup salad rice pasta coffee tea juice milk
water honey sugar salt flour egg butter jam chocolate newspaper magazine notebook pencil
pen envelope parcel package stamp flag balloon kite drum guitar piano violin trumpet flute
ball puzzle doll toy fence gate bridge tower statue fountain bench tent rock stone shell
feather leaf branch flower rose tulip seed tree bush log""".split()
_ANIMALS = """dog cat horse cow sheep goat pig rabbit mouse duck goose chicken owl eagle hawk
crow sparrow robin parrot fox wolf bear deer moose squirrel frog turtle snake lizard whale
dolphin shark salmon trout crab lobster bee ant spider butterfly beetle camel zebra lion
tiger elephant giraffe monkey kangaroo penguin seal otter badger""".split()
_LOCATIONS = """kitchen garden station airport office library museum market bakery hospital
school university factory farm harbor beach forest meadow valley hill mountain river lake
island village town city street square park playground theater cinema stadium church
castle palace cottage cabin barn garage basement attic hallway bedroom bathroom balcony
rooftop restaurant cafe hotel shop pharmacy bank post office gym pool zoo laboratory
warehouse courtyard tunnel highway countryside desert jungle canyon""".split()
_ADJECTIVES = """old new young small big large tiny huge tall short long narrow wide heavy
light dark bright quiet loud soft hard warm cold hot cool fresh stale clean dirty empty full
busy lazy happy sad angry calm brave shy clever silly kind polite rude gentle strict funny
serious strange famous ordinary rare common cheap expensive simple difficult easy early late
quick slow smooth rough sharp dull sweet bitter sour salty spicy delicious wooden metal
plastic golden silver red blue green yellow purple orange brown gray pink white black ancient
modern broken shiny dusty muddy rusty sleepy hungry thirsty tired careful curious proud
lucky strong weak gentle wild peaceful noisy crowded lonely friendly elegant ugly beautiful
wonderful terrible excellent perfect gorgeous enormous delicate fragile sturdy colorful""".split()
_ADVERBS = """quickly slowly quietly loudly carefully gently suddenly finally happily sadly
easily rarely often always never usually sometimes nearly almost really truly clearly
politely calmly bravely eagerly patiently proudly softly firmly warmly secretly""".split()
# base:past, transitive (take an object)
_VERBS_T = """open:opened close:closed carry:carried paint:painted clean:cleaned fix:fixed
find:found lose:lost buy:bought sell:sold bring:brought take:took make:made build:built
break:broke hold:held keep:kept leave:left see:saw watch:watched hear:heard read:read
write:wrote draw:drew cook:cooked bake:baked wash:washed fold:folded throw:threw catch:caught
push:pushed pull:pulled lift:lifted drop:dropped borrow:borrowed lend:lent pack:packed
order:ordered deliver:delivered visit:visited call:called help:helped meet:met follow:followed
choose:chose count:counted measure:measured repair:repaired hide:hid share:shared
plant:planted pick:picked feed:fed fill:filled empty:emptied check:checked test:tested
answer:answered explain:explained describe:described remember:remembered forget:forgot
return:returned send:sent receive:received mend:mended polish:polished sweep:swept
wrap:wrapped sign:signed print:printed copy:copied climb:climbed cross:crossed enjoy:enjoyed
admire:admired study:studied notice:noticed tie:tied hang:hung ring:rang""".split()
_VERBS_I = """arrive:arrived leave:left sleep:slept laugh:laughed smile:smiled cry:cried
sing:sang dance:danced run:ran walk:walked swim:swam jump:jumped wait:waited rest:rested
shout:shouted whisper:whispered travel:traveled work:worked play:played talk:talked
listen:listened return:returned relax:relaxed complain:complained agree:agreed
hesitate:hesitated sneeze:sneezed wander:wandered stumble:stumbled shiver:shivered""".split()
_TIMES = """yesterday|today|tonight|tomorrow|last night|this morning|every evening|on Monday
|on Tuesday morning|on Wednesday|on Thursday afternoon|on Friday night|on Saturday|on Sunday
|next week|last summer|in the spring|during the winter|in autumn|at noon|at midnight
|before breakfast|after lunch|after dinner|at dawn|at sunset|twice a week|once a month
|every day|a few minutes ago|an hour later|in the meantime|right away|later that day""".replace(
    "\n", "").split("|")
_INTERJECTIONS = """Yes.|No.|Okay.|Thank you.|Thank you very much!|Of course.|Sure thing.
|Good morning!|Good evening.|Hello there.|Goodbye!|See you soon.|Not at all.|Excuse me.
|I'm sorry.|Well done!|Oh no!|Wow!|Really?|Why not?|Me too.|Never mind.|Happy birthday!
|Congratulations!|Welcome back.|Take care.|Good luck!|All right.|Absolutely.|Maybe later.
|Watch out!|Hold on.|Just a moment, please.|Come in.|Sounds good.|I see.|Fair enough.""".replace(
    "\n", "").split("|")
_MONTHS = ("January February March April May June July August September October November "
           "December").split()
_MODALS = "will|can|should|might|must|could|would like to|wants to|has to|decided to|forgot to".split("|")
_CONNECT = ["and", "but", "so", "yet", "or", "because", "although", "while", "until", "since"]
_OPENERS = ["When", "After", "Before", "If", "Although", "Because", "Once", "While", "As soon as"]
_IRREGULAR_PLURALS = {"child": "children", "mouse": "mice", "goose": "geese", "knife": "knives",
                      "leaf": "leaves", "sheep": "sheep", "deer": "deer", "moose": "moose",
                      "salmon": "salmon", "trout": "trout", "shelf": "shelves", "man": "men",
                      "woman": "women", "fish": "fish", "scarf": "scarves", "wolf": "wolves",
                      "potato": "potatoes", "tomato": "tomatoes"}


T = TypeVar("T")


def _split(entries: list[str]) -> list[tuple[str, str]]:
    return [(base, past) for base, past in (entry.split(":") for entry in entries)]


_TRANSITIVE, _INTRANSITIVE = _split(_VERBS_T), _split(_VERBS_I)


def _plural(noun: str) -> str:
    if noun in _IRREGULAR_PLURALS:
        return _IRREGULAR_PLURALS[noun]
    if noun.endswith(("s", "sh", "ch", "x", "z")):
        return noun + "es"
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def _third_person(verb: str) -> str:
    return {"have": "has", "do": "does", "go": "goes"}.get(verb) or _plural(verb)


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


class _Grammar:
    """One random source, many small productions; each returns a phrase."""

    def __init__(self, rng: random.Random, wide: WideVocab | None = None) -> None:
        self.rng = rng
        self.wide = wide  # version 3: half the open-class words come from the wide lists
        self.wide_names = wide.names if wide is not None else frozenset()

    def pick(self, items: Sequence[T]) -> T:
        return self.rng.choice(items)

    def widen(self) -> bool:
        """Whether this word comes from the wide lists (never drawn for versions 1-2, so
        their sequences stay as they were)."""
        return self.wide is not None and self.rng.random() < _WIDE_SHARE

    def noun(self) -> str:
        if self.widen():
            return self.pick(self.wide.nouns)
        return self.pick(_THINGS if self.rng.random() < 0.7 else _ANIMALS)

    def adjective(self) -> str:
        return self.pick(self.wide.adjectives) if self.widen() else self.pick(_ADJECTIVES)

    def transitive(self) -> tuple[str, str]:
        if self.widen():
            return self.pick(self.wide.verbs)[:2]
        return self.pick(_TRANSITIVE)

    def name(self) -> str:
        if not self.widen():
            return self.pick(_NAMES)
        first = self.pick(self.wide.first_names)
        return f"{first} {self.pick(self.wide.last_names)}" if self.rng.random() < 0.2 else first

    def lower_first(self, text: str) -> str:
        """`text` to follow other words: its first letter lowered unless it starts a name."""
        if text.split(" ", 1)[0] in self.wide_names:
            return text
        return _lower_first(text)

    def noun_phrase(self) -> str:
        roll, noun = self.rng.random(), self.noun()
        if roll < 0.35:
            return f"the {noun}"
        if roll < 0.55:
            adjective = self.adjective()
            return f"{_article(adjective)} {adjective} {noun}"
        if roll < 0.7:
            return f"the {self.adjective()} {noun}"
        if roll < 0.85:
            return f"{self.pick(['two', 'three', 'several', 'some', 'many', 'a few'])} {_plural(noun)}"
        return f"{self.pick(['my', 'your', 'our', 'their', 'his', 'her'])} {noun}"

    def subject(self) -> tuple[str, bool]:
        """A subject and whether it takes the third person singular."""
        roll = self.rng.random()
        if roll < 0.3:
            pronoun = self.pick(["I", "you", "we", "they", "he", "she"])
            return pronoun, pronoun in ("he", "she")
        if roll < 0.55:
            return self.name(), True
        if roll < 0.8:
            return f"{self.pick(['the', 'my', 'our', 'their', 'a'])} {self.pick(_PEOPLE)}", True
        return f"the {self.adjective()} {self.pick(_PEOPLE + _ANIMALS)}", True

    def place(self) -> str:
        roll = self.rng.random()
        if roll < 0.6:
            preposition = self.pick(["in", "near", "behind", "outside", "at", "by", "across"])
            return f"{preposition} the {self.pick(_LOCATIONS)}"
        return f"{self.pick(['in', 'from', 'to', 'near'])} {self.pick(_PLACES)}"

    def extras(self) -> str:
        parts = []
        if self.rng.random() < 0.4:
            parts.append(self.place())
        if self.rng.random() < 0.4:
            parts.append(self.pick(_TIMES))
        if self.rng.random() < 0.15:
            parts.insert(0, self.pick(_ADVERBS))
        return "".join(" " + part for part in parts)

    def clause(self) -> str:
        subject, singular = self.subject()
        roll = self.rng.random()
        if roll < 0.35:
            _, past = self.transitive()
            return f"{subject} {past} {self.noun_phrase()}{self.extras()}"
        if roll < 0.5:
            _, past = self.pick(_INTRANSITIVE)
            return f"{subject} {past}{self.extras()}"
        if roll < 0.7:
            base, _ = self.transitive()
            return f"{subject} {self.pick(_MODALS)} {base} {self.noun_phrase()}{self.extras()}"
        if roll < 0.85:
            base, _ = self.pick(_TRANSITIVE + _INTRANSITIVE)
            verb = _third_person(base) if singular else base
            rest = f" {self.noun_phrase()}" if (base, _) in _TRANSITIVE else ""
            return f"{subject} {self.pick(['usually', 'often', 'never', 'always', ''])} {verb}{rest}".replace("  ", " ")
        copula = ("is" if singular else "are") if subject != "I" else "am"
        if self.rng.random() < 0.5:
            copula = ("was" if singular or subject == "I" else "were")
        adjectives = self.adjective()
        if self.rng.random() < 0.4:
            adjectives += f" and {self.adjective()}"
        return f"{subject} {copula} {self.pick(['very ', 'quite ', 'rather ', 'so ', ''])}{adjectives}"


def _statement(g: _Grammar) -> str:
    return g.clause() + "."


def _compound(g: _Grammar) -> str:
    return f"{g.clause()}, {g.pick(_CONNECT)} {g.lower_first(g.clause())}{g.pick(['.', '.', '!'])}"


def _subordinate(g: _Grammar) -> str:
    return f"{g.pick(_OPENERS)} {g.lower_first(g.clause())}, {g.lower_first(g.clause())}."


def _question(g: _Grammar) -> str:
    roll = g.rng.random()
    subject, singular = g.subject()
    base, _ = g.transitive()
    if roll < 0.3:
        return f"Did {g.lower_first(subject)} {base} {g.noun_phrase()}{g.extras()}?"
    if roll < 0.55:
        wh = g.pick(["Where", "Why", "When", "How", "How often"])
        aux = "does" if singular else "do"
        return f"{wh} {aux} {g.lower_first(subject)} {base} {g.noun_phrase()}?"
    if roll < 0.8:
        return f"{g.pick(['Can', 'Could', 'Would', 'Will'])} you {base} {g.noun_phrase()}{g.extras()}?"
    return f"Is {g.noun_phrase()} still {g.place()}?"


def _command(g: _Grammar) -> str:
    base, _ = g.transitive()
    opener = g.pick(["Please ", "", "Don't forget to ", "Remember to ", "Try to ", "Never "])
    return f"{opener}{base} {g.noun_phrase()}{g.extras()}."


def _exclamation(g: _Grammar) -> str:
    adjective = g.adjective()
    return g.pick([
        f"What {_article(adjective)} {adjective} {g.noun()}!",
        f"How {adjective} the {g.pick(_LOCATIONS)} looks {g.pick(_TIMES)}!",
        f"That {g.noun()} is so {adjective}!",
    ])


def _listing(g: _Grammar) -> str:
    items = [g.noun_phrase() for _ in range(g.rng.randint(3, 5))]
    subject, _ = g.subject()
    _, past = g.transitive()
    return f"{subject} {past} {', '.join(items[:-1])}, and {items[-1]}."


def _long(g: _Grammar) -> str:
    parts = [g.clause() for _ in range(g.rng.randint(3, 4))]
    joins = [g.pick([", and ", "; ", ", but ", ", so ", ": ", ", while "]) for _ in parts[1:]]
    text = parts[0] + "".join(join + g.lower_first(part) for join, part in zip(joins, parts[1:]))
    return text + "."


def _numbers(g: _Grammar) -> str:
    rng = g.rng
    subject, _ = g.subject()
    return g.pick([
        f"{subject} paid ${rng.randint(1, 999)}.{rng.randint(0, 99):02d} for {g.noun_phrase()}.",
        (f"The {g.pick(['train', 'bus', 'ferry', 'flight', 'meeting'])} leaves at "
         f"{rng.randint(1, 12)}:{rng.choice(['00', '15', '30', '45', '05', '50'])}."),
        f"About {rng.randint(2, 99)}% of the {_plural(g.pick(_PEOPLE))} agreed.",
        f"{subject} lived in {g.pick(_PLACES)} until {rng.randint(1900, 2030)}.",
        f"There are {rng.randint(2, 9999):,} {_plural(g.noun())} {g.place()}.",
        f"We met on the {rng.randint(4, 20)}th of {g.pick(_MONTHS)} at {rng.randint(1, 12)} o'clock.",
        f"Room {rng.randint(100, 999)} is on the {rng.choice(['1st', '2nd', '3rd', '4th', '5th'])} floor.",
    ])


_COMPANIES = """Bluefin Northwind Maplecrest Sunpath Ironbridge Clearwater Redwood Brightline
Harborview Silverleaf Pinegate Stonefield Westbrook Lakeshore Greenhill Oakmont Riverton
Summit Evergreen Foxglove Highland Kestrel Larkspur Meadowbrook Copperfield""".split()
_ACCOUNT_THINGS = """order account package refund subscription appointment reservation invoice
payment card claim ticket delivery plan policy prescription booking return exchange
warranty shipment membership statement transfer request""".split()
_CODE_NAMES = """confirmation reference booking tracking order case ticket claim member policy
account invoice""".split()
_STREETS = """Oak Maple Pine Cedar Elm Main Park Lake Hill River Church Mill Spring Market
Bridge Forest Sunset Highland Union Washington Lincoln Jackson Franklin Madison""".split()
_STREET_KINDS = "St. Ave. Rd. Blvd. Dr. Ln. Ct. Way".split()
_TLDS = "com org net io co us".split()
_AGENT_LINES = """I can help you with that.|Let me pull up your account.|Thank you for your patience.
|I'm sorry for the wait.|One moment while I check that for you.|Is there anything else I can help
you with today?|Could you confirm your date of birth?|I've updated your details.|Your request has
been submitted.|You'll receive an email shortly.|I understand how frustrating that is.|Let me
transfer you to a specialist.|Your call may be recorded for quality purposes.|Please stay on the
line.|I didn't quite catch that, could you repeat it?|That change takes effect right away.|We
apologize for the inconvenience.|Have a great rest of your day.""".replace("\n", " ").split("|")


def _digits(rng: random.Random, count: int) -> str:
    return "".join(str(rng.randrange(10)) for _ in range(count))


def _code(rng: random.Random) -> str:
    """An account code as agents write them: letters and digits, maybe hyphenated."""
    roll = rng.random()
    if roll < 0.4:
        return _digits(rng, rng.randint(6, 14))  # long digit strings, read one by one
    letters = "ABCDEFGHJKLMNPQRSTUVWXYZ"
    head = "".join(rng.choice(letters) for _ in range(rng.randint(1, 3)))
    tail = _digits(rng, rng.randint(2, 6))
    return f"{head}{rng.choice(['', '-'])}{tail}" if roll < 0.8 else f"{head}{_digits(rng, 1)}-{tail}"


def _amount(rng: random.Random) -> str:
    dollars = rng.choice([rng.randint(1, 99), rng.randint(100, 999), rng.randint(1000, 9999)])
    return f"${dollars:,}" if rng.random() < 0.3 else f"${dollars:,}.{rng.randint(0, 99):02d}"


def _service(g: _Grammar) -> str:
    """A line a support agent (or the language model behind a voice agent) would write."""
    rng = g.rng
    thing = g.pick(_ACCOUNT_THINGS)
    company = g.pick(_COMPANIES)
    day = f"{g.pick(_MONTHS)} {rng.randint(1, 28)}"
    if rng.random() < 0.5:
        day = f"{g.pick(['Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday'])}, {day}"
    clock = f"{rng.randint(1, 12)}:{rng.choice(['00', '15', '30', '45', '10', '20', '40'])} " \
            f"{g.pick(['AM', 'PM', 'a.m.', 'p.m.'])}"
    local = g.pick(_NAMES).lower() + g.pick(["", ".", "_"]) * (rng.random() < 0.5) + \
        (g.pick(_PLACES).lower() if rng.random() < 0.3 else "")
    domain = f"{company.lower()}{g.pick(['', 'help', 'mail', 'shop'])}.{g.pick(_TLDS)}"
    street = f"{rng.randint(1, 9999)} {g.pick(_STREETS)} {g.pick(_STREET_KINDS)}"
    return g.pick([
        f"Your {g.pick(['balance', 'total', 'refund', 'payment', 'charge', 'deposit'])} "
        f"{g.pick(['is', 'was', 'comes to', 'will be'])} {_amount(rng)}.",
        f"Your {g.pick(_CODE_NAMES)} {g.pick(['number', 'code', 'ID'])} is {_code(rng)}.",
        f"{g.pick(['You can reach us', 'Please call', 'Call our team', 'Text us'])} at "
        + (f"({_digits(rng, 3)}) {_digits(rng, 3)}-{_digits(rng, 4)}." if rng.random() < 0.6
           else f"1-800-{_digits(rng, 3)}-{_digits(rng, 4)}."),
        f"{g.pick(['Please email', 'Send the form to', 'Write to', 'Reply to'])} {local}@{domain}.",
        f"{g.pick(['Visit', 'Go to', 'Check'])} www.{domain}/{g.pick(_ACCOUNT_THINGS)} "
        f"{g.pick(['to track it', 'for details', 'any time', 'to make changes'])}.",
        f"{g.pick(['Our office is at', 'It ships to', 'The store is at', 'Please mail it to'])} "
        f"{street}{g.pick(['', f', Suite {rng.randint(100, 900)}', f', Apt. {rng.randint(1, 40)}'])}"
        f", {g.pick(_PLACES)}.",
        f"Your {thing} is {g.pick(['scheduled', 'confirmed', 'booked', 'due', 'expected'])} "
        f"for {day} at {clock}.",
        f"{g.pick(['You save', 'That is', 'Rates went up by', 'You get'])} {rng.randint(2, 60)}% "
        f"{g.pick(['today', 'this month', 'on your next order', 'off'])}.",
        f"The card ending in {_digits(rng, 4)} "
        f"{g.pick(['was declined', 'has expired', 'was charged ' + _amount(rng), 'is on file'])}.",
        f"Thanks for calling {company}, this is {g.pick(_NAMES)}, how can I help you today?",
        f"I see your {thing} from {day}, {g.lower_first(g.pick(_AGENT_LINES))}",
        g.pick(_AGENT_LINES),
        f"{g.pick(['Press', 'Say or press', 'Dial'])} {rng.randint(0, 9)} "
        f"for {g.pick(['billing', 'support', 'sales', 'returns', 'an agent', 'your balance'])}.",
        f"Your {thing} {g.pick(['ships', 'arrives', 'renews', 'closes', 'starts'])} in "
        f"{rng.randint(2, 14)} {g.pick(['days', 'business days', 'weeks', 'hours'])}.",
    ])


_SPELL_ASKS = """Could you spell your last name for me?|How do you spell that?|Can you spell
the street name?|What's the name on the account?|Could you spell your first name?|What's the
code on the back of the card?|Can you read me the reference number?|What's your member ID?|Could
you spell the city for me?|Can you confirm the spelling?|Which name is the booking under?|What are
the letters on your ticket?""".replace("\n", " ").split("|")
_SPELL_CHECKS = ("Is it {}?", "That's {}.", "I have {}, is that right?", "So that's {}?",
                 "Got it, {}.", "Was that {}?", "I have it as {}.", "Let me repeat that: {}.")
_LETTERS = "ABCDEFGHIJKLMNOPRSTUVWY"


def _spelled(g: _Grammar) -> str:
    """A name, a place or random letters (or a short code) spelled with hyphens."""
    rng = g.rng
    roll = rng.random()
    if roll < 0.45:
        word = g.pick(_NAMES)
    elif roll < 0.6:
        word = g.pick(_PLACES)
    elif roll < 0.85:
        word = "".join(rng.choice(_LETTERS) for _ in range(rng.randint(3, 8)))
    else:
        code = _code(rng)  # digits alone are hyphenated, so read one by one
        return "-".join(code[: rng.randint(3, 7)]) if code.isdecimal() else code
    return "-".join(word.upper())


def _exchange(g: _Grammar) -> str:
    """A question, then a short clause that checks the answer: a spelled name or code, or a
    short reply; sometimes a closing sentence. Chained after a question, a short spelled
    clause made joe-ar speak the question again (issue 25): these teach it to go on."""
    rng = g.rng
    question = g.pick(_SPELL_ASKS) if rng.random() < 0.6 else _question(g)
    answer = g.pick(_SPELL_CHECKS).format(_spelled(g)) if rng.random() < 0.8 else _reply(g)
    parts = [question, answer]
    if rng.random() < 0.3:
        parts.append(g.pick(_AGENT_LINES) if rng.random() < 0.5 else _reply(g))
    return " ".join(" ".join(part.split()) for part in parts)


def _reply(g: _Grammar) -> str:
    return g.pick(_INTERJECTIONS)


def _quoted(g: _Grammar) -> str:
    speaker = g.name()
    quote = _statement(g)[:-1]
    return f'"{quote[:1].upper()}{quote[1:]}," {speaker} {g.pick(["said", "replied", "whispered", "shouted"])}.'


_PRODUCTIONS: list[tuple[Callable[[_Grammar], str], float]] = [
    (_statement, 0.22), (_compound, 0.12), (_subordinate, 0.10), (_question, 0.14),
    (_command, 0.08), (_exclamation, 0.05), (_listing, 0.05), (_long, 0.06),
    (_numbers, 0.10), (_reply, 0.04), (_quoted, 0.04),
]
_PREPOSITIONS = """above across along around behind below beneath beside between beyond inside
into onto over through toward under within without past near against among""".split()
_RELATIVES = ["who", "that", "which"]
_LINKS = ["whenever", "because", "although", "until", "while", "before", "after", "since",
          "as soon as", "even though", "unless", "whether or not"]


def _wide_sentence(g: _Grammar) -> str:
    """Version 3 only: shapes the older productions lack (progressive and present verbs,
    relative clauses, prepositions of place), over the wide lists."""
    wide, rng = g.wide, g.rng
    subject, singular = g.subject()
    _, past, third, ing = g.pick(wide.verbs)
    where = f"{g.pick(_PREPOSITIONS)} {g.noun_phrase()}"
    roll = rng.random()
    if roll < 0.3:
        be = ("was" if singular or subject == "I" else "were") if rng.random() < 0.6 else \
            ("am" if subject == "I" else "is" if singular else "are")
        return f"{subject} {be} {ing} {g.noun_phrase()} {where}."
    if roll < 0.6:
        later = g.pick(wide.verbs).past
        return (f"The {g.noun()} {g.pick(_RELATIVES)} {past} {g.noun_phrase()} "
                f"{later} {where}.")
    if roll < 0.85:
        other, other_singular = g.subject()
        other_third = g.pick(wide.verbs).third
        verb = third if singular else g.pick(wide.verbs).base
        other_verb = other_third if other_singular else g.pick(wide.verbs).base
        return (f"{subject} {verb} {g.noun_phrase()} {g.pick(_LINKS)} "
                f"{g.lower_first(other)} {other_verb} {g.noun_phrase()}.")
    return f"{g.pick(['Why', 'How', 'When', 'Where'])} {'was' if singular else 'were'} " \
        f"{g.lower_first(subject)} {ing} {g.noun_phrase()} {where}?"


#: Version 2 (issue 25) adds customer-service lines and paragraphs of 3-5 sentences, whose
#: sentences the teacher speaks one by one: the student learns to chain real neighbours.
_SERVICE_SHARE = 0.3  # of single sentences
_WIDE_SHARE = 0.5  # version 3: of nouns, adjectives, transitive verbs and names in prose
_WIDE_SENTENCES = 0.35  # version 3: of the other single sentences, made by _wide_sentence
_PARAGRAPH_SHARE = 0.12  # of items


def _single(g: _Grammar, version: int) -> str:
    if version >= 2 and g.rng.random() < _SERVICE_SHARE:
        text = _service(g)
    elif version >= 3 and g.rng.random() < _WIDE_SENTENCES:
        text = _wide_sentence(g)
    else:
        productions, weights = zip(*_PRODUCTIONS)
        text = g.rng.choices(productions, weights)[0](g)
    text = " ".join(text.split())
    return text[0].upper() + text[1:]


def _item(g: _Grammar, version: int, exchange_share: float = 0.0) -> str:
    if exchange_share and g.rng.random() < exchange_share:
        return _exchange(g)
    if version >= 2 and g.rng.random() < _PARAGRAPH_SHARE:
        return " ".join(_single(g, version) for _ in range(g.rng.randint(3, 5)))
    return _single(g, version)


def _lower_first(text: str) -> str:
    first = text.split(" ", 1)[0]
    if first in _NAMES or first in _PLACES or first == "I":
        return text
    return text[:1].lower() + text[1:]


def held_out() -> frozenset[str]:
    """The project's own sentences, reserved for measuring (never generated)."""
    from polyvox.asr.sentences import SENTENCES as ASR
    from polyvox.bench.texts import SENTENCES as BENCH
    from polyvox.eval.sets import load_items

    return frozenset(ASR) | frozenset(BENCH) | {
        item.text for split in ("dev", "test") for item in load_items(split)}


GENERATOR_VERSION = 2


def generate_sentences(count: int, seed: int = 0, version: int = GENERATOR_VERSION,
                       exchange_share: float = 0.0) -> Iterator[str]:
    """`count` normalized items (a sentence or, from version 2, sometimes a paragraph);
    the same seed and version always give the same sequence, and the first n of a longer
    run equal a run of n. Version 1 is the grammar joe-ar's first 8,000 were drawn from; version 3 is
    version 2 with half its prose words drawn from a wide vocabulary (polyvox.train.wide_vocab).
    `exchange_share` of the items are exchanges: a question, then a short spelled or
    confirming clause (0 leaves the sequence as it was)."""
    if version not in (1, 2, 3):
        raise ValueError(f"generator version must be 1, 2 or 3, not {version}")
    if not 0.0 <= exchange_share <= 1.0:
        raise ValueError(f"exchange_share must be between 0 and 1, not {exchange_share}")
    rng = random.Random(seed)
    grammar = _Grammar(rng, load_wide_vocab() if version >= 3 else None)
    normalizer = make_normalizer("en")
    excluded = held_out()
    produced = 0
    while produced < count:
        text = _item(grammar, version, exchange_share)
        if text in excluded:
            continue
        yield normalizer.normalize(text)
        produced += 1
