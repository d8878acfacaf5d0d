"""One release of an embedded index as a request reads it: the in-memory derived indexes, the
live mask, and masks and scope statistics per filter, cached for the release.

The filter compiles to a mask over ordinals (:class:`MaskWhere`) that every leg, graph
expansion and concept linking apply inside their search, never as a post-filter."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from clew.backends.embedded.lexical import BM25Index
from clew.backends.embedded.store import SQLiteStore
from clew.backends.embedded.vector import VectorIndex
from clew.cache import Lru
from clew.config import DenseConfig, GraphConfig, LexicalConfig
from clew.filters import Mask, MetadataColumns, Node, fields_of, filter_key, parse_filter
from clew.index.graph import GraphIndex, LinkedConcept
from clew.memory import MEMORY_KIND, MEMORY_SOURCE
from clew.protocols import ChunkRow, Matrix, ScopeStats, Where
from clew.types import LegHit

__all__ = ["EmbeddedSnapshot", "MaskWhere"]


@dataclass(frozen=True, slots=True)
class MaskWhere:
    """A compiled filter of the embedded backend: the live chunks it allows."""

    mask: Mask
    filtered: bool
    scoped: bool = False


@dataclass(slots=True)
class EmbeddedSnapshot:
    release: int
    lexical_index: BM25Index
    vector_index: VectorIndex
    graph_index: GraphIndex
    live: Mask
    store: SQLiteStore
    keys: Mapping[int, tuple[str, str]]
    """Ordinal → (chunk id, content hash) of every chunk, in memory."""
    _columns: MetadataColumns | None = None
    _masks: OrderedDict[str, Mask] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _memories: bool | None = None
    _stats: Lru[str, ScopeStats] = field(default_factory=lambda: Lru(16))
    _views: Lru[str, int] = field(default_factory=lambda: Lru(64))
    _removed: list[tuple[int, dict[str, Any]]] | None = None

    # -- the filter --------------------------------------------------------------------------

    def where(
        self, filter: Node | None, scope: Node | None, exclude_docs: Sequence[str] = ()
    ) -> MaskWhere:
        allowed = self.allowed(filter_key(filter), filter_key(scope))
        if exclude_docs:
            allowed = allowed.copy()
            chunks = self.graph_index.layout().doc_chunks
            hidden = [o for doc in exclude_docs for o in chunks.get(doc, ())]
            allowed[[o for o in hidden if o < len(allowed)]] = False
        filtered = filter is not None or scope is not None or bool(exclude_docs)
        return MaskWhere(allowed, filtered, scope is not None)

    def mask(self, where: Where) -> Mask:
        assert isinstance(where, MaskWhere)
        return where.mask

    def allowed(self, filter_json: str | None, scope_json: str | None = None) -> Mask:
        """Live chunks that pass the request's filter AND the caller's scope.

        The filter is strict (a field no document has is an error); the scope is not (a scope
        over a field nothing has yet hides everything, and its error would reveal field names).
        """
        if filter_json is None and scope_json is None:
            return self.live
        key = f"{filter_json}\x00{scope_json}"
        with self._lock:
            cached = self._masks.get(key)
            if cached is not None:
                self._masks.move_to_end(key)
                return cached
        columns = self.columns()
        with self._lock:
            mask = self.live
            scope = parse_filter(scope_json)
            if scope is not None:
                mask = mask & columns.mask(scope, strict=False)
            node = parse_filter(filter_json)
            if node is not None:
                # a scoped caller's filter is checked against the fields of documents in scope:
                # an error must not name, or hint at, fields only other tenants use
                within = None if scope is None else mask
                mask = mask & columns.mask(node, strict=True, within=within)
            self._masks[key] = mask
            if len(self._masks) > 64:
                self._masks.popitem(last=False)
            return mask

    def columns(self) -> MetadataColumns:
        """The metadata columns of this release's chunks, built on first use from the store.

        A later release may have committed by then: its chunks (ordinals past this release's)
        are left out, and a document deleted since has no metadata left, so its chunks match no
        filter: a pinned snapshot may hide more, never show what its release did not hold."""
        with self._lock:
            if self._columns is None:
                size = len(self.live)
                rows = (
                    (kept, meta)
                    for ords, meta in self.store.metadata_rows()
                    if (kept := [o for o in ords if o < size])
                )
                self._columns = MetadataColumns.build(size, rows)
            return self._columns

    def scope_stats(self, scope_json: str | None) -> ScopeStats | None:
        """The statistics population of a caller's scope: its live chunks, and the graph leg's
        numbers over them (None: unscoped, the whole index's statistics). Cached per scope."""
        if scope_json is None:
            return None
        cached = self._stats.get(scope_json)
        if cached is not None:
            return cached
        population = self.allowed(None, scope_json)
        stats = ScopeStats(population, self.graph_index.stats(population))
        self._stats.put(scope_json, stats)
        return stats

    def view(self, scope_json: str | None) -> int:
        """The release a caller with this scope sees: the last that wrote a chunk the scope lets
        through or removed a document it let through (this release when unscoped; 0 when the
        scope never held anything). Cached per scope."""
        if scope_json is None:
            return self.release
        cached = self._views.get(scope_json)
        if cached is not None:
            return cached
        view = max(self._written(self.allowed(None, scope_json)), self._gone(scope_json))
        self._views.put(scope_json, view)
        return view

    def _written(self, population: Mask) -> int:
        """The release of the scope's newest chunk. Ordinals grow with releases (each release
        takes new ones in its own write transaction), so it is the release of the highest
        visible ordinal still stored (one deleted since this snapshot is passed over)."""
        visible = np.flatnonzero(population)[::-1]
        for start in range(0, len(visible), 64):
            found = self.store.latest_release(visible[start : start + 64].tolist())
            if found is not None:
                return min(found, self.release)
        return 0

    def _gone(self, scope_json: str) -> int:
        """The last release, up to this one, that removed a document the scope let through."""
        with self._lock:
            if self._removed is None:
                self._removed = [r for r in self.store.removed_rows() if r[0] <= self.release]
            rows = self._removed
        node = parse_filter(scope_json)
        if not rows or node is None:
            return 0
        # the scope reads only the fields it names: each distinct value of those with its last
        # removal (a handful of rows for a tenant scope, however many documents went)
        names = fields_of(node)
        last: dict[str, tuple[int, dict[str, Any]]] = {}
        for release, meta in rows:
            seen = {f: meta[f] for f in names if f in meta}
            key = json.dumps(seen, sort_keys=True, default=str)
            if key not in last or last[key][0] < release:
                last[key] = (release, seen)
        kept = list(last.values())
        columns = MetadataColumns.build(len(kept), (([i], m) for i, (_, m) in enumerate(kept)))
        hit = np.flatnonzero(columns.mask(node, strict=False))
        return max((kept[int(i)][0] for i in hit), default=0)

    # -- the legs ----------------------------------------------------------------------------

    def link(
        self, query: str, cfg: GraphConfig, where: Where, stats: ScopeStats | None
    ) -> list[LinkedConcept]:
        allowed = self.mask(where)
        g = self.graph_index
        linked = g.link(
            query,
            fuzzy=cfg.fuzzy,
            word_weight=cfg.word_weight,
            stats=None if stats is None else stats.graph,
        )
        if allowed is not self.live:
            linked = g.within(linked, allowed)
        return linked

    def lexical(
        self, terms: Mapping[str, float], where: Where, cfg: LexicalConfig, stats: ScopeStats | None
    ) -> list[LegHit]:
        return self.lexical_index.search(
            terms,
            self.mask(where),
            cfg.depth,
            k1=cfg.k1,
            b=cfg.b,
            population=None if stats is None else stats.population,
        )

    def dense(self, vector: Matrix, where: Where, k: int) -> list[LegHit]:
        exact = where.scoped and self.vector_index.config.scoped_exact
        return self.vector_index.search(vector, self.mask(where), k, exact=exact)

    def graph(
        self,
        query: str,
        where: Where,
        cfg: GraphConfig,
        linked: Sequence[LinkedConcept],
        stats: ScopeStats | None,
    ) -> list[LegHit]:
        return self.graph_index.search(
            query,
            self.mask(where),
            cfg.depth,
            cfg,
            list(linked),
            stats=None if stats is None else stats.graph,
        )

    # -- what later stages read ---------------------------------------------------------------

    def load_keys(self, ordinals: Iterable[int]) -> None:
        """Every key is in memory already."""

    def rows(self, ordinals: Sequence[int]) -> dict[int, ChunkRow]:
        return self.store.fetch(ordinals)

    def idf(self, terms: Sequence[str], stats: ScopeStats | None) -> dict[str, float]:
        population = None if stats is None else stats.population
        return {term: self.lexical_index.idf(term, population) for term in terms}

    def cosines(self, ordinals: npt.NDArray[np.int64], vector: Matrix) -> npt.NDArray[np.float64]:
        cos = np.zeros(len(ordinals))
        matrix = self.vector_index.matrix
        inside = ordinals < len(matrix)
        cos[inside] = matrix[ordinals[inside]] @ vector
        return cos

    def bm25(
        self,
        terms: Mapping[str, float],
        ordinals: npt.NDArray[np.int64],
        cfg: LexicalConfig,
        stats: ScopeStats | None,
    ) -> npt.NDArray[np.float64]:
        bm25 = np.zeros(len(ordinals))
        full = self.lexical_index.scores(
            terms,
            int(ordinals.max()) + 1,
            k1=cfg.k1,
            b=cfg.b,
            population=None if stats is None else stats.population,
        )
        if full is not None:
            bm25 = full[ordinals].astype(np.float64)
        return bm25

    def vectors(self, ordinals: Sequence[int]) -> dict[int, Matrix]:
        matrix = self.vector_index.matrix
        return {o: matrix[o] for o in ordinals if o < len(matrix)}

    def created(
        self, ordinals: Sequence[int], memories: bool
    ) -> Mapping[int, tuple[float, bool]] | None:
        created = self.columns().numeric("created_at")
        if created is None:
            return None
        memory = self.allowed(None, json.dumps({"kind": MEMORY_KIND})) if memories else None
        out = {}
        for o in ordinals:
            when = float(created[o]) if o < len(created) else float("nan")
            out[o] = (when, memory is not None and o < len(memory) and bool(memory[o]))
        return out

    def has_memories(self) -> bool:
        """Whether any memory is in this release (memories get recency weighting)."""
        if self._memories is None:
            self._memories = self.store.has_source(MEMORY_SOURCE)
        return self._memories

    def visible(self, ordinals: Sequence[int], scope: Node | None) -> bool:
        allowed = self.allowed(None, filter_key(scope))
        return all(o < len(allowed) and bool(allowed[o]) for o in ordinals)

    def uses_hnsw(self, dense: DenseConfig) -> bool:
        return self.vector_index.hnsw is not None
