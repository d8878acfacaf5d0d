"""Questions almost no indexed corpus answers: the unrelated negatives of ``clew calibrate
--self``, where no other corpus is at hand. Everyday and general-knowledge questions of every
type (who, when, how many, how do I …), written for clew and kept apart from the questions its
tests and benchmarks ask; a corpus about one of these topics should be calibrated on a judged
split instead (``--dataset``)."""

from __future__ import annotations

OFF_TOPIC: tuple[str, ...] = (
    "Which Roman emperor built a wall across northern Britain?",
    "What is the capital of Mongolia?",
    "how do I make fresh pasta without a machine",
    "who won the 1966 Wimbledon women's singles",
    "what is the melting point of tungsten",
    "best time of year to visit Patagonia",
    "how do bees make honey",
    "recommend a board game for six players",
    "what is the deepest lake in Siberia",
    "how to fix a dripping kitchen tap",
    "When did the Berlin Wall fall?",
    "How many moons does Neptune have?",
    "who wrote the opera The Magic Flute",
    "what temperature should I roast a chicken at",
    "How long does it take to boil an egg?",
    "Which river flows through Budapest?",
    "how do I tie a bowline knot",
    "what does the Italian word sprezzatura mean",
    "Who was the first woman to win a Nobel Prize?",
    "how many strings does a cello have",
    "what year did the Titanic sink",
    "how do I get red wine out of a carpet",
    "Which planet has the longest day?",
    "what is the offside rule in football",
    "How tall is the Eiffel Tower?",
    "who composed The Four Seasons",
    "how do I repot an orchid",
    "what causes the northern lights",
    "Where is the Great Barrier Reef?",
    "how many players are on a rugby union team",
    "what is the difference between a crocodile and an alligator",
    "Who invented the printing press?",
    "how long should I steep green tea",
    "which country has the most islands",
    "what is the plot of Moby-Dick",
    "how do I train a puppy to sit",
    "When was the first moon landing?",
    "what is a haiku",
    "how much does an adult blue whale weigh",
    "why is the sky blue",
)
