"""What statistics within the caller's scope cost: the synthetic 100k-chunk index, scoped search.

A scoped caller's BM25 (chunk count, lengths, document frequencies), concept idf, hub cuts and
PageRank are computed over its scope's chunks, so nothing outside the scope moves a number it
sees. This measures, side by side in one process and on the same queries:

- the one-off work per scope and release (``Snapshot.scope_stats``: the scope's mask, concept
  document frequencies, and PageRank of the scope's subgraph on first use), cold;
- search latency (p50/p95 of ``timings_ms.total``) for each scope with statistics within the
  scope (the new behaviour) against the same scope with corpus-wide statistics (the old one,
  ``stats_scope=None``), per preset; and unscoped as the reference.

Usage: ``python bench/scoped_stats.py [--chunks 100000] [--queries 100]``
"""

from __future__ import annotations

import json
import time
from typing import Any

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
    uncached,
    wait_quiet,
    write_result,
)
from clew import Engine
from clew.models.embedder import load_encoder

SCOPES: dict[str, dict[str, Any] | None] = {
    "unscoped": None,
    "tenant = t3 (~10%)": {"tenant": "t3"},
    "audience = public (~33%)": {"audience": "public"},
}
PRESETS = ("default", "lexical", "graph")


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--chunks", type=int, default=100_000)
    p.add_argument("--queries", type=int, default=100)
    args = p.parse_args()
    dataset = scifact_dir(args.data)
    spec = _synthetic.SyntheticSpec(chunks=args.chunks)
    _, _, total = corpus_source(dataset, None)
    directory, _ = _synthetic.ensure(
        spec, _synthetic.corpus_docs(dataset), scifact_index_dir(total, total)
    )
    engine = Engine(directory, uncached(), encoder=load_encoder())
    engine.refresh()
    queries = [q for _, q in test_queries(dataset)]
    queries += [q for q in read_queries(dataset / "queries.jsonl").values() if q not in queries]
    queries = queries[: args.queries]

    cold_rows = []
    snap = engine.snapshot()
    for name, scope in SCOPES.items():
        if scope is None:
            continue
        key = json.dumps(scope, sort_keys=True)
        t = time.perf_counter()
        stats = snap.scope_stats(key)
        mid = time.perf_counter()
        assert stats is not None
        _ = stats.graph.pagerank_chunk
        end = time.perf_counter()
        cold_rows.append(
            [name, f"{int(stats.population.sum()):,}", (mid - t) * 1e3, (end - mid) * 1e3]
        )

    rows = []
    for preset in PRESETS:
        base: Stats | None = None
        for name, scope in SCOPES.items():
            modes = [("corpus-wide", None)] if scope is None else []
            if scope is not None:
                modes = [("corpus-wide (old)", None), ("within scope (new)", scope)]
            for mode, stats_scope in modes:
                wait_quiet(args.quiet_wait)
                for q in queries[:5]:  # warm-up: masks, scope statistics, caches
                    engine._retrieve(
                        q,
                        k=10,
                        filter=None,
                        preset=preset,
                        config=None,
                        scope=scope,
                        stats_scope=stats_scope,
                    )
                totals = []
                for q in queries:
                    run = engine._retrieve(
                        q,
                        k=10,
                        filter=None,
                        preset=preset,
                        config=None,
                        scope=scope,
                        stats_scope=stats_scope,
                    )
                    totals.append(run.timings["total"])
                st = Stats.of(totals)
                if base is None:
                    base = st
                rows.append([preset, name, mode, st.p50, st.p95, ratio(st.p50, base.p50)])
                log(f"{preset} / {name} / {mode}: p50 {st.p50:.1f} ms")
    engine.close()
    body = "\n".join(
        [
            f"Synthetic index of {args.chunks:,} chunks, {len(queries)} SciFact queries per row.",
            "",
            "## One-off work per scope and release (cold)",
            "",
            table(
                ["scope", "chunks in scope", "mask + concept df (ms)", "PageRank (ms)"], cold_rows
            ),
            "",
            "## Search latency (timings_ms.total)",
            "",
            table(["preset", "scope", "statistics", "p50 ms", "p95 ms", "p50 vs unscoped"], rows),
            "",
        ]
    )
    write_result(
        "scoped_stats",
        "Statistics within the caller's scope: cost",
        body,
        notes=[
            "corpus-wide (old) is the same scoped search with statistics over the whole index "
            "(the behaviour before statistics were scoped), run side by side",
            "the one-off work is paid once per scope and release (cached in the snapshot, 16 "
            "scopes); PageRank only when the graph leg or the feature reranker reads it",
        ],
    )


if __name__ == "__main__":
    main()
