"""Identifier titles: a hit whose document or section is titled by an identifier the query names.

A query that names an identifier ("SW-2207", "what does LOCK-E31 mean", "ERR-4413") most often
asks for the page about it. The legs do not always put that page first: the dense leg barely
tells ``SW-2207`` from ``SW-2209`` (their embeddings are near neighbours), and a table that lists
many codes can outscore the section about one of them lexically. A document titled
"SW-2207: Unlock request timed out", or a chunk under the heading "ERR-4413: Idempotency key in
use", is about it.

So after fusion, each of the top ``depth`` hits whose document title or heading path names an
identifier of the query (:func:`clew.ingest.concepts.find_identifiers`, compared whole and
casefolded: ``SW-2207`` is not ``SW-2209``) gains ``fusion.title_identifier`` times a rank-1
leg part (:meth:`clew.config.FusionConfig.top_part`) times the identifiers' share of the
query (:func:`identifier_share`), once however many it names. The share keeps a code named in
passing from deciding the order: ``SW-2207`` alone gains the whole part, "DK-07 amber bay light
but the bike display says it's charging" a third of it, since most of what it asks is in the
other words. It carries a ``title_identifier`` contribution: its rank after the step, the number
of the query's identifiers its titles name as the raw score, and the part it gained. Only hits
already in the caller's fused list are read, and the idf comes from the caller's scope, so
nothing outside the filter counts.

Measured with ``clew eval --preset default`` on the train and dev sets (the weight chosen there,
by replaying the fused lists of those sets at 0.25, 0.5, 0.75 and 1): our support dev set
nDCG@10 0.797 → 0.809, its identifier slice 0.890 → 0.942, its mixed slice 0.990 → 0.980 (a
question about a code whose answer lies in another page); SciFact train (371 of 809 claims name
an identifier such as ``IL-6``) 0.7293 unchanged, NFCorpus dev 0.3250 → 0.3251, musique-train100,
hotpotqa-train100 and memory unchanged. In the replay, 0.5 cost SciFact train 0.002 and the mixed
slice 0.03.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache

from clew.ingest.analyze import analyze
from clew.ingest.concepts import find_identifiers
from clew.protocols import ChunkRow
from clew.retrieve.fuse import Fused, boost

__all__ = ["LEG", "identifier_share", "query_identifiers", "title_identifiers"]

LEG = "title_identifier"
"""Contribution name of the step."""


def query_identifiers(query: str) -> frozenset[str]:
    """The identifiers a query names, casefolded."""
    return frozenset(s.casefold() for s in find_identifiers(query))


def identifier_share(
    terms: Mapping[str, float], idf: Mapping[str, float], identifiers: frozenset[str]
) -> float:
    """How much of the query the identifiers are: the idf mass of the query ``terms`` (analyzer
    tokens with their weights, :func:`clew.ingest.analyze.query_terms`) that belong to the
    identifiers (the whole token and its parts) over the idf mass of all of them; 1.0 when
    the terms carry no idf at all."""
    mine = {t for identifier in identifiers for t in analyze(identifier)}
    total = sum(idf.get(t, 0.0) * w for t, w in terms.items())
    if total <= 0:
        return 1.0
    return sum(idf.get(t, 0.0) * w for t, w in terms.items() if t in mine) / total


@lru_cache(maxsize=8192)
def _titled(title: str, headings: tuple[str, ...]) -> frozenset[str]:
    """The identifiers a chunk's title and headings name (the same few strings recur across a
    document's chunks and across queries, so they are read once)."""
    return query_identifiers("\n".join((title, *headings)))


def title_identifiers(
    fused: Sequence[Fused],
    rows: Callable[[Sequence[int]], Mapping[int, ChunkRow]],
    identifiers: frozenset[str],
    part: float,
    depth: int,
) -> list[Fused]:
    """``fused`` with each of its top ``depth`` hits whose title or headings name one of
    ``identifiers`` raised by ``part``, re-sorted (ties keep fused order). ``rows`` reads the
    candidates' titles and headings; it is not called when there is nothing to match."""
    out = list(fused)
    if not identifiers or part <= 0 or depth <= 0 or not out:
        return out
    head = out[:depth]
    found = rows([f.ordinal for f in head])
    named: dict[int, tuple[float, float]] = {}
    for f in head:
        row = found.get(f.ordinal)
        if row is None:
            continue
        count = len(identifiers & _titled(row.title, tuple(row.heading_path)))
        if count:
            named[f.ordinal] = (float(count), part)
    return boost(out, named, LEG)
