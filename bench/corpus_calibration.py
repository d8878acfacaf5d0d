"""Corpus-level leg calibration without labels: does it help? (issue #15; measured, not kept)

    python bench/corpus_calibration.py [--docs 100]

The idea: before any user query, pseudo-queries made from the corpus itself tell which leg is
strong on *this* corpus, and the router's prior dense share is shifted by it. This script
measures that idea on the train and dev sets (test splits are never read):

1. **Ceiling.** For each train/dev corpus, the learned router fitted without it (as
   ``bench/router.py`` does), then the one bias shift of its logit that scores best on that
   corpus *with its labels*. No label-free calibration of one corpus-level shift can gain more.
2. **Pseudo-queries.** ``--docs`` documents per corpus (in SHA-1 order of their ids, so the
   sample is fixed), one middle sentence of 8+ words each, asked as is and with every third
   word dropped; the MRR@10 of the source document with the lexical leg alone and the dense
   leg alone. The corpus signal is dense MRR − lexical MRR.
3. **Leave one corpus out.** A slope (shift = slope × centred signal) chosen on the other
   corpora's gains, applied to the one left out; its gain against the router without a shift.

Gain per query = (nDCG@10 + Recall@5) / 2, read from the router's cached examples (each
candidate route's gain, ``bench/.work/router/``). Output: ``bench/results/corpus-calibration.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

from clew.config import EngineConfig, preset_config
from clew.eval.datasets import load_dataset
from clew.eval.runner import open_index
from clew.retrieve.adaptive import RouterModel, load_router
from clew.train.router import Example, fit, mean_gain
from rerank import dataset_dir
from router import SETS, examples_of

ROOT = Path(__file__).resolve().parents[1]
SHIFTS = np.arange(-3.0, 3.01, 0.25)
"""Candidate bias shifts of the router's logit (the ceiling's search)."""
SLOPES = np.arange(-20.0, 20.01, 1.0)
"""Candidate slopes of shift against the centred corpus signal."""
SENTENCE = re.compile(r"(?<=[.!?])\s+")


def pseudo_queries(name: str, split: str, docs: int) -> list[tuple[str, str, str]]:
    """(doc id, sentence, sentence with every third word dropped) for ``docs`` documents."""
    dataset = load_dataset(dataset_dir(name), split)
    with dataset.corpus_path.open(encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    rows.sort(key=lambda r: hashlib.sha1(str(r["_id"]).encode()).hexdigest())
    out = []
    for row in rows:
        sentences = [s for s in SENTENCE.split(str(row.get("text", ""))) if len(s.split()) >= 8]
        if len(sentences) < 2:
            continue
        words = sentences[len(sentences) // 2].split()[:60]
        dropped = " ".join(w for i, w in enumerate(words) if i % 3 != 1)
        out.append((str(row["_id"]), " ".join(words), dropped))
        if len(out) >= docs:
            break
    return out


def leg_mrr(name: str, split: str, docs: int) -> dict[str, float]:
    """MRR@10 of each pseudo-query's source document per leg, plain and with words dropped."""
    dataset = load_dataset(dataset_dir(name), split)
    engine = open_index(dataset, EngineConfig())
    legs = {
        leg: preset_config(leg).with_overrides(trace={"enabled": False})
        for leg in ("lexical", "dense")
    }
    got: dict[str, list[float]] = {}
    try:
        for doc_id, plain, dropped in pseudo_queries(name, split, docs):
            for variant, text in (("plain", plain), ("dropped", dropped)):
                for leg, cfg in legs.items():
                    ids = [h.doc_id for h in engine.search(text, k=10, config=cfg).hits]
                    rr = 1.0 / (ids.index(doc_id) + 1) if doc_id in ids else 0.0
                    got.setdefault(f"{leg}_{variant}", []).append(rr)
    finally:
        engine.close()
    return {key: float(np.mean(values)) for key, values in got.items()}


