"""Questions almost no indexed corpus answers: the unrelated negatives of ``clew calibrate
--self``, where no other corpus is at hand. Everyday and general-knowledge questions of every
type (who, when, how many, how do I …), written for clew; a corpus about one of these topics
should pass its own unrelated questions instead (``--unrelated``)."""

from __future__ import annotations

OFF_TOPIC: tuple[str, ...] = (
    "Which volcano erupted in Iceland in 2010 and grounded flights across Europe?",
    "What is the capital of Mongolia?",
    "how do I bake sourdough bread at home",
    "who won the 1998 football world cup",
    "what is the boiling point of liquid nitrogen",
    "best hiking trails in the Dolomites",
    "how does photosynthesis work in cacti",
    "recommend a good science fiction novel about first contact",
    "what is the tallest mountain in Africa",
    "how to change a bicycle inner tube",
    "When did the Berlin Wall fall?",
    "How many moons does Neptune have?",
    "who painted the ceiling of the Sistine Chapel",
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
