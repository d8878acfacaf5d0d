"""The lexical leg in PostgreSQL: BM25 through pg_search.

It takes the access filter as a compiled predicate over ``chunks AS c``
(:func:`clew.backends.postgres.where.compile_filter`) and applies it inside the query, before
the top-k, so a hidden chunk never enters a candidate list, like the embedded leg's mask (the
dense leg does the same: :mod:`clew.backends.postgres.vector`).

BM25 parameters. pg_search 0.21 scores with tantivy's fixed ``k1 = 1.2, b = 0.75`` and
one-byte quantized field lengths; its index options accept no ``k1``/``b`` (unknown keys are
silently ignored; per-field ``k1``/``b`` arrived in pg_search 0.23). So :class:`PgLexical` has
three scorings:

- ``"rescore"`` (what the engine uses): pg_search's own BM25 (block-max WAND, each query term
  boosted by its query weight) picks the top ``max(rescore_factor × k, rescore_min)`` allowed
  chunks, and the BM25 of the embedded index (the engine's ``k1``/``b``, exact lengths, query
  term weights, document frequencies from pg_search counts) re-ranks them in SQL. The result is
  the exact ranking whenever the engine's top ``k`` lies inside tantivy's top candidates, which
  the two BM25 variants make nearly certain: ``bench/pg_legs.py`` measures it (identical top-50
  on SciFact and on 100k synthetic chunks at the defaults). Cost grows with the candidate count,
  not the corpus. pg_search evaluates a PostgreSQL predicate beside ``@@@`` row by row, which is
  slow for a filter that keeps many rows; given the share the filter allows, the candidates are
  the top ``pool / share`` of all matches filtered afterwards, the same chunks whenever enough
  pass (else the filter goes to pg_search after all).
- ``"exact"``: pg_search finds every allowed chunk holding a query term, and the embedded
  index's BM25 is computed in SQL from the tokens of all of them. Same scores as
  :class:`clew.backends.embedded.lexical.BM25Index` up to float rounding, always; cost grows with
  the number
  of allowed chunks that hold any query term (seconds at 100k chunks for common terms).
- ``"native"``: ``paradedb.score`` with per-term boosts, tantivy's top-k. Fastest, but
  ``k1``/``b`` are tantivy's, not the engine's (``bench/pg_legs.py`` measures the overlap).

Corpus size and mean length come from :meth:`PgLexical.corpus_stats` (pass them in, cached per
release, to save a scan of ``chunks`` per query); document frequencies are cached per instance
with ``cache_df`` (one instance per release).
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import psycopg
from psycopg import sql

from clew.backends.postgres.store import Connect
from clew.index import bm25
from clew.types import LegHit

Scoring = Literal["exact", "native", "rescore"]


@dataclass(frozen=True, slots=True)
class Population:
    """The chunks BM25's statistics are computed over when not the whole table: a caller's
    scope as one SQL predicate over ``chunks AS c``, and a key naming it for caches."""

    key: str
    where: sql.Composable


def _one(conn: psycopg.Connection[Any], query: sql.Composed) -> int:
    row = conn.execute(query).fetchone()
    return int(row[0]) if row else 0


@dataclass(frozen=True, slots=True)
class CorpusStats:
    """BM25's corpus statistics: how many chunks, and their total length in tokens."""

    n_docs: int
    total_len: float

    @property
    def avgdl(self) -> float:
        return bm25.average_length(self.total_len, self.n_docs)


_TERMS = sql.SQL("(SELECT array_agg(paradedb.term('tokens', t)) FROM unnest({}::text[]) AS u(t))")

_BM25 = """
SELECT cand.ordinal,
       sum(q.iw * m.tf * ({k1} + 1.0)
           / (m.tf + {k1} * (1.0 - {b} + {b} * cardinality(cand.toks) / {avgdl}))) AS score
FROM cand
CROSS JOIN LATERAL (
    SELECT x.term, count(*)::float8 AS tf FROM unnest(cand.toks) AS x(term)
    WHERE x.term = ANY({terms}::text[]) GROUP BY x.term
) AS m
JOIN q ON q.term = m.term
GROUP BY cand.ordinal
ORDER BY score DESC, cand.ordinal
LIMIT {k}
"""
"""The engine's BM25 of the chunks in ``cand`` (ordinal, tokens as an array): the per-term
score of :func:`clew.index.bm25.term_score` (saturation over the length norm) spelled out in SQL,
with ``q.iw`` the query weight times :func:`clew.index.bm25.idf`, computed in Python."""

