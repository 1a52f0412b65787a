"""Written text -> spoken form, one table row per behaviour a support voice relies on."""

from __future__ import annotations

import pytest

from polyvox.text.normalize import EnglishNormalizer, StreamingNormalizer

NUMBERS = [
    ("0", "zero"),
    ("7", "seven"),
    ("13", "thirteen"),
    ("21", "twenty-one"),
    ("100", "one hundred"),
    ("101", "one hundred one"),
    ("1,000", "one thousand"),
    ("1,000,000", "one million"),
    ("12,345,678", "twelve million three hundred forty-five thousand six hundred seventy-eight"),
    ("2024", "two thousand twenty-four"),
    ("We have 48213 members.", "We have forty-eight thousand two hundred thirteen members."),
    ("Agent 007", "Agent zero zero seven"),
    ("3.14", "three point one four"),
    ("0.5", "zero point five"),
    (".75", "point seven five"),
    ("10.05", "ten point zero five"),
    ("-5", "minus five"),
    ("-3.5", "minus three point five"),
    ("+3", "plus three"),
    ("It is 3.", "It is three."),
    ("1st", "first"),
    ("2nd", "second"),
    ("3rd", "third"),
    ("4th", "fourth"),
    ("11th", "eleventh"),
    ("12th", "twelfth"),
    ("21st", "twenty-first"),
    ("22nd", "twenty-second"),
    ("100th", "one hundredth"),
    ("1,000th", "one thousandth"),
    ("You're 1st in line.", "You're first in line."),
    ("The 3rd floor, room 12.", "The third floor, room twelve."),
]

RANGES_FRACTIONS_PERCENTAGES = [
    ("5 to 7", "five to seven"),
    ("5-7", "five to seven"),
    ("2-4 PM", "two to four PM"),
    ("9am-5pm", "nine AM to five PM"),
    ("10-20 kg", "ten to twenty kilograms"),
    ("3-5 business days", "three to five business days"),
    ("5-7%", "five to seven percent"),
    ("2020-2024", "twenty twenty to twenty twenty-four"),
    ("We'll ship 2-3 items.", "We'll ship two to three items."),
    ("1/2", "one half"),
    ("3/4", "three quarters"),
    ("2/3", "two thirds"),
    ("5/8", "five eighths"),
    ("1/3", "one third"),
    ("3/2", "three halves"),
    ("24/7", "twenty-four seven"),
    ("50/50", "fifty fifty"),
    ("2 1/2", "two and a half"),
    ("3 3/4", "three and three quarters"),
    ("½", "one half"),
    ("2½", "two and a half"),
    ("15%", "fifteen percent"),
    ("2.5%", "two point five percent"),
    ("-3%", "minus three percent"),
    ("100%", "one hundred percent"),
]

MONEY = [
    ("$1,249.50", "one thousand two hundred forty-nine dollars and fifty cents"),
    ("$1.00", "one dollar"),
    ("$1", "one dollar"),
    ("$0.99", "ninety-nine cents"),
    ("$0.01", "one cent"),
    ("$20", "twenty dollars"),
    ("$5M", "five million dollars"),
    ("$2.5 million", "two point five million dollars"),
    ("$1.5k", "one point five thousand dollars"),
    ("€20", "twenty euros"),
    ("€3.50", "three euros and fifty cents"),
    ("£3.99", "three pounds and ninety-nine pence"),
    ("£1", "one pound"),
    ("£0.50", "fifty pence"),
    ("¥500", "five hundred yen"),
    ("₹250", "two hundred fifty rupees"),
    ("20 USD", "twenty dollars"),
    ("EUR 15.50", "fifteen euros and fifty cents"),
    ("25¢", "twenty-five cents"),
    ("$20/mo", "twenty dollars per month"),
    ("$15/hr", "fifteen dollars per hour"),
    ("-$20", "minus twenty dollars"),
    ("$10-20", "ten to twenty dollars"),
    ("$10-$20", "ten to twenty dollars"),
    ("$1-2M", "one to two million dollars"),
    (
        "$9.99-19.99",
        "nine dollars and ninety-nine cents to nineteen dollars and ninety-nine cents",
    ),
    ("Your balance is $0.", "Your balance is zero dollars."),
    ("$1 million - $2 million", "one million to two million dollars"),
    ("USD 1.5 million", "one point five million dollars"),
]

