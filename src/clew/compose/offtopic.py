"""Self-calibration without judged questions: clew's off-topic questions and the threshold they
set on a corpus (``clew calibrate --self``, and ``answer.self_calibrate`` after an ingest).

:data:`OFF_TOPIC` are questions almost no indexed corpus answers: the unrelated negatives where
no other corpus is at hand. Everyday and general-knowledge questions of every type (who, when,
how many, how do I …), written for clew and kept apart from the questions its tests and
benchmarks ask; a corpus about one of these topics should be calibrated on a judged split
instead (``--dataset``). :func:`self_calibrated` keeps a calibration's weights and sets its
threshold from how those questions score on this corpus (:func:`offtopic_threshold`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from clew.compose.answer import Calibration
from clew.config import EngineConfig
from clew.errors import ConfigError

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


OFF_TOPIC_QUANTILE = 0.95
"""The self-calibrated threshold abstains on this share of clew's off-topic questions …"""
PORTABLE_QUANTILE = 0.7
"""… this share for a calibration's portable fit (no cosine features: it tells off-topic
questions apart less sharply, so a high quantile would abstain on answerable ones too) …"""
THRESHOLD_CAP = 0.4
"""… but never asks more than this P(answerable): where the corpus can answer general
questions (Wikipedia), the off-topic questions look answerable and would set it too high.
Both chosen on the six train corpora, leave-one-corpus-out (``bench/calibrate.py``)."""


def evidence_config(config: EngineConfig) -> EngineConfig:
    """``config`` for collecting evidence: no traces (many queries nobody inspects) and no
    abstention (calibration needs the evidence of every query)."""
    return replace(
        config,
        trace=replace(config.trace, enabled=False),
        answer=replace(config.answer, abstain=False),
    )


def offtopic_threshold(
    calibration: Calibration,
    offtopic: Sequence[Mapping[str, float]],
    *,
    quantile: float = OFF_TOPIC_QUANTILE,
    cap: float = THRESHOLD_CAP,
) -> float:
    """The threshold under which ``quantile`` of the off-topic questions' P(answerable) falls,
    capped at ``cap``: what the corpus's own score distribution says an unrelated question
    looks like."""
    if not offtopic:
        raise ConfigError("self-calibration needs the evidence of at least one off-topic question")
    probs = np.sort([calibration.probability(e) for e in offtopic])
    return float(min(np.quantile(probs, quantile), cap))


def self_calibrated(
    base: Calibration,
    offtopic: Sequence[Mapping[str, float]],
    *,
    scope: dict[str, Any] | None = None,
    info: Mapping[str, Any] | None = None,
) -> Calibration:
    """``base``'s weights (and its portable fit's), each with the threshold the evidence of
    :data:`OFF_TOPIC` asked on this corpus sets (:func:`offtopic_threshold`); ``scope`` (the
    canonical JSON of the scope the questions were asked in) and ``info`` are recorded."""
    meta = {
        **base.info,
        "dataset": "self",
        "scope": scope,
        "unrelated": len(offtopic),
        "rule": f"abstain on {OFF_TOPIC_QUANTILE:.0%} of clew's off-topic questions "
        f"({PORTABLE_QUANTILE:.0%} for a fit without cosines), "
        f"threshold at most {THRESHOLD_CAP:g}",
        **(info or {}),
    }

    def own(fit: Calibration) -> Calibration:
        quantile = OFF_TOPIC_QUANTILE if fit.reads_cosines else PORTABLE_QUANTILE
        threshold = offtopic_threshold(fit, offtopic, quantile=quantile)
        return Calibration(replace(fit.model, info=meta), threshold)

    return replace(own(base), portable=None if base.portable is None else own(base.portable))