_EXACT = (
    """
WITH q AS (SELECT * FROM unnest({terms}::text[], {iw}::float8[]) AS q(term, iw)),
cand AS MATERIALIZED (
    SELECT c.ordinal, string_to_array(c.tokens, ' ') AS toks
    FROM chunks AS c
    WHERE c.tokens @@@ paradedb.term_set(terms => {match}) AND ({where})
)"""
    + _BM25
)

_RESCORE = (
    """
WITH q AS (SELECT * FROM unnest({terms}::text[], {iw}::float8[]) AS q(term, iw)),
top AS MATERIALIZED ({top}),
cand AS MATERIALIZED (
    SELECT c.ordinal, string_to_array(c.tokens, ' ') AS toks
    FROM top JOIN chunks AS c ON c.ordinal = top.ordinal
)"""
    + _BM25
)

_NATIVE_MATCH = """
c.ordinal @@@ paradedb.boolean(should => (
    SELECT array_agg(paradedb.boost(u.w::real, paradedb.term('tokens', u.t)))
    FROM unnest({terms}::text[], {weights}::float8[]) AS u(t, w)))
"""

_NATIVE = """
SELECT c.ordinal, paradedb.score(c.ordinal) AS score
FROM chunks AS c
WHERE {match} AND ({where})
ORDER BY score DESC, c.ordinal
LIMIT {k}
"""

_NATIVE_OUTSIDE = """
WITH m AS MATERIALIZED (
    SELECT c.ordinal, paradedb.score(c.ordinal) AS score FROM chunks AS c WHERE {match}
)
SELECT m.ordinal, m.score FROM m JOIN chunks AS c ON c.ordinal = m.ordinal
WHERE ({where})
ORDER BY m.score DESC, m.ordinal
LIMIT {k}
"""


