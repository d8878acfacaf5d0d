""" "More like this": the documents whose chunks lie nearest to a document's chunks."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from clew.protocols import Snapshot
from clew.types import LegHit, Similar

__all__ = ["OWN_CHUNKS", "similar"]

OWN_CHUNKS = 16
"""A long document's first chunks stand for it."""


def similar(
    snap: Snapshot,
    doc_id: str,
    own: Sequence[int],
    k: int,
    filter: Any,
    scope: Any,
) -> list[Similar]:
    """Documents nearest (dense cosine) to any of ``own`` (the chunks of ``doc_id``), best chunk
    pair per document, ``doc_id`` itself excluded; ``filter`` and ``scope`` are parsed filter
    nodes and apply as in a search."""
    where = snap.where(filter, scope, [doc_id])
    vectors = snap.vectors(list(own[:OWN_CHUNKS]))
    searches: list[Callable[[], list[LegHit]]] = [
        partial(snap.dense, vectors[o], where, 10 * k) for o in own[:OWN_CHUNKS] if o in vectors
    ]
    best: dict[int, float] = {}
    for search in searches:
        for hit in search():
            if hit.ordinal >= len(snap.live) or not snap.live[hit.ordinal]:
                continue  # written after this snapshot
            prev = best.get(hit.ordinal)
            if prev is None or hit.score > prev:
                best[hit.ordinal] = hit.score
    rows = snap.rows(sorted(best))
    by_doc: dict[str, Similar] = {}
    for ordinal, score in sorted(best.items(), key=lambda kv: (-kv[1], kv[0])):
        row = rows.get(ordinal)
        if row is None or row.doc_id in by_doc:
            continue
        by_doc[row.doc_id] = Similar(row.doc_id, row.title, float(score), row.chunk_id)
        if len(by_doc) == k:
            break
    return list(by_doc.values())
