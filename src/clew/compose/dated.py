"""Memories' own days in answers: a memory is said on a day, a document is not."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from clew.memory import said_on
from clew.types import Hit

__all__ = ["CURRENT_WEIGHT", "MEMORY_TIME_FIT", "memory_days", "newer"]

MEMORY_TIME_FIT = 0.5
"""In a time question ("when did I switch teams"), a sentence of a memory fits the asked type
this much (a sentence holding a time span fits 1.0): the memory's own time answers, and the
answer shows that day before the sentence (:func:`clew.compose.render.answer_text`). On
eval/dev/memory ingested as memories, gold in the answer is the same with and without it (0.600);
"when did I switch teams" over a chat of eleven turns answered with a dated turn about something
else before."""
CURRENT_WEIGHT = 0.2
"""In a question about the present state ("Where do I live now?", "What's the latest on …"),
a memory's sentence gains this much times how new its day is among the hits' memories (the
newest 1, the oldest 0): a later memory says what holds now. On eval/dev/memory ingested as
memories, gold in the answer 0.600 -> 0.612 (temporal 0.556 -> 0.593; 0.1 to 0.5 the same).
Documents have no day of their own and gain nothing."""
_CURRENT = re.compile(
    r"\b(?:now|currently|current|nowadays|these days|at the moment|latest|most recent|still"
    r"|any ?more)\b",
    re.IGNORECASE,
)


def memory_days(hits: Sequence[Hit]) -> dict[int, str]:
    """Hit index → the day that hit's memory was said (:func:`clew.memory.said_on`); documents
    have none."""
    return {i: d for i, h in enumerate(hits) if (d := said_on(h.metadata))}


def newer(question: str, days: Mapping[int, str]) -> dict[int, float]:
    """For a question about the present state, hit index → :data:`CURRENT_WEIGHT` times how new
    that memory's day (``days``: :func:`memory_days`) is among them (newest 1, oldest 0); empty
    for another question, or when the memories were said on fewer than two days."""
    if not _CURRENT.search(question):
        return {}
    order = sorted(set(days.values()))
    if len(order) < 2:
        return {}
    return {i: CURRENT_WEIGHT * order.index(d) / (len(order) - 1) for i, d in days.items()}
