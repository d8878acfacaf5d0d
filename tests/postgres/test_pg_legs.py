"""The PostgreSQL legs: conformance with the embedded legs, filters inside, HNSW recall."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

from clew.backends.embedded.lexical import BM25Index
from clew.backends.postgres.lexical import PgLexical
from clew.backends.postgres.schema import MIGRATIONS, dimension_ddl
from clew.backends.postgres.store import Connect
from clew.backends.postgres.vector import PgVector
from clew.backends.postgres.where import TRUE, compile_filter
from clew.filters import parse_filter
from clew.ingest.analyze import analyze
from clew.testing.conformance import check_lexical_search, check_vector_search

Row = tuple[int, Sequence[str], Sequence[float], dict[str, Any]]


def make_schema(url: str, schema: str, dim: int) -> psycopg.Connection[Any]:
    conn = psycopg.connect(url, autocommit=True)
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_search")
    conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    conn.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(schema)))
    conn.execute(MIGRATIONS[0])
    for stmt in dimension_ddl(dim):
        conn.execute(stmt)
    return conn


def load(conn: psycopg.Connection[Any], rows: Sequence[Row]) -> None:
    """One document per chunk, the chunk's ordinal as given."""
    with conn.transaction():
        with conn.cursor().copy(
            "COPY documents (doc_id, title, source, fmt, metadata, doc_hash, text, release) "
            "FROM STDIN"
        ) as cp:
            for o, _, _, md in rows:
                cp.write_row((f"d{o}", f"d{o}", f"d{o}", "text", Jsonb(md), "h", "", 1))
        with conn.cursor().copy(
            "COPY chunks (ordinal, chunk_id, doc_id, seq, text, content_hash, token_count, "
            "heading_path, start_char, end_char, tokens, embedding, metadata, release) "
            "FROM STDIN"
        ) as cp:
            for o, toks, vec, md in rows:
                emb = "[" + ",".join(repr(float(x)) for x in vec) + "]"
                text = " ".join(toks)
                row = (o, f"d{o}#0", f"d{o}", 0, text, "h", len(toks), "[]", 0, 1, text, emb)
                cp.write_row((*row, Jsonb(md), 1))


def connector(conn: psycopg.Connection[Any]) -> Connect:
    return lambda: contextlib.nullcontext(conn)


def allowed_where(allowed: Any) -> sql.Composable:
    ords = [int(i) for i in np.flatnonzero(allowed)]
    return sql.SQL("c.ordinal = ANY({}::bigint[])").format(sql.Literal(ords))


def opaque_where(allowed: Any) -> sql.Composable:
    """The same predicate, but not one pg_search pushes into tantivy (a pushed-down predicate
    on the key field adds a constant 1.0 to every native score)."""
    ords = [int(i) for i in np.flatnonzero(allowed)]
    return sql.SQL("c.ordinal + 0 = ANY({}::bigint[])").format(sql.Literal(ords))


@pytest.fixture
def schema_conn(pg_url: str, pg_schema: str) -> Iterator[Callable[[int], psycopg.Connection[Any]]]:
    opened: list[psycopg.Connection[Any]] = []

    def make(dim: int) -> psycopg.Connection[Any]:
        opened.append(make_schema(pg_url, pg_schema, dim))
        return opened[-1]

    yield make
    for c in opened:
        c.close()


TEXTS = [
    "pgbouncer pool exhausted",
    "ERR-4012 timeouts in gateway",
    "pool pool size",
    "retry storm after ERR-4012",
    "settlement cutoff hour",
    "gateway gateway gateway",
]


def test_lexical_conformance_exact(schema_conn: Callable[[int], Any]) -> None:
    conn = schema_conn(4)
    docs = {i * 2 + 1: analyze(t) for i, t in enumerate(TEXTS)}  # gaps in ordinals
    load(conn, [(o, toks, [1.0, 0, 0, 0], {}) for o, toks in docs.items()])
    leg = PgLexical(connector(conn))

    def search(query: Sequence[str], allowed: Any, k: int) -> list[Any]:
        return leg.search(Counter(query), allowed_where(allowed), k)

    check_lexical_search(search, docs)
    check_lexical_search(
        lambda q, m, k: leg.search(Counter(q), allowed_where(m), k, k1=1.2, b=0.75),
        docs,
        k1=1.2,
        b=0.75,
    )


