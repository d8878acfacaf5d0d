"""Latency of the stages after fusion: graph expansion, each reranker, assembly and answers.

Runs the same SciFact queries on (a) the real SciFact index (``bench/.work/scifact-index``,
built by ``bench/ingest.py``) and (b) the synthetic 100k-chunk index (``bench/_synthetic.py``),
once per configuration: ``default`` (the baseline, tracing off), ``+trace`` (the default
config, which writes a trace file per query), ``+expand``, ``+rerank-blend`` (the
untrained feature blend), ``+rerank-features`` and ``+rerank-ce`` when their model is given,
and ``ask`` (default retrieval of 20 hits + assembly + extractive answer). Prints p50/p95 of
each stage from the engine's own timings and of the total, with the ratio of each total to the
baseline's.

Usage: ``python bench/pipeline.py [--queries 100] [--feature-model F] [--rerank-model DIR]``
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import _synthetic
from _common import (
    Background,
    Stats,
    corpus_source,
    indexed_docs,
    log,
    parser,
    ratio,
    scifact_dir,
    scifact_index_dir,
    table,
    test_queries,
    uncached,
    wait_quiet,
    write_result,
)
from clew import Engine, EngineConfig
from clew.models.embedder import OnnxEncoder, load_encoder

STAGES = ("legs", "fuse", "expand", "rerank", "fetch", "assemble", "answer")


def configs(args: object) -> list[tuple[str, EngineConfig]]:
    base = EngineConfig().with_overrides(trace={"enabled": False})
    out = [
        ("default", base),
        ("+trace", EngineConfig()),
        ("+expand", base.with_overrides(expand={"enabled": True})),
        ("+rerank-blend", base.with_overrides(rerank={"kind": "features"})),
    ]
    feature_model = getattr(args, "feature_model", None)
    if feature_model:
        out.append(
            (
                "+rerank-features",
                base.with_overrides(rerank={"kind": "features", "model": feature_model}),
            )
        )
    rerank_model = getattr(args, "rerank_model", None)
    if rerank_model:
        out.append(
            (
                "+rerank-ce",
                base.with_overrides(rerank={"kind": "cross-encoder", "model": rerank_model}),
            )
        )
    out.append(("ask", base))
    # the baseline of the answer stage: every candidate sentence embedded (the default: 8 at most)
    out.append(("ask, all sentences embedded", base.with_overrides(answer={"embed_sentences": 0})))
    return out


def measure(
    engine: Engine, name: str, cfg: EngineConfig, queries: Sequence[str], warmup: int, wait: float
) -> tuple[dict[str, Stats], float]:
    def once(q: str) -> dict[str, float]:
        if name.startswith("ask"):
            return dict(engine.ask(q, config=cfg).timings_ms)
        return dict(engine.search(q, k=10, config=cfg).timings_ms)

    for q in queries[:warmup]:
        once(q)
    wait_quiet(wait)
    bg = Background()
    stages: dict[str, list[float]] = {}
    for q in queries:
        t = time.perf_counter()
        timings = once(q)
        timings["wall"] = (time.perf_counter() - t) * 1000.0
        for stage, ms in timings.items():
            stages.setdefault(stage, []).append(ms)
    return {s: Stats.of(v) for s, v in stages.items()}, bg.cores()


def section(
    title: str, engine: Engine, queries: Sequence[str], args: object, warmup: int, wait: float
) -> str:
    results: dict[str, dict[str, Stats]] = {}
    busy: dict[str, float] = {}
    for name, cfg in configs(args):
        log(f"{title}: {name}, {len(queries)} queries")
        results[name], busy[name] = measure(engine, name, cfg, queries, warmup, wait)
        log(f"  wall p50 {results[name]['wall'].p50:.2f} ms")
    base = results["default"]["wall"].p50
    rows = []
    for name, st in results.items():
        cells: list[object] = [name]
        for stage in STAGES:
            s = st.get(stage)
            cells.append("-" if s is None else f"{s.p50:.2f} / {s.p95:.2f}")
        w = st["wall"]
        cells += [f"{w.p50:.2f} / {w.p95:.2f}", ratio(w.p50, base), f"{busy[name]:.2f}"]
        rows.append(cells)
    head = [
        "config",
        *[f"{s} p50/p95 ms" for s in STAGES],
        "wall p50/p95 ms",
        "vs default",
        "other procs",
    ]
    return f"## {title}\n\n{table(head, rows)}\n"


def main() -> None:
    p = parser(__doc__, quiet_wait=10.0)
    p.add_argument("--queries", type=int, default=100)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--feature-model", help="weights from clew train-reranker --kind features")
    p.add_argument("--rerank-model", help="cross-encoder directory from clew train-reranker")
    p.add_argument("--skip-synthetic", action="store_true")
    args = p.parse_args()
    dataset = scifact_dir(args.data)
    queries = [q for _, q in test_queries(dataset)][: args.queries]
    enc: OnnxEncoder = load_encoder()
    enc.encode(["warm-up"])
    sections = []
    _, _, total = corpus_source(dataset, None)
    sci = scifact_index_dir(total, total)
    if indexed_docs(sci) > 0:
        with Engine(sci, uncached(), encoder=enc) as engine:
            sections.append(
                section("SciFact (5,183 docs)", engine, queries, args, args.warmup, args.quiet_wait)
            )
    else:
        log(f"no SciFact index at {sci.name}: run bench/ingest.py first")
    if not args.skip_synthetic:
        spec = _synthetic.SyntheticSpec(chunks=100_000)
        directory, _ = _synthetic.ensure(spec, _synthetic.corpus_docs(dataset), sci)
        with Engine(directory, uncached(), encoder=enc) as engine:
            engine.refresh()
            sections.append(
                section(
                    "Synthetic 100k chunks", engine, queries, args, args.warmup, args.quiet_wait
                )
            )
    notes = [
        "stage cells are p50 / p95 of the engine's own timings; `wall` is measured around the call",
        "`ask` = search of 20 hits with the default config + assembly + extractive answer "
        "(sentences of the top 4 hits; the 8 best by terms, type and rank embedded; "
        "`ask, all sentences embedded` embeds every one, as before)",
        "`other procs` = cores other processes used during the run",
    ]
    write_result(
        "pipeline",
        "Expansion, rerank, assembly and answer latency",
        "\n".join(sections),
        notes=notes,
    )


if __name__ == "__main__":
    main()
