"""Learning the router model from train splits: which leg to trust, per query.

For every train query the default pipeline runs once (all legs, the rules' graph weight) and
its signals are kept. The legs' lists are then fused again offline with each candidate route
of :data:`GRID` (the dense share of the lexical + dense weight, from lexical alone to dense
alone) by the pipeline's own RRF and dedup, and each candidate's gain is scored against the
qrels: ``(nDCG@10 + Recall@5) / 2`` of the documents ranked by their best chunk.

:func:`fit` then finds the logistic unit (:mod:`clew.retrieve.adaptive`) whose share, read
between the grid's candidates (linear interpolation of the gains), maximizes the mean gain,
each dataset weighing the same however many queries it has, with an L2 penalty. It starts from
the all-zero model (share 0.5: the config's own weights), so training can only move away from
the fixed default where the train data says so. :func:`leave_one_out` refits without each
dataset in turn and scores the one left out.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from clew.engine import Engine
from clew.eval.datasets import Dataset
from clew.eval.metrics import route_gain
from clew.eval.routes import ROUTES
from clew.retrieve.adaptive import RouterModel, dense_share
from clew.retrieve.fuse import dedup, fuse
from clew.retrieve.signals import SIGNALS
from clew.train.features import quiet_config, with_progress
from clew.types import LegHit

__all__ = [
    "GRID",
    "Example",
    "collect",
    "fit",
    "gain",
    "leave_one_out",
    "route_gains",
]

GRID: tuple[float, ...] = ROUTES
"""Candidate routes: the dense leg's share of the lexical + dense weight (as the eval's)."""
DEPTH = 100


@dataclass(frozen=True, slots=True)
class Example:
    """One train query: its signals and the gain of each candidate route of :data:`GRID`."""

    dataset: str
    qid: str
    slice: str
    values: dict[str, float]
    gains: tuple[float, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "qid": self.qid,
            "slice": self.slice,
            "values": self.values,
            "gains": list(self.gains),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Example:
        return cls(
            str(data["dataset"]),
            str(data["qid"]),
            str(data["slice"]),
            {str(k): float(v) for k, v in data["values"].items()},
            tuple(float(g) for g in data["gains"]),
        )


gain = route_gain
"""The per-query objective: the mean of nDCG@10 and Recall@5."""


def _doc(chunk_id: str) -> str:
    return chunk_id.rsplit("#", 1)[0]


def route_gains(
    lists: Mapping[str, Sequence[LegHit]],
    graph_weight: float,
    base: tuple[float, float],
    keys: Mapping[int, tuple[str, str]],
    qrels: Mapping[str, int],
    rrf_k: int,
    grid: Sequence[float] = GRID,
    method: str = "convex",
) -> tuple[float, ...]:
    """The gain of each candidate route, fusing the same leg lists with its weights."""

    def chunk_id(o: int) -> str:
        return keys[o][0]

    def content_hash(o: int) -> str:
        return keys[o][1]

    out = []
    for share in grid:
        weights = {
            "lexical": base[0] * 2.0 * (1.0 - share),
            "dense": base[1] * 2.0 * share,
            "graph": graph_weight,
        }
        fused = dedup(fuse(method, lists, weights, rrf_k, chunk_id), content_hash)
        docs = list(dict.fromkeys(_doc(chunk_id(f.ordinal)) for f in fused))[:DEPTH]
        out.append(gain(docs, qrels))
    return tuple(out)


def collect(
    engine: Engine, dataset: Dataset, name: str | None = None, *, progress: bool = False
) -> list[Example]:
    """The examples of every judged query of ``dataset`` (default config, traces off)."""
    cfg = quiet_config(engine.config)
    base = (cfg.fusion.lexical_weight, cfg.fusion.dense_weight)
    out = []
    for q in with_progress(dataset.queries, f"route {dataset.name}", progress):
        qrels = dataset.qrels.get(q.qid, {})
        if not any(g > 0 for g in qrels.values()):
            continue
        run = engine.retrieve(q.text, k=10, filter=q.filter, config=cfg)
        if not run.route.signals:
            continue  # a leg did not run: nothing to weigh
        snap = run.snap
        snap.load_keys(h.ordinal for hits in run.lists.values() for h in hits)
        gains = route_gains(
            run.lists,
            run.route.legs.get("graph", 0.0),
            base,
            snap.keys,
            qrels,
            cfg.fusion.rrf_k,
            method=cfg.fusion.method,
        )
        out.append(Example(name or dataset.name, q.qid, q.slice or "all", run.route.signals, gains))
    return out


def _interp(gains: npt.NDArray[np.float64], share: npt.NDArray[np.float64]) -> Any:
    """Per example: (gain at ``share`` read linearly between grid points, its slope)."""
    grid = np.asarray(GRID)
    idx = np.clip(np.searchsorted(grid, share, side="right") - 1, 0, len(grid) - 2)
    lo, hi = grid[idx], grid[idx + 1]
    rows = np.arange(len(share))
    g0, g1 = gains[rows, idx], gains[rows, idx + 1]
    slope = (g1 - g0) / (hi - lo)
    return g0 + slope * (share - lo), slope


def fit(
    examples: Sequence[Example],
    *,
    l2: float = 0.01,
    steps: int = 3000,
    lr: float = 0.05,
    signals: Sequence[str] = SIGNALS,
    info: Mapping[str, Any] | None = None,
) -> RouterModel:
    """The router model that maximizes the dataset-balanced mean gain (see the module)."""
    if not examples:
        raise ValueError("no train examples; give datasets with judged queries")
    x = np.array([[e.values.get(s, 0.0) for s in signals] for e in examples], dtype=np.float64)
    gains = np.array([e.gains for e in examples], dtype=np.float64)
    counts: dict[str, int] = defaultdict(int)
    for e in examples:
        counts[e.dataset] += 1
    weight = np.array([1.0 / (counts[e.dataset] * len(counts)) for e in examples])
    mean = x.mean(axis=0)
    std = x.std(axis=0)
    std[std < 1e-6] = 1.0
    z = (x - mean) / std
    w = np.zeros(z.shape[1])
    b = 0.0
    # Adam on the interpolated gain; deterministic (full batch, fixed start)
    m_w, v_w, m_b, v_b = np.zeros_like(w), np.zeros_like(w), 0.0, 0.0
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    for step in range(1, steps + 1):
        share = 1.0 / (1.0 + np.exp(-(z @ w + b)))
        _, slope = _interp(gains, share)
        d_logit = weight * slope * share * (1.0 - share)
        g_w = z.T @ d_logit - 2.0 * l2 * w
        g_b = float(d_logit.sum())
        m_w = beta1 * m_w + (1 - beta1) * g_w
        v_w = beta2 * v_w + (1 - beta2) * g_w * g_w
        m_b = beta1 * m_b + (1 - beta1) * g_b
        v_b = beta2 * v_b + (1 - beta2) * g_b * g_b
        corr1, corr2 = 1 - beta1**step, 1 - beta2**step
        w = w + lr * (m_w / corr1) / (np.sqrt(v_w / corr2) + eps)
        b = b + lr * (m_b / corr1) / (math.sqrt(v_b / corr2) + eps)
    return RouterModel(
        signals=tuple(signals),
        mean=tuple(round(float(v), 6) for v in mean),
        std=tuple(round(float(v), 6) for v in std),
        weights=tuple(round(float(v), 6) for v in w),
        bias=round(b, 6),
        info={
            "objective": "dataset-balanced mean of (nDCG@10 + Recall@5) / 2",
            "grid": list(GRID),
            "l2": l2,
            "steps": steps,
            "examples": dict(sorted(counts.items())),
            **(info or {}),
        },
    ).versioned()


def mean_gain(model: RouterModel | None, examples: Iterable[Example], share: float = 0.5) -> float:
    """Mean gain of the model's routes (None: the fixed ``share`` for every query)."""
    rows = list(examples)
    if not rows:
        return 0.0
    gains = np.array([e.gains for e in rows], dtype=np.float64)
    shares = np.array([dense_share(model, e.values) if model is not None else share for e in rows])
    value, _ = _interp(gains, shares)
    return float(value.mean())


def leave_one_out(examples: Sequence[Example], **kw: Any) -> dict[str, dict[str, float]]:
    """Per dataset: the gain of the model trained without it, against fixed routes, the best
    fixed route for that dataset (the ceiling of any corpus-level calibration of one share)
    and the per-query oracle (the best candidate for each query)."""
    out: dict[str, dict[str, float]] = {}
    for name in sorted({e.dataset for e in examples}):
        held = [e for e in examples if e.dataset == name]
        model = fit([e for e in examples if e.dataset != name], **kw)
        row = {
            "n": float(len(held)),
            "learned_lodo": mean_gain(model, held),
            "lexical": mean_gain(None, held, 0.0),
            "balanced": mean_gain(None, held, 0.5),
            "dense": mean_gain(None, held, 1.0),
            "best_fixed": max(mean_gain(None, held, c) for c in GRID),
            "oracle": float(np.mean([max(e.gains) for e in held])),
        }
        out[name] = {k: round(v, 4) for k, v in row.items()}
    return out
