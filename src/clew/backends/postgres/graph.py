"""The graph leg over PostgreSQL: the same concepts, hops, scores and trails as
:class:`clew.index.graph.GraphIndex`, computed in the database.

Tables (:mod:`clew.backends.postgres.schema`): ``concepts``, ``mentions`` (chunk ↔ concept edges,
weight
``1 + ln(count)``), ``chunks`` (the access filter is a predicate over ``chunks`` aliased ``c``)
and, for PageRank only, ``links``.

Per query, in SQL:

- ``link``: one round trip looks up every candidate key (identifiers, then word n-grams as
  identifier and as phrase keys) with its document frequency and the live chunk count; a second
  one, only when some one- or two-word n-gram of five or more characters matched nothing, fetches
  the fuzzy candidates. A key within one edit of ``q`` either starts with ``q``'s first half,
  ends with its second half, or is ``q`` with the two middle characters swapped; the database
  filters on that in one scan of ``concepts`` (no index helps: pg_trgm is not assumed), Python
  confirms the edit distance.
- ``search``: one statement walks seeds → MENTIONS → allowed chunks (hop 1) → MENTIONS →
  RELATED_TO concepts (co-occurrence in those allowed chunks, hubs and singletons dropped,
  strongest ``related_per_concept × len(linked)`` kept, scaled to the strongest seed) → MENTIONS
  → allowed chunks (hop 2), with the filter applied at every chunk the walk reaches, so a hidden
  chunk neither comes back nor creates the edge that leads to a visible one. The two hops are
  fixed, and each needs aggregates (sum, max, top-n) that a recursive CTE cannot hold in its
  recursive term, so they are plain CTEs. Each sum adds its terms in the order of the embedded
  index's sparse products, so scores (and ties, and the related-concept cut) are the same to
  the last bit. A second statement fetches the trail concepts of the final hits.

PageRank (the embedded leg multiplies scores by ``1 + pagerank_weight × rank``) is global and
iterative and the schema has no column for it: it is computed here once per graph state (the
same code as the embedded index, from one read of the graph tables into a
:class:`~clew.index.graph.GraphIndex`, kept in memory and shared with what walks the graph per
query: expansion and the feature reranker, :meth:`PgGraph.index`). The
database returns only the chunks whose hop score could still reach the top ``k`` after that
boost (``score × (1 + w) ≥ k-th score``), so the ranking is exact without reading every hit.
The graph state is recognized by (live chunks, max ordinal, max concept id, concepts, links);
:meth:`PgGraph.refresh` drops the cached state explicitly. The first query after a write pays
for the recomputation (about a third of a second at 100k mentions).

The mention index carries the count (``mentions_concept`` on ``(concept_id, ordinal) INCLUDE
(count)``, migration 3), so each hop reads a concept's mentions from the index alone (half the
time at 100k chunks, once the table is vacuumed: :meth:`PostgresStore.vacuum` runs after a bulk
load, autovacuum otherwise).

Document links enter the leg only through PageRank, as in the embedded index.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg import sql

from clew.backends.postgres.store import Connect
from clew.config import GraphConfig
from clew.index.graph import (
    GraphIndex,
    LinkedConcept,
    edit_distance_le1,
    fuzzy_linkable,
    gram_keys,
)
from clew.ingest.analyze import STOP_WORDS, concept_key, words
from clew.ingest.concepts import find_identifiers
from clew.protocols import GraphRows
from clew.types import GraphTrail, LegHit

__all__ = ["PgGraph"]

Where = sql.Composable | None

_WEIGHT = "(1.0::float8 + ln(greatest(m.count, 1)::float8))"
"""A MENTIONS edge's weight, as the embedded index stores it."""

_STATE = """
    SELECT (SELECT count(*) FROM chunks) AS n_chunks,
           (SELECT coalesce(max(ordinal), 0) FROM chunks) AS max_ordinal,
           (SELECT coalesce(max(concept_id), 0) FROM concepts) AS max_concept,
           (SELECT count(*) FROM concepts) AS n_concepts,
           (SELECT count(*) FROM links) AS n_links
"""

