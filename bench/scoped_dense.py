"""What the dense leg's scope wall costs: an exact scan of the scope against the filtered HNSW walk.

A caller's scope is scanned exactly (``dense.scoped_exact``, the default), because an HNSW walk
with the scope as an id selector goes through every tenant's vectors and what it finds of the
scope's depends on them. This measures, side by side in one process, on ``--chunks`` vectors
(default 100,000; real SciFact chunk vectors mixed as in ``bench/_synthetic.py``) and real
SciFact query embeddings, for scopes of 10%, 33% and 67% of the chunks (whole documents of 1-4
chunks drawn at random):

- ``VectorIndex.search`` latency (p50/p95, embedding excluded) with the exact scan of the scope
  (new) and with the filtered HNSW walk (old), against an unscoped HNSW search (the baseline);
- what the walk loses: recall@10 and @50 of the walk against the exact top-k, and the share of
  queries whose top 10 differs from the exact one (the hits that depend on other tenants).

Usage: ``python bench/scoped_dense.py [--chunks 100000] [--queries 200]``
"""

from __future__ import annotations

import time

import numpy as np

import _synthetic
from _common import (
    Stats,
    corpus_source,
    log,
    parser,
    ratio,
    read_queries,
    scifact_dir,
    scifact_index_dir,
    table,
    test_queries,
    wait_quiet,
    write_result,
)
from clew.backends.embedded.vector import VectorIndex
from clew.config import DenseConfig
from clew.models.embedder import load_encoder

SHARES = {"10%": 0.10, "33%": 0.33, "67%": 0.67}
DEPTH = 50
"""The dense leg's depth (``dense.depth``)."""


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--chunks", type=int, default=100_000)
    p.add_argument("--queries", type=int, default=200)
    args = p.parse_args()
    dataset = scifact_dir(args.data)
    _, _, total = corpus_source(dataset, None)
    docs = _synthetic.corpus_docs(dataset)
    source = _synthetic.source_vectors(scifact_index_dir(total, total), docs)
    rng = np.random.default_rng(11)
    n = args.chunks
    i, j = rng.integers(len(source), size=n), rng.integers(len(source), size=n)
    a = rng.uniform(0.7, 1.0, size=(n, 1)).astype(np.float32)
    b = rng.uniform(0.0, 0.5, size=(n, 1)).astype(np.float32)
    noise = rng.standard_normal((n, source.shape[1]), dtype=np.float32)
    noise *= np.float32(0.1 / np.sqrt(source.shape[1]))
    mixed = a * source[i] + b * source[j] + noise
    mixed /= np.linalg.norm(mixed, axis=1, keepdims=True)

    config = DenseConfig()
    t = time.perf_counter()
    index = VectorIndex(mixed.shape[1], config)
    index.add(enumerate(mixed))
    build_s = time.perf_counter() - t
    assert index.hnsw is not None, "below dense.hnsw_min_chunks: no HNSW to compare against"
    log(f"HNSW over {n:,} vectors built in {build_s:.1f} s")

    texts = [q for _, q in test_queries(dataset)]
    texts += [q for q in read_queries(dataset / "queries.jsonl").values() if q not in texts]
    queries = load_encoder().encode(texts[: args.queries])

    # whole documents of 1-4 chunks, each drawn into the scope with the scope's share
    doc_of = np.repeat(np.arange(n), rng.integers(1, 5, size=n))[:n]
    draw = rng.random(int(doc_of.max()) + 1)
    everything = np.ones(n, dtype=bool)

    def timed(allowed: np.ndarray, exact: bool) -> tuple[Stats, list[list[int]]]:
        for q in queries[:5]:
            index.search(q, allowed, DEPTH, exact=exact)
        times, hits = [], []
        for q in queries:
            t = time.perf_counter()
            found = index.search(q, allowed, DEPTH, exact=exact)
            times.append((time.perf_counter() - t) * 1e3)
            hits.append([h.ordinal for h in found])
        return Stats.of(times), hits

    wait_quiet(args.quiet_wait)
    base, _ = timed(everything, exact=False)
    rows: list[list[object]] = [["unscoped", f"{n:,}", "HNSW walk", base.p50, base.p95, "1.00×"]]
    loss_rows: list[list[object]] = []
    for name, share in SHARES.items():
        allowed = draw[doc_of] < share
        count = int(allowed.sum())
        wait_quiet(args.quiet_wait)
        exact, want = timed(allowed, exact=True)
        walk, got = timed(allowed, exact=False)
        path = "exact (both)" if count <= config.exact_max_allowed else "HNSW walk"
        rows.append([name, f"{count:,}", "exact scan (new)", exact.p50, exact.p95, ""])
        rows[-1][-1] = ratio(exact.p50, base.p50)
        rows.append([name, f"{count:,}", f"{path} (old)", walk.p50, walk.p95, ""])
        rows[-1][-1] = ratio(walk.p50, base.p50)
        pairs = list(zip(got, want, strict=True))
        r10 = np.mean([len(set(g[:10]) & set(w[:10])) / 10 for g, w in pairs])
        r50 = np.mean([len(set(g) & set(w)) / max(len(w), 1) for g, w in pairs])
        differ = np.mean([g[:10] != w[:10] for g, w in pairs])
        loss_rows.append([name, f"{count:,}", f"{r10:.4f}", f"{r50:.4f}", f"{differ:.1%}"])
        log(f"{name}: exact p50 {exact.p50:.2f} ms, walk p50 {walk.p50:.2f} ms, R@10 {r10:.4f}")

    body = "\n".join(
        [
            f"{n:,} vectors (384-d, SciFact chunk vectors mixed), HNSW M={config.hnsw_m}, "
            f"efConstruction={config.ef_construction} (built in {build_s:.0f} s), "
            f"ef_search={config.ef_search} widened by 1/share under a filter; "
            f"{len(queries)} SciFact query embeddings, k={DEPTH} (the dense leg's depth). "
            "Baseline: unscoped HNSW search.",
            "",
            "## Latency of `VectorIndex.search` (embedding excluded)",
            "",
            table(
                ["scope", "chunks in scope", "path", "p50 ms", "p95 ms", "p50 vs unscoped"], rows
            ),
            "",
            "## What the filtered walk gets wrong (against the exact scan of the scope)",
            "",
            table(
                [
                    "scope",
                    "chunks in scope",
                    "walk R@10",
                    "walk R@50",
                    "queries whose top 10 differs",
                ],
                loss_rows,
            ),
            "",
        ]
    )
    write_result(
        "scoped_dense",
        "The dense leg's scope wall: exact scan of the scope vs. the filtered HNSW walk",
        body,
        notes=[
            "a scope of at most dense.exact_max_allowed (20,000) chunks was scanned exactly "
            "before too: its two rows are the same path",
            "the walk's misses are the scope's own chunks it did not reach because of how the "
            "graph runs through other tenants' vectors: hits that depend on data outside the scope",
        ],
    )


if __name__ == "__main__":
    main()