class PgLexical:
    """BM25 over ``chunks.tokens`` with the filter inside the query (see the module doc).

    ``cache_df``: keep each term's document frequency once counted. Only for an instance that
    lives for one release (the engine makes one per snapshot): frequencies change with writes."""

    def __init__(
        self,
        connect: Connect,
        *,
        scoring: Scoring = "exact",
        cache_df: bool = False,
        rescore_factor: int = 6,
        rescore_min: int = 300,
    ) -> None:
        if scoring not in ("exact", "native", "rescore"):
            raise ValueError(
                f"scoring={scoring!r} is invalid; allowed: 'exact', 'native', 'rescore'"
            )
        if rescore_factor < 1 or rescore_min < 1:
            raise ValueError(
                f"rescore_factor={rescore_factor!r}, rescore_min={rescore_min!r} are invalid; "
                "allowed: at least 1 each"
            )
        self.connect = connect
        self.scoring = scoring
        self.rescore_factor = rescore_factor
        self.rescore_min = rescore_min
        self._df: dict[str, int] | None = {} if cache_df else None
        self._df_lock = threading.Lock()

    def doc_freqs(
        self,
        conn: psycopg.Connection[Any],
        terms: Sequence[str],
        within: Population | None = None,
    ) -> dict[str, int]:
        """How many chunks hold each term (one pg_search count per term not cached yet);
        ``within``: only chunks of that population (a caller's scope) count."""
        cache = self._df
        prefix = "" if within is None else within.key + "\x00"
        if cache is not None:
            with self._df_lock:
                known = {t: cache[prefix + t] for t in terms if prefix + t in cache}
        else:
            known = {}
        todo = [t for t in dict.fromkeys(terms) if t not in known]
        if todo:
            if within is None:
                rows = conn.execute(
                    "SELECT u.t, (SELECT count(*) FROM chunks AS c "
                    "WHERE c.tokens @@@ paradedb.term('tokens', u.t)) "
                    "FROM unnest(%s::text[]) AS u(t)",
                    (todo,),
                ).fetchall()
            else:
                # the matches first (pg_search plans only simple predicates beside @@@)
                rows = [
                    (
                        t,
                        _one(
                            conn,
                            sql.SQL(
                                "WITH m AS MATERIALIZED (SELECT c.ordinal FROM chunks AS c "
                                "WHERE c.tokens @@@ paradedb.term('tokens', {})) "
                                "SELECT count(*) FROM m JOIN chunks AS c ON c.ordinal = m.ordinal "
                                "WHERE ({})"
                            ).format(sql.Literal(t), within.where),
                        ),
                    )
                    for t in todo
                ]
            found = {str(t): int(n) for t, n in rows}
            if cache is not None:
                with self._df_lock:
                    if len(cache) > 100_000:
                        cache.clear()
                    cache.update({prefix + t: n for t, n in found.items()})
            known.update(found)
        return known

    def idf(
        self, terms: Sequence[str], stats: CorpusStats, within: Population | None = None
    ) -> dict[str, float]:
        """BM25 idf of each term, as :meth:`clew.backends.embedded.lexical.BM25Index.idf` (df 0:
        highest);
        ``within`` as in :meth:`doc_freqs` (then ``stats`` are that population's)."""
        usable = [t for t in terms if t and "\x00" not in t]
        with self.connect() as conn:
            df = self.doc_freqs(conn, usable, within)
        n = stats.n_docs
        return {t: bm25.idf(n, df.get(t, 0)) for t in terms}

    def scores_of(
        self,
        terms: Mapping[str, float],
        ordinals: Sequence[int],
        *,
        k1: float = 0.9,
        b: float = 0.4,
        stats: CorpusStats,
        within: Population | None = None,
    ) -> dict[int, float]:
        """BM25 of the given chunks (0 for one without a query term; absent: no such chunk);
        ``within`` as in :meth:`doc_freqs`."""
        weighted = {t: float(w) for t, w in terms.items() if w > 0 and t and "\x00" not in t}
        wanted = sorted({int(o) for o in ordinals})
        if not wanted:
            return {}
        with self.connect() as conn:
            rows = conn.execute(
                "SELECT ordinal, tokens FROM chunks WHERE ordinal = ANY(%s)", (wanted,)
            ).fetchall()
            df = self.doc_freqs(conn, list(weighted), within) if weighted else {}
        n, avgdl = stats.n_docs, max(stats.avgdl, 1e-9)
        idf = {t: bm25.idf(n, df[t]) for t in weighted if df.get(t, 0) > 0}
        out: dict[int, float] = {}
        for ordinal, text in rows:
            toks = text.split()
            tf = Counter(t for t in toks if t in idf)
            norm = bm25.length_norm(len(toks), avgdl, k1, b)
            out[int(ordinal)] = float(
                sum(bm25.term_score(idf[t], weighted[t], f, norm, k1) for t, f in tf.items())
            )
        return out

    @staticmethod
    def corpus_stats(
        conn: psycopg.Connection[Any], within: sql.Composable | None = None
    ) -> CorpusStats:
        """Chunk count and total token count (one scan of ``chunks``; cache it per release);
        ``within``: of the chunks that predicate allows only."""
        row = conn.execute(
            sql.SQL(
                "SELECT count(*), coalesce(sum(CASE WHEN c.tokens = '' THEN 0 ELSE "
                "length(c.tokens) - length(replace(c.tokens, ' ', '')) + 1 END), 0) "
                "FROM chunks AS c WHERE {}"
            ).format(sql.SQL("TRUE") if within is None else within)
        ).fetchone()
        assert row is not None
        return CorpusStats(int(row[0]), float(row[1]))

    def search(
        self,
        terms: Mapping[str, float],
        where: sql.Composable,
        k: int,
        *,
        k1: float = 0.9,
        b: float = 0.4,
        stats: CorpusStats | None = None,
        allowed_share: float | None = None,
        within: Population | None = None,
    ) -> list[LegHit]:
        """Top-k chunks by BM25 among those ``where`` allows (score desc, ordinal asc).

        ``terms``: query term → weight (:func:`clew.ingest.analyze.query_terms`); ``k1``/``b``
        apply to the exact and rescore scorings (native scoring is tantivy's 1.2/0.75).
        ``allowed_share``: the share of chunks ``where`` allows, when known (rescore uses it to
        find the candidates without handing a broad filter to pg_search). ``within``: the
        population whose statistics BM25 uses (a caller's scope; ``stats`` must be its)."""
        weighted = {t: float(w) for t, w in terms.items() if w > 0 and t and "\x00" not in t}
        if not weighted or k <= 0:
            return []
        with self.connect() as conn:
            if self.scoring == "native":
                return self._native(conn, weighted, where, k)
            return self._exact(conn, weighted, where, k, k1, b, stats, allowed_share, within)

    def _native(
        self, conn: psycopg.Connection[Any], weighted: dict[str, float], where: Any, k: int
    ) -> list[LegHit]:
        words = list(weighted)
        match = sql.SQL(_NATIVE_MATCH).format(
            terms=sql.Literal(words), weights=sql.Literal([weighted[t] for t in words])
        )
        rows = _with_fallback(
            conn, lambda top: top, {"match": match, "where": where, "k": sql.Literal(int(k))}
        )
        return [LegHit(int(o), float(s)) for o, s in rows]

    def _exact(
        self,
        conn: psycopg.Connection[Any],
        weighted: dict[str, float],
        where: sql.Composable,
        k: int,
        k1: float,
        b: float,
        stats: CorpusStats | None,
        allowed_share: float | None = None,
        within: Population | None = None,
    ) -> list[LegHit]:
        words = list(weighted)
        matches = self.doc_freqs(conn, words)
        df = matches if within is None else self.doc_freqs(conn, words, within)
        present = [t for t in words if df.get(t, 0) > 0]
        if not present:
            return []
        if stats is None:
            stats = self.corpus_stats(conn, None if within is None else within.where)
        n = stats.n_docs
        iw = [weighted[t] * bm25.idf(n, df[t]) for t in present]
        query = sql.SQL(_EXACT).format(
            terms=sql.Literal(present),
            iw=sql.Literal(iw),
            match=_TERMS.format(sql.Literal(present)),
            where=where,
            k1=sql.Literal(float(k1)),
            b=sql.Literal(float(b)),
            avgdl=sql.Literal(max(stats.avgdl, 1e-9)),
            k=sql.Literal(int(k)),
        )
        if self.scoring == "exact":
            rows = conn.execute(query).fetchall()
        else:
            pool = max(self.rescore_factor * k, self.rescore_min)
            match = sql.SQL(_NATIVE_MATCH).format(
                terms=sql.Literal(present), weights=sql.Literal([weighted[t] for t in present])
            )

            def rescore(top: sql.Composed) -> sql.Composed:
                return sql.SQL(_RESCORE).format(
                    terms=sql.Literal(present),
                    iw=sql.Literal(iw),
                    top=top,
                    k1=sql.Literal(float(k1)),
                    b=sql.Literal(float(b)),
                    avgdl=sql.Literal(max(stats.avgdl, 1e-9)),
                    k=sql.Literal(int(k)),
                )

            total = sum(matches.get(t, 0) for t in present)
            top = self._oversampled(conn, match, where, pool, allowed_share, total)
            if top is not None:
                rows = conn.execute(rescore(top)).fetchall()
            else:
                rows = _with_fallback(
                    conn, rescore, {"match": match, "where": where, "k": sql.Literal(pool)}
                )
        return [LegHit(int(o), float(s)) for o, s in rows if s > 0]

    @staticmethod
    def _oversampled(
        conn: psycopg.Connection[Any],
        match: sql.Composable,
        where: sql.Composable,
        pool: int,
        share: float | None,
        matches: int,
    ) -> sql.Composed | None:
        """Tantivy's top ``pool`` allowed matches, found without handing the filter to
        pg_search (which evaluates a PostgreSQL predicate row by row, slow for a filter that
        keeps many rows): the top ``pool / share`` of all matches, filtered afterwards. That
        gives exactly the same chunks whenever at least ``pool`` of them pass the filter or
        the oversampled top held every match; otherwise None (the caller hands the filter to
        pg_search). ``share``: the share of chunks the filter allows (None: no filter)."""
        if share is None or share <= 0.02:
            return None  # no filter, or one so selective that pg_search's own way is cheaper
        n = min(math.ceil(1.5 * pool / share), 50_000)
        query = sql.SQL(
            "SELECT t.ordinal FROM ({top}) AS t JOIN chunks AS c ON c.ordinal = t.ordinal "
            "WHERE ({where}) ORDER BY t.score DESC, t.ordinal LIMIT {pool}"
        ).format(
            top=sql.SQL(_NATIVE).format(match=match, where=sql.SQL("TRUE"), k=sql.Literal(n)),
            where=where,
            pool=sql.Literal(pool),
        )
        try:
            with conn.transaction():
                found = [int(r[0]) for r in conn.execute(query).fetchall()]
        except psycopg.errors.InternalError_:
            return None
        if len(found) < pool and n < matches:
            return None  # too few passed and the top did not hold every match
        return sql.SQL("SELECT unnest({}::bigint[]) AS ordinal").format(sql.Literal(found))


def _with_fallback(
    conn: psycopg.Connection[Any],
    wrap: Callable[[sql.Composed], sql.Composed],
    args: dict[str, sql.Composable],
) -> list[tuple[Any, ...]]:
    """Run ``wrap(top)``, where ``top`` is tantivy's top ``k`` allowed matches (ordinal,
    score). pg_search 0.21 plans only simple predicates beside ``@@@`` (COALESCE, CASE, IS TRUE,
    sublinks, regexes fail with "Unsupported query shape"): for such a filter the top is taken
    with the filter outside the search, over every match (slower, same result)."""
    try:
        with conn.transaction():
            return conn.execute(wrap(sql.SQL(_NATIVE).format(**args))).fetchall()
    except psycopg.errors.InternalError_ as exc:
        if "Unsupported query shape" not in str(exc):
            raise
    return conn.execute(wrap(sql.SQL(_NATIVE_OUTSIDE).format(**args))).fetchall()
