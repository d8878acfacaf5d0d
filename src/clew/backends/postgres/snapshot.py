"""What a PostgreSQL-backed engine reads per query from the database instead of memory.

An embedded engine keeps its derived indexes (BM25 postings, vectors and HNSW, the graph, chunk
keys, metadata columns) in memory. Against PostgreSQL the database holds them: each snapshot of
the engine gets one :class:`SqlLegs`, which runs the three legs with the filter compiled to one
SQL predicate, validates filter fields, and answers the per-candidate questions of the later
stages (BM25 and idf of a few chunks, their vectors, recency, visibility) with one query each.
Nothing here scales with the corpus in memory except the graph, which is loaded once per graph
state and only when a query walks it (PageRank, expansion, feature reranking:
:meth:`clew.backends.postgres.graph.PgGraph.index`).
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from clew.cache import Lru
from clew.config import DenseConfig, GraphConfig, LexicalConfig
from clew.errors import FilterError
from clew.filters import Eq, Mask, Node, fields_of, filter_key
from clew.protocols import ChunkRow, Matrix, ScopeStats, Where
from clew.types import LegHit

if TYPE_CHECKING:
    from psycopg import sql

    from clew.backends.postgres.lexical import CorpusStats, Population
    from clew.backends.postgres.store import PostgresStore
    from clew.index.graph import GraphIndex, LinkedConcept

__all__ = ["ChunkKeys", "PgSnapshot", "SqlLegs", "SqlWhere"]

_KEYS_CACHED = 500_000
"""Chunk keys kept in memory per engine (ordinals are never reused, so they stay valid)."""


class ChunkKeys(Mapping[int, tuple[str, str]]):
    """Ordinal → (chunk id, content hash), read from the database on demand and cached.

    Fusion ties, dedup, paths and traces ask for the keys of the candidates only, so the engine
    calls :meth:`load` with the ordinals of each stage's lists first; a key asked for without
    that is fetched alone. A chunk the database no longer has (deleted since the snapshot) gets
    a placeholder; its row is gone too, so it never reaches the hits."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self._known: dict[int, tuple[str, str]] = {}
        self._lock = threading.Lock()

    def load(self, ordinals: Sequence[int]) -> None:
        with self._lock:
            todo = sorted({int(o) for o in ordinals} - self._known.keys())
        if not todo:
            return
        with self._store.connection() as conn:
            rows = conn.execute(
                "SELECT ordinal, chunk_id, content_hash FROM chunks WHERE ordinal = ANY(%s)",
                (todo,),
            ).fetchall()
        found = {int(o): (str(c), str(h)) for o, c, h in rows}
        for o in todo:
            found.setdefault(o, (f"#{o}", f"#{o}"))
        with self._lock:
            if len(self._known) + len(found) > _KEYS_CACHED:
                self._known.clear()
            self._known.update(found)

    def __getitem__(self, ordinal: int) -> tuple[str, str]:
        with self._lock:
            found = self._known.get(ordinal)
        if found is None:
            self.load([ordinal])
            with self._lock:
                found = self._known.get(ordinal, (f"#{ordinal}", f"#{ordinal}"))
        return found

    def __iter__(self) -> Iterator[int]:
        with self._lock:
            return iter(list(self._known))

    def __len__(self) -> int:
        return len(self._known)


