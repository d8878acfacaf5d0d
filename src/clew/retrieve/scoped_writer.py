"""The store as a scoped writer's ingest sees it (entity resolution within the writer's scope)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clew.filters import parse_filter
from clew.protocols import DocumentRecord, Snapshot, Writer
from clew.types import CONCEPT_KINDS, KIND_RANK


class ScopedWriter:
    """The store as a scoped writer's ingest sees it: every write goes through, but the concepts
    entity resolution may resolve against are those that chunks in the writer's scope mention
    (in the release the ingest started from) or that this ingest wrote itself, of the kind
    those chunks and this ingest gave them (another tenant's chunk that calls a word a name
    makes it none here)."""

    def __init__(self, store: Writer, snap: Snapshot, scope: Any) -> None:
        self._store = store
        self._graph = snap.graph_index
        self._allowed = snap.mask(snap.where(None, parse_filter(scope)))
        self._written: dict[str, int] = {}
        """Concept key → the highest kind rank this ingest wrote it with."""

    def doc_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]:
        return self._store.doc_hashes(doc_ids)

    def write(self, records: Sequence[DocumentRecord]) -> int:
        release = self._store.write(records)
        for rec in records:
            for ms in rec.mentions:
                for m in ms:
                    rank = KIND_RANK.get(m.concept.kind, 0)
                    self._written[m.concept.key] = max(rank, self._written.get(m.concept.key, 0))
        return release

    def release(self) -> int:
        return self._store.release()

    def concept_kinds(self, keys: Sequence[str]) -> dict[str, str]:
        out = self._graph.scoped_kinds(keys, self._allowed)
        for key in keys:
            if key in self._written:
                seen = KIND_RANK.get(out.get(key, "phrase"), 0)
                out[key] = CONCEPT_KINDS[max(seen, self._written[key])]
        return out
