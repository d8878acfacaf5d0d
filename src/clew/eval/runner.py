"""The evaluation runner: index a BEIR dataset once, run configurations, score, compare.

Qrels judge documents, so each query's documents are ranked by their best chunk. One search per
query and configuration with a large ``k`` returns every fused candidate (the union of all legs'
lists), which serves both the metrics (documents by best chunk) and the oracle analysis (was a
relevant document in any leg's candidates, and did the fused top-k keep it).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from clew.compose.assemble import assemble
from clew.config import EngineConfig, preset_config
from clew.engine import Engine, display_target
from clew.eval.datasets import Dataset
from clew.eval.metrics import evaluate, mean_metrics, percentile
from clew.eval.routes import ORACLE, candidate_configs, oracle_records, route_report, share_of
from clew.ingest.analyze import ANALYZER_VERSION
from clew.ingest.concepts import VERSION as CONCEPTS_VERSION
from clew.models.embedder import cache_dir
from clew.retrieve.rerank import BLEND_MODEL
from clew.types import SearchResult

METRICS: tuple[str, ...] = (
    "ndcg@10",
    "recall@2",
    "recall@5",
    "recall@10",
    "recall@20",
    "recall@100",
    "mrr@10",
    "map@100",
)
ABLATIONS: tuple[str, ...] = ("lexical", "dense", "graph", "hybrid", "rules", "default")
"""Ablation order: each leg alone, hybrid RRF without graph, hybrid + graph routed by the rules
alone, the default (rules, then the learned leg weights). ``--ablate`` adds ``oracle-route``."""
EXTRAS: tuple[str, ...] = ("-graph", "-titles", "graph-walk", "+expand", "+rerank-blend")
"""Rows after the ablation: the default without its graph leg, the default without title
links (:mod:`clew.retrieve.titles`), the default with the previous graph leg (the hop walk
instead of PageRank), default + graph expansion, default + the
untrained feature blend. ``configs_for`` adds ``+rerank-features`` (the given weights, else the
shipped ones) and ``+rerank-ce`` when given a cross-encoder."""
ASSEMBLE_FROM = 20
"""Hits the assembler sees per query (as ``clew ask`` does)."""
ALL = "all"
CANDIDATES = 1000
"""``k`` of the eval search: large enough to return every fused candidate."""


@dataclass(frozen=True, slots=True)
class QueryRecord:
    qid: str
    slice: str
    ranked_docs: tuple[str, ...]
    scores: tuple[float, ...]
    candidate_docs: dict[str, tuple[str, ...]]
    """Leg → documents that leg's candidate list held."""
    legs_run: tuple[str, ...]
    timings_ms: dict[str, float]
    context_tokens: int
    assembled_tokens: int = 0
    """Tokens the assembler keeps from the top hits (budget, near-duplicate skip, floor)."""
    undiversified_tokens: int = 0
    """The same without the near-duplicate skip: what the diversity pass saves."""
    share: float | None = None
    """The route's dense share of the lexical + dense weight (None: neither leg ran)."""
    reason: str = ""
    """Why the router weighed the legs so (empty when the rules did)."""


@dataclass(frozen=True, slots=True)
class ConfigRun:
    name: str
    config: EngineConfig
    records: tuple[QueryRecord, ...]
    per_query: dict[str, dict[str, float]]
    slices: dict[str, dict[str, float]]
    """Slice ("all" for overall) → metric → mean; plus ``n`` (queries)."""
    latency_ms: dict[str, dict[str, float]]
    legs_run: dict[str, dict[str, int]]
    oracle: dict[str, dict[str, float]]