_LOOKUP = sql.SQL(
    """
    WITH st AS ({state})
    SELECT st.n_chunks, st.max_ordinal, st.max_concept, st.n_concepts, st.n_links,
           k.concept_id, k.key, k.label, k.kind,
           (SELECT count(*) FROM mentions m WHERE m.concept_id = k.concept_id) AS df
    FROM st LEFT JOIN concepts k ON k.key = ANY(%(keys)s::text[])
    """
).format(state=sql.SQL(_STATE))

_FUZZY = sql.SQL(
    """
    SELECT k.concept_id, k.key, k.label, k.kind,
           (SELECT count(*) FROM mentions m WHERE m.concept_id = k.concept_id) AS df
    FROM concepts k
    WHERE k.kind <> 'identifier'
      AND length(k.key) BETWEEN greatest(5, %(shortest)s - 1) AND %(longest)s + 1
      AND (k.key ^@ ANY(%(pre)s::text[])
           OR reverse(k.key) ^@ ANY(%(rsuf)s::text[])
           OR k.key = ANY(%(swap)s::text[]))
    """
)
"""Keys that may be one edit away from one of the query keys (Python checks which)."""

_WITHIN = sql.SQL(
    """
    SELECT s.key
    FROM unnest(%(keys)s::text[]) AS s(key)
    JOIN concepts k ON k.key = s.key
    WHERE EXISTS (
        SELECT 1 FROM mentions m JOIN chunks c ON c.ordinal = m.ordinal
        WHERE m.concept_id = k.concept_id AND ({where}))
    """
)

# Every sum adds its terms in the order the embedded index's sparse products do (seeds and
# related concepts by concept id, reached chunks by ordinal), so the floats come out the same,
# to the last bit, and so do ties among them.
_SEARCH = sql.SQL(
    """
    WITH st AS MATERIALIZED ({state}),
    seeds AS MATERIALIZED (
        SELECT k.concept_id, s.weight
        FROM unnest(%(keys)s::text[], %(weights)s::float8[]) AS s(key, weight)
        JOIN concepts k ON k.key = s.key
    ),
    hop1 AS MATERIALIZED (
        SELECT m.ordinal, sum(s.weight * {w} ORDER BY m.concept_id) AS score
        FROM seeds s
        JOIN mentions m ON m.concept_id = s.concept_id
        {join}
        WHERE ({where})
        GROUP BY m.ordinal
    ),
    related AS MATERIALIZED (
        SELECT m.concept_id, sum({w} * h.score ORDER BY h.ordinal) AS strength
        FROM hop1 h JOIN mentions m ON m.ordinal = h.ordinal
        WHERE %(two)s AND m.concept_id NOT IN (SELECT concept_id FROM seeds)
        GROUP BY m.concept_id
    ),
    limits AS MATERIALIZED (
        SELECT hub_limit, floor(hub_limit)::bigint + 1 AS cap
        FROM (SELECT greatest(20.0::float8, %(hub_fraction)s::float8 * greatest(st.n_chunks, 1))
                     AS hub_limit
              FROM st) AS x
    ),
    kept AS MATERIALIZED (
        -- strongest first; the document frequency (counted up to just past the hub limit) is
        -- taken row by row in that order until enough concepts pass, so hubs cost little
        SELECT r.concept_id, r.strength
        FROM (
            SELECT concept_id, strength
            FROM related
            WHERE strength > 0
            ORDER BY strength DESC, concept_id
        ) AS r
        CROSS JOIN limits AS l
        CROSS JOIN LATERAL (
            SELECT count(*) AS df
            FROM (SELECT 1 FROM mentions m2 WHERE m2.concept_id = r.concept_id LIMIT l.cap) AS x
        ) AS d
        WHERE d.df >= 2 AND d.df <= l.hub_limit
        LIMIT %(cut)s
    ),
    rel AS (
        SELECT concept_id, strength / max(strength) OVER () * %(seed_max)s::float8 AS weight
        FROM kept
    ),
    hop2 AS MATERIALIZED (
        SELECT m.ordinal, sum(r.weight * {w} ORDER BY m.concept_id) * %(penalty)s::float8 AS score
        FROM rel r
        JOIN mentions m ON m.concept_id = r.concept_id
        {join}
        WHERE ({where})
        GROUP BY m.ordinal
    ),
    scored AS MATERIALIZED (
        SELECT ordinal,
               greatest(coalesce(h1.score, 0), coalesce(h2.score, 0))
               + 0.1::float8 * least(coalesce(h1.score, 0), coalesce(h2.score, 0)) AS score
        FROM hop1 h1 FULL JOIN hop2 h2 USING (ordinal)
    ),
    kth AS (
        SELECT coalesce(min(score), 0) AS score
        FROM (SELECT score FROM scored WHERE score > 0 ORDER BY score DESC LIMIT %(k)s) AS t
    )
    SELECT st.n_chunks, st.max_ordinal, st.max_concept, st.n_concepts, st.n_links,
           (SELECT array_agg(concept_id) FROM seeds),
           (SELECT array_agg(concept_id) FROM kept),
           f.ordinals, f.scores
    FROM st, LATERAL (
        SELECT array_agg(s.ordinal ORDER BY s.ordinal) AS ordinals,
               array_agg(s.score ORDER BY s.ordinal) AS scores
        FROM scored s, kth
        WHERE s.score > 0 AND s.score * %(boost)s::float8 >= kth.score
    ) AS f
    """
)

