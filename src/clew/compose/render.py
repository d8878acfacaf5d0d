"""An extractive answer as text: the chosen sentences, each with its citation marker."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from clew.compose.extract import Selected
from clew.errors import QueryError

__all__ = ["answer_text"]


def answer_text(
    selected: Sequence[Selected],
    citation_of: Mapping[int, int],
    days: Mapping[int, str] | None = None,
) -> str:
    """The selected sentences as one paragraph, in the order given, each followed by its
    citation marker: ``"First sentence. [1] Second one. [2]"``.

    ``citation_of`` maps a hit index to its citation number; ``days`` a hit index to the day
    shown before each of its sentences (``"2026-04-20: I switched teams. [1]"``: the day a
    memory was said, for a time question).
    """
    days = days or {}
    out: list[str] = []
    for s in selected:
        index = s.sentence.hit_index
        if index not in citation_of:
            raise QueryError(
                f"no citation number for hit {index}; citation_of has {sorted(citation_of)}"
            )
        text = s.sentence.text
        if s.sentence.kind in ("heading", "row") and not text.endswith((".", "!", "?", "…")):
            text += "."  # a heading or a table row reads as a sentence of its own
        day = days.get(index)
        out.append(
            f"{day}: {text} [{citation_of[index]}]" if day else f"{text} [{citation_of[index]}]"
        )
    return " ".join(out)