DATES_AND_YEARS = [
    ("March 14th", "March fourteenth"),
    ("March 14", "March fourteenth"),
    ("June 30, 2025", "June thirtieth, twenty twenty-five"),
    ("Jan. 5, 2024", "January fifth, twenty twenty-four"),
    ("Sept 3", "September third"),
    ("March 2024", "March twenty twenty-four"),
    ("the 14th of March", "the fourteenth of March"),
    ("14 March 2024", "the fourteenth of March twenty twenty-four"),
    ("02/17/2024", "February seventeenth, twenty twenty-four"),
    ("2/17/24", "February seventeenth, twenty twenty-four"),
    ("17/02/2024", "February seventeenth, twenty twenty-four"),
    ("17.02.2024", "February seventeenth, twenty twenty-four"),
    ("2024-02-17", "February seventeenth, twenty twenty-four"),
    ("due 3/4", "due March fourth"),
    ("on Tuesday 3/4", "on Tuesday March fourth"),
    ("exp 12/25", "exp twelve twenty-five"),
    ("in 1999", "in nineteen ninety-nine"),
    ("since 2010", "since twenty ten"),
    ("by 2005", "by two thousand five"),
    ("in 1905", "in nineteen oh five"),
    ("in 1900", "in nineteen hundred"),
    ("in 2000", "in two thousand"),
    ("the 1990s", "the nineteen nineties"),
    ("the '80s", "the eighties"),
    ("Q3 2024 results", "Q three twenty twenty-four results"),
    ("We've been in business since 1999.", "We've been in business since nineteen ninety-nine."),
]

TIMES = [
    ("3:45 PM", "three forty-five PM"),
    ("10:15 AM", "ten fifteen AM"),
    ("7:05", "seven oh five"),
    ("7:00", "seven o'clock"),
    ("12:30", "twelve thirty"),
    ("3 PM", "three PM"),
    ("3pm", "three PM"),
    ("10 a.m. on Monday", "ten AM on Monday"),
    ("See you at 3 p.m. Thanks!", "See you at three PM. Thanks!"),
    ("See you at 3 p.m.", "See you at three PM."),
    ("15:30", "fifteen thirty"),
    ("15:00", "fifteen hundred"),
    ("at noon", "at noon"),
    ("Our hours are 10:15 AM to 6 PM.", "Our hours are ten fifteen AM to six PM."),
    ("9:00 AM - 5:00 p.m. Thanks", "nine AM to five PM. Thanks"),
    ("Open 9:00 AM - 5:00 p.m. Monday to Friday.", "Open nine AM to five PM Monday to Friday."),
    ("Open Mon-Fri 9am-5pm.", "Open Monday to Friday nine AM to five PM."),
    ("Open Mon.–Thurs.", "Open Monday to Thursday."),
    ("Sat. 10-2", "Saturday ten to two"),
    ("Tue, Mar 5", "Tuesday, March fifth"),
]

PHONES_CARDS_CODES = [
    ("(555) 123-4567", "five five five, one two three, four five six seven"),
    ("555-123-4567", "five five five, one two three, four five six seven"),
    ("555.123.4567", "five five five, one two three, four five six seven"),
    ("+1 (555) 123-4567", "plus one, five five five, one two three, four five six seven"),
    ("1-800-555-0199", "one, eight zero zero, five five five, zero one nine nine"),
    ("+44 20 7946 0958", "plus four four, two zero, seven nine four six, zero nine five eight"),
    ("555-1234", "five five five, one two three four"),
    (
        "(555) 123-4567x204",
        "five five five, one two three, four five six seven, extension two zero four",
    ),
    ("ext. 204", "extension two zero four"),
    (
        "4111 1111 1111 1111",
        "four one one one, one one one one, one one one one, one one one one",
    ),
    (
        "4111-1111-1111-1111",
        "four one one one, one one one one, one one one one, one one one one",
    ),
    ("card ending in 4242", "card ending in four two four two"),
    ("PIN 0917", "PIN zero nine one seven"),
    ("order number 48213", "order number four eight two one three"),
    ("Your confirmation number is 58213.", "Your confirmation number is five eight two one three."),
    ("order #4521", "order number four five two one"),
    ("#1", "number one"),
    ("A7X-392-KQ", "A-seven X, three nine two, K Q"),
    ("confirmation code A7X-392-KQ", "confirmation code A-seven X, three nine two, K Q"),
    ("ZX4-88Q1", "Z X four, eight eight Q one"),
    ("392-118-004", "three nine two, one one eight, zero zero four"),
    ("Springfield, IL 62704", "Springfield, IL six two seven zero four"),
    ("62704-1234", "six two seven zero four, one two three four"),
    ("Apt. 4B", "Apartment four B"),
    ("B12", "B twelve"),
    ("MP3", "M P three"),
    ("2FA", "two F A"),
    ("v2", "v two"),
    ("iPhone15", "iPhone fifteen"),
    ("abc123", "abc one two three"),
    ("192.168.1.1", "one hundred ninety-two dot one hundred sixty-eight dot one dot one"),
]