@dataclass(frozen=True, slots=True)
class EvalResult:
    dataset: str
    split: str
    dataset_hash: str
    release: int
    index: str
    k: int
    skipped: int
    runs: tuple[ConfigRun, ...]
    seconds: float
    environment: dict[str, str] = field(default_factory=dict)
    router: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Slice → the router report of the default run (:func:`clew.eval.routes.route_report`);
    empty unless the eval ran the candidate routes (``--ablate``)."""

    def table(self) -> dict[str, dict[str, dict[str, float]]]:
        """Config → slice → metric, the shape the gates read."""
        return {r.name: r.slices for r in self.runs}

    def to_dict(self, *, per_query: bool = True) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "split": self.split,
            "dataset_hash": self.dataset_hash,
            "release": self.release,
            "index": self.index,
            "k": self.k,
            "skipped_queries": self.skipped,
            "seconds": round(self.seconds, 3),
            "environment": self.environment,
            "router": self.router,
            "runs": [
                {
                    "name": r.name,
                    "config": r.config.to_dict(),
                    "slices": r.slices,
                    "latency_ms": r.latency_ms,
                    "legs_run": r.legs_run,
                    "oracle": r.oracle,
                    **({"per_query": r.per_query} if per_query else {}),
                }
                for r in self.runs
            ],
        }


def ingest_key(dataset: Dataset, config: EngineConfig) -> str:
    """Identifies an index built from this corpus with these ingest settings."""
    payload = json.dumps(
        {
            "corpus": dataset.corpus_hash(),
            "embedder": config.embedder.model,
            "chunk": [config.chunk.max_tokens, config.chunk.overlap_tokens],
            "concepts": [config.concepts.spacy, config.concepts.max_phrase_words],
            "analyzer": ANALYZER_VERSION,
            "extractor": CONCEPTS_VERSION,
        },
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def open_index(
    dataset: Dataset,
    config: EngineConfig,
    index: str | Path | None = None,
    *,
    progress: bool = False,
) -> Engine:
    """Open the dataset's index, building it when missing or built from other inputs."""
    key = ingest_key(dataset, config)
    target: str | Path
    if isinstance(index, str) and index.startswith(("postgresql://", "postgres://")):
        target = index  # a PostgreSQL store
    else:
        target = Path(index) if index else cache_dir() / "eval" / f"{dataset.name}-{key}"
    engine = Engine(target, config, create=True)
    if engine.store.get_meta("eval_key") != key:
        engine.ingest([dataset.corpus_path], progress=progress)
        engine.store.set_meta({"eval_key": key})
    else:
        engine.self_calibrate()  # what an ingest now does, for an index built before it did
    return engine


def run_config(
    engine: Engine,
    dataset: Dataset,
    name: str,
    config: EngineConfig,
    k: int,
    *,
    progress: bool = False,
) -> ConfigRun:
    records: list[QueryRecord] = []
    queries = dataset.queries
    bar: Any = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(queries), desc=f"{dataset.name}:{name}", unit="q", dynamic_ncols=True)
    config = replace(config, trace=replace(config.trace, enabled=False))
    for q in queries:
        result = engine.search(q.text, k=CANDIDATES, filter=q.filter, config=config)
        records.append(_record(q.qid, q.slice or ALL, result, k, config))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return summarize(name, config, records, dataset.qrels)


def _record(
    qid: str, slice_: str, result: SearchResult, k: int, config: EngineConfig
) -> QueryRecord:
    docs: dict[str, float] = {}
    candidates: dict[str, set[str]] = defaultdict(set)
    for hit in result.hits:
        if hit.doc_id not in docs:
            docs[hit.doc_id] = hit.score
        for c in hit.contributions:
            candidates[c.leg].add(hit.doc_id)
    ranked = tuple(docs)
    head = result.hits[:ASSEMBLE_FROM]
    t = time.perf_counter()
    context = assemble(head, config.assemble)
    timings = dict(result.timings_ms)
    timings["assemble"] = round((time.perf_counter() - t) * 1000.0, 3)
    plain = assemble(head, replace(config.assemble, jaccard=1.0))
    return QueryRecord(
        qid=qid,
        slice=slice_,
        ranked_docs=ranked,
        scores=tuple(docs.values()),
        candidate_docs={leg: tuple(sorted(d)) for leg, d in candidates.items()},
        legs_run=tuple(sorted(result.route.legs)),
        timings_ms=timings,
        context_tokens=sum(h.token_count for h in result.hits[:k]),
        assembled_tokens=context.tokens,
        undiversified_tokens=plain.tokens,
        share=share_of(result.route.legs, config),
        reason=result.route.reason,
    )


