"""The store as a scoped writer's ingest sees it (entity resolution within the writer's scope)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clew.filters import parse_filter
from clew.protocols import DocumentRecord, Snapshot, Writer


class ScopedWriter:
    """The store as a scoped writer's ingest sees it: every write goes through, but the concepts
    entity resolution may resolve against are those that chunks in the writer's scope mention
    (in the release the ingest started from) or that this ingest wrote itself."""

    def __init__(self, store: Writer, snap: Snapshot, scope: Any) -> None:
        self._store = store
        self._graph = snap.graph_index
        self._allowed = snap.mask(snap.where(None, parse_filter(scope)))
        self._written: set[str] = set()

    def doc_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]:
        return self._store.doc_hashes(doc_ids)

    def write(self, records: Sequence[DocumentRecord]) -> int:
        release = self._store.write(records)
        for rec in records:
            self._written.update(m.concept.key for ms in rec.mentions for m in ms)
        return release

    def release(self) -> int:
        return self._store.release()

    def concept_kinds(self, keys: Sequence[str]) -> dict[str, str]:
        g, allowed = self._graph, self._allowed
        upto = min(g.mentions.shape[1], len(allowed))

        def visible(key: str) -> bool:
            if key in self._written:
                return True
            row = g.key_to_row.get(key)
            if row is None:
                return False
            cols = g.mentions.indices[g.mentions.indptr[row] : g.mentions.indptr[row + 1]]
            cols = cols[cols < upto]
            return bool(len(cols)) and bool(allowed[cols].any())

        mine = [k for k in keys if visible(k)]
        return self._store.concept_kinds(mine) if mine else {}
