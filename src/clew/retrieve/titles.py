"""Title links: a top hit that names another document by its title brings that document up.

A bridge question ("who directed the film shot in Leland in 1986?") finds the first document
("Leland, North Carolina … the film *Maximum Overdrive* was shot here") but not the second,
which shares no words with the question: the one titled *Maximum Overdrive*. The first hit
names it. So after fusion (and expansion), for each of the top ``graph.title_sources`` hits,
the concepts its chunk mentions that are another document's title
(:func:`clew.index.graph.title_keys`, :attr:`GraphIndex.about`) lead to that document: its
first allowed chunk joins the hits at rank ``graph.title_rank`` (the hits ahead keep their
places, the rest move down one), ``graph.title_links`` per source at most. A document already
among the top ``graph.title_shown`` hits is shown already and passed over, so the source's next
named document joins instead.

Only chunks the caller may see are sources or targets, and a concept that titles more than
:data:`~clew.index.graph.TITLE_MAX_DOCS` *allowed* documents (a generic title) leads nowhere,
so nothing outside the caller's filter shapes the result. Each chunk brought up carries a
``title_link`` contribution (what it added to its score) and an expansion path from its source:
``ABOUT 'maximum overdrive'`` (the concept, named by its key, is the target document's title;
its label is the first form any writer gave, maybe another tenant's). Its score lies between
its new neighbours', so scores stay monotone with the order.

Measured on every set in ``bench/results/graph.md`` (its ``-titles`` column: the default without
this step) and in ``bench/results/quality.md`` (``make eval``'s ``-titles`` row); the settings
were chosen on the train and dev sets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from clew.config import GraphConfig
from clew.filters import Mask
from clew.index.graph import TITLE_MAX_DOCS, GraphIndex, GraphStats, titles_lead
from clew.retrieve.fuse import Fused
from clew.types import TITLE_EDGE as EDGE
from clew.types import Contribution, ExpansionPath, PathStep

LEG = "title_link"


@dataclass(frozen=True, slots=True)
class _Link:
    source: Fused
    target: int
    concept: int
    at: int
    """The target's position in the pool (its length when it was not in it)."""
    weight: float
    """How often the source mentions the concept (``1 + ln count``)."""


def title_links(
    pool: Sequence[Fused],
    graph: GraphIndex,
    mask: Callable[[], Mask],
    config: GraphConfig,
    chunk_id: Callable[[int], str],
    load_keys: Callable[[Iterable[int]], None] | None = None,
    stats: GraphStats | None = None,
) -> tuple[list[Fused], int]:
    """The pool with the documents its top hits name by title brought up; and how many were.
    ``mask`` gives the caller's allowed chunks (asked only when a top hit names a title);
    ``load_keys`` is told the chunks a path names before ``chunk_id`` is asked for them;
    ``stats``: the caller's population (whether a one-word concept is a name there)."""
    out = list(pool)
    st = stats or graph.stats()
    keep = config.title_rank - 1
    col = graph.mentions_csc
    sources = [f.ordinal for f in out[: config.title_sources] if f.ordinal < col.shape[1]]
    if config.title_links <= 0 or not any(
        titles_lead(graph, int(r), st)
        for o in sources
        for r in col.indices[col.indptr[o] : col.indptr[o + 1]]
    ):
        return out, 0
    allowed = mask()
    layout = graph.layout()
    size = min(col.shape[1], len(allowed))
    position = {f.ordinal: i for i, f in enumerate(out)}
    shown = max(keep, config.title_shown)
    ahead = {graph.chunk_doc.get(f.ordinal) for f in out[:shown]}

    def first_allowed(doc: str) -> int | None:
        return next((o for o in layout.doc_chunks.get(doc, ()) if o < size and allowed[o]), None)

    chosen: list[_Link] = []
    taken: set[str] = set()
    for source in out[: config.title_sources]:
        o = source.ordinal
        if o >= size or not allowed[o]:
            continue
        own = graph.chunk_doc.get(o)
        found: dict[str, _Link] = {}
        lo, hi = col.indptr[o], col.indptr[o + 1]
        for row, weight in zip(col.indices[lo:hi].tolist(), col.data[lo:hi].tolist(), strict=True):
            docs = graph.about.get(row)
            if not docs or not titles_lead(graph, row, st):
                continue
            targets: list[tuple[str, int]] = []
            for d in docs:
                t = first_allowed(d)
                if t is not None:
                    targets.append((d, t))
                    if len(targets) > TITLE_MAX_DOCS:
                        break
            if not 1 <= len(targets) <= TITLE_MAX_DOCS:
                continue
            for doc, target in targets:
                if doc == own or doc in ahead or doc in taken:
                    continue
                link = _Link(source, target, row, position.get(target, len(out)), weight)
                best = found.get(doc)
                if best is None or (-link.weight, link.concept) < (-best.weight, best.concept):
                    found[doc] = link
        ranked = sorted(found.items(), key=lambda kv: (kv[1].at, -kv[1].weight, kv[0]))
        for doc, link in ranked[: config.title_links]:
            chosen.append(link)
            taken.add(doc)
    if not chosen:
        return out, 0
    moved = {link.target for link in chosen}
    if load_keys is not None:
        load_keys([*moved, *(link.source.ordinal for link in chosen)])
    rest = [f for f in out if f.ordinal not in moved]
    head, tail = rest[:keep], rest[keep:]
    upper = head[-1].score  # the sources are never moved, so the head is never empty
    lower = tail[0].score if tail else min(0.0, upper)
    brought: list[Fused] = []
    for i, link in enumerate(chosen):
        score = upper - (upper - lower) * (i + 1) / (len(chosen) + 1)
        at = link.at
        before = out[at] if at < len(out) else None
        base = before.score if before is not None else 0.0
        # the concept's key, not its label: the label is the first surface form any writer
        # gave, maybe another tenant's casing; the key is the same for everyone who has it
        label = graph.keys[link.concept]
        path = ExpansionPath(
            chunk_id(link.source.ordinal),
            1,
            (PathStep(EDGE, label, chunk_id(link.target)),),
            1.0,
        )
        part = Contribution(LEG, keep + i + 1, link.weight, score - base)
        if before is not None:
            brought.append(
                replace(
                    before,
                    score=score,
                    contributions=(*before.contributions, part),
                    expansion=(path, *before.expansion),
                )
            )
        else:
            brought.append(Fused(link.target, score, (part,), None, (), (path,)))
    return head + brought + tail, len(brought)