_TRAILS = sql.SQL(
    """
    SELECT m.ordinal, k.key, m.concept_id = ANY(%(seeds)s::bigint[])
    FROM mentions m JOIN concepts k ON k.concept_id = m.concept_id
    WHERE m.ordinal = ANY(%(hits)s::bigint[])
      AND (m.concept_id = ANY(%(seeds)s::bigint[]) OR m.concept_id = ANY(%(kept)s::bigint[]))
    """
)


@dataclass
class _Cached:
    """What the leg keeps between queries, valid for one graph state."""

    state: tuple[int, ...] = ()
    max_words: int | None = None
    graph: GraphIndex | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class PgGraph:
    """The graph leg over a PostgreSQL index.

    ``connect()`` gives a connection (as a context manager) whose ``search_path`` is the index
    schema, then ``public``. ``where`` arguments are SQL predicates over ``chunks`` aliased ``c``
    (``None``: every live chunk).
    """

    def __init__(self, connect: Connect) -> None:
        self._connect = connect
        self._cache = _Cached()

    def refresh(self) -> None:
        """Forget the cached graph state (max words per key, PageRank): the next query reloads."""
        self._cache = _Cached()

    # -- linking ----------------------------------------------------------------------------

    def link(
        self, query: str, *, fuzzy: bool = True, word_weight: float = 1.0
    ) -> list[LinkedConcept]:
        """Concepts a query names, as :meth:`GraphIndex.link`: identifiers, then word n-grams
        (exact key, then one-edit fuzzy for non-identifiers), weighted by idf over chunks."""
        idents = [concept_key(s, identifier=True) for s in find_identifiers(query)]
        tokens = words(query)
        grams: list[tuple[int, tuple[str, ...], str, bool]] = []
        # (n, keys to try in order, phrase key, may link fuzzily)
        for n in range(min(len(tokens), 4), 0, -1):
            for i in range(len(tokens) - n + 1):
                gram = tokens[i : i + n]
                if n == 1 and gram[0] in STOP_WORDS:
                    continue
                raw = " ".join(gram)
                grams.append((n, gram_keys(raw), concept_key(raw), fuzzy_linkable(gram)))
        keys = sorted({*idents, *(k for g in grams for k in g[1])})
        with self._connect() as conn:
            rows = conn.execute(_LOOKUP, {"keys": keys}).fetchall()
            state = tuple(int(v) for v in rows[0][:5])
            max_words = self._max_words(conn, state)
            n_live = max(state[0], 1)
            by_key: dict[str, tuple[int, str, str, str, int]] = {}
            for row in rows:
                if row[5] is not None:
                    by_key[row[6]] = (int(row[5]), row[6], row[7], row[8], int(row[9]))

            found: dict[str, LinkedConcept] = {}

            def add(concept: tuple[int, str, str, str, int], how: str) -> None:
                cid, key, label, kind, df = concept
                if key in found or df == 0:
                    return
                weight = math.log(1.0 + n_live / float(df))
                if kind == "phrase" and " " not in key:
                    if word_weight <= 0:
                        return
                    weight *= word_weight
                found[key] = LinkedConcept(cid, key, label, how, weight, kind)

            for key in idents:
                if key in by_key:
                    add(by_key[key], "identifier")
            unmatched: list[str] = []
            for n, tried, phrase_key, linkable in grams:
                if n > max_words:
                    continue
                hit = next((by_key[k] for k in tried if k in by_key), None)
                if hit is not None:
                    add(hit, "exact")
                elif n <= 2 and linkable:
                    unmatched.append(phrase_key)
            todo = [q for q in unmatched if len(q) >= 5] if fuzzy else []
            if todo:
                candidates = self._fuzzy_candidates(conn, todo)
                for q in todo:
                    for concept in candidates:
                        if concept[3] == "identifier" or not fuzzy_linkable(concept[1].split()):
                            continue
                        if edit_distance_le1(q, concept[1]):
                            add(concept, "fuzzy")
        return sorted(found.values(), key=lambda c: (-c.weight, c.key))

    def _fuzzy_candidates(
        self, conn: psycopg.Connection[Any], keys: Sequence[str]
    ) -> list[tuple[int, str, str, str, int]]:
        qs = sorted(set(keys))
        mids = [len(q) // 2 for q in qs]
        pairs = list(zip(qs, mids, strict=True))
        params = {
            "shortest": min(len(q) for q in qs),
            "longest": max(len(q) for q in qs),
            "pre": [q[:m] for q, m in pairs],
            "rsuf": [q[m:][::-1] for q, m in pairs],
            "swap": [q[: m - 1] + q[m] + q[m - 1] + q[m + 1 :] for q, m in pairs],
        }
        rows = conn.execute(_FUZZY, params).fetchall()
        out = [(int(r[0]), r[1], r[2], r[3], int(r[4])) for r in rows]
        out.sort()  # concept id order, as the embedded index's rows
        return out

    def _max_words(self, conn: psycopg.Connection[Any], state: tuple[int, ...]) -> int:
        cache = self._cache
        with cache.lock:
            if cache.state != state:
                cache.state, cache.max_words, cache.graph = state, None, None
            if cache.max_words is None:
                row = conn.execute(
                    "SELECT coalesce(max(length(key) - length(replace(key, ' ', ''))), 0) + 1 "
                    "FROM concepts"
                ).fetchone()
                cache.max_words = max(1, int(row[0])) if row else 1
            return cache.max_words

    def within(self, linked: Sequence[LinkedConcept], where: Where) -> list[LinkedConcept]:
        """The linked concepts with at least one mention in a chunk that ``where`` allows."""
        if not linked:
            return []
        query = _WITHIN.format(where=_predicate(where))
        with self._connect() as conn:
            rows = conn.execute(query, {"keys": sorted({c.key for c in linked})}).fetchall()
        ok = {r[0] for r in rows}
        return [c for c in linked if c.key in ok]

    # -- the leg ----------------------------------------------------------------------------

    def search(
        self,
        query: str,
        where: Where,
        k: int,
        config: GraphConfig | None = None,
        linked: Sequence[LinkedConcept] | None = None,
        allowed: npt.ArrayLike | None = None,
    ) -> list[LegHit]:
        """The graph leg: top ``k`` chunks that ``where`` allows, as :meth:`GraphIndex.search`.

        ``allowed``: the ordinals ``where`` selects, when the caller has them (the engine reads
        them once per filter and release): the walk then joins them as a hashed set instead of
        evaluating the predicate on the chunk of every mention it reads (4x faster under a 10%
        filter at 100k chunks), with the same result."""
        config = config or GraphConfig()
        if linked is None:
            linked = self.link(query, fuzzy=config.fuzzy, word_weight=config.word_weight)
        if not linked or k <= 0:
            return []
        seeds: dict[str, float] = {}
        for c in linked:
            seeds[c.key] = c.weight
        pw = config.pagerank_weight
        params = {
            "keys": list(seeds),
            "weights": list(seeds.values()),
            "two": config.max_hops >= 2,
            "hub_fraction": config.hub_fraction,
            "cut": config.related_per_concept * len(linked),
            "seed_max": max(0.0, *seeds.values()),
            "penalty": config.hop_penalty,
            "k": k,
            # a chunk can gain at most the factor (1 + w) from PageRank; the margin keeps every
            # chunk whose float32 score could tie the k-th
            "boost": (1.0 + pw) * (1.0 + 1e-6),
        }
        if allowed is not None and where is not None:
            params["allowed"] = np.asarray(allowed, dtype=np.int64).tolist()
            join = "JOIN unnest(%(allowed)s::bigint[]) AS c(ordinal) ON c.ordinal = m.ordinal"
            where = None
        else:
            join = "" if where is None else "JOIN chunks c ON c.ordinal = m.ordinal"
        statement = _SEARCH.format(
            state=sql.SQL(_STATE), where=_predicate(where), w=sql.SQL(_WEIGHT), join=sql.SQL(join)
        )
        with self._connect() as conn:
            # never a prepared statement: after a few runs PostgreSQL may switch it to a generic
            # plan, which cannot see how many ordinals the allowed set holds and walks it in a
            # nested loop (seconds per query at 1M chunks)
            row = conn.execute(statement, params, prepare=False).fetchone()
            if row is None or not row[7]:
                return []
            state = tuple(int(v) for v in row[:5])
            seed_ids: list[int] = list(row[5] or [])
            kept_ids: list[int] = list(row[6] or [])
            ordinals = np.asarray(row[7], dtype=np.int64)
            scores = np.asarray(row[8], dtype=np.float64)
            if pw > 0:
                pr = self._pagerank(conn, state)
                boost = np.zeros(len(ordinals))
                inside = ordinals < len(pr)
                boost[inside] = pr[ordinals[inside]]
                scores = scores * (1.0 + pw * boost)
            f32 = scores.astype(np.float32)
            order = np.lexsort((ordinals, -f32))[:k]
            hits = [(int(ordinals[i]), float(f32[i])) for i in order if f32[i] > 0]
            trail_rows = conn.execute(
                _TRAILS,
                {"hits": [o for o, _ in hits], "seeds": seed_ids, "kept": kept_ids},
            ).fetchall()
        direct: dict[int, list[str]] = {}
        through: dict[int, list[str]] = {}
        for ordinal, key, is_seed in trail_rows:
            (direct if is_seed else through).setdefault(int(ordinal), []).append(key)
        linked_keys = tuple(sorted(c.key for c in linked))[:5]
        out = []
        for ordinal, score in hits:
            if ordinal in direct:
                trail = GraphTrail(concepts=tuple(sorted(direct[ordinal])), hops=1)
            else:
                via = tuple(sorted(through.get(ordinal, []))[:5])
                trail = GraphTrail(concepts=linked_keys, hops=2, via=via)
            out.append(LegHit(ordinal, score, trail))
        return out

    def _pagerank(
        self, conn: psycopg.Connection[Any], state: tuple[int, ...]
    ) -> npt.NDArray[np.float64]:
        """Chunk PageRank (scaled to [0, 1]) for this graph state, computed once per state."""
        return self._index(conn, state).pagerank_chunk

    def index(self) -> GraphIndex:
        """The whole graph in memory (as the embedded leg holds it), for what walks it per
        query: graph expansion, the feature reranker's signals, document layouts. Built from one
        read of the graph tables on first use and kept while the graph state stays the same;
        the graph leg builds it anyway for PageRank."""
        with self._connect() as conn:
            row = conn.execute(_STATE).fetchone()
            assert row is not None
            return self._index(conn, tuple(int(v) for v in row))

    def _index(self, conn: psycopg.Connection[Any], state: tuple[int, ...]) -> GraphIndex:
        cache = self._cache
        with cache.lock:
            if cache.state != state:
                cache.state, cache.max_words, cache.graph = state, None, None
            if cache.graph is None:
                rows = GraphRows(
                    concepts=conn.execute(
                        "SELECT concept_id, key, label, kind FROM concepts ORDER BY concept_id"
                    ).fetchall(),
                    mentions=conn.execute(
                        "SELECT ordinal, concept_id, count, kind FROM mentions "
                        "ORDER BY ordinal, concept_id"
                    ).fetchall(),
                    chunks=conn.execute(
                        "SELECT ordinal, doc_id, seq FROM chunks ORDER BY ordinal"
                    ).fetchall(),
                    links=conn.execute(
                        "SELECT doc_id, target FROM links ORDER BY doc_id, target"
                    ).fetchall(),
                    titles=conn.execute(
                        "SELECT doc_id, title FROM documents ORDER BY doc_id"
                    ).fetchall(),
                )
                size = max((int(r[0]) for r in rows.chunks), default=-1) + 1
                cache.graph = GraphIndex.build(rows, size, -1)
            return cache.graph


def _predicate(where: Where) -> sql.Composable:
    return sql.SQL("TRUE") if where is None else where
