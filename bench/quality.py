"""Quality on the shared benchmark datasets: ablations per slice, oracle, gates.

Runs ``clew eval --ablate`` on each dataset (the index is built once per corpus and ingest
settings, then cached), checks ``eval/gates.yaml`` and writes ``bench/results/quality.md`` plus
one JSON file per dataset. Exit status 1 when a gate fails.

    python bench/quality.py [--datasets scifact nfcorpus ...] [--limit N]
                            [--feature-model FILE] [--rerank-model DIR]

Rows: each leg alone, hybrid RRF, the default (hybrid + graph, routed), ``+expand`` (graph
expansion on every query), ``+rerank-blend`` (the untrained feature blend), and
``+rerank-features`` (the given feature weights, else the ones clew ships: trained across six
train/dev sets by ``bench/rerank.py --write``), ``+rerank-ce`` when a cross-encoder is given
(``clew train-reranker`` on the SciFact *train* split). The "reranker rule" table
shows, per slice, each reranker's change against the default on the gate metric (nDCG@10 for
SciFact and NFCorpus, Recall@5 for the multi-hop sets): a reranker joins the default preset
only if no slice drops by more than 0.01.

``rules`` is hybrid + graph routed by the query-feature rules alone (the default before the
learned router); ``oracle-route`` ranks each query with its best candidate route, and the
router section gives per slice the routes taken against the oracle's, accuracy and regret
(:mod:`clew.eval.routes`). Test splits are reported, never tuned on; the ``train`` and ``dev``
sets are what the router and the feature reranker were trained on (so their figures are
in-sample; ``clew train-router --lodo`` gives leave-one-dataset-out figures).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from clew.eval import check_gates, configs_for, load_dataset, load_gates, run_eval
from clew.eval.runner import EvalResult

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
DEV = ROOT / "eval" / "dev"
SPLITS = {
    "musique-train100": "train",
    "hotpotqa-train100": "train",
    "support": "dev",
    "memory": "dev",
}
"""Split per dataset (default ``test``)."""
DATASETS = (
    "scifact",
    "nfcorpus",
    "musique-migres200",
    "hotpotqa-migres200",
    "musique-train100",
    "hotpotqa-train100",
    "support",
    "memory",
)
REFERENCES = {
    "scifact": "BM25 0.665 (BEIR) / 0.679 (Pyserini); MiniLM 0.645; naive RRF 0.690; "
    "LlamaIndex fusion 0.710; target ≥ 0.70",
    "nfcorpus": "BM25 0.325 (BEIR), 0.305 (rank_bm25 here); BM25+CE 0.350; target ≥ 0.34",
    "musique-migres200": "Recall@5: BM25 0.455, MiniLM 0.532, naive RRF 0.525; target ≥ 0.535",
    "hotpotqa-migres200": "Recall@5: BM25 0.738, MiniLM 0.802, naive RRF 0.805, txtai 0.833; "
    "target ≥ 0.85; txtai nDCG@10 0.839",
    "musique-train100": "TRAIN split (router training data); issue #15: default 0.583, "
    "dense 0.618 before the learned router",
    "hotpotqa-train100": "TRAIN split (router training data); issue #15: default 0.790, "
    "hybrid 0.805 before the learned router",
    "support": "our dev set (eval/dev/support): support docs, identifiers, paraphrases",
    "memory": "our dev set (eval/dev/memory): multi-session chat memory",
}


def markdown(result: EvalResult, reasons: list[str]) -> str:
    cols = ("ndcg@10", "recall@2", "recall@5", "recall@10", "recall@100", "mrr@10")
    lines = [
        f"## {result.dataset}",
        "",
        f"{result.split} split, {int(result.runs[0].slices['all']['n'])} queries "
        f"({result.skipped} without qrels skipped); corpus sha256 {result.dataset_hash[:12]}; "
        f"references: {REFERENCES.get(result.dataset, '-')}",
        "",
        "| config | slice | n | " + " | ".join(cols) + " | p50 ms | p95 ms |",
        "|---|---|---|" + "---|" * len(cols) + "---|---|",
    ]
    for run in result.runs:
        total = run.latency_ms.get("total", {})
        for s, row in run.slices.items():
            lat = f"{total.get('p50', 0):.1f} | {total.get('p95', 0):.1f}" if s == "all" else " | "
            lines.append(
                f"| {run.name} | {s} | {int(row['n'])} | "
                + " | ".join(f"{row.get(c, 0):.4f}" for c in cols)
                + f" | {lat} |"
            )
    lines += [
        "",
        "Post-fusion stages (all queries; p50 / p95 ms of the stage itself) and context tokens "
        "per query (top 10 hits; assembled from the top 20 with and without the near-duplicate "
        "skip):",
        "",
        "| config | expand | rerank | assemble | tokens top 10 | assembled | without diversity |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in result.runs:
        stage = []
        for name in ("expand", "rerank", "assemble"):
            st = run.latency_ms.get(name)
            stage.append("-" if st is None else f"{st['p50']:.1f} / {st['p95']:.1f}")
        row = run.slices["all"]
        lines.append(
            f"| {run.name} | "
            + " | ".join(stage)
            + f" | {row.get('context_tokens', 0):.0f} | {row.get('assembled_tokens', 0):.0f} | "
            f"{row.get('undiversified_tokens', 0):.0f} |"
        )
    lines += [
        "",
        "Oracle (share of relevant documents in each leg's candidates, in any leg's, "
        "and kept in the fused top 10) and legs run per slice, default preset:",
        "",
    ]
    default = next(r for r in result.runs if r.name == "default")
    for s, row in default.oracle.items():
        ran = ", ".join(f"{leg} {n}" for leg, n in default.legs_run.get(s, {}).items())
        lines.append(
            f"- {s}: " + ", ".join(f"{k} {v:.3f}" for k, v in row.items()) + f"; legs run: {ran}"
        )
    lines += rule_table(result)
    if result.router:
        lines += [
            "",
            "Router (gain = (nDCG@10 + Recall@5) / 2; routes = dense share of the "
            "lexical + dense weight: queries):",
            "",
            "| slice | n | accuracy | regret | gain | oracle gain | routes taken | oracle routes |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for s, row in result.router.items():
            taken = " ".join(f"{k}:{v}" for k, v in row["routes"].items())
            best = " ".join(f"{k}:{v}" for k, v in row["oracle_routes"].items())
            lines.append(
                f"| {s} | {row['n']} | {row['accuracy']:.3f} | {row['regret']:.4f} | "
                f"{row['gain']:.4f} | {row['oracle_gain']:.4f} | {taken} | {best} |"
            )
    lines += ["", "Gates: " + ("pass" if not reasons else "FAIL"), ""]
    lines += [f"- {r}" for r in reasons]
    return "\n".join(lines) + "\n"


RULE_METRIC = {
    "scifact": "ndcg@10",
    "nfcorpus": "ndcg@10",
    "support": "ndcg@10",
    "memory": "recall@10",
}
RULE_LIMIT = 0.01


def rule_table(result: EvalResult) -> list[str]:
    """Per slice: each post-fusion row's change against the default on the gate metric."""
    metric = RULE_METRIC.get(result.dataset, "recall@5")
    runs = {r.name: r for r in result.runs}
    extra = [n for n in runs if n.startswith("+")]
    if "default" not in runs or not extra:
        return []
    base = runs["default"].slices
    lines = [
        "",
        f"Reranker rule ({metric}, change against default; a drop over {RULE_LIMIT} in any "
        "slice keeps a row out of the default preset):",
        "",
        "| slice | default | " + " | ".join(extra) + " |",
        "|---|---|" + "---|" * len(extra),
    ]
    for s, row in base.items():
        cells = []
        for name in extra:
            delta = runs[name].slices[s].get(metric, 0.0) - row.get(metric, 0.0)
            mark = " ✗" if delta < -RULE_LIMIT else ""
            cells.append(f"{delta:+.4f}{mark}")
        lines.append(f"| {s} | {row.get(metric, 0.0):.4f} | " + " | ".join(cells) + " |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument("--limit", type=int, default=None, help="first N queries only")
    parser.add_argument("--gates", type=Path, default=ROOT / "eval" / "gates.yaml")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument(
        "--feature-model", help="feature weights (clew train-reranker --kind features)"
    )
    parser.add_argument("--rerank-model", help="cross-encoder directory (clew train-reranker)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    gates = load_gates(args.gates)
    sections = []
    failed = False
    started = time.time()
    for name in args.datasets:
        root = DEV / name if (DEV / name).is_dir() else args.data / name
        dataset = load_dataset(root, SPLITS.get(name, "test"))
        if args.limit:
            dataset = dataset.subset(args.limit)
        models = {}
        if args.feature_model:
            models["features"] = args.feature_model
        if args.rerank_model:
            models["cross-encoder"] = args.rerank_model
        result = run_eval(dataset, configs_for([], True, models=models), progress=True, oracle=True)
        reasons = check_gates(gates, result.dataset, result.table())
        failed |= bool(reasons)
        data = result.to_dict(per_query=False)
        data["index"] = Path(data["index"]).name  # no machine paths in committed results
        (args.out / f"quality-{name}.json").write_text(
            json.dumps(data, indent=2) + "\n", encoding="utf-8"
        )
        sections.append(markdown(result, reasons))
        print(sections[-1], flush=True)
    header = [
        "# Retrieval quality on the shared datasets",
        "",
        "Default preset = convex fusion of lexical, dense and graph (each leg's scores min-max "
        "normalized in its own list), the lexical/dense split set per query by the learned "
        "router (`clew/retrieve/router.json`, trained on train and dev sets only: "
        "bench/results/router.md), the graph weight by the query-feature rules; no reranker. "
        "`rules` = the previous default (RRF, rules only); `hybrid` = plain RRF of lexical and "
        "dense; `oracle-route` = each query ranked with its best candidate route. Documents "
        "are ranked by their best chunk. Latency is per query, in process, 2-core machine. "
        "Context tokens: the assembler over the top 20 hits (3,200-token budget), with and "
        "without the near-duplicate skip.",
        "",
        "Test splits (scifact, nfcorpus, musique-migres200, hotpotqa-migres200) are reported, "
        "never tuned on. musique-train100 and hotpotqa-train100 (train split) and support and "
        "memory (our dev sets, eval/dev/) are what the router and the feature reranker were "
        "trained on, so their figures are in-sample; leave-one-dataset-out figures are in "
        "bench/results/router.md.",
        "",
        "Reproduce: `make eval` (= `python bench/quality.py --feature-model "
        "eval/features-all.json`). The feature weights (the same as the shipped "
        "`clew/retrieve/reranker.json`) were made by `python bench/rerank.py --write`: "
        "SciFact train, NFCorpus dev, musique-train100, hotpotqa-train100 and eval/dev "
        "support and memory, each set weighing the same; leave-one-dataset-out figures in "
        "bench/results/rerank.md. The `+rerank-ce` row "
        "needs `--rerank-model DIR` from `clew train-reranker --dataset ../shared/data/scifact "
        "--split train --out DIR` (about 22 min on 2 cores).",
        "",
        f"This run: {time.strftime('%Y-%m-%d')}, {time.time() - started:.0f} s including index "
        "builds that were not cached; other processes shared the 2 cores during part of it, "
        "so latencies here are indicative (bench/results/pipeline.md has quiet ones).",
        "",
    ]
    if not args.limit:
        (args.out / "quality.md").write_text(
            "\n".join(header) + "\n".join(sections), encoding="utf-8"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
