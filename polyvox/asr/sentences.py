"""Plain English sentences for intelligibility checks, written for polyvox.

Everyday topics, 6 to 20 words each; a few carry numbers in written form (an amount, a
percentage, an ordinal, a time) so the check also covers how a voice reads them.
"""

from __future__ import annotations

SENTENCES: tuple[str, ...] = (
    "The old lighthouse keeper climbed the narrow stairs every evening to light the lamp.",
    "Fresh bread from the corner bakery usually sells out before nine in the morning.",
    "My grandmother planted 14 tomato plants along the south side of her garden.",
    "Heavy rain is expected tonight, so bring an umbrella if you go out.",
    "The museum reopened last spring after a long renovation of its main hall.",
    "He left his keys on the train and had to wait outside for an hour.",
    "Our group finished the mountain trail in just under three hours.",
    "Please turn off the lights when you leave the kitchen.",
    "The river was so calm that we could see fish swimming beneath the boat.",
    "She practices the piano for twenty minutes before dinner every day.",
    "A small brown dog followed the children all the way home from school.",
    "The concert starts at 7:30, so we should leave the house by six.",
    "Scientists expect the comet to return in about seventy years.",
    "The recipe calls for two cups of flour and a pinch of salt.",
    "Winter evenings are perfect for reading a good book by the fire.",
    "The price of apples went up by 20% after the long dry summer.",
    "Which platform does the next train to the city leave from?",
    "The bridge was painted bright red so that ships could see it through the fog.",
    "He paid $12 for a ticket and sat in the very last row.",
    "They moved into a small apartment on the 3rd floor last October.",
    "Learning a new language takes patience, practice, and a good sense of humor.",
)
