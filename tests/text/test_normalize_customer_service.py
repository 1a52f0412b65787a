"""The customer-service sentences of the normalization WER measurement, and its scorer.

- The normalizer's output says every sentence exactly as its hand-written reference does.
- The spoken-form scorer is fair both ways: a correct reading in whisper's writing style
  ("$1,249.50", "3.45pm", "Dr. Patel") costs nothing, a wrong one ("March 40") costs.
- Readings found by the measurement (docs/normalization_wer.md): "AM"/"PM" and a lone
  letter A tied to what follows, which front ends would read as the article "uh".
"""

from __future__ import annotations

import pytest

from polyvox.asr.customer_service import CUSTOMER_SERVICE
from polyvox.asr.normalization_wer import reduction, spoken_errors, spoken_slots
from polyvox.text.normalize import EnglishNormalizer, StreamingNormalizer

NORMALIZER = EnglishNormalizer()

# Found by measuring: the written form, and what the voice must be given.
READINGS = [
    ("Meet at 10 AM Friday.", "Meet at ten AM Friday."),
    ("We open at 9 a.m. sharp.", "We open at nine AM sharp."),
    ("We open at 9 a.m.", "We open at nine AM."),
    ("Pick-up is in the p.m. only", "Pick-up is in the PM only"),
    ("Gate A4 is closed.", "Gate A-four is closed."),
    ("See the A.T.M. outside.", "See the A-T M outside."),
    ("Code AB12-A3", "Code A-B one two, A-three"),
    ("Code AA7-X", "Code A, A-seven, X"),
    ("Code 7A", "Code seven A"),
    ("Text a7x to us", "Text a-seven x to us"),
    ("visit acme.ai now", "visit acme dot a-i now"),
    ("It is 6 ft. tall.", "It is six feet tall."),
    ("Add 5 lbs. of flour.", "Add five pounds of flour."),
    ("It weighs 2.5 lbs.", "It weighs two point five pounds."),
    ("It weighs 2.5 lbs. The box is free.", "It weighs two point five pounds. The box is free."),
    ("The TV is 55 in. wide.", "The TV is fifty-five inches wide."),
    ("A 1 in. gap", "A one inch gap"),
    ("Come in. Sit down.", "Come in. Sit down."),
    ("We close at 6 in the evening.", "We close at six in the evening."),
    ("Add 10-20 lbs. of sand.", "Add ten to twenty pounds of sand."),
]


@pytest.mark.parametrize(("written", "spoken"), READINGS, ids=[w for w, _ in READINGS])
def test_reading(written: str, spoken: str) -> None:
    assert NORMALIZER.normalize(written) == spoken


@pytest.mark.parametrize("written", [w for w, _ in READINGS] + [s.text for s in CUSTOMER_SERVICE])
def test_every_split_point_streams_like_the_whole(written: str) -> None:
    whole = NORMALIZER.normalize(written)
    for cut in range(len(written) + 1):
        stream = StreamingNormalizer(NORMALIZER)
        assert stream.feed(written[:cut]) + stream.feed(written[cut:]) + stream.flush() == whole


def test_the_set_is_large_and_covers_every_category() -> None:
    assert len(CUSTOMER_SERVICE) >= 40
    assert len({s.text for s in CUSTOMER_SERVICE}) == len(CUSTOMER_SERVICE)
    categories = {c for s in CUSTOMER_SERVICE for c in s.categories}
    assert categories >= {
        "number", "money", "date", "time", "phone", "code", "email", "url", "address",
        "abbreviation", "unit", "percent",
    }  # fmt: skip
    texts = " ".join(s.text for s in CUSTOMER_SERVICE)
    for abbreviation in ("Dr.", "St.", "Ave.", "Apt."):
        assert abbreviation in texts


@pytest.mark.parametrize("sentence", CUSTOMER_SERVICE, ids=[s.text for s in CUSTOMER_SERVICE])
def test_references_are_spoken_words(sentence) -> None:  # type: ignore[no-untyped-def]
    assert not any(char.isdigit() for char in sentence.spoken)
    assert not set(sentence.spoken) & set("$€£%@#/&:.")


@pytest.mark.parametrize("sentence", CUSTOMER_SERVICE, ids=[s.text for s in CUSTOMER_SERVICE])
def test_normalizer_says_what_the_reference_says(sentence) -> None:  # type: ignore[no-untyped-def]
    normalized = NORMALIZER.normalize(sentence.text)
    errors = spoken_errors(sentence.spoken, normalized)
    assert errors.num_edits == 0, (normalized, errors.reference, errors.hypothesis)


