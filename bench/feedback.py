"""Pseudo-relevance feedback for the lexical leg (RM3-style): does it help? (issue #15;
measured, not kept)

    HF_HUB_OFFLINE=1 python bench/feedback.py [--settings M,N,BETA[,COVER] ...]

The textbook lever for BM25 on SciFact and NFCorpus is query expansion from the top hits: the
lexical leg searches once, reads its ``m`` best chunks, weighs each of their terms by
``sum over those chunks of (chunk's share of their BM25 scores) * tf / length``, times the
term's idf in the caller's scope, and searches again with the query's own terms plus the
``n`` best new terms at ``beta`` times their relative weight (the best new term weighs
``beta``, a query term 1). Terms that are only digits are left out. With ``COVER``, the
feedback runs only when the lexical top hit scores at least that share of the most any chunk
could score on the query (the router's ``lexical_cover``): a selective variant that leaves
paraphrases, where the lexical top hits are off-topic, alone. The feedback reads only chunks
the caller's filter lets through, so it cannot carry anything across a scope.

The second search is done by wrapping :meth:`EmbeddedSnapshot.lexical` in this process; the
product is unchanged. Runs the default config on the train and dev sets only (test splits are
never read) with the feedback off and at each ``m,n,beta``. Output:
``bench/results/feedback.md``.
"""

from __future__ import annotations

import dataclasses
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from _common import log, parser, setting_row, write_settings
from clew.backends.embedded.snapshot import EmbeddedSnapshot
from clew.config import EngineConfig
from clew.eval.datasets import load_dataset
from clew.eval.runner import open_index, run_config
from clew.index.bm25 import ceiling
from clew.ingest.analyze import analyze
from clew.types import LegHit
from rerank import TRAIN, dataset_dir

SETS = TRAIN  # the train and dev sets, with the metric each is read by


class Feedback:
    """Wraps ``EmbeddedSnapshot.lexical`` with one round of feedback from its own top hits."""

    def __init__(self) -> None:
        self.original = EmbeddedSnapshot.lexical
        self.setting: tuple[int, int, float, float] | None = None  # off
        self.added = 0

    def expansion(
        self, snap: EmbeddedSnapshot, terms: Mapping[str, float], top: Sequence[LegHit], stats: Any
    ) -> dict[str, float]:
        assert self.setting is not None
        _, n, beta, _ = self.setting
        total = sum(h.score for h in top) or 1.0
        rows = snap.rows([h.ordinal for h in top])
        weight: Counter[str] = Counter()
        for h in top:
            row = rows.get(h.ordinal)
            tokens = analyze(f"{row.title} {row.text}") if row is not None else []
            if not tokens:
                continue
            share = h.score / total / len(tokens)
            for term, count in Counter(tokens).items():
                weight[term] += share * count
        new = [t for t in weight if t not in terms and not t.isdigit()]
        if not new:
            return {}
        idf = snap.idf(new, stats)
        scored = sorted(new, key=lambda t: (-weight[t] * idf[t], t))[:n]
        best = weight[scored[0]] * idf[scored[0]] or 1.0
        return {t: beta * weight[t] * idf[t] / best for t in scored if idf[t] > 0}

    def lexical(
        self,
        snap: EmbeddedSnapshot,
        terms: Mapping[str, float],
        where: Any,
        cfg: Any,
        stats: Any,
    ) -> list[LegHit]:
        hits = self.original(snap, terms, where, cfg, stats)
        if self.setting is None or not hits:
            return hits
        idf = snap.idf(list(terms), stats)
        most = ceiling(terms, idf, cfg.k1)
        if most <= 0 or hits[0].score / most < self.setting[3]:
            return hits  # the lexical leg's own top hit covers too little of the query
        extra = self.expansion(snap, terms, hits[: self.setting[0]], stats)
        if not extra:
            return hits
        self.added += len(extra)
        return self.original(snap, {**terms, **extra}, where, cfg, stats)


def main(argv: Sequence[str] | None = None) -> int:
    p = parser(__doc__, quiet_wait=0.0)
    p.add_argument(
        "--settings",
        nargs="+",
        default=["3,10,0.5", "5,10,0.3", "3,20,0.3", "3,20,0.3,0.4", "3,20,0.3,0.6"],
    )
    args = p.parse_args(argv)
    config = EngineConfig()
    # no result cache: every setting must search anew
    config = dataclasses.replace(config, cache=dataclasses.replace(config.cache, size=0))
    feedback = Feedback()
    EmbeddedSnapshot.lexical = (  # type: ignore[method-assign]
        lambda snap, terms, where, cfg, stats: feedback.lexical(snap, terms, where, cfg, stats)
    )
    settings: list[tuple[str, tuple[int, int, float, float] | None]] = [("off", None)]
    for spec in args.settings:
        m, n, beta, cover = [*spec.split(","), "0"][:4]
        label = f"m {m} n {n} beta {beta}" + (f" cover {cover}" if float(cover) else "")
        settings.append((label, (int(m), int(n), float(beta), float(cover))))
    rows: list[list[object]] = []
    for name, split, metric in SETS:
        dataset = load_dataset(dataset_dir(name), split)
        engine = open_index(dataset, config, progress=False)
        scores: list[float] = []
        for label, setting in settings:
            feedback.setting, feedback.added = setting, 0
            run = run_config(engine, dataset, label, config, 10)
            scores.append(run.slices["all"][metric])
            per = feedback.added / max(len(dataset.queries), 1)
            log(f"{name}: {label} {metric} {scores[-1]:.4f} (+{per:.1f} terms/query)")
        engine.close()
        rows.append(setting_row(f"{name}:{split} {metric}", scores))
    write_settings(
        "feedback",
        "Pseudo-relevance feedback for the lexical leg (measured, not kept)",
        [label for label, _ in settings],
        rows,
        notes=[
            "`m`: feedback chunks (the lexical leg's own top hits), `n`: new terms, `beta`: the "
            "best new term's weight (a query term weighs 1)",
        ],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
