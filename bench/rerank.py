"""The feature reranker trained across every train/dev set, left out one set at a time, and
the slice rule that decides whether it joins the default preset.

    python bench/rerank.py [--write] [--l2 1.0] [--sets NAME ...] [--features NAME ...]

1. Feature rows (every reranker candidate of every judged query, with its label) are collected
   once per train/dev set with the default pipeline and cached under ``bench/.work/rerank/``,
   keyed by the corpus, the config, the router model and the feature names.
2. One model is fitted on all six sets (each weighing the same); ``--write`` saves it as
   ``eval/features-all.json`` and as the model clew ships (``src/clew/retrieve/reranker.json``).
3. Leave one dataset out: for each train/dev set, a model fitted on the other five reranks that
   set; its gate metric per slice against the default without a reranker.
4. Every set (test splits reported, never tuned on): default against default + the all-sets
   model, per slice. The rule of ``bench/quality.py``: a drop over 0.01 on any slice of any set
   keeps the reranker out of the default preset.

``--features`` fits on a subset of :data:`clew.retrieve.rerank.FEATURES` (to measure what a
feature is worth). Output: ``bench/results/rerank.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from clew.config import EngineConfig, preset_config
from clew.eval.datasets import Dataset, load_dataset
from clew.eval.runner import ingest_key, open_index, run_eval
from clew.models.logistic import LogisticModel
from clew.retrieve.adaptive import load_router
from clew.retrieve.rerank import FEATURES, FORMAT
from clew.train.features import feature_rows, fit_features_across

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
WORK = ROOT / "bench" / ".work" / "rerank"
TRAIN = (
    ("scifact", "train", "ndcg@10"),
    ("nfcorpus", "dev", "ndcg@10"),
    ("musique-train100", "train", "recall@5"),
    ("hotpotqa-train100", "train", "recall@5"),
    ("support", "dev", "ndcg@10"),
    ("memory", "dev", "recall@10"),
)
TEST = (
    ("scifact", "test", "ndcg@10"),
    ("nfcorpus", "test", "ndcg@10"),
    ("musique-migres200", "test", "recall@5"),
    ("hotpotqa-migres200", "test", "recall@5"),
)
RULE = 0.01
"""A drop over this on any slice keeps a reranker out of the default preset."""
Rows = tuple[str, np.ndarray[Any, np.dtype[np.float64]], np.ndarray[Any, np.dtype[np.float64]]]


def dataset_dir(name: str) -> Path:
    own = ROOT / "eval" / "dev" / name
    return own if own.is_dir() else DATA / name


def rows_key(dataset: Dataset, config: EngineConfig) -> str:
    """What the rows depend on: the corpus and ingest settings, the queries and judgements,
    the retrieval config, the router model and the feature names (a change to any collects
    the rows again)."""
    body = json.dumps(
        [
            ingest_key(dataset, config),
            [(q.qid, q.text, q.filter) for q in dataset.queries],
            dataset.qrels,
            config.to_dict(),
            load_router(config.router.model).version,
            FEATURES,
        ],
        sort_keys=True,
    )
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def rows_of(name: str, split: str, config: EngineConfig) -> Rows:
    """The feature rows of one train/dev set (cached under :func:`rows_key`)."""
    if split == "test":
        raise SystemExit(f"{name}:{split}: the reranker never trains on a test split")
    dataset = load_dataset(dataset_dir(name), split)
    key = rows_key(dataset, config)
    cache = WORK / f"{name}-{split}.npz"
    if cache.is_file():
        data = np.load(cache)
        if "key" in data.files and str(data["key"]) == key:
            return f"{name}:{split}", data["x"], data["y"]
    engine = open_index(dataset, config, progress=True)
    try:
        x, y = feature_rows(engine, dataset, config, progress=True)
    finally:
        engine.close()
    WORK.mkdir(parents=True, exist_ok=True)
    np.savez(cache, x=x, y=y, key=np.array(key))
    return f"{name}:{split}", x, y


def select(rows: list[Rows], names: tuple[str, ...]) -> list[Rows]:
    cols = [FEATURES.index(n) for n in names]
    return [(n, x[:, cols], y) for n, x, y in rows]


def fit(rows: list[Rows], names: tuple[str, ...], l2: float) -> LogisticModel:
    return fit_features_across(select(rows, names), l2=l2, features=names)


def save(model: LogisticModel, path: Path) -> None:
    path.write_text(json.dumps(model.to_json(FORMAT), indent=2) + "\n", encoding="utf-8")


def compare(
    name: str, split: str, metric: str, models: dict[str, Path], config: EngineConfig
) -> dict[str, dict[str, dict[str, float]]]:
    """Per model label: slice → {default, rerank, n} of the gate metric on one set (one eval
    run: the default once, then each model on top of it)."""
    dataset = load_dataset(dataset_dir(name), split)
    configs = [("default", config)] + [
        (label, config.with_overrides(rerank={"kind": "features", "model": str(path)}))
        for label, path in models.items()
    ]
    table = run_eval(dataset, configs).table()
    return {
        label: {
            s: {
                "default": table["default"][s][metric],
                "rerank": table[label][s][metric],
                "n": table["default"][s]["n"],
            }
            for s in table["default"]
        }
        for label in models
    }


def rule_rows(label: str, metric: str, got: dict[str, dict[str, float]]) -> list[str]:
    out = []
    for s in sorted(got, key=lambda s: (s != "all", s)):
        d, r, n = got[s]["default"], got[s]["rerank"], int(got[s]["n"])
        mark = " ✗" if r - d < -RULE else ""
        out.append(f"| {label} | {s} | {n} | {metric} | {d:.4f} | {r:.4f} | {r - d:+.4f}{mark} |")
    return out


def fails(got: dict[str, dict[str, float]]) -> list[str]:
    return [s for s, v in got.items() if v["rerank"] - v["default"] < -RULE]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--write", action="store_true", help="save the all-sets model (see above)")
    p.add_argument("--l2", type=float, default=1.0)
    p.add_argument("--features", nargs="+", default=list(FEATURES), choices=FEATURES)
    p.add_argument("--skip-lodo", action="store_true", help="only the all-sets model's rule")
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    started = time.perf_counter()
    names = tuple(args.features)
    config = preset_config("default").with_overrides(trace={"enabled": False})
    rows = [rows_of(n, s, config) for n, s, _ in TRAIN]
    model = fit(rows, names, args.l2)
    tmp = Path(tempfile.mkdtemp(prefix="clew-rerank-"))
    everything = tmp / "all.json"
    save(model, everything)
    weights = ", ".join(f"{n} {w:+.3f}" for n, w in zip(model.features, model.weights, strict=True))
    print(f"all six sets: {weights}; bias {model.bias:+.3f}", flush=True)

    lines = [
        f"Features: {', '.join(names)}; L2 {args.l2}; each set weighs the same. Rerank pool 40, "
        "the reranker's best 8 first, the rest in fused order.",
        "",
        "Weights of the model fitted on all six train/dev sets (per standard deviation; positive "
        "= more likely relevant):",
        "",
        "| feature | weight |",
        "|---|---|",
        *(
            f"| {n} | {w:+.3f} |"
            for n, w in sorted(
                zip(model.features, model.weights, strict=True), key=lambda nw: -abs(nw[1])
            )
        ),
        "",
    ]
    got: dict[tuple[str, str], dict[str, dict[str, dict[str, float]]]] = {}
    for i, (name, split, metric) in enumerate((*TRAIN, *TEST)):
        models = {"all": everything}
        if i < len(TRAIN) and not args.skip_lodo:
            models["lodo"] = tmp / f"without-{name}.json"
            save(fit([r for j, r in enumerate(rows) if j != i], names, args.l2), models["lodo"])
        got[(name, split)] = compare(name, split, metric, models, config)
        overall = {label: result["all"] for label, result in got[(name, split)].items()}
        print(f"{name} {split}: {overall}", flush=True)
    header = [
        "| set | slice | n | metric | default | + rerank | change |",
        "|---|---|---|---|---|---|---|",
    ]
    if not args.skip_lodo:
        lines += [
            "## Leave one dataset out (train/dev sets; the model fitted on the other five)",
            "",
            *header,
        ]
        for name, split, metric in TRAIN:
            lines += rule_rows(f"{name} ({split})", metric, got[(name, split)]["lodo"])
        lines.append("")
    lines += [
        "## Every set with the model fitted on all six (test splits reported, not tuned on)",
        "",
        *header,
    ]
    failed: list[str] = []
    for name, split, metric in (*TEST, *TRAIN):
        result = got[(name, split)]["all"]
        lines += rule_rows(f"{name} ({split})", metric, result)
        failed += [f"{name}/{s}" for s in fails(result)]
    verdict = (
        "passes the slice rule on every set and slice"
        if not failed
        else f"fails the slice rule on {', '.join(failed)}"
    )
    lines += ["", f"Verdict: the reranker {verdict}.", ""]
    if args.write:
        save(model, ROOT / "eval" / "features-all.json")
        save(model, ROOT / "src" / "clew" / "retrieve" / "reranker.json")
        lines.append("Written: eval/features-all.json, src/clew/retrieve/reranker.json.")
    lines += [
        "",
        f"Run time {(time.perf_counter() - started) / 60:.1f} min. Reproduce: "
        f"`python bench/rerank.py{' --write' if args.write else ''}`.",
    ]
    shutil.rmtree(tmp, ignore_errors=True)
    out = ROOT / "bench" / "results" / "rerank.md"
    out.write_text(
        "# The feature reranker across sets\n\n" + "\n".join(lines) + "\n", encoding="utf-8"
    )
    print(f"wrote {out}: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