def shifted(model: RouterModel, shift: float) -> RouterModel:
    return dataclasses.replace(model, bias=model.bias + float(shift))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--docs", type=int, default=100, help="pseudo-queries per corpus")
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    started = time.perf_counter()
    shipped = load_router("")
    examples: list[Example] = [e for spec in SETS for e in examples_of(spec, EngineConfig())]
    names = sorted({e.dataset for e in examples})
    split_of = {spec.partition(":")[0]: spec.partition(":")[2] for spec in SETS}
    held = {n: [e for e in examples if e.dataset == n] for n in names}
    l2 = float(shipped.info.get("l2", 0.1))
    lodo = {
        n: fit([e for e in examples if e.dataset != n], l2=l2, signals=shipped.signals)
        for n in names
    }

    mrr = {n: leg_mrr(n, split_of[n], args.docs) for n in names}
    for n in names:
        print(n, mrr[n], flush=True)

    lines = [
        "# Corpus-level leg calibration without labels",
        "",
        f"Reproduce: `python bench/corpus_calibration.py --docs {args.docs}` "
        f"({time.strftime('%Y-%m-%d')}). Train and dev sets only. Router: the shipped model's "
        f"signals ({', '.join(shipped.signals)}) and L2, refitted without each corpus. Gain per "
        "query = (nDCG@10 + Recall@5) / 2.",
        "",
        "## Ceiling: the best corpus-level shift, chosen with the corpus's own labels",
        "",
        "| corpus | n | router (corpus left out) | best shift of its logit | gain then | ceiling |",
        "|---|---|---|---|---|---|",
    ]
    ceiling: dict[str, float] = {}
    for n in names:
        base = mean_gain(lodo[n], held[n])
        best_gain, best_shift = max(
            (mean_gain(shifted(lodo[n], s), held[n]), -abs(s), s) for s in SHIFTS
        )[::2]
        ceiling[n] = best_gain - base
        lines.append(
            f"| {n} | {len(held[n])} | {base:.4f} | {best_shift:+.2f} | {best_gain:.4f} | "
            f"{ceiling[n]:+.4f} |"
        )
    lines += [
        "",
        f"Mean ceiling over the {len(names)} corpora: {np.mean(list(ceiling.values())):+.4f}.",
        "",
        "## Pseudo-queries: MRR@10 of the source document per leg",
        "",
        "| corpus | lexical | dense | lexical, words dropped | dense, words dropped |",
        "|---|---|---|---|---|",
        *(
            f"| {n} | {mrr[n]['lexical_plain']:.3f} | {mrr[n]['dense_plain']:.3f} | "
            f"{mrr[n]['lexical_dropped']:.3f} | {mrr[n]['dense_dropped']:.3f} |"
            for n in names
        ),
        "",
        "## Leave one corpus out: shift = slope × (signal − mean signal)",
        "",
        "| signal | corpus | slope (other corpora) | signal, centred | router | calibrated "
        "| change |",
        "|---|---|---|---|---|---|---|",
    ]
    verdicts: list[str] = []
    worst, best_mean = 0.0, -1.0
    for variant in ("plain", "dropped"):
        signal = {n: mrr[n][f"dense_{variant}"] - mrr[n][f"lexical_{variant}"] for n in names}
        changes = []
        for n in names:
            others = [o for o in names if o != n]
            centre = float(np.mean([signal[o] for o in others]))

            slope = max(
                (
                    np.mean(
                        [
                            mean_gain(shifted(lodo[n], s * (signal[o] - centre)), held[o])
                            for o in others
                        ]
                    ),
                    -abs(s),
                    s,
                )
                for s in SLOPES
            )[2]
            base = mean_gain(lodo[n], held[n])
            got = mean_gain(shifted(lodo[n], slope * (signal[n] - centre)), held[n])
            changes.append(got - base)
            lines.append(
                f"| dense − lexical MRR, {variant} | {n} | {slope:+.0f} | "
                f"{signal[n] - centre:+.3f} | {base:.4f} | {got:.4f} | {got - base:+.4f} |"
            )
        verdicts.append(f"{variant} {np.mean(changes):+.4f}")
        worst = min(worst, float(np.min(changes)))
        best_mean = max(best_mean, float(np.mean(changes)))
    lines += [
        "",
        f"Mean change left out: {', '.join(verdicts)} (the ceiling above is the most any "
        "corpus-level shift could give).",
        "",
        "Verdict: "
        + (
            "kept: it gains on average and loses nowhere."
            if best_mean > 0 and worst >= -0.005
            else "not kept. Sentence pseudo-queries are near-verbatim, so lexical finds their "
            "source almost always on every corpus, and how well dense does on them says how "
            "the corpus is written, not how its users ask: support's questions are "
            "paraphrases that favour dense, its pseudo-queries favour lexical. Which leg to "
            "trust is a property of the query, which the router reads per query."
        ),
        "",
        f"Run time {(time.perf_counter() - started) / 60:.1f} min.",
    ]
    out = ROOT / "bench" / "results" / "corpus-calibration.md"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
