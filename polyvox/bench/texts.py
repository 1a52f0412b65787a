"""Built-in benchmark texts: natural English sentences of 5 to 30 words on varied topics,
written for polyvox (no third-party text), and a seeded pick of them."""

from __future__ import annotations

import random

SENTENCES: tuple[str, ...] = (
    "The morning train was late again, so I walked to work along the river.",
    "Please remember to water the tomatoes before you leave for the weekend.",
    "Our flight to Lisbon has been moved to gate twelve.",
    "She kept every letter her grandmother wrote, tied together with a faded blue ribbon.",
    "Turn left at the bakery, then follow the narrow street until you reach the old fountain.",
    "The library closes early on Fridays during the summer months.",
    "A light rain is expected this afternoon, clearing by the evening with a cool breeze.",
    "He fixed the bicycle chain with a paper clip and a lot of patience.",
    "Could you tell me how long the museum stays open today?",
    "The soup needs more salt, but the bread is perfect.",
    "Scientists counted more than two hundred species of birds in the wetland last spring.",
    "If the printer jams again, lift the back cover and gently pull the paper out.",
    "We watched the storm roll in over the hills from the kitchen window.",
    "The meeting will start at half past nine, so please bring your notes.",
    "Most of the town gathered in the square to hear the band play on Saturday night.",
    "I think the cat has figured out how to open the cupboard door.",
    "The recipe calls for two eggs, a cup of flour, and a pinch of cinnamon.",
    "After the long climb, the view from the summit made every step worth it.",
    "Your package was delivered to the front desk at four fifteen this afternoon.",
    "Bees visit thousands of flowers every day to collect enough nectar for the hive.",
    "The old lighthouse has guided ships safely into the harbor for over a century.",
    "Remember that the store will be closed on Monday for the public holiday.",
    "My brother learned to play the piano by ear when he was only seven.",
    "The children built a snow fort in the backyard and defended it all afternoon.",
    "Press the green button twice to confirm your appointment.",
    "The river froze so thick that winter that people skated all the way to the next village.",
    "Good design is often invisible, because it simply works the way you expect.",
    "The bus driver waved as we ran across the street to catch it.",
    "Fresh strawberries are finally back at the market, and they taste wonderful.",
    "The engineers tested the bridge by driving heavy trucks across it one at a time.",
    "Would you like tea or coffee with your breakfast this morning?",
    "A quiet hour with a good book is the best way to end a busy day.",
    "The committee agreed to review the proposal again next month.",
    "Light travels from the sun to the earth in a little over eight minutes.",
    "He painted the fence bright yellow, much to the surprise of his neighbors.",
    "Thank you for calling, your call is important to us, please stay on the line.",
    "The garden looked tired after the heat wave, but a week of rain brought it back.",
    "We should leave early tomorrow to avoid the traffic on the coast road.",
    "The young chef surprised everyone with a dessert made from roasted pears and honey.",
    "Our team finished the project two days ahead of schedule.",
    "Keep the receipt in case you need to return the jacket.",
    "On clear nights you can see the faint band of the Milky Way from the valley.",
    "The new park has a playground, a pond with ducks, and plenty of shady benches.",
    "She answered every question calmly, even the ones she had not expected.",
    "The bakery on the corner sells out of croissants before eight every morning.",
    "Volcanic soil is rich in minerals, which is why the vineyards here do so well.",
    "Please speak a little more slowly, the connection is not very good.",
    "The kitten slept through the thunderstorm curled up in a laundry basket.",
    "I left my umbrella on the train, and of course it started to pour.",
    "Regular exercise, enough sleep, and a balanced diet help the body recover from stress.",
    "The orchestra tuned their instruments while the audience found their seats.",
    "It took three tries, but the kite finally caught the wind and rose above the dunes.",
    "Our neighbors are moving to a small farm in the mountains next year.",
    "The map was old and torn, yet it still showed the path to the waterfall.",
    "Your password must contain at least twelve characters and one number.",
    "The festival lights turned the whole harbor into a field of floating colors.",
    "Grandpa tells the same story about the big fish every summer, and it grows each time.",
    "The results of the experiment were surprising, so the students ran it again.",
    "Dinner is almost ready, could you set the table?",
    "Migrating geese fly in a V shape to save energy on their long journey south.",
    "The shop downstairs repairs watches, radios, and the occasional antique clock.",
    "After years of practice, the climber reached the top of the granite wall without a rope.",
    "The forecast says it will be sunny all week, perfect weather for the harvest.",
    "Several volunteers stayed late to clean up the beach after the concert.",
    "Learning a new language is easier when you listen to it every day.",
    "The ferry leaves every hour from the north pier, weather permitting.",
    "He wrote the whole novel by hand in a cabin without electricity.",
    "The puppy chased its own tail until it fell over, dizzy and delighted.",
    "When the power went out, we lit candles and told stories until midnight.",
    "The city plans to plant ten thousand trees along its busiest streets.",
    "Every autumn the maple leaves turn a deep red before they fall.",
    "Can you believe it has been ten years since we first met?",
    "The kettle is boiling already.",
    "Meet me at the station.",
    "Nobody expected the snow to last.",
    "Turn off the lights when you go.",
    "This coffee tastes like burnt toast.",
    ("The hikers set off before dawn, crossed two rivers and a pass, and reached the "
     "hut just as the last light faded behind the western ridge."),
    ("When the museum reopened after the renovation, visitors found the dinosaur "
     "skeletons rearranged, the old dusty cases gone, and a bright cafe where the "
     "gift shop used to be."),
    ("If you are calling about an existing order, please have your order number ready, "
     "and one of our team will be with you in just a few minutes."),
    ("The first settlers in the valley grew barley and kept sheep, and their stone "
     "walls still divide the fields that the farmers plough today."),
    ("She packed a map, a flashlight, two sandwiches, and a notebook full of questions, "
     "then set out to find the source of the mysterious humming sound."),
)


def pick_texts(n: int, seed: int = 0) -> list[str]:
    """`n` sentences chosen by `seed`: the same arguments always give the same list.

    Sentences do not repeat until all have been used; then a new shuffled pass begins."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(seed)
    picked: list[str] = []
    while len(picked) < n:
        order = list(SENTENCES)
        rng.shuffle(order)
        picked.extend(order[: n - len(picked)])
    return picked