# The written sentence is what a perfect transcriber could write, except where whisper
# would write what it heard in another form ("February 17th", "per month").
WRITTEN_NOT_AS_HEARD = {
    "A payment of $89.99 is due on 02/17/2024.",
    "Your subscription renews on January 1st for $9.99/mo.",
    "Your new router is 6 in. tall and uses 12 W of power.",
}


@pytest.mark.parametrize(
    "sentence",
    [s for s in CUSTOMER_SERVICE if s.text not in WRITTEN_NOT_AS_HEARD],
    ids=[s.text for s in CUSTOMER_SERVICE if s.text not in WRITTEN_NOT_AS_HEARD],
)
def test_the_written_sentence_as_a_transcript_scores_zero(sentence) -> None:  # type: ignore[no-untyped-def]
    errors = spoken_errors(sentence.spoken, sentence.text)
    assert errors.num_edits == 0, (errors.reference, errors.hypothesis)


# (reference, a transcript whisper could write, edits)
FAIRNESS = [
    # correct readings in whisper's style cost nothing
    ("your balance is one thousand two hundred forty nine dollars and fifty cents",
     "Your balance is $1,249.50.", 0),
    ("your balance is one thousand two hundred forty nine dollars and fifty cents",
     "Your balance is 1,249 dollars and 50 cents.", 0),
    ("at three forty five p m", "at 3.45pm.", 0),
    ("at three forty five p m", "at 3:45 P.M.", 0),
    ("at ten a m", "at 10:00 a.m.", 0),
    ("at seven thirty", "at 7.30", 0),
    ("on march fourteenth", "on March 14", 0),
    ("since nineteen ninety eight", "since 1998", 0),
    ("since nineteen ninety eight", "since nineteen ninety-eight", 0),
    ("at two twenty one baker street", "at 221 Baker St.", 0),
    ("order four eight two one three", "order 48213", 0),
    ("call five five five one two three four five six seven", "call (555) 123-4567", 0),
    ("code a seven x three nine two k q", "code A7X-392-KQ", 0),
    ("code a seven x three nine two k q", "code A-7-X 3 9 2 K.Q.", 0),
    ("j dot smith at example dot com", "j.smith@example.com", 0),
    ("j dot smith at example dot com", "J dot Smith at example.com", 0),
    ("w w w dot acme dot i o slash help", "www.acme.io/help", 0),
    ("doctor patel", "Dr. Patel", 0),
    ("elm drive", "Elm Dr.", 0),
    ("missus lee", "Mrs. Lee", 0),
    ("twenty euros", "€20", 0),
    ("three pounds and ninety nine pence", "£3.99", 0),
    ("ten miles per hour", "10 MPH", 0),
    ("five to seven days", "5-7 days", 0),
    ("number four five two one", "#4521", 0),
    # wrong readings cost, whichever way they are written
    ("on march fourteenth", "on March 40", 1),
    ("at ten fifteen a m", "at 10.50am", 1),
    ("at ten fifteen a m", "at ten fifty nam", 2),
    ("order four eight two one three", "order 48,213", 4),
    ("the card ending in four two four two", "the card ending in 4,242", 3),
    ("our office is on baker street", "our office is on Baker Saint", 1),
    ("code a seven x", "code 7X", 1),
    ("j dot smith at example dot com", "jsmith@example.com", 3),
    ("nine a m", "9 and M", 2),
]  # fmt: skip


@pytest.mark.parametrize(("reference", "heard", "edits"), FAIRNESS, ids=[h for _, h, _ in FAIRNESS])
def test_scoring_is_fair_both_ways(reference: str, heard: str, edits: int) -> None:
    assert spoken_errors(reference, heard).num_edits == edits


def test_references_with_digits_are_refused() -> None:
    with pytest.raises(ValueError, match="words only"):
        spoken_errors("call 555", "call five five five")


def test_ambiguous_tokens_become_alternatives() -> None:
    (slot,) = spoken_slots("2024")
    assert ("two", "thousand", "twenty", "four") in slot
    assert ("twenty", "twenty", "four") in slot
    assert ("two", "zero", "two", "four") in slot


def test_reduction() -> None:
    assert reduction(0.10, 0.06) == pytest.approx(0.4)
    assert reduction(0.0, 0.0) == 0.0