def summarize(
    name: str,
    config: EngineConfig,
    records: Sequence[QueryRecord],
    qrels: Mapping[str, Mapping[str, int]],
) -> ConfigRun:
    run = {r.qid: list(r.ranked_docs[:100]) for r in records}
    per_query = evaluate(run, qrels, METRICS)
    by_slice: dict[str, list[str]] = defaultdict(list)
    for r in records:
        by_slice[ALL].append(r.qid)
        if r.slice != ALL:
            by_slice[r.slice].append(r.qid)
    slices: dict[str, dict[str, float]] = {}
    legs_run: dict[str, dict[str, int]] = {}
    oracle: dict[str, dict[str, float]] = {}
    rec_by_qid = {r.qid: r for r in records}
    for s, qids in sorted(by_slice.items()):
        row = mean_metrics(per_query, qids)
        row["n"] = float(len(qids))
        row["context_tokens"] = _mean(rec_by_qid[q].context_tokens for q in qids)
        row["assembled_tokens"] = _mean(rec_by_qid[q].assembled_tokens for q in qids)
        row["undiversified_tokens"] = _mean(rec_by_qid[q].undiversified_tokens for q in qids)
        slices[s] = row
        counts: dict[str, int] = defaultdict(int)
        for q in qids:
            for leg in rec_by_qid[q].legs_run:
                counts[leg] += 1
        legs_run[s] = dict(sorted(counts.items()))
        oracle[s] = _oracle([rec_by_qid[q] for q in qids], qrels)
    stages = sorted({st for r in records for st in r.timings_ms})
    latency = {
        st: {
            "p50": round(
                percentile([r.timings_ms[st] for r in records if st in r.timings_ms], 50), 3
            ),
            "p95": round(
                percentile([r.timings_ms[st] for r in records if st in r.timings_ms], 95), 3
            ),
        }
        for st in stages
    }
    return ConfigRun(name, config, tuple(records), per_query, slices, latency, legs_run, oracle)


def _oracle(
    records: Sequence[QueryRecord], qrels: Mapping[str, Mapping[str, int]], k: int = 10
) -> dict[str, float]:
    """Share of relevant documents in each leg's candidates, in any leg's, and in the top-k."""
    total = 0
    found: dict[str, int] = defaultdict(int)
    for r in records:
        relevant = {d for d, g in qrels.get(r.qid, {}).items() if g > 0}
        total += len(relevant)
        any_leg: set[str] = set()
        for leg, docs in r.candidate_docs.items():
            hit = relevant & set(docs)
            found[leg] += len(hit)
            any_leg |= hit
        found["any_leg"] += len(any_leg)
        found[f"fused_top{k}"] += len(relevant & set(r.ranked_docs[:k]))
    return {name: round(n / total, 4) if total else 0.0 for name, n in sorted(found.items())}


def _mean(values: Iterable[float]) -> float:
    vals = list(values)
    return round(sum(vals) / len(vals), 3) if vals else 0.0


def run_eval(
    dataset: Dataset,
    configs: Sequence[tuple[str, EngineConfig]],
    *,
    index: str | Path | None = None,
    k: int = 10,
    progress: bool = False,
    on_run: Callable[[ConfigRun], None] | None = None,
    oracle: bool = False,
) -> EvalResult:
    """Evaluate each (name, config) on one dataset; the index is built once for all. With
    ``oracle``, also run every candidate route (:mod:`clew.eval.routes`): an ``oracle-route``
    row and the router report of the ``default`` run (or the first)."""
    started = time.perf_counter()
    base = configs[0][1]
    engine = open_index(dataset, base, index, progress=progress)
    router: dict[str, dict[str, Any]] = {}
    try:
        runs = []
        for name, cfg in configs:
            run = run_config(engine, dataset, name, cfg, k, progress=progress)
            runs.append(run)
            if on_run is not None:
                on_run(run)
        if oracle and runs:
            primary = next((r for r in runs if r.name == "default"), runs[0])
            row, router = _oracle_route(engine, dataset, primary, k, progress)
            runs.append(row)
            if on_run is not None:
                on_run(row)
        release = engine.store.release()
        path = display_target(engine.url) if engine.url else str(engine.directory)
    finally:
        engine.close()
    return EvalResult(
        dataset=dataset.name,
        split=dataset.split,
        dataset_hash=dataset.corpus_hash(),
        release=release,
        index=path,
        k=k,
        skipped=dataset.skipped,
        runs=tuple(runs),
        seconds=time.perf_counter() - started,
        environment={"python": platform.python_version(), "cpus": str(os.cpu_count())},
        router=router,
    )


