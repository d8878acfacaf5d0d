"""One release of an index as a request reads it: the derived indexes, the live mask, masks and
scope statistics per filter, and the read-write lock that pins a snapshot for a request."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from clew.backends.embedded.lexical import BM25Index
from clew.backends.embedded.store import SQLiteStore
from clew.backends.embedded.vector import VectorIndex
from clew.backends.postgres.snapshot import ChunkKeys, SqlLegs
from clew.filters import Mask, MetadataColumns, parse_filter
from clew.index.graph import GraphIndex, GraphStats

if TYPE_CHECKING:
    from clew.backends.postgres.store import PostgresStore


MEMORY_KIND = "memory"
"""``metadata.kind`` of a memory (:mod:`clew.memory`)."""
MEMORY_SOURCE = "memory"
RECENCY = "recency"
"""Contribution name of recency weighting."""


class ReadWriteLock:
    """Many readers or one writer; a waiting writer holds back new readers (no starvation)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writing = False
        self._waiting = 0

    @contextmanager
    def reading(self) -> Iterator[None]:
        with self._cond:
            while self._writing or self._waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def writing(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            try:
                while self._writing or self._readers:
                    self._cond.wait()
            finally:
                self._waiting -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()


SAME_SCOPE: Any = type("SameScope", (), {"__repr__": lambda self: "SAME_SCOPE"})()
"""Statistics over the request's own scope (the default of ``stats_scope``)."""


@dataclass(frozen=True, slots=True)
class ScopeStats:
    """What query-time statistics are computed over for a scoped caller: BM25's chunk count,
    lengths and document frequencies, answer idf and coverage, concept idf, hub cuts and
    PageRank all come from ``population`` (the scope's live chunks), so no number a response
    carries depends on data outside the scope."""

    population: Mask
    graph: GraphStats
    sql: Any = None
    """PostgreSQL: the scope as BM25's population in SQL, with its corpus statistics
    (:meth:`clew.backends.postgres.snapshot.SqlLegs.population`)."""


@dataclass(slots=True)
class Snapshot:
    release: int
    _lexical: BM25Index | None
    _vector: VectorIndex | None
    _graph: GraphIndex | None
    live: Mask
    store: SQLiteStore | PostgresStore
    keys: Mapping[int, tuple[str, str]]
    """Ordinal → (chunk id, content hash), for fusion ties and dedup: every chunk in memory for
    an embedded index; read on demand (:class:`~clew.backends.postgres.snapshot.ChunkKeys`) for
    PostgreSQL."""
    _columns: MetadataColumns | None = None
    _masks: OrderedDict[str, Mask] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _memories: bool | None = None
    sql: SqlLegs | None = None
    """The legs in SQL when the store is PostgreSQL (None: the in-memory legs)."""
    _build: Callable[[str], Any] | None = None
    """Builds a derived index that is not in memory (PostgreSQL: only if something asks)."""
    _build_lock: threading.Lock = field(default_factory=threading.Lock)
    _stats: OrderedDict[str, ScopeStats] = field(default_factory=OrderedDict)

    def scope_stats(self, scope_json: str | None) -> ScopeStats | None:
        """The statistics population of a caller's scope: its live chunks, and the graph leg's
        numbers over them (None: unscoped, the whole index's statistics). Cached per scope."""
        if scope_json is None:
            return None
        with self._lock:
            cached = self._stats.get(scope_json)
            if cached is not None:
                self._stats.move_to_end(scope_json)
                return cached
        pg: Any = None
        if self.sql is None:
            population = self.allowed(None, scope_json)
        else:  # the database evaluates the scope
            node = parse_filter(scope_json)
            key = json.dumps([None, scope_json, []])
            where = self.sql.where(None, node)
            population = self.sql.mask(key, where, self.live)
            pg = self.sql.population(key, where)
        stats = ScopeStats(population, self.graph.stats(population), pg)
        with self._lock:
            self._stats[scope_json] = stats
            if len(self._stats) > 16:
                self._stats.popitem(last=False)
        return stats

    def _lazy(self, name: str) -> Any:
        with self._build_lock:
            current = getattr(self, "_" + name)
            if current is None:
                assert self._build is not None
                current = self._build(name)
                setattr(self, "_" + name, current)
            return current

    @property
    def lexical(self) -> BM25Index:
        """The in-memory BM25 index (PostgreSQL: built from the database on first use; the
        query path never asks for it there)."""
        return self._lexical if self._lexical is not None else self._lazy("lexical")

    @property
    def vector(self) -> VectorIndex:
        """The in-memory vector index (PostgreSQL: as :attr:`lexical`)."""
        return self._vector if self._vector is not None else self._lazy("vector")

    @property
    def graph(self) -> GraphIndex:
        """The in-memory graph (PostgreSQL: the graph leg's, loaded once per graph state when a
        query first walks it)."""
        if self.sql is not None:
            return self.sql.graph.index()  # type: ignore[no-any-return]
        return self._graph if self._graph is not None else self._lazy("graph")

    def load_keys(self, ordinals: Iterable[int]) -> None:
        """Make the keys of these ordinals cheap to read (PostgreSQL: one query)."""
        if isinstance(self.keys, ChunkKeys):
            self.keys.load(list(ordinals))

    def columns(self) -> MetadataColumns:
        with self._lock:
            if self._columns is None:
                self._columns = MetadataColumns.build(len(self.live), self.store.metadata_rows())
            return self._columns

    def has_memories(self) -> bool:
        """Whether any memory is in this release (memories get recency weighting)."""
        if self._memories is None:
            self._memories = self.store.has_source(MEMORY_SOURCE)
        return self._memories

    def memory_mask(self) -> Mask:
        return self.allowed(None, json.dumps({"kind": MEMORY_KIND}))

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
