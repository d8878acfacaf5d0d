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

import math
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from clew.config import DenseConfig
from clew.errors import FilterError
from clew.filters import Eq, Mask, Node, fields_of

if TYPE_CHECKING:
    from psycopg import sql

    from clew.backends.postgres.legs import CorpusStats, Population
    from clew.backends.postgres.store import PostgresStore

__all__ = ["ChunkKeys", "SqlLegs"]

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
        from clew.backends.postgres.legs import PgLexical, PgVector

        self.store = store
        self.release = release
        self.lexical = PgLexical(store.connection, scoring="rescore", cache_df=True)
        # exact where the embedded leg is exact: small corpora and selective filters
        self.vector = PgVector(
            store.connection,
            ef_search=dense.ef_search,
            exact_max_allowed=max(dense.exact_max_allowed, dense.hnsw_min_chunks - 1),
        )
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
        from clew.filters import _clip

        everything = sorted(self._fields_in(scope, None)[1])
        more = f" and {len(everything) - 50} more" if len(everything) > 50 else ""
        shown = [_clip(f, 40) for f in unknown[:10]]
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
        from clew.backends.postgres.legs import PgLexical, Population

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