# Single letters joined by hyphens spell a word: read letter by letter, like a code group.
# A single letter joined to a real word is a hyphenated word, and one letter with digits
# is a code.
SPELLED_WORDS = [
    ("J-O-N-E-S", "J O N E S"),
    ("My name is J-O-N-E-S.", "My name is J O N E S."),
    ("That's Jones, J-O-N-E-S, with an S.", "That's Jones, J O N E S, with an S."),
    ("j-o-n-e-s", "J O N E S"),
    ("U-S-A", "U S A"),
    ("A-B-C-1-2-3", "A-B C one two three"),
    ("Spell it B-A-K-E-R please", "Spell it B A-K E R please"),  # "A-K": not the article
    ("I-I-I don't know", "I I I don't know"),
    ("a well-known co-op", "a well-known co-op"),
    ("a T-shirt", "a T-shirt"),
    ("my e-mail", "my e-mail"),
    ("an X-ray", "an X-ray"),
    ("the re-do", "the re-do"),
    ("K-9", "K, nine"),
    ("J-O-N-E-S-style", "J-O-N-E-S-style"),
]

EMAILS_AND_URLS = [
    ("j.smith@example.com", "j dot smith at example dot com"),
    (
        "John_Doe42@mail.example.co.uk",
        "John underscore Doe four two at mail dot example dot co dot u k",
    ),
    ("support+billing@acme.io", "support plus billing at acme dot i o"),
    ("help@acme-support.com", "help at acme dash support dot com"),
    ("Email j.smith@example.com.", "Email j dot smith at example dot com."),
    ("https://www.example.com/help", "w w w dot example dot com slash help"),
    ("www.example.com", "w w w dot example dot com"),
    ("Visit acme.com.", "Visit acme dot com."),
    (
        "See example.com/billing?id=5.",
        "See example dot com slash billing question mark id equals five.",
    ),
    ("Open report.pdf", "Open report.pdf"),
]

ABBREVIATIONS_AND_UNITS = [
    ("Dr. Patel will see you now.", "Doctor Patel will see you now."),
    ("Please call Dr. Patel.", "Please call Doctor Patel."),
    ("The office is on Elm Dr.", "The office is on Elm Drive."),
    ("It is on Elm Dr. Parking is free.", "It is on Elm Drive. Parking is free."),
    ("Call the Dr.", "Call the Doctor."),
    ("Visit St. Louis.", "Visit Saint Louis."),
    ("St. Patrick's Day", "Saint Patrick's Day"),
    ("Baker St. is closed.", "Baker Street is closed."),
    ("Main St. is closed.", "Main Street is closed."),
    ("I live at 42 Oak Ave. in Springfield.", "I live at forty-two Oak Avenue in Springfield."),
    ("1600 Pennsylvania Ave. NW", "sixteen hundred Pennsylvania Avenue NW"),
    ("12 W Main St", "twelve W Main Street"),
    ("305 Oak Ave", "three oh five Oak Avenue"),
    ("Martin Luther King Jr. Blvd.", "Martin Luther King Junior Boulevard."),
    ("Mr. Smith and Mrs. Jones met Ms. Lee.", "Mister Smith and Missus Jones met Miz Lee."),
    ("Prof. Adams", "Professor Adams"),
    ("Apt 12", "Apartment twelve"),
    ("Acme Inc. sells widgets.", "Acme Incorporated sells widgets."),
    ("We sell widgets, gadgets, etc.", "We sell widgets, gadgets, et cetera."),
    ("Widgets vs. gadgets", "Widgets versus gadgets"),
    ("e.g., a receipt", "for example, a receipt"),
    ("i.e. today", "that is today"),
    ("U.S. citizens", "U S citizens"),
    ("John F. Kennedy", "John F Kennedy"),
    ("No. 5", "Number five"),
    ("No, thanks.", "No, thanks."),
    ("Q & A", "Q and A"),
    ("5 kg", "five kilograms"),
    ("1 kg", "one kilogram"),
    ("10 mph", "ten miles per hour"),
    ("5km", "five kilometers"),
    ("3 GB", "three gigabytes"),
    ("72°F", "seventy-two degrees Fahrenheit"),
    ("-5°C", "minus five degrees Celsius"),
    ("90°", "ninety degrees"),
    ("2 lbs", "two pounds"),
    ("12 oz", "twelve ounces"),
    ("6 ft", "six feet"),
    ("100 ms", "one hundred milliseconds"),
    ("5 min", "five minutes"),
    ("1.5 kg", "one point five kilograms"),
    ("24h", "twenty-four hours"),
]