def test_lexical_native_is_tantivy_bm25(schema_conn: Callable[[int], Any]) -> None:
    """Native scoring is BM25 with k1=1.2, b=0.75 (exact lengths for short chunks)."""
    conn = schema_conn(4)
    docs = {i * 2 + 1: analyze(t) for i, t in enumerate(TEXTS)}
    load(conn, [(o, toks, [1.0, 0, 0, 0], {}) for o, toks in docs.items()])
    leg = PgLexical(connector(conn), scoring="native")
    check_lexical_search(
        lambda q, m, k: leg.search(Counter(q), opaque_where(m), k), docs, k1=1.2, b=0.75
    )
    with pytest.raises(AssertionError):  # and not the engine's 0.9/0.4
        check_lexical_search(lambda q, m, k: leg.search(Counter(q), opaque_where(m), k), docs)


def test_vector_conformance(schema_conn: Callable[[int], Any]) -> None:
    conn = schema_conn(16)
    rng = np.random.default_rng(0)
    m = rng.normal(size=(300, 16)).astype(np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    load(conn, [(i, ["x"], m[i], {}) for i in range(300)])
    exact = PgVector(connector(conn))
    check_vector_search(lambda q, a, k: exact.search(q, allowed_where(a), k), m)
    hnsw = PgVector(connector(conn), ef_search=400, exact_max_allowed=0)
    check_vector_search(lambda q, a, k: hnsw.search(q, allowed_where(a), k), m)
    got = exact.search(m[3], TRUE, 1)
    assert got[0].ordinal == 3 and abs(got[0].score - 1.0) < 1e-5, "score is the inner product"


@pytest.fixture
def corpus(schema_conn: Callable[[int], Any]) -> tuple[psycopg.Connection[Any], Any, list[Row]]:
    """2000 chunks in 100 groups (a group filter keeps 1%), all holding the word ``common``."""
    conn = schema_conn(16)
    rng = np.random.default_rng(1)
    vocab = [f"w{i}" for i in range(300)]
    m = rng.normal(size=(2000, 16)).astype(np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    rows: list[Row] = []
    for i in range(2000):
        toks = ["common", *rng.choice(vocab, size=int(rng.integers(3, 30))).tolist()]
        rows.append((i + 1, toks, m[i], {"group": i % 100, "tags": [f"t{i % 7}"]}))
    load(conn, rows)
    return conn, m, rows


@pytest.mark.parametrize("spec", [{"group": 42}, {"group": {"lt": 5}}, {"tags": "t3"}])
def test_filter_inside_every_leg(corpus: Any, spec: Any) -> None:
    conn, m, rows = corpus
    where = compile_filter(parse_filter(spec))
    allowed = {
        o
        for o, _, _, md in rows
        if (md["group"] == 42 if "group" in spec and spec["group"] == 42 else True)
        and (md["group"] < 5 if spec.get("group") == {"lt": 5} else True)
        and ("t3" in md["tags"] if "tags" in spec else True)
    }
    k = 10
    legs: list[Callable[[], list[Any]]] = [
        lambda: PgLexical(connector(conn)).search({"common": 1.0, "w1": 1.0}, where, k),
        lambda: PgLexical(connector(conn), scoring="native").search({"common": 1.0}, where, k),
        lambda: PgVector(connector(conn)).search(m[0], where, k),
        lambda: PgVector(connector(conn), exact_max_allowed=0).search(m[0], where, k),
    ]
    for leg in legs:
        hits = leg()
        assert {h.ordinal for h in hits} <= allowed, "no hit outside the filter"
        assert len(hits) == min(k, len(allowed)), "k hits when at least k are allowed"


def test_lexical_exact_matches_embedded_on_corpus(corpus: Any) -> None:
    conn, _, rows = corpus
    idx = BM25Index()
    idx.add([(o, toks) for o, toks, _, _ in rows])
    allowed = np.zeros(len(rows) + 1, dtype=bool)
    allowed[[o for o, _, _, md in rows if md["group"] < 50]] = True
    where = compile_filter(parse_filter({"group": {"lt": 50}}))
    leg = PgLexical(connector(conn))
    stats = leg.corpus_stats(conn)
    assert stats.n_docs == len(rows)
    for terms in ({"w1": 1.0, "w7": 0.5}, {"common": 1.0, "w100": 2.0, "nope": 1.0}):
        want = idx.search(terms, allowed, 20)
        got = leg.search(terms, where, 20, stats=stats)
        assert [h.ordinal for h in got] == [h.ordinal for h in want]
        assert np.allclose([h.score for h in got], [h.score for h in want], rtol=1e-5)
    assert leg.search({"nope": 1.0}, TRUE, 5) == []
    assert leg.search({}, TRUE, 5) == []


def recall_at_10(conn: Any, m: Any, where: Any, queries: Any) -> float:
    hnsw = PgVector(connector(conn), exact_max_allowed=0)
    exact = PgVector(connector(conn))
    found = 0
    for q in queries:
        want = {h.ordinal for h in exact.search(q, where, 10, exact=True)}
        found += len(want & {h.ordinal for h in hnsw.search(q, where, 10)})
    return found / (10 * len(queries))


def test_hnsw_recall(schema_conn: Callable[[int], Any]) -> None:
    conn = schema_conn(24)
    rng = np.random.default_rng(2)
    n = 3000
    m = rng.normal(size=(n, 24)).astype(np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    load(conn, [(i + 1, ["x"], m[i], {"bucket": i % 20}) for i in range(n)])
    conn.execute("ANALYZE chunks")
    queries = rng.normal(size=(30, 24)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    assert recall_at_10(conn, m, TRUE, queries) >= 0.95
    selective = compile_filter(parse_filter({"bucket": 3}))  # 5%
    assert recall_at_10(conn, m, selective, queries) >= 0.95


@pytest.mark.parametrize(
    "spec",
    [
        None,
        {"group": {"lt": 50}},  # half the chunks: oversampled without the filter in pg_search
        {"tags": "t3"},  # a seventh
        {"group": 42},  # 1%: the filter goes to pg_search
    ],
)
def test_lexical_rescore_matches_embedded(corpus: Any, spec: Any) -> None:
    """pg_search picks the candidates, the engine's BM25 re-ranks them: the same ranking as
    the embedded index here, whether the filter goes to pg_search or the candidates are
    oversampled and filtered afterwards, and whether the oversample held enough or not."""
    conn, _, rows = corpus
    idx = BM25Index()
    idx.add([(o, toks) for o, toks, _, _ in rows])
    node = parse_filter(spec)
    where = compile_filter(node)
    allowed = np.zeros(len(rows) + 1, dtype=bool)
    for o, _, _, md in rows:
        allowed[o] = spec is None or (
            md["group"] < 50
            if spec == {"group": {"lt": 50}}
            else "t3" in md["tags"]
            if "tags" in spec
            else md["group"] == 42
        )
    share = float(allowed.sum()) / len(rows)
    stats = PgLexical.corpus_stats(conn)
    for rescore_min in (300, 60):
        leg = PgLexical(connector(conn), scoring="rescore", rescore_min=rescore_min)
        for terms in ({"w1": 1.0, "w7": 0.5}, {"common": 1.0, "w100": 2.0}, {"w3": 1.0}):
            want = idx.search(terms, allowed, 10)
            for known in (None, share if spec is not None else None):
                got = leg.search(terms, where, 10, stats=stats, allowed_share=known)
                assert [h.ordinal for h in got] == [h.ordinal for h in want], (terms, known)
                assert np.allclose([h.score for h in got], [h.score for h in want], rtol=1e-5)
    # a share that claims too much: the oversample holds too few, the filter goes to pg_search
    leg = PgLexical(connector(conn), scoring="rescore", rescore_min=50)
    if spec is not None:
        want = idx.search({"common": 1.0}, allowed, 10)
        got = leg.search({"common": 1.0}, where, 10, stats=stats, allowed_share=0.99)
        assert [h.ordinal for h in got] == [h.ordinal for h in want]
