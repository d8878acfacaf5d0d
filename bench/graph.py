"""The graph leg's ablation on every set: hybrid, the old walk, PageRank, plans, expansion.

    python bench/graph.py [--sets NAME,...] [--limit N]

Rows per set (and per slice), in the order of issue #16's table:

- ``hybrid``: RRF of lexical and dense, no graph (the usual baseline);
- ``-graph``: the default without its graph leg (convex fusion, the learned lexical/dense split);
- ``+graph-old``: the default with the previous graph leg (the 1-2 hop walk, ``graph-walk``),
  no title links;
- ``+PPR-leg``: Personalized PageRank seeded by the query's concepts alone, on every query, no
  title links;
- ``+plans``: PPR seeded by the concepts and the top lexical + dense passages (a sequential
  plan: it runs after those legs), on every query, no title links;
- ``-titles``: the default without title links (:mod:`clew.retrieve.titles`);
- ``default`` (``graph.method: auto``): the router's plan, PPR seeded by both for a question
  that names an entity or identifier, the walk beside the text legs otherwise, then the top
  hit's title links;
- ``+PPR-expansion``: the default with graph expansion on every query.

The test splits are reported, never tuned on; the train100 and eval/dev sets are training data
(the PPR settings and the graph weight were chosen on them). Writes ``bench/results/graph.md``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from clew.config import EngineConfig, preset_config
from clew.eval.datasets import load_dataset
from clew.eval.runner import run_eval, variant

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
SETS = (
    (DATA / "musique-migres200", "test", "recall@5"),
    (DATA / "hotpotqa-migres200", "test", "recall@5"),
    (DATA / "scifact", "test", "ndcg@10"),
    (DATA / "nfcorpus", "test", "ndcg@10"),
    (DATA / "musique-train100", "train", "recall@5"),
    (DATA / "hotpotqa-train100", "train", "recall@5"),
    (ROOT / "eval" / "dev" / "support", "dev", "ndcg@10"),
    (ROOT / "eval" / "dev" / "memory", "dev", "recall@10"),
)


def configs() -> list[tuple[str, EngineConfig]]:
    default = preset_config("default")
    untitled = {"title_links": 0}  # the graph legs as they were before title links
    return [
        ("hybrid", preset_config("hybrid")),
        ("-graph", variant("-graph")),
        ("+graph-old", variant("graph-walk").with_overrides(graph=untitled)),
        (
            "+PPR-leg",
            default.with_overrides(graph={"method": "ppr", "seed_passages": 0, **untitled}),
        ),
        ("+plans", default.with_overrides(graph={"method": "ppr", **untitled})),
        ("-titles", variant("-titles")),
        ("default", default),
        ("+PPR-expansion", variant("+expand")),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", default="", help="comma-separated set names (default: all)")
    parser.add_argument("--limit", type=int, default=0, help="first N queries of each set")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    chosen = configs()
    lines = [
        "# The graph leg: ablation on every set",
        "",
        f"Reproduce: `python bench/graph.py` ({time.strftime('%Y-%m-%d')}). Cells: the set's "
        "metric (MuSiQue and HotpotQA Recall@5, BEIR nDCG@10, memory Recall@10); `Δ` is "
        "`default` minus `hybrid`. Test splits are reported, never tuned on; the "
        "train100 and eval/dev rows are the data the graph settings were chosen on.",
        "",
        "| set | slice | n | " + " | ".join(name for name, _ in chosen) + " | Δ vs hybrid |",
        "|---|---|---|" + "---|" * len(chosen) + "---|",
    ]
    wanted = {s for s in args.sets.split(",") if s}
    for root, split, metric in SETS:
        if wanted and root.name not in wanted:
            continue
        dataset = load_dataset(root, split)
        if args.limit and len(dataset.queries) > args.limit:
            dataset = dataset.subset(args.limit)
        result = run_eval(dataset, chosen)
        runs = result.runs
        slices = ["all", *sorted(s for s in runs[0].slices if s != "all")]
        for s in slices:
            values = [r.slices[s][metric] for r in runs]
            n = int(runs[0].slices[s].get("n", 0))
            cells = " | ".join(f"{v:.4f}" for v in values)
            names = [name for name, _ in chosen]
            delta = values[names.index("default")] - values[names.index("hybrid")]
            name = f"{dataset.name}:{split} {metric}" if s == "all" else ""
            lines.append(f"| {name} | {s} | {n} | {cells} | {delta:+.4f} |")
            print(lines[-1], flush=True)
    if not wanted and not args.limit:
        out = ROOT / "bench" / "results" / "graph.md"
        out.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