SENTENCES = [
    (
        "Your appointment with Dr. Patel is on Tuesday, March 14th at 3:45 PM.",
        (
            "Your appointment with Doctor Patel is on Tuesday, March fourteenth at three forty-five"
            " PM."
        ),
    ),
    (
        "Our office is at 221 Baker St., Suite 400.",
        "Our office is at two twenty-one Baker Street, Suite four hundred.",
    ),
    (
        "Your total is $42.17, due by 02/28/2024.",
        (
            "Your total is forty-two dollars and seventeen cents, due by February twenty-eighth,"
            " twenty twenty-four."
        ),
    ),
    (
        "Please call us at 1-800-555-0199 between 9 AM and 5 PM, Monday to Friday.",
        (
            "Please call us at one, eight zero zero, five five five, zero one nine nine between"
            " nine AM and five PM, Monday to Friday."
        ),
    ),
    (
        "Your refund of €20 will arrive in 3-5 days.",
        "Your refund of twenty euros will arrive in three to five days.",
    ),
    (
        "The package weighs 2.5 kg and costs £3.99 to ship.",
        (
            "The package weighs two point five kilograms and costs three pounds and ninety-nine"
            " pence to ship."
        ),
    ),
    (
        "Reply to help@acme.com or visit https://acme.com/returns.",
        "Reply to help at acme dot com or visit acme dot com slash returns.",
    ),
    (
        "Your card ending in 4242 was charged $1,249.50 on June 30, 2025.",
        (
            "Your card ending in four two four two was charged one thousand two hundred forty-nine"
            " dollars and fifty cents on June thirtieth, twenty twenty-five."
        ),
    ),
    (
        "Meet me at St. Mary's Hospital, 350 Oak St. at 7:05.",
        "Meet me at Saint Mary's Hospital, three fifty Oak Street at seven oh five.",
    ),
    (
        "Interest is 3.5% APR, 0.25% lower than in 2023.",
        (
            "Interest is three point five percent APR, zero point two five percent lower than in"
            " twenty twenty-three."
        ),
    ),
    (
        "Call me back at (312) 555-0142, ext. 12.",
        "Call me back at three one two, five five five, zero one four two, extension one two.",
    ),
    (
        "Your reservation code is QH7-2K9 for 2 guests on Friday, Aug. 9th.",
        "Your reservation code is Q H seven, two K nine for two guests on Friday, August ninth.",
    ),
    (
        "Hi Ms. Garcia, your order #58213 ships Mon. 3/4 and arrives by 5 p.m. Friday.",
        (
            "Hi Miz Garcia, your order number five eight two one three ships Monday March fourth"
            " and arrives by five PM Friday."
        ),
    ),
    (
        "Your plan is $29.99/mo and includes 10 GB of data.",
        (
            "Your plan is twenty-nine dollars and ninety-nine cents per month and includes ten"
            " gigabytes of data."
        ),
    ),
    (
        "Text STOP to 55123 or call 877-555-0100 x2.",
        (
            "Text STOP to fifty-five thousand one hundred twenty-three or call eight seven seven,"
            " five five five, zero one zero zero, extension two."
        ),
    ),
    (
        "The temperature dropped to -5°C overnight.",
        "The temperature dropped to minus five degrees Celsius overnight.",
    ),
]

CASES = (
    NUMBERS
    + RANGES_FRACTIONS_PERCENTAGES
    + MONEY
    + DATES_AND_YEARS
    + TIMES
    + PHONES_CARDS_CODES
    + SPELLED_WORDS
    + EMAILS_AND_URLS
    + ABBREVIATIONS_AND_UNITS
    + SENTENCES
)
NORMALIZER = EnglishNormalizer()


def test_table_is_large_and_has_no_duplicate_inputs() -> None:
    inputs = [written for written, _ in CASES]
    assert len(inputs) >= 150
    assert len(set(inputs)) == len(inputs)


@pytest.mark.parametrize(("written", "spoken"), CASES, ids=[written for written, _ in CASES])
def test_spoken_form(written: str, spoken: str) -> None:
    assert NORMALIZER.normalize(written) == spoken


@pytest.mark.parametrize("written", [written for written, _ in CASES])
def test_every_split_point_streams_like_the_whole(written: str) -> None:
    """Each table row cut in two at every position, and fed one character at a time."""
    whole = NORMALIZER.normalize(written)
    for cut in range(len(written) + 1):
        stream = StreamingNormalizer(NORMALIZER)
        assert stream.feed(written[:cut]) + stream.feed(written[cut:]) + stream.flush() == whole
    stream = StreamingNormalizer(NORMALIZER)
    assert "".join(stream.feed(char) for char in written) + stream.flush() == whole
