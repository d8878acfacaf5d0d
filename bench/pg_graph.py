"""The graph leg over PostgreSQL (``PgGraph``) against the embedded one (``GraphIndex``).

Two graphs, the same rows loaded into both: the bundled sample corpus (``data/sample`` ingested
with the fake encoder and identifier concepts, plus phrase concepts for its repeated words and
word pairs) and a synthetic graph (default 20k chunks × ~5 mentions = ~100k mentions over 10k
Zipf-distributed concepts: identifiers, words and word pairs; documents of 1–4 chunks with a
tenant t0..t9 and a few links). Per query: ``link`` + ``search`` (top 50, default
``GraphConfig``), without a filter and with ``tenant = t3`` (embedded: a precomputed mask, as the
engine has; PostgreSQL: the SQL predicate). Printed: medians and p95 in milliseconds, the
one-off costs (embedded build; PostgreSQL's first query, which computes PageRank), and whether the
two legs returned the same ordinals.

Usage: ``python bench/pg_graph.py [--chunks 20000] [--budget 150]`` (about two minutes on two
cores). Needs the PostgreSQL test server (``clew.testing.pgserver``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import string
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

os.environ.setdefault("HF_HUB_OFFLINE", "1")


from clew.backends.postgres.graph import PgGraph
from clew.backends.postgres.schema import MIGRATIONS, dimension_ddl
from clew.config import GraphConfig
from clew.index.graph import GraphIndex
from clew.ingest.analyze import STOP_WORDS
from clew.protocols import GraphRows
from clew.testing.graphs import densified
from clew.testing.pgserver import PgServer

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample"
Meta = dict[str, dict[str, str]]


# -- corpora ---------------------------------------------------------------------------------


def sample_rows() -> tuple[GraphRows, Meta, list[str]]:
    with tempfile.TemporaryDirectory() as tmp:
        dense = densified(Path(tmp) / "idx")
    rows, df = dense.rows, dense.added  # added phrase key -> chunks mentioning it
    meta = {d: {"tenant": f"t{i % 10}"} for i, d in enumerate(dense.docs)}
    phrases = sorted((k for k in df if " " in k), key=lambda k: -df[k])
    singles = sorted((k for k in df if " " not in k and len(k) >= 7), key=lambda k: -df[k])
    queries = [
        "ERR-4412",
        "what does ERR-4413 mean",
        "pgbouncer-core",
        "INC-2031 postmortem",
        "idempotency_key retries",
        "fraud_fail_open on-call team-risk",
        "globex dedicated pool pool_size",
        *phrases[:6],
        *(f"how to fix {p} with {s}" for p, s in zip(phrases[6:12], singles, strict=False)),
        *(s[:2] + s[3] + s[2] + s[4:] for s in singles[:6]),  # typos
    ]
    return rows, meta, queries


def synthetic_rows(n_chunks: int, seed: int = 0) -> tuple[GraphRows, Meta, list[str]]:
    rng = np.random.default_rng(seed)
    letters = np.array(list(string.ascii_lowercase))
    vocab: list[str] = []
    seen: set[str] = set()
    while len(vocab) < 3000:
        w = "".join(rng.choice(letters, size=int(rng.integers(5, 10))))
        if w not in seen and w not in STOP_WORDS:
            seen.add(w)
            vocab.append(w)
    n_concepts = max(200, n_chunks // 2)
    keys: list[tuple[str, str]] = []
    taken: set[str] = set()
    while len(keys) < n_concepts:
        r = rng.random()
        if r < 0.2:
            key, kind = f"err-{int(rng.integers(1000, 99999))}", "identifier"
        elif r < 0.6:
            key, kind = str(vocab[int(rng.integers(len(vocab)))]), "phrase"
        else:
            a, b = rng.integers(len(vocab), size=2)
            key, kind = f"{vocab[int(a)]} {vocab[int(b)]}", "phrase"
        if key not in taken:
            taken.add(key)
            keys.append((key, kind))
    concepts = [(i + 1, k, k, kind) for i, (k, kind) in enumerate(keys)]
    zipf = 1.0 / np.arange(1, n_concepts + 1) ** 0.9
    zipf /= zipf.sum()
    chunks: list[tuple[int, str, int]] = []
    mentions: list[tuple[int, int, int]] = []
    ordinal, doc = 1, 0
    while ordinal <= n_chunks:
        for seq in range(int(rng.integers(1, 5))):
            if ordinal > n_chunks:
                break
            chunks.append((ordinal, f"doc-{doc}", seq))
            picked = rng.choice(n_concepts, size=int(rng.integers(3, 8)), replace=False, p=zipf)
            mentions += [(ordinal, int(c) + 1, int(rng.integers(1, 4))) for c in picked]
            ordinal += 1
        doc += 1
    links = [
        (f"doc-{int(a)}", f"doc-{int(b)}")
        for a, b in rng.integers(doc, size=(doc // 3, 2))
        if a != b
    ]
    meta = {f"doc-{d}": {"tenant": f"t{d % 10}"} for d in range(doc)}
    by_rank = [k for k, _ in keys]
    queries = []
    for i in range(40):
        a, b = by_rank[int(rng.integers(5, 400))], by_rank[int(rng.integers(50, 3000))]
        queries.append(f"{a} and {b}" if i % 3 else a)
        if i % 4 == 0 and len(a) >= 6 and not a.startswith("err-"):
            queries.append(a[:3] + a[4] + a[3] + a[5:])  # a typo
    return GraphRows(concepts, mentions, chunks, sorted(set(links))), meta, queries


# -- loading ---------------------------------------------------------------------------------


def load(url: str, schema: str, rows: GraphRows, meta: Meta) -> None:
    with psycopg.connect(url) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_search")
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(schema)))
        conn.execute(MIGRATIONS[0])
        for ddl in dimension_ddl(2):
            conn.execute(ddl)
        docs = sorted({d for _, d, _ in rows.chunks} | {d for d, _ in rows.links})
        with conn.cursor() as cur:
            _copy(
                cur,
                "documents (doc_id, title, source, fmt, metadata, doc_hash, text, release)",
                [(d, d, d, "md", json.dumps(meta.get(d, {})), "h", "", 1) for d in docs],
            )
            _copy(
                cur,
                "chunks (ordinal, chunk_id, doc_id, seq, text, content_hash, token_count, "
                "heading_path, start_char, end_char, tokens, embedding, metadata, release)",
                [
                    (o, f"{d}#{s}", d, s, "", "h", 1, "[]", 0, 0, "", "[1,0]", meta_of(meta, d), 1)
                    for o, d, s in rows.chunks
                ],
                override=True,
            )
            _copy(cur, "concepts (concept_id, key, label, kind)", rows.concepts, override=True)
            _copy(cur, "mentions (ordinal, concept_id, count)", rows.mentions)
            _copy(cur, "links (doc_id, target)", sorted(set(rows.links)))
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE")  # as autovacuum would: index-only scans, statistics


def meta_of(meta: Meta, doc: str) -> str:
    return json.dumps(meta.get(doc, {}))


def _copy(cur: psycopg.Cursor[Any], target: str, rows: Any, *, override: bool = False) -> None:
    if override:  # identity columns: COPY writes them as given
        table, cols = target.split(" ", 1)
        cur.execute(f"CREATE TEMP TABLE _stage AS SELECT {cols[1:-1]} FROM {table} LIMIT 0")
        with cur.copy(f"COPY _stage {cols} FROM STDIN") as cp:
            for r in rows:
                cp.write_row(r)
        cur.execute(f"INSERT INTO {target} OVERRIDING SYSTEM VALUE SELECT {cols[1:-1]} FROM _stage")
        cur.execute("DROP TABLE _stage")
        return
    with cur.copy(f"COPY {target} FROM STDIN") as cp:
        for r in rows:
            cp.write_row(r)


# -- timing ----------------------------------------------------------------------------------


def ms(samples: list[float]) -> str:
    s = sorted(samples)
    p95 = s[min(len(s) - 1, round(0.95 * (len(s) - 1)))]
    return f"median {statistics.median(s) * 1e3:7.2f} ms  p95 {p95 * 1e3:7.2f} ms"


def run(
    name: str, url: str, rows: GraphRows, meta: Meta, queries: list[str], deadline: float
) -> None:
    schema = f"bench_{name}"
    t = time.perf_counter()
    load(url, schema, rows, meta)
    print(
        f"\n== {name}: {len(rows.chunks)} chunks, {len(rows.concepts)} concepts, "
        f"{len(rows.mentions)} mentions, {len(rows.links)} links, {len(queries)} queries "
        f"(loaded in {time.perf_counter() - t:.1f} s)"
    )
    size = max(o for o, _, _ in rows.chunks) + 1
    t = time.perf_counter()
    g = GraphIndex.build(rows, size, 1)
    print(f"embedded build (incl. PageRank): {(time.perf_counter() - t) * 1e3:.0f} ms")
    allowed_all = np.zeros(size, dtype=bool)
    allowed_t3 = np.zeros(size, dtype=bool)
    for o, d, _ in rows.chunks:
        allowed_all[o] = True
        allowed_t3[o] = meta.get(d, {}).get("tenant") == "t3"
    t3 = sql.SQL("c.metadata->>'tenant' = 't3'")
    cfg = GraphConfig()

    with psycopg.connect(url, options=f"-c search_path={schema},public") as conn:

        @contextmanager
        def same() -> Iterator[psycopg.Connection[Any]]:
            yield conn
            conn.commit()

        pg = PgGraph(same)
        t = time.perf_counter()
        pg.search(queries[0], None, 50, cfg)
        print(f"PostgreSQL first query (incl. PageRank): {(time.perf_counter() - t) * 1e3:.0f} ms")

        def emb(q: str, allowed: np.ndarray[Any, Any], filtered: bool) -> list[int]:
            linked = g.link(q)
            if filtered:
                linked = g.within(linked, allowed)
            return [h.ordinal for h in g.search(q, allowed, 50, cfg, linked)]

        def pgq(q: str, where: sql.Composable | None) -> list[int]:
            linked = pg.link(q)
            if where is not None:
                linked = pg.within(linked, where)
            return [h.ordinal for h in pg.search(q, where, 50, cfg, linked)]

        cases: list[tuple[str, Callable[[str], list[int]], Callable[[str], list[int]]]] = [
            ("no filter", lambda q: emb(q, allowed_all, False), lambda q: pgq(q, None)),
            ("tenant=t3", lambda q: emb(q, allowed_t3, True), lambda q: pgq(q, t3)),
        ]
        for label, e_fn, p_fn in cases:
            e_t: list[float] = []
            p_t: list[float] = []
            same_count = 0
            for q in queries:
                if time.perf_counter() > deadline:
                    print("   (deadline reached, stopping early)")
                    break
                t = time.perf_counter()
                a = e_fn(q)
                e_t.append(time.perf_counter() - t)
                t = time.perf_counter()
                b = p_fn(q)
                p_t.append(time.perf_counter() - t)
                same_count += a == b
            print(f"[{label}] embedded  : {ms(e_t)}")
            print(f"[{label}] PostgreSQL: {ms(p_t)}")
            print(f"[{label}] same ordinals: {same_count}/{len(e_t)}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--chunks", type=int, default=20_000)
    p.add_argument("--budget", type=float, default=150.0, help="seconds for the whole run")
    args = p.parse_args()
    deadline = time.perf_counter() + args.budget
    with PgServer.start() as server:
        rows, meta, queries = sample_rows()
        run("sample", server.url, rows, meta, queries, deadline)
        rows, meta, queries = synthetic_rows(args.chunks)
        run("synthetic", server.url, rows, meta, queries, deadline)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
