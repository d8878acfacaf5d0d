"""Which names lead an answer from its first hop to the second.

:func:`clew.compose.extract.select_sentences` gives a bonus to a sentence that names a name the
chosen sentences bring (the bridge). Two refinements, measured on the train/dev sets with
answers run end to end (gold in the answer, HotpotQA / MuSiQue / support / memory, from
0.570 / 0.290 / 0.554 / 0.553; each hit's first sentence also always embedded):

- a chosen sentence that names another hit by its title ("He played for the Philadelphia
  Eagles") leads to that hit: its sentences gain :data:`TITLE_BRIDGE_WEIGHT`, more than a
  name alone (0.580 / 0.310 / 0.569 / 0.553);
- a name that most of the hits say ("National Football League" in four NFL articles) leads
  nowhere in particular and bridges nothing (0.590 / 0.310 / 0.569 / 0.565).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from clew.compose.question import names
from clew.types import Hit

__all__ = ["TITLE_BRIDGE_WEIGHT", "novel_names", "specific", "title_links", "titled_by"]

TITLE_BRIDGE_WEIGHT = 0.45
"""The bridge bonus of a hit that a chosen sentence names by its title (0.3 and 0.6 did no
better)."""

_QUALIFIER = re.compile(r"\s*\([^)]*\)\s*$")


def titled_by(text: str, titles: Sequence[str], asked: str, own: int) -> set[int]:
    """Indexes of the hits (other than ``own``) whose title, without a trailing qualifier
    ("Brooklyn Dodgers (NFL)"), ``text`` names whole and the question ``asked`` (casefolded)
    does not."""
    said = text.casefold()
    out = set()
    for j, title in enumerate(titles):
        base = _QUALIFIER.sub("", title.casefold()).strip()
        if j == own or len(base) < 3 or base in asked:
            continue
        if re.search(rf"(?<![\w-]){re.escape(base)}(?![\w-])", said):
            out.add(j)
    return out


def specific(found: Iterable[str], hits: Sequence[Hit], own: int) -> set[str]:
    """The casefolded names ``found`` (in a sentence of hit ``own``) that at most half of the other
    ``hits`` (title or text; one, of two or three) say."""
    texts = [f"{h.title} {h.text}".casefold() for i, h in enumerate(hits) if i != own]
    most = max(1, len(texts) // 2)
    return {n for n in found if sum(n in t for t in texts) <= most}


def novel_names(text: str, asked: str) -> frozenset[str]:
    """Names a chosen sentence brings that the question does not say (the bridge to a second
    hop: ``Anna Benson's husband`` → ``Kris Benson``)."""
    return frozenset(n.casefold() for n in names(text) if n.casefold() not in asked)


def title_links(hits: Sequence[Hit]) -> dict[int, set[int]]:
    """Hit index → the hits that came up because it names them by their title (a title link's
    ``ABOUT`` path from that hit's chunk: :mod:`clew.retrieve.titles`)."""
    index_of = {h.chunk_id: i for i, h in enumerate(hits)}
    out: dict[int, set[int]] = {}
    for j, h in enumerate(hits):
        for path in h.expansion:
            if path.by_title and path.seed in index_of:
                out.setdefault(index_of[path.seed], set()).add(j)
    return out
