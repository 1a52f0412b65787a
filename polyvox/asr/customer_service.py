"""Customer-service sentences for measuring text normalization, written for polyvox.

Each sentence is what an agent (or an LLM behind a voice agent) would write: amounts,
dates, times, phone numbers, codes, email and web addresses, street addresses with
abbreviations, units and percentages. Each comes with `spoken`, the reference transcript:
the words a listener should hear, in plain lowercase words with no digits or symbols.

`spoken` was written by hand, not produced by the normalizer, so scoring the normalizer's
own output against it is a real check (see tests/text/test_normalize_customer_service.py).
Readings follow the conventions in docs/normalization.md where several are natural:
digits one at a time for phone numbers, codes and account numbers ("zero", never "oh"),
house numbers the way addresses are said ("two twenty one"), years in pairs ("twenty
twenty four").
"""

from __future__ import annotations

from typing import NamedTuple


class ServiceSentence(NamedTuple):
    """One written sentence and what a listener should hear."""

    text: str  # as written
    spoken: str  # reference transcript, spoken words only
    categories: tuple[str, ...]  # what it exercises, for the report


def _s(text: str, spoken: str, *categories: str) -> ServiceSentence:
    return ServiceSentence(text, spoken, categories)


CUSTOMER_SERVICE: tuple[ServiceSentence, ...] = (
    _s(
        "Your balance is $1,249.50.",
        "your balance is one thousand two hundred forty nine dollars and fifty cents",
        "money",
    ),
    _s(
        "Your appointment with Dr. Patel is on Tuesday, March 14th at 3:45 PM.",
        "your appointment with doctor patel is on tuesday march fourteenth at three forty five p m",
        "abbreviation",
        "date",
        "time",
    ),
    _s(
        "Our office is at 221 Baker St., Suite 400.",
        "our office is at two twenty one baker street suite four hundred",
        "address",
        "abbreviation",
        "number",
    ),
    _s(
        "Please call us at (555) 123-4567 between 9 AM and 5 PM.",
        "please call us at five five five one two three four five six seven between nine "
        "a m and five p m",
        "phone",
        "time",
    ),
    _s(
        "Your confirmation code is A7X-392-KQ.",
        "your confirmation code is a seven x three nine two k q",
        "code",
    ),
    _s(
        "You can email the team at j.smith@example.com with any questions.",
        "you can email the team at j dot smith at example dot com with any questions",
        "email",
    ),
    _s(
        "Visit www.acme.io/help to reset your password.",
        "visit w w w dot acme dot i o slash help to reset your password",
        "url",
    ),
    _s(
        "The package weighs 5 kg and ships within 2 business days.",
        "the package weighs five kilograms and ships within two business days",
        "unit",
        "number",
    ),
    _s(
        "You qualify for a 15% discount on your next order.",
        "you qualify for a fifteen percent discount on your next order",
        "percent",
    ),
    _s(
        "Your order 48213 shipped on June 30, 2025.",
        "your order four eight two one three shipped on june thirtieth twenty twenty five",
        "code",
        "date",
    ),
    _s(
        "A payment of $89.99 is due on 02/17/2024.",
        "a payment of eighty nine dollars and ninety nine cents is due on february "
        "seventeenth twenty twenty four",
        "money",
        "date",
    ),
    _s(
        "The new clinic is at 1450 Oak Ave., Apt. 3B, in Springfield.",
        "the new clinic is at fourteen fifty oak avenue apartment three b in springfield",
        "address",
        "abbreviation",
    ),
    _s(
        "Mrs. Lee will call you back at 10:15 AM tomorrow.",
        "missus lee will call you back at ten fifteen a m tomorrow",
        "abbreviation",
        "time",
    ),
    _s(
        "The card ending in 4242 expires next month.",
        "the card ending in four two four two expires next month",
        "code",
    ),
    _s(
        "Press 2 to speak with a billing specialist.",
        "press two to speak with a billing specialist",
        "number",
    ),
    _s(
        "We are open Monday to Friday, 8:30 AM to 6 PM.",
        "we are open monday to friday eight thirty a m to six p m",
        "time",
    ),
    _s(
        "The technician will arrive between 2 and 4 PM on Thursday.",
        "the technician will arrive between two and four p m on thursday",
        "time",
    ),
    _s(
        "Your monthly plan costs $45 and includes 20 GB of data.",
        "your monthly plan costs forty five dollars and includes twenty gigabytes of data",
        "money",
        "unit",
    ),
    _s(
        "A refund of €20 has been sent to your card.",
        "a refund of twenty euros has been sent to your card",
        "money",
    ),
    _s(
        "The replacement charger costs £3.99 plus shipping.",
        "the replacement charger costs three pounds and ninety nine pence plus shipping",
        "money",
    ),
    _s(
        "Your ticket number is 70215.",
        "your ticket number is seven zero two one five",
        "code",
    ),
    _s(
        "Please arrive 15 minutes early for your 7:05 visit.",
        "please arrive fifteen minutes early for your seven oh five visit",
        "number",
        "time",
    ),
    _s(
        "The store at 88 Elm Dr. closes at noon on Saturdays.",
        "the store at eighty eight elm drive closes at noon on saturdays",
        "address",
        "abbreviation",
    ),
    _s(
        "Dr. Garcia moved her practice to 500 Main St. last week.",
        "doctor garcia moved her practice to five hundred main street last week",
        "address",
        "abbreviation",
    ),
    _s(
        "Your flight leaves at 6:40 PM from gate 12.",
        "your flight leaves at six forty p m from gate twelve",
        "time",
        "number",
    ),
    _s(
        "The speed limit in our parking garage is 10 mph.",
        "the speed limit in our parking garage is ten miles per hour",
        "unit",
    ),
    _s(
        "This savings account earns 4.5% interest per year.",
        "this savings account earns four point five percent interest per year",
        "percent",
    ),
    _s(
        "Your claim number is 2024-118-07.",
        "your claim number is two zero two four one one eight zero seven",
        "code",
    ),
    _s(
        "We received your last payment on May 3rd, 2024.",
        "we received your last payment on may third twenty twenty four",
        "date",
    ),
    _s(
        "Your table for 4 is booked for Friday at 7:30 PM.",
        "your table for four is booked for friday at seven thirty p m",
        "number",
        "time",
    ),
    _s(
        "Please send the signed form to billing@northwind.com by Friday.",
        "please send the signed form to billing at northwind dot com by friday",
        "email",
    ),
    _s(
        "Our support line is 1-800-555-0199, extension 204.",
        "our support line is one eight zero zero five five five zero one nine nine "
        "extension two zero four",
        "phone",
    ),
    _s(
        "The total for 3 items comes to $127.08.",
        "the total for three items comes to one hundred twenty seven dollars and eight cents",
        "money",
        "number",
    ),
    _s(
        "We credited $0.75 to your account on Monday.",
        "we credited seventy five cents to your account on monday",
        "money",
    ),
    _s(
        "The warehouse is at 1600 Industrial Blvd., Building C.",
        "the warehouse is at sixteen hundred industrial boulevard building c",
        "address",
        "abbreviation",
    ),
    _s(
        "Mr. Thompson asked us to ship it to 42 Oak St., Apt. 7.",
        "mister thompson asked us to ship it to forty two oak street apartment seven",
        "address",
        "abbreviation",
    ),
    _s(
        "Keep the medicine below 40°F at all times.",
        "keep the medicine below forty degrees fahrenheit at all times",
        "unit",
    ),
    _s(
        "Your new internet plan runs at 300 Mbps.",
        "your new internet plan runs at three hundred megabits per second",
        "unit",
    ),
    _s(
        "Your subscription renews on January 1st for $9.99/mo.",
        "your subscription renews on january first for nine dollars and ninety nine cents "
        "per month",
        "date",
        "money",
    ),
    _s(
        "The rebate covers 25% of the cost, up to $200.",
        "the rebate covers twenty five percent of the cost up to two hundred dollars",
        "percent",
        "money",
    ),
    _s(
        "Your PIN was changed at 11:59 PM on December 31st.",
        "your pin was changed at eleven fifty nine p m on december thirty first",
        "time",
        "date",
    ),
    _s(
        "Your case ID is BK-4471-Z.",
        "your case i d is b k four four seven one z",
        "code",
    ),
    _s(
        "Ms. Alvarez can see you on Wednesday, April 9th at 1:15 PM.",
        "miz alvarez can see you on wednesday april ninth at one fifteen p m",
        "abbreviation",
        "date",
        "time",
    ),
    _s(
        "Returns are accepted for 30 days after delivery.",
        "returns are accepted for thirty days after delivery",
        "number",
    ),
    _s(
        "The box you returned weighed 2.5 lbs.",
        "the box you returned weighed two point five pounds",
        "unit",
    ),
    _s(
        "St. Mary's Hospital is at 300 Pine Ave.",
        "saint mary's hospital is at three hundred pine avenue",
        "address",
        "abbreviation",
    ),
    _s(
        "After the $35.20 late fee, your balance is $1,012.65.",
        "after the thirty five dollars and twenty cents late fee your balance is one "
        "thousand twelve dollars and sixty five cents",
        "money",
    ),
    _s(
        "Call 555-0142 to reach the front desk.",
        "call five five five zero one four two to reach the front desk",
        "phone",
    ),
    _s(
        "For help, visit support.acme.com or call 1-888-420-3311.",
        "for help visit support dot acme dot com or call one eight eight eight four two zero "
        "three three one one",
        "url",
        "phone",
    ),
    _s(
        "We have served more than 12,000 customers since 1998.",
        "we have served more than twelve thousand customers since nineteen ninety eight",
        "number",
        "date",
    ),
    _s(
        "Delivery usually takes 5-7 business days.",
        "delivery usually takes five to seven business days",
        "number",
    ),
    _s(
        "Your new router is 6 in. tall and uses 12 W of power.",
        "your new router is six inches tall and uses twelve watts of power",
        "unit",
    ),
)
