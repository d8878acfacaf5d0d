"""Memories' own days in answers: a memory is said on a day, a document is not."""

from __future__ import annotations

import re
from collections.abc import Sequence

from clew.memory import said_on
from clew.types import Hit

__all__ = ["CURRENT_WEIGHT", "newer"]

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


def newer(question: str, hits: Sequence[Hit]) -> dict[int, float]:
    """For a question about the present state, hit index → :data:`CURRENT_WEIGHT` times how new
    that memory's day is among the memories of ``hits`` (newest 1, oldest 0); empty for another
    question, or when the memories were said on fewer than two days."""
    if not _CURRENT.search(question):
        return {}
    days = {i: d for i, h in enumerate(hits) if (d := said_on(h.metadata))}
    order = sorted(set(days.values()))
    if len(order) < 2:
        return {}
    return {i: CURRENT_WEIGHT * order.index(d) / (len(order) - 1) for i, d in days.items()}