def _oracle_route(
    engine: Engine, dataset: Dataset, primary: ConfigRun, k: int, progress: bool
) -> tuple[ConfigRun, dict[str, dict[str, Any]]]:
    """The oracle-route row and the router report of ``primary``."""
    runs = {
        name: run_config(engine, dataset, name, cfg, k, progress=progress)
        for name, cfg in candidate_configs(primary.config)
    }
    ranked = {name: {r.qid: r.ranked_docs for r in run.records} for name, run in runs.items()}
    choice = oracle_records(ranked, dataset.qrels)
    by_qid = {name: {r.qid: r for r in run.records} for name, run in runs.items()}
    records = [by_qid[choice[r.qid]][r.qid] for r in primary.records]
    row = summarize(ORACLE, primary.config, records, dataset.qrels)
    slices: dict[str, list[str]] = defaultdict(list)
    for r in primary.records:
        slices[ALL].append(r.qid)
        if r.slice != ALL:
            slices[r.slice].append(r.qid)
    report = route_report(
        {r.qid: r.share for r in primary.records},
        {r.qid: r.ranked_docs for r in primary.records},
        ranked,
        dataset.qrels,
        dict(sorted(slices.items())),
    )
    return row, report


def variant(name: str, models: Mapping[str, str] | None = None) -> EngineConfig:
    """A preset, or an extra row: ``-graph``, ``-titles``, ``graph-walk``, ``+expand``,
    ``+rerank-blend``,
    ``+rerank-features``, ``+rerank-ce`` (the last two read their model from ``models``)."""
    models = models or {}
    default = preset_config("default")
    if name == "-graph":
        return default.with_overrides(fusion={"graph_weight": 0.0})
    if name == "-titles":
        return default.with_overrides(graph={"title_links": 0})
    if name == "graph-walk":
        return default.with_overrides(graph={"method": "walk"}, router={"named_graph_weight": 0.15})
    if name == "+expand":
        return default.with_overrides(expand={"enabled": True})
    if name == "+rerank-blend":
        return default.with_overrides(rerank={"kind": "features", "model": BLEND_MODEL})
    if name == "+rerank-features":  # without a model given: the weights clew ships
        model = models.get("features", "")
        return default.with_overrides(rerank={"kind": "features", "model": model})
    if name == "+rerank-ce":
        return default.with_overrides(
            rerank={"kind": "cross-encoder", "model": models["cross-encoder"]}
        )
    return preset_config(name)


CONFIG_ROW = "config"
"""The row of ``clew eval --config FILE`` given without ``--preset`` or ``--ablate``."""


def configs_for(
    presets: Sequence[str],
    ablate: bool,
    base: EngineConfig | None = None,
    models: Mapping[str, str] | None = None,
) -> list[tuple[str, EngineConfig]]:
    """The configurations to run: the named presets, or the ablation series (each leg alone,
    hybrid, the default, then +expand and each reranker). With ``base`` (``--config``) and
    neither, the one row ``config``: ``base`` as written, its fusion and router included. With
    presets or the ablation, each row keeps its own retrieval sections (fusion, router,
    expand, rerank) and takes the rest (ingest, graph, answer …) from ``base``."""
    models = models or {}
    if base is not None and not presets and not ablate:
        return [(CONFIG_ROW, base)]
    names = list(ABLATIONS) + list(EXTRAS) if ablate else (list(presets) or ["default"])
    if ablate:  # the feature reranker's shipped weights when none are given
        names += ["+rerank-features"] + (["+rerank-ce"] if "cross-encoder" in models else [])
    out = []
    for name in dict.fromkeys(names):
        cfg = variant(name, models)
        if base is not None:
            cfg = EngineConfig.from_dict(
                {
                    k: v
                    for k, v in base.to_dict().items()
                    if k not in ("fusion", "router", "expand", "rerank")
                },
                base=cfg,
            )
        out.append((name, cfg))
    return out


