"""Graph expansion's hop penalty under convex fusion, on the train and dev sets only.

    python bench/expand.py

Each set: the default (expansion only on relation cues), then expansion on every query with
``expand.hop_penalty`` 0.5 (the value tuned for RRF), 0.25 and 0.1. NFCorpus dev is limited to
its first 150 queries. Writes ``bench/results/expand.md``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from clew.config import preset_config
from clew.eval.datasets import load_dataset
from clew.eval.runner import run_eval

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
SETS = (
    (DATA / "musique-train100", "train", "recall@5"),
    (DATA / "hotpotqa-train100", "train", "recall@5"),
    (ROOT / "eval" / "dev" / "support", "dev", "ndcg@10"),
    (ROOT / "eval" / "dev" / "memory", "dev", "recall@10"),
    (DATA / "nfcorpus", "dev", "ndcg@10"),
)
PENALTIES = (0.5, 0.25, 0.1)


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    base = preset_config("default").with_overrides(expand={"enabled": False})
    configs = [("default", base)] + [
        (f"expand {p}", base.with_overrides(expand={"enabled": True, "hop_penalty": p}))
        for p in PENALTIES
    ]
    lines = [
        "# Graph expansion's hop penalty under convex fusion (train and dev sets)",
        "",
        f"Reproduce: `python bench/expand.py` ({time.strftime('%Y-%m-%d')}). Cells: the set's "
        "metric / Recall@100. `default` expands only on relation cues (at the default hop "
        "penalty); the other columns expand every query.",
        "",
        "| set | metric | " + " | ".join(name for name, _ in configs) + " |",
        "|---|---|" + "---|" * len(configs),
    ]
    for root, split, metric in SETS:
        dataset = load_dataset(root, split)
        if len(dataset.queries) > 150:
            dataset = dataset.subset(150)
        result = run_eval(dataset, configs)
        cells = [
            f"{r.slices['all'][metric]:.4f} / {r.slices['all']['recall@100']:.4f}"
            for r in result.runs
        ]
        lines.append(f"| {dataset.name}:{split} | {metric} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    out = ROOT / "bench" / "results" / "expand.md"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {out.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
