"""The PostgreSQL graph leg against the embedded one, on the same graph rows."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg import sql

from clew.backends.postgres.graph import PgGraph
from clew.backends.postgres.schema import MIGRATIONS, dimension_ddl
from clew.config import GraphConfig
from clew.index.graph import GraphIndex
from clew.protocols import GraphRows
from clew.testing.graphs import densified
from clew.types import KIND_RANK, GraphTrail

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"
TENANT_A = sql.SQL("c.metadata->>'tenant' = 'a'")


@dataclass
class Corpus:
    rows: GraphRows
    doc_meta: dict[str, dict[str, Any]]
    """doc_id → metadata (copied onto its chunks)."""


def load(conn: psycopg.Connection[Any], schema: str, corpus: Corpus) -> None:
    """Make ``schema`` with clew's tables and fill them with the corpus's graph rows."""
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_search")
    conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    conn.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(schema)))
    for migration in MIGRATIONS:
        conn.execute(migration)
    for ddl in dimension_ddl(2):
        conn.execute(ddl)
    rows = corpus.rows
    docs = sorted({d for _, d, _ in rows.chunks} | {d for d, _ in rows.links})
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO documents (doc_id, title, source, fmt, metadata, doc_hash, text, release)"
            " VALUES (%s, %s, %s, 'md', %s, 'h', '', 1)",
            [(d, d, d, json.dumps(corpus.doc_meta.get(d, {}))) for d in docs],
        )
        cur.executemany(
            "INSERT INTO chunks (ordinal, chunk_id, doc_id, seq, text, content_hash, token_count,"
            " heading_path, start_char, end_char, tokens, embedding, metadata, release)"
            " OVERRIDING SYSTEM VALUE"
            " VALUES (%s, %s, %s, %s, '', 'h', 1, '[]', 0, 0, '', '[1,0]', %s, 1)",
            [
                (o, f"{d}#{s}", d, s, json.dumps(corpus.doc_meta.get(d, {})))
                for o, d, s in rows.chunks
            ],
        )
        cur.executemany(
            "INSERT INTO concepts (concept_id, key, label, kind) OVERRIDING SYSTEM VALUE"
            " VALUES (%s, %s, %s, %s)",
            list(rows.concepts),
        )
        rank = {c[0]: KIND_RANK[c[3]] for c in rows.concepts}  # a mention of its concept's kind
        cur.executemany(
            "INSERT INTO mentions (ordinal, concept_id, count, kind) VALUES (%s, %s, %s, %s)",
            [(*m[:3], m[3] if len(m) > 3 else rank[m[1]]) for m in rows.mentions],
        )
        cur.executemany(
            "INSERT INTO links (doc_id, target) VALUES (%s, %s)", sorted(set(rows.links))
        )
    conn.commit()


def connector(url: str, schema: str) -> Any:
    def connect() -> AbstractContextManager[psycopg.Connection[Any]]:
        return psycopg.connect(url, options=f"-c search_path={schema},public")

    return connect


def embedded(corpus: Corpus) -> tuple[GraphIndex, int]:
    size = max((o for o, _, _ in corpus.rows.chunks), default=-1) + 1
    return GraphIndex.build(corpus.rows, size, 1), size


def mask(corpus: Corpus, size: int, tenant: str | None) -> np.ndarray[Any, np.dtype[np.bool_]]:
    allowed = np.zeros(size, dtype=bool)
    for o, d, _ in corpus.rows.chunks:
        if tenant is None or corpus.doc_meta.get(d, {}).get("tenant") == tenant:
            allowed[o] = True
    return allowed


# -- corpora -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    """The sample corpus (identifier concepts from the fake-encoder engine) plus phrase concepts
    (words and word pairs found in two or more chunks), so n-grams, fuzzy and hop 2 all fire."""
    dense = densified(tmp_path_factory.mktemp("pggraph") / "idx", label=str.title)
    meta = {d: {"tenant": "ab"[i % 2]} for i, d in enumerate(dense.docs)}
    return Corpus(dense.rows, meta)


@pytest.fixture
def sample_pg(pg_url: str, pg_schema: str, sample: Corpus) -> Iterator[PgGraph]:
    with psycopg.connect(pg_url) as conn:
        load(conn, pg_schema, sample)
    yield PgGraph(connector(pg_url, pg_schema))


def hand_corpus() -> Corpus:
    """Hidden chunk 1 is the only bridge from the seed ``alpha`` to ``bravo``:

    ``alpha`` → chunk 0 (a), chunk 1 (b); ``bravo`` ← chunk 1 (b), chunk 2 (a), chunk 3 (a);
    ``charlie`` ← chunk 0 (a), chunk 4 (a) (so hop 2 through a visible chunk still works)."""
    concepts = [(1, "alpha", "Alpha", "entity"), (2, "bravo", "Bravo", "entity")]
    concepts += [(3, "charlie", "Charlie", "entity"), (4, "delta", "Delta", "entity")]
    chunks = [(0, "a1", 0), (1, "b1", 0), (2, "a2", 0), (3, "a3", 0), (4, "a4", 0)]
    mentions = [(0, 1, 1), (1, 1, 2), (1, 2, 1), (2, 2, 1), (3, 2, 3), (0, 3, 1), (4, 3, 1)]
    mentions += [(2, 4, 1), (3, 4, 1)]
    meta = {d: {"tenant": d[0]} for _, d, _ in chunks}
    links = [("a1", "b1"), ("b1", "a2"), ("a3", "related_to::a4")]
    return Corpus(GraphRows(concepts, mentions, chunks, links), meta)


# -- helpers ---------------------------------------------------------------------------------


def same_hits(pg: Sequence[Any], emb: Sequence[Any], what: str) -> None:
    assert [h.ordinal for h in pg] == [h.ordinal for h in emb], what
    for a, b in zip(pg, emb, strict=True):
        assert math.isclose(a.score, b.score, rel_tol=1e-6), (what, a, b)
        assert a.trail == b.trail, (what, a, b)


def phrase_keys(corpus: Corpus, *, multi: bool) -> list[str]:
    df = Counter(m[1] for m in corpus.rows.mentions)
    keys = [
        (df[cid], key)
        for cid, key, _, kind in corpus.rows.concepts
        if kind == "phrase" and (" " in key) == multi
    ]
    return [k for _, k in sorted(keys, reverse=True)]


def queries(corpus: Corpus) -> list[str]:
    singles = phrase_keys(corpus, multi=False)
    pairs = phrase_keys(corpus, multi=True)
    long_word = next(k for k in singles if len(k) >= 7)
    typo = long_word[:3] + long_word[4] + long_word[3] + long_word[5:]  # a swap
    return [
        "ERR-4412",
        "what does ERR-4413 mean",
        "pgbouncer-core",
        "INC-2031 postmortem",
        "idempotency_key retries",
        "ledger.settlement.cutoff_hour",
        pairs[0],
        f"how do I handle {pairs[1]} during {pairs[2]}",
        f"the {singles[0]} and the {singles[3]}",
        typo,
        f"{singles[5][:-1]}x problems",  # substitution typo
        "fraud_fail_open on-call team-risk",
        "globex dedicated pool pool_size",
    ]


# -- tests -------------------------------------------------------------------------------------


def test_link_matches_embedded(sample: Corpus, sample_pg: PgGraph) -> None:
    g, _ = embedded(sample)
    hows: set[str] = set()
    for q in queries(sample):
        for fuzzy in (True, False):
            for ww in (1.0, 0.5, 0.0):
                got = sample_pg.link(q, fuzzy=fuzzy, word_weight=ww)
                want = g.link(q, fuzzy=fuzzy, word_weight=ww)
                assert got == want, (q, fuzzy, ww)
                hows |= {c.how for c in got}
    assert hows == {"identifier", "exact", "fuzzy"}


def test_search_matches_embedded(sample: Corpus, sample_pg: PgGraph) -> None:
    g, size = embedded(sample)
    configs = [
        GraphConfig(),
        GraphConfig(pagerank_weight=0.0),
        GraphConfig(max_hops=1),
        GraphConfig(related_per_concept=2, hub_fraction=0.2, hop_penalty=0.5),
        GraphConfig(pagerank_weight=3.0, depth=5),
    ]
    two_hop = 0
    for tenant, where in ((None, None), ("a", TENANT_A)):
        allowed = mask(sample, size, tenant)
        for q in queries(sample):
            for cfg in configs:
                linked = g.link(q, fuzzy=cfg.fuzzy, word_weight=cfg.word_weight)
                if tenant is not None:
                    linked = g.within(linked, allowed)
                    assert sample_pg.within(linked, where) == linked
                for k in (cfg.depth, 3):
                    want = g.search(q, allowed, k, cfg, linked)
                    got = sample_pg.search(q, where, k, cfg, linked)
                    same_hits(got, want, f"{q!r} {tenant} {cfg} k={k}")
                    two_hop += sum(1 for h in got if h.trail and h.trail.hops == 2)
                    if tenant is not None:  # the allowed ordinals as a set: the same walk
                        ords = np.flatnonzero(allowed).tolist()
                        as_set = sample_pg.search(q, where, k, cfg, linked, allowed=ords)
                        same_hits(as_set, want, f"{q!r} {tenant} {cfg} k={k} as a set")
            # linking inside search (no linked given)
            same_hits(
                sample_pg.search(q, where, 50, GraphConfig()),
                g.search(q, allowed, 50, GraphConfig()),
                q,
            )
    assert two_hop > 0


def test_within_matches_embedded(sample: Corpus, sample_pg: PgGraph) -> None:
    g, size = embedded(sample)
    for tenant, where in (("a", TENANT_A), ("b", sql.SQL("c.metadata->>'tenant' = 'b'"))):
        allowed = mask(sample, size, tenant)
        for q in queries(sample):
            linked = g.link(q)
            assert sample_pg.within(linked, where) == g.within(linked, allowed)
    nothing = sql.SQL("FALSE")
    assert sample_pg.within(g.link("ERR-4412 pgbouncer-core"), nothing) == []
    assert sample_pg.within([], TENANT_A) == []


def test_filter_applies_at_every_hop(pg_url: str, pg_schema: str) -> None:
    corpus = hand_corpus()
    with psycopg.connect(pg_url) as conn:
        load(conn, pg_schema, corpus)
    pg = PgGraph(connector(pg_url, pg_schema))
    g, size = embedded(corpus)
    cfg = GraphConfig(pagerank_weight=0.0)

    everyone = pg.search("alpha", None, 10, cfg)
    same_hits(everyone, g.search("alpha", mask(corpus, size, None), 10, cfg), "all")
    by_ordinal = {h.ordinal: h for h in everyone}
    assert by_ordinal[1].trail is not None and by_ordinal[1].trail.hops == 1  # hidden later
    assert {2, 3} <= set(by_ordinal)  # reached through bravo, via the tenant-b chunk 1
    assert by_ordinal[2].trail is not None and by_ordinal[2].trail.via == ("bravo",)

    hits = pg.search("alpha", TENANT_A, 10, cfg)
    same_hits(hits, g.search("alpha", mask(corpus, size, "a"), 10, cfg), "tenant a")
    ords = np.flatnonzero(mask(corpus, size, "a")).tolist()
    assert pg.search("alpha", TENANT_A, 10, cfg, allowed=ords) == hits
    assert [h.ordinal for h in hits] == [0, 4]  # chunk 0 directly, chunk 4 via charlie
    for h in hits:
        assert h.trail is not None
        assert "bravo" not in h.trail.via and "delta" not in h.trail.via
    assert hits[1].trail == GraphTrail(concepts=("alpha",), hops=2, via=("charlie",))

    # a query whose only concept lives in hidden chunks reaches nothing
    assert pg.within(pg.link("bravo"), sql.SQL("c.metadata->>'tenant' = 'b'")) != []
    assert pg.search("charlie", sql.SQL("c.metadata->>'tenant' = 'b'"), 10, cfg) == []
    # with PageRank on, the same result as the embedded leg
    same_hits(
        pg.search("alpha bravo", TENANT_A, 10, GraphConfig()),
        g.search("alpha bravo", mask(corpus, size, "a"), 10, GraphConfig()),
        "pagerank",
    )


def test_empty_graph(pg_url: str, pg_schema: str) -> None:
    corpus = Corpus(GraphRows([], [], [], []), {})
    with psycopg.connect(pg_url) as conn:
        load(conn, pg_schema, corpus)
    pg = PgGraph(connector(pg_url, pg_schema))
    assert pg.link("ERR-4412 connection pool") == []
    assert pg.search("ERR-4412 connection pool", None, 10, GraphConfig()) == []
    assert pg.search("x", TENANT_A, 10, GraphConfig(), []) == []
    assert pg.within([], None) == []


def test_state_change_is_seen(pg_url: str, pg_schema: str) -> None:
    """A write after a query (new chunk, new concept) shows in the next one: PageRank and the
    longest key are recomputed for the new graph state."""
    corpus = hand_corpus()
    with psycopg.connect(pg_url) as conn:
        load(conn, pg_schema, corpus)
    pg = PgGraph(connector(pg_url, pg_schema))
    assert pg.search("alpha", None, 10, GraphConfig())
    assert pg.link("echo foxtrot golf") == []
    more = Corpus(
        GraphRows(
            [*corpus.rows.concepts, (5, "echo foxtrot golf", "Echo Foxtrot Golf", "phrase")],
            [*corpus.rows.mentions, (5, 5, 1), (5, 1, 1)],
            [*corpus.rows.chunks, (5, "a5", 0)],
            corpus.rows.links,
        ),
        {**corpus.doc_meta, "a5": {"tenant": "a"}},
    )
    with psycopg.connect(pg_url, options=f"-c search_path={pg_schema},public") as conn:
        conn.execute(
            "INSERT INTO documents (doc_id, title, source, fmt, metadata, doc_hash, text, release)"
            """ VALUES ('a5', 'a5', 'a5', 'md', '{"tenant": "a"}', 'h', '', 2)"""
        )
        conn.execute(
            "INSERT INTO chunks (ordinal, chunk_id, doc_id, seq, text, content_hash, token_count,"
            " heading_path, start_char, end_char, tokens, embedding, metadata, release)"
            " OVERRIDING SYSTEM VALUE VALUES (5, 'a5#0', 'a5', 0, '', 'h', 1, '[]', 0, 0, '',"
            """ '[1,0]', '{"tenant": "a"}', 2)"""
        )
        conn.execute(
            "INSERT INTO concepts (concept_id, key, label, kind) OVERRIDING SYSTEM VALUE"
            " VALUES (5, 'echo foxtrot golf', 'Echo Foxtrot Golf', 'phrase')"
        )
        conn.execute("INSERT INTO mentions VALUES (5, 5, 1, 0), (5, 1, 1, 1)")
    g, size = embedded(more)
    assert pg.link("echo foxtrot golf") == g.link("echo foxtrot golf") != []
    for q in ("alpha", "echo foxtrot golf"):
        same_hits(
            pg.search(q, None, 10, GraphConfig()),
            g.search(q, mask(more, size, None), 10, GraphConfig()),
            q,
        )