def write_trec_run(path: str | Path, run: ConfigRun, depth: int = 100) -> None:
    """``qid Q0 docid rank score tag``, documents ranked by their best chunk."""
    lines = []
    for r in run.records:
        for rank, (doc, score) in enumerate(
            zip(r.ranked_docs[:depth], r.scores[:depth], strict=True), start=1
        ):
            lines.append(f"{r.qid} Q0 {doc} {rank} {score:.6f} clew-{run.name}")
    Path(path).write_text("\n".join(lines) + ("\n" if lines else ""), encoding="utf-8")


def format_table(result: EvalResult) -> str:
    """Overall and per-slice rows for every configuration, then the oracle analysis."""
    cols = ("ndcg@10", "recall@2", "recall@5", "recall@10", "recall@100", "mrr@10")
    head = (
        f"{'config':<10} {'slice':<12} {'n':>5} "
        + " ".join(f"{c:>10}" for c in cols)
        + f" {'p50 ms':>8} {'p95 ms':>8}"
    )
    lines = [
        f"{result.dataset} ({result.split}, release {result.release}, "
        f"{result.skipped} queries without qrels skipped)",
        head,
        "-" * len(head),
    ]
    for run in result.runs:
        total = run.latency_ms.get("total", {})
        for s, row in run.slices.items():
            p50 = f"{total.get('p50', 0.0):>8.1f}" if s == ALL else " " * 8
            p95 = f"{total.get('p95', 0.0):>8.1f}" if s == ALL else " " * 8
            lines.append(
                f"{run.name:<10} {s:<12} {int(row['n']):>5} "
                + " ".join(f"{row.get(c, 0.0):>10.4f}" for c in cols)
                + f" {p50} {p95}"
            )
    lines.append("")
    lines.append(
        "oracle: share of relevant documents in each leg's candidates, any leg's, "
        "and the fused top 10"
    )
    for run in result.runs:
        for s, row in run.oracle.items():
            legs = "  ".join(f"{k} {v:.3f}" for k, v in row.items())
            ran = ", ".join(f"{leg} {n}" for leg, n in run.legs_run.get(s, {}).items())
            lines.append(f"  {run.name:<10} {s:<12} {legs}   legs run: {ran}")
    if result.router:
        lines.append("")
        lines.append(format_router(result.router))
    return "\n".join(lines)


def format_router(report: Mapping[str, Mapping[str, Any]]) -> str:
    """The router report: per slice, accuracy, regret and the routes taken against the oracle's
    (dense share of the lexical + dense weight → queries)."""
    lines = [
        "router: gain = (nDCG@10 + Recall@5) / 2; accuracy = taken route (nearest candidate) "
        "as good as the oracle route; regret = oracle gain - default gain",
        f"  {'slice':<12} {'n':>5} {'accuracy':>8} {'regret':>8} {'gain':>8} {'oracle':>8}"
        "   routes taken | oracle routes (dense share: queries)",
    ]
    for s, row in report.items():
        taken = " ".join(f"{k}:{v}" for k, v in row["routes"].items())
        best = " ".join(f"{k}:{v}" for k, v in row["oracle_routes"].items())
        lines.append(
            f"  {s:<12} {row['n']:>5} {row['accuracy']:>8.3f} {row['regret']:>8.4f} "
            f"{row['gain']:>8.4f} {row['oracle_gain']:>8.4f}   {taken} | {best}"
        )
    return "\n".join(lines)
