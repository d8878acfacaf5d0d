"""Train the shipped router model on the train and dev sets, with leave-one-dataset-out figures.

    python bench/router.py [--write] [--l2 0.01 0.03 ...] [--sets NAME:SPLIT ...]

Collects the examples of every train set once (cached under ``bench/.work/router/``: signals
and each candidate route's gain per query, see :mod:`clew.train.router`), then for each signal
set (:data:`SIGNAL_SETS`) and L2 value refits without each dataset in turn and scores the one
left out. The choice with the best mean left-out gain is used for the final fit on all sets;
``--write`` saves it as the shipped model (``src/clew/retrieve/router.json``).
Test splits are never read.

Gain = (nDCG@10 + Recall@5) / 2 per query, from the real pipeline's leg lists fused again with
each candidate route (lexical alone ... dense alone). Output: ``bench/results/router.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from clew.config import EngineConfig
from clew.eval.datasets import load_dataset
from clew.eval.runner import open_index
from clew.retrieve.adaptive import SHIPPED, fit_summary
from clew.retrieve.signals import SIGNALS
from clew.train.router import Example, collect, fit, leave_one_out, mean_gain

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
WORK = ROOT / "bench" / ".work" / "router"
SETS = (
    "scifact:train",
    "nfcorpus:train",
    "nfcorpus:dev",
    "musique-train100:train",
    "hotpotqa-train100:train",
    "support:dev",
    "memory:dev",
)

SIGNAL_SETS: dict[str, tuple[str, ...]] = {
    "all": SIGNALS,
    "query": ("identifier", "quoted", "entity", "relation", "question", "terms"),
    "lists": (
        "lexical_top_z",
        "lexical_gap",
        "lexical_cover",
        "dense_top_z",
        "dense_gap",
        "agree_10",
        "lexical_top_in_dense",
        "dense_top_in_lexical",
    ),
    "cues": ("identifier", "quoted", "lexical_cover"),
    "identifiers": ("identifier", "quoted"),
}
"""Candidate signal sets: every signal, the query features, the list shapes, small ones."""


def examples_of(spec: str, config: EngineConfig) -> list[Example]:
    name, _, split = spec.partition(":")
    if split == "test":
        raise SystemExit(f"{spec}: the router never trains on a test split")
    cache = WORK / f"{name}-{split}.json"
    if cache.is_file():
        return [Example.from_json(e) for e in json.loads(cache.read_text())["examples"]]
    root = ROOT / "eval" / "dev" / name
    dataset = load_dataset(root if root.is_dir() else DATA / name, split)
    engine = open_index(dataset, config, progress=True)
    try:
        out = collect(engine, dataset, name, progress=True)
    finally:
        engine.close()
    WORK.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({"examples": [e.to_json() for e in out]}), encoding="utf-8")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sets", nargs="+", default=list(SETS))
    parser.add_argument("--l2", nargs="+", type=float, default=[0.003, 0.01, 0.03, 0.1])
    parser.add_argument("--write", action="store_true", help="save as the shipped model")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "router.md")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    started = time.time()
    config = EngineConfig()
    examples = [e for spec in args.sets for e in examples_of(spec, config)]
    names = sorted({e.dataset for e in examples})
    lines = [
        "# The learned router: leave-one-dataset-out on the train and dev sets",
        "",
        f"Reproduce: `python bench/router.py --write` ({time.strftime('%Y-%m-%d')}). Sets: "
        + ", ".join(f"`{s}`" for s in args.sets)
        + ". Gain per query = (nDCG@10 + Recall@5) / 2; a row's dataset weighs the same as "
        "every other in training. `learned LODO` = the model fitted without that dataset; "
        "`lexical` / `balanced` / `dense` = one fixed route for every query (dense share 0, "
        "0.5, 1); `best fixed` = the best single route for that dataset, chosen with its labels "
        "(the ceiling of any corpus-level calibration of one share); `oracle` = the best candidate "
        "route per query.",
        "",
    ]
    best: tuple[str, float, float] | None = None
    for (set_name, subset), l2 in [(kv, l2) for kv in SIGNAL_SETS.items() for l2 in args.l2]:
        lodo = leave_one_out(examples, l2=l2, signals=subset)
        mean = sum(r["learned_lodo"] for r in lodo.values()) / len(lodo)
        over = sum(r["learned_lodo"] - r["balanced"] for r in lodo.values()) / len(lodo)
        lines += [
            f"## signals `{set_name}`, L2 {l2}: mean left-out gain {mean:.4f} "
            f"({over:+.4f} over balanced)",
            "",
            "| dataset | n | lexical | balanced | dense | best fixed | learned LODO | oracle |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, row in lodo.items():
            lines.append(
                f"| {name} | {int(row['n'])} | {row['lexical']:.4f} | {row['balanced']:.4f} | "
                f"{row['dense']:.4f} | {row['best_fixed']:.4f} | {row['learned_lodo']:.4f} | "
                f"{row['oracle']:.4f} |"
            )
        lines.append("")
        print("\n".join(lines[-len(lodo) - 4 :]), flush=True)
        if best is None or mean > best[2] + 1e-9:
            best = (set_name, l2, mean)
    assert best is not None
    set_name, l2, _ = best
    model = fit(
        examples,
        l2=l2,
        signals=SIGNAL_SETS[set_name],
        info={"datasets": list(args.sets), "signal_set": set_name},
    )
    lines += [
        f"## Shipped model: all sets, signals `{set_name}`, L2 {l2} ({model.version})",
        "",
        "| dataset | n | balanced | learned (in-sample) |",
        "|---|---|---|---|",
    ]
    for name in names:
        rows = [e for e in examples if e.dataset == name]
        lines.append(
            f"| {name} | {len(rows)} | {mean_gain(None, rows, 0.5):.4f} | "
            f"{mean_gain(model, rows):.4f} |"
        )
    lines += [
        "",
        "Signal weights (per standard deviation of the signal; + = towards dense):",
        "",
        "| signal | weight | mean | std |",
        "|---|---|---|---|",
    ]
    stats = {s: (m, sd) for s, m, sd in zip(model.signals, model.mean, model.std, strict=True)}
    for signal, weight in fit_summary(model):
        m, sd = stats[signal]
        lines.append(f"| {signal} | {weight:+.3f} | {m:.3f} | {sd:.3f} |")
    lines += [f"| bias | {model.bias:+.3f} | | |", "", f"{time.time() - started:.0f} s", ""]
    print("\n".join(lines[-len(model.signals) - 8 :]))
    if args.write:
        SHIPPED.write_text(model.to_json(), encoding="utf-8")
        args.out.write_text("\n".join(lines), encoding="utf-8")
        print(f"wrote {SHIPPED.name} ({model.version}) and {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