class SqlLegs:
    """The three legs of a PostgreSQL store for one snapshot, run in the database with the
    filter compiled to one SQL predicate (:mod:`clew.backends.postgres.where`), and the
    per-candidate
    lookups of the later stages. Document frequencies and corpus statistics are cached for the
    snapshot's release."""

    def __init__(self, store: PostgresStore, release: int, dense: DenseConfig, graph: Any) -> None:
        from clew.backends.postgres.lexical import PgLexical
        from clew.backends.postgres.vector import PgVector

        self.store = store
        self.release = release
        self.lexical = PgLexical(store.connection, scoring="rescore", cache_df=True)
        # exact where the embedded leg is exact: small corpora and selective filters
        self.vector = PgVector(
            store.connection,
            ef_search=dense.ef_search,
            exact_max_allowed=max(dense.exact_max_allowed, dense.hnsw_min_chunks - 1),
        )
        self.scoped_exact = dense.scoped_exact
        """A scoped query scans its scope exactly (``dense.scoped_exact``)."""
        self.graph = graph
        """The engine's :class:`~clew.backends.postgres.graph.PgGraph` (shared across snapshots: its
        in-memory graph is keyed by the graph state, not the release)."""
        with store.connection() as conn:
            self.stats = PgLexical.corpus_stats(conn)
        self._fields: dict[str, tuple[bool, set[str]]] = {}
        self._ordinals: dict[str, npt.NDArray[np.int64]] = {}
        self._shares: dict[str, float] = {}
        self._populations: dict[str, tuple[Population, CorpusStats]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def where(filter_node: Any, scope_node: Any, exclude_docs: Sequence[str] = ()) -> Any:
        from psycopg import sql

        from clew.backends.postgres.where import and_where, compile_filter

        parts = [compile_filter(filter_node), compile_filter(scope_node)]
        if exclude_docs:
            parts.append(sql.SQL("c.doc_id <> ALL({})").format(sql.Literal(list(exclude_docs))))
        return and_where(*parts)

    # -- filter fields ----------------------------------------------------------------------

    def check_fields(self, node: Node | None, scope: Node | None) -> None:
        """The strict half of :meth:`clew.filters.MetadataColumns.mask`: a filter field that no
        document has (no document in the caller's scope, for a scoped caller) is an error that
        names only fields of documents in scope; an empty scope makes every filter valid."""
        if node is None:
            return
        wanted = sorted(fields_of(node))
        anything, known = self._fields_in(scope, wanted)
        if not anything:
            return
        unknown = [f for f in wanted if f not in known]
        if not unknown:
            return
        from clew.filters import clip_text

        everything = sorted(self._fields_in(scope, None)[1])
        more = f" and {len(everything) - 50} more" if len(everything) > 50 else ""
        shown = [clip_text(f, 40) for f in unknown[:10]]
        raise FilterError(
            f"filter field(s) {shown}{' …' if len(unknown) > 10 else ''} appear in no "
            f"document; known fields: {', '.join(everything[:50]) or '(none)'}{more}"
        )

    def _fields_in(self, scope: Node | None, wanted: list[str] | None) -> tuple[bool, set[str]]:
        """(whether a scope is absent or holds a live chunk, which of ``wanted`` — all, for
        None — some document has: any document without a scope, as the embedded metadata
        columns count; one with a live chunk in scope otherwise). Cached for this release."""
        from psycopg import sql

        from clew.backends.postgres.where import compile_filter
        from clew.filters import to_json

        key = f"{to_json(scope)}\x00{wanted}"
        with self._lock:
            cached = self._fields.get(key)
        if cached is not None:
            return cached
        where = (
            sql.SQL("TRUE")
            if scope is None
            else sql.SQL(
                "{} AND EXISTS (SELECT 1 FROM chunks AS c WHERE c.doc_id = d.doc_id)"
            ).format(compile_filter(scope, alias="d"))
        )
        with self.store.connection() as conn:
            if wanted is None:
                rows = conn.execute(
                    sql.SQL(
                        "SELECT DISTINCT jsonb_object_keys(d.metadata) FROM documents AS d WHERE {}"
                    ).format(where)
                ).fetchall()
                found = {str(r[0]) for r in rows}
            else:
                found = set()
                for name in wanted:
                    row = conn.execute(
                        sql.SQL(
                            "SELECT EXISTS (SELECT 1 FROM documents AS d "
                            "WHERE d.metadata ? {} AND {})"
                        ).format(sql.Literal(name), where)
                    ).fetchone()
                    if row and row[0]:
                        found.add(name)
            anything = scope is None or bool(found)
            if not anything:
                row = conn.execute(
                    sql.SQL("SELECT EXISTS (SELECT 1 FROM documents AS d WHERE {})").format(where)
                ).fetchone()
                anything = bool(row and row[0])
        result = (anything, found)
        with self._lock:
            if len(self._fields) > 256:
                self._fields.clear()
            self._fields[key] = result
        return result

    # -- per-candidate lookups --------------------------------------------------------------

    def recency_of(
        self, ordinals: Sequence[int], memory_kind: str
    ) -> dict[int, tuple[float, bool]]:
        """(created_at as epoch seconds or NaN, whether a memory) of each given chunk."""
        from psycopg import sql

        from clew.backends.postgres.where import compile_filter

        wanted = sorted({int(o) for o in ordinals})
        if not wanted:
            return {}
        memory = compile_filter(Eq("kind", memory_kind))
        with self.store.connection() as conn:
            rows = conn.execute(
                sql.SQL(
                    "SELECT c.ordinal, c.created_at, {} FROM chunks AS c WHERE c.ordinal = ANY(%s)"
                ).format(memory),
                (wanted,),
            ).fetchall()
        return {
            int(o): (math.nan if t is None else float(t), bool(is_memory))
            for o, t, is_memory in rows
        }

    def visible(self, ordinals: Sequence[int], scope: Node | None) -> bool:
        """Whether every given chunk exists and passes the scope."""
        from psycopg import sql

        from clew.backends.postgres.where import compile_filter

        wanted = sorted({int(o) for o in ordinals})
        if scope is None or not wanted:
            return True
        with self.store.connection() as conn:
            row = conn.execute(
                sql.SQL("SELECT count(*) FROM chunks AS c WHERE c.ordinal = ANY(%s) AND {}").format(
                    compile_filter(scope)
                ),
                (wanted,),
            ).fetchone()
        return bool(row and int(row[0]) == len(wanted))

    def share(self, key: str, where: sql.Composable) -> float:
        """The share of live chunks ``where`` allows (one count per predicate and release;
        ``key`` names the predicate for the cache)."""
        from psycopg import sql

        with self._lock:
            cached = self._shares.get(key)
        if cached is not None:
            return cached
        with self.store.connection() as conn:
            row = conn.execute(
                sql.SQL("SELECT count(*) FROM chunks AS c WHERE {}").format(where)
            ).fetchone()
        out = (int(row[0]) if row else 0) / max(self.stats.n_docs, 1)
        with self._lock:
            if len(self._shares) >= 64:
                self._shares.pop(next(iter(self._shares)))
            self._shares[key] = out
        return out

    def ordinals(self, key: str, where: sql.Composable) -> npt.NDArray[np.int64]:
        """The ordinals ``where`` allows, ascending (one query per predicate and release;
        ``key`` names the predicate for the cache): the graph walks join them as a set."""
        from psycopg import sql

        with self._lock:
            cached = self._ordinals.get(key)
        if cached is not None:
            return cached
        with self.store.connection() as conn, conn.cursor(binary=True) as cur:
            rows = cur.execute(
                sql.SQL("SELECT c.ordinal FROM chunks AS c WHERE {} ORDER BY 1").format(where)
            )
            out = np.fromiter((r[0] for r in rows), dtype=np.int64)
        with self._lock:
            if len(self._ordinals) >= 16:
                self._ordinals.pop(next(iter(self._ordinals)))
            self._ordinals[key] = out
        return out

    def mask(self, key: str, where: sql.Composable, live: Mask) -> Mask:
        """The live chunks ``where`` allows, as a mask (for what walks the in-memory graph)."""
        ordinals = self.ordinals(key, where)
        out = np.zeros(len(live), dtype=bool)
        out[ordinals[ordinals < len(live)]] = True
        return out & live

    def population(self, key: str, where: sql.Composable) -> tuple[Population, CorpusStats]:
        """A caller's scope as the population of BM25's statistics, with its chunk count and
        total length (one scan per scope and release; ``key`` names the predicate)."""
        from clew.backends.postgres.lexical import PgLexical, Population

        with self._lock:
            cached = self._populations.get(key)
        if cached is not None:
            return cached
        with self.store.connection() as conn:
            stats = PgLexical.corpus_stats(conn, where)
        out = (Population(key, where), stats)
        with self._lock:
            if len(self._populations) >= 16:
                self._populations.pop(next(iter(self._populations)))
            self._populations[key] = out
        return out

    def idf(
        self, terms: Sequence[str], scoped: tuple[Population, CorpusStats] | None = None
    ) -> dict[str, float]:
        if scoped is not None:
            return self.lexical.idf(terms, scoped[1], scoped[0])
        return self.lexical.idf(terms, self.stats)

    def bm25_of(
        self,
        terms: Mapping[str, float],
        ordinals: Sequence[int],
        k1: float,
        b: float,
        scoped: tuple[Population, CorpusStats] | None = None,
    ) -> dict[int, float]:
        if scoped is not None:
            return self.lexical.scores_of(
                terms, ordinals, k1=k1, b=b, stats=scoped[1], within=scoped[0]
            )
        return self.lexical.scores_of(terms, ordinals, k1=k1, b=b, stats=self.stats)


@dataclass(frozen=True, slots=True)
class SqlWhere:
    """A compiled filter of the PostgreSQL backend: one SQL predicate over ``chunks AS c``,
    and the key that names it in the per-release caches of :class:`SqlLegs`."""

    key: str
    sql: Any
    filtered: bool
    scoped: bool = False


@dataclass(slots=True)
class PgSnapshot:
    """One release of a PostgreSQL index: the release and its live chunks; the legs run in the
    database (:class:`SqlLegs`), and no derived index is copied into memory except the graph,
    loaded by the graph leg when a query first walks it."""

    release: int
    live: Mask
    store: PostgresStore
    keys: ChunkKeys
    sql: SqlLegs
    _build: Callable[[str], Any]
    """Builds an in-memory lexical or vector index from the store (only if something asks)."""
    _lexical: Any = None
    _vector: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _memories: bool | None = None
    _stats: Lru[str, ScopeStats] = field(default_factory=lambda: Lru(16))
    _views: Lru[str, int] = field(default_factory=lambda: Lru(64))

    @property
    def graph_index(self) -> GraphIndex:
        """The graph leg's in-memory graph, loaded once per graph state."""
        return self.sql.graph.index()  # type: ignore[no-any-return]

    def _lazy(self, name: str) -> Any:
        with self._lock:
            current = getattr(self, "_" + name)
            if current is None:
                current = self._build(name)
                setattr(self, "_" + name, current)
            return current

    @property
    def lexical_index(self) -> Any:
        """An in-memory BM25 index built from the database on first use (the query path never
        asks for it)."""
        return self._lexical if self._lexical is not None else self._lazy("lexical")

    @property
    def vector_index(self) -> Any:
        """An in-memory vector index, as :attr:`lexical_index`."""
        return self._vector if self._vector is not None else self._lazy("vector")

    # -- the filter --------------------------------------------------------------------------

    def where(
        self, filter: Node | None, scope: Node | None, exclude_docs: Sequence[str] = ()
    ) -> SqlWhere:
        self.sql.check_fields(filter, scope)
        key = json.dumps([filter_key(filter), filter_key(scope), sorted(exclude_docs)])
        filtered = filter is not None or scope is not None or bool(exclude_docs)
        sql_where = self.sql.where(filter, scope, exclude_docs)
        return SqlWhere(key, sql_where, filtered, scope is not None)

    def mask(self, where: Where) -> Mask:
        assert isinstance(where, SqlWhere)
        if not where.filtered:
            return self.live
        return self.sql.mask(where.key, where.sql, self.live)

    def scope_stats(self, scope_json: str | None) -> ScopeStats | None:
        """As the embedded snapshot's, with the scope evaluated by the database."""
        if scope_json is None:
            return None
        cached = self._stats.get(scope_json)
        if cached is not None:
            return cached
        from clew.filters import parse_filter

        node = parse_filter(scope_json)
        key = json.dumps([None, scope_json, []])
        where = self.sql.where(None, node)
        population = self.sql.mask(key, where, self.live)
        pg = self.sql.population(key, where)
        stats = ScopeStats(population, self.graph_index.stats(population), pg)
        self._stats.put(scope_json, stats)
        return stats

    def view(self, scope_json: str | None) -> int:
        """As the embedded snapshot's: the newest release, up to this one, among the chunks the
        scope lets through and the tombstones of documents it let through (one query per scope
        and release)."""
        if scope_json is None:
            return self.release
        cached = self._views.get(scope_json)
        if cached is not None:
            return cached
        from psycopg import sql

        from clew.filters import parse_filter

        where = self.sql.where(None, parse_filter(scope_json))
        query = sql.SQL(
            "SELECT GREATEST("
            "(SELECT max(c.release) FROM chunks AS c WHERE c.release <= {r} AND {w}), "
            "(SELECT max(c.release) FROM removed AS c WHERE c.release <= {r} AND {w}))"
        ).format(r=sql.Literal(self.release), w=where)
        with self.store.connection() as conn:
            row = conn.execute(query).fetchone()
        view = int(row[0]) if row is not None and row[0] is not None else 0
        self._views.put(scope_json, view)
        return view

    # -- the legs ----------------------------------------------------------------------------

    def _in_release(self, hits: list[LegHit]) -> list[LegHit]:
        live = self.live
        return [h for h in hits if h.ordinal < len(live) and live[h.ordinal]]

    def link(
        self, query: str, cfg: GraphConfig, where: Where, stats: ScopeStats | None
    ) -> list[LinkedConcept]:
        assert isinstance(where, SqlWhere)
        if stats is not None:
            # a scoped caller's graph numbers come from the in-memory graph over its scope
            g = self.graph_index
            linked = g.link(query, fuzzy=cfg.fuzzy, word_weight=cfg.word_weight, stats=stats.graph)
            return g.within(linked, self.sql.mask(where.key, where.sql, self.live))
        linked = self.sql.graph.link(query, fuzzy=cfg.fuzzy, word_weight=cfg.word_weight)
        if where.filtered:
            linked = self.sql.graph.within(linked, where.sql)
        return linked  # type: ignore[no-any-return]

    def lexical(
        self, terms: Mapping[str, float], where: Where, cfg: LexicalConfig, stats: ScopeStats | None
    ) -> list[LegHit]:
        assert isinstance(where, SqlWhere)
        sl = self.sql
        return self._in_release(
            sl.lexical.search(
                terms,
                where.sql,
                cfg.depth,
                k1=cfg.k1,
                b=cfg.b,
                stats=sl.stats if stats is None else stats.sql[1],
                allowed_share=sl.share(where.key, where.sql) if where.filtered else None,
                within=None if stats is None else stats.sql[0],
            )
        )

    def dense(self, vector: Matrix, where: Where, k: int) -> list[LegHit]:
        assert isinstance(where, SqlWhere)
        exact = True if where.scoped and self.sql.scoped_exact else None
        return self._in_release(self.sql.vector.search(vector, where.sql, k, exact=exact))

    def graph(
        self,
        query: str,
        where: Where,
        cfg: GraphConfig,
        linked: Sequence[LinkedConcept],
        stats: ScopeStats | None,
    ) -> list[LegHit]:
        assert isinstance(where, SqlWhere)
        if stats is not None:
            in_scope = self.sql.mask(where.key, where.sql, self.live)
            return self._in_release(
                self.graph_index.search(
                    query, in_scope, cfg.depth, cfg, list(linked), stats=stats.graph
                )
            )
        sl = self.sql
        return self._in_release(
            sl.graph.search(
                query,
                where.sql,
                cfg.depth,
                cfg,
                linked,
                allowed=sl.ordinals(where.key, where.sql) if where.filtered else None,
            )
        )

    # -- what later stages read ---------------------------------------------------------------

    def load_keys(self, ordinals: Iterable[int]) -> None:
        """Read the keys of these ordinals in one query."""
        self.keys.load(list(ordinals))

    def rows(self, ordinals: Sequence[int]) -> dict[int, ChunkRow]:
        return self.store.fetch(ordinals)

    def idf(self, terms: Sequence[str], stats: ScopeStats | None) -> dict[str, float]:
        return self.sql.idf(terms, None if stats is None else stats.sql)

    def cosines(self, ordinals: npt.NDArray[np.int64], vector: Matrix) -> npt.NDArray[np.float64]:
        cos = np.zeros(len(ordinals))
        vectors = self.sql.vector.vectors_of(ordinals.tolist())
        for i, o in enumerate(ordinals.tolist()):
            if o in vectors:
                cos[i] = float(vectors[o] @ vector)
        return cos

    def bm25(
        self,
        terms: Mapping[str, float],
        ordinals: npt.NDArray[np.int64],
        cfg: LexicalConfig,
        stats: ScopeStats | None,
    ) -> npt.NDArray[np.float64]:
        scores = self.sql.bm25_of(
            terms, ordinals.tolist(), cfg.k1, cfg.b, None if stats is None else stats.sql
        )
        # rounded to float32, as the embedded index keeps its scores
        bm25 = np.asarray([scores.get(o, 0.0) for o in ordinals.tolist()], dtype=np.float32)
        return bm25.astype(np.float64)

    def vectors(self, ordinals: Sequence[int]) -> dict[int, Matrix]:
        return self.sql.vector.vectors_of(list(ordinals))

    def created(
        self, ordinals: Sequence[int], memories: bool
    ) -> Mapping[int, tuple[float, bool]] | None:
        from clew.memory import MEMORY_KIND

        return self.sql.recency_of(ordinals, MEMORY_KIND)

    def has_memories(self) -> bool:
        if self._memories is None:
            from clew.memory import MEMORY_SOURCE

            self._memories = self.store.has_source(MEMORY_SOURCE)
        return self._memories

    def visible(self, ordinals: Sequence[int], scope: Node | None) -> bool:
        live = self.live
        alive = all(0 <= o < len(live) and bool(live[o]) for o in ordinals)
        return alive and self.sql.visible(ordinals, scope)

    def uses_hnsw(self, dense: DenseConfig) -> bool:
        return bool(self.live.sum() >= dense.hnsw_min_chunks)
