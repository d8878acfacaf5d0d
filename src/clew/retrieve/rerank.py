"""Reranking with a safe fallback, and the explainable feature reranker.

:func:`rerank` asks a :class:`~clew.protocols.Reranker` to score the top ``pool`` candidates.
The best ``keep`` by its scores go first (ties keep fused order; unscored candidates rank after
scored ones); the rest follow in fused order. Any exception from the reranker — a model that
fails to load, invalid JSON from an LLM, a timeout — leaves the fused order untouched and the
reason recorded; only the caller's cancellation (``KeyboardInterrupt``, ``CancelledError``,
which are not ``Exception``) propagates.

Scores stay monotone with the order: the reranked hits take over the fused score *slots* of
the head in their new order, and a ``rerank`` contribution records the change, so the
assembler's score floor still reads "half the top score" and provenance is never overwritten.

Feature reranker: per candidate a fixed set of named signals (:data:`FEATURES`). By default
(``rerank.model: ""``) it is the logistic regression clew ships (:data:`SHIPPED`), trained across
six train/dev sets; ``clew train-reranker --kind features`` fits one on your data. Each
feature's contribution (weight × standardized value) is shown. ``rerank.model: blend`` is the
untrained blend 0.60·cosine + 0.25·concept overlap + 0.15·PageRank, each min-max scaled over
the candidate set.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np
import numpy.typing as npt

from clew.config import RERANKERS, RerankConfig
from clew.errors import ConfigError, ModelError
from clew.models.logistic import LogisticModel
from clew.protocols import RerankCandidate, Reranker, RerankScores
from clew.retrieve.fuse import Fused
from clew.types import LEGS, Contribution, RerankNote, RerankStatus

FEATURES: tuple[str, ...] = (
    "cosine",
    "bm25",
    "legs",
    "best_rank",
    "concept_overlap",
    "pagerank",
    "hops",
    "recency",
    "fused",
    "graph",
)
"""The features the feature reranker computes, in the order ``clew train-reranker`` fits them;
a weights file may use any of them (files fitted before ``fused`` and ``graph`` existed load)."""
BLEND: dict[str, float] = {"cosine": 0.60, "concept_overlap": 0.25, "pagerank": 0.15}
"""The untrained preset: weights of min-max scaled features."""
BLEND_MODEL = "blend"
"""``rerank.model`` of the untrained blend (``""`` is the shipped trained weights)."""
LEG = "rerank"
FORMAT = "clew-feature-reranker/1"


@dataclass(frozen=True, slots=True)
class Reranked:
    pool: list[Fused]
    status: RerankStatus
    notes: dict[int, RerankNote]
    """Ordinal → what the reranker did to that candidate."""


def rerank(
    query: str,
    pool: Sequence[Fused],
    candidates: Sequence[RerankCandidate],
    reranker: Reranker,
    keep: int,
) -> Reranked:
    """Reorder the head of ``pool`` (the first ``len(candidates)`` entries) by the reranker."""
    pool = list(pool)
    n = len(candidates)
    name = str(getattr(reranker, "name", type(reranker).__name__))
    if n == 0:
        return Reranked(pool, RerankStatus(name, True, pool=0), {})
    try:
        result = reranker.score(query, candidates)
        if len(result.scores) != n:
            raise ValueError(f"returned {len(result.scores)} scores for {n} candidates")
        for s in result.scores:
            if s is not None and not math.isfinite(s):
                raise ValueError(f"returned a non-finite score {s!r}")
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}".strip()
        return Reranked(pool, RerankStatus(name, False, reason=reason, pool=n), {})
    head = pool[:n]
    order = sorted(
        range(n),
        key=lambda i: (result.scores[i] is None, -(result.scores[i] or 0.0), i),
    )
    promoted = order[:keep]
    rest = sorted(set(range(n)) - set(promoted))
    new_order = promoted + rest
    slots = [f.score for f in head]
    notes: dict[int, RerankNote] = {}
    out: list[Fused] = []
    for after, i in enumerate(new_order):
        f = head[i]
        score = result.scores[i]
        explain = dict(result.explain[i]) if i < len(result.explain) else {}
        notes[f.ordinal] = RerankNote(name, i + 1, after + 1, score, explain)
        contribution = Contribution(
            LEG, after + 1, 0.0 if score is None else score, slots[after] - f.score
        )
        out.append(replace(f, score=slots[after], contributions=(*f.contributions, contribution)))
    status = RerankStatus(name, True, notes=tuple(result.notes), pool=n)
    return Reranked(out + pool[n:], status, notes)


# -- features ----------------------------------------------------------------------------------


def leg_features(f: Fused, top_score: float = 0.0) -> dict[str, float]:
    """The features a fused candidate carries itself: legs, best leg rank, hop distance, its
    fused score as a share of the pool's best (``top_score``), and 1 / its graph leg rank."""
    leg_ranks = [c.rank for c in f.contributions if c.leg in LEGS]
    hops = min((p.hops for p in f.expansion), default=0) if not leg_ranks else 0
    graph_ranks = [c.rank for c in f.contributions if c.leg == "graph"]
    return {
        "legs": float(len({c.leg for c in f.contributions if c.leg in LEGS})),
        "best_rank": 1.0 / min(leg_ranks) if leg_ranks else 0.0,
        "hops": float(hops),
        "fused": max(0.0, f.score) / top_score if top_score > 0 else 0.0,
        "graph": 1.0 / min(graph_ranks) if graph_ranks else 0.0,
    }


def _minmax(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    lo, hi = float(values.min()), float(values.max())
    if hi - lo <= 1e-12:
        return np.zeros_like(values) if hi <= 0 else np.ones_like(values)
    return (values - lo) / (hi - lo)


def _matrix(
    candidates: Sequence[RerankCandidate], names: Sequence[str] = FEATURES
) -> npt.NDArray[np.float64]:
    return np.array(
        [[float(c.features.get(name, 0.0)) for name in names] for c in candidates],
        dtype=np.float64,
    ).reshape(len(candidates), len(names))


class BlendReranker:
    """The untrained preset: 0.60·cosine + 0.25·concept overlap + 0.15·PageRank (min-max)."""

    name = "features:blend"
    version = "blend/1"

    def score(self, query: str, candidates: Sequence[RerankCandidate]) -> RerankScores:
        x = _matrix(candidates)
        parts = {name: w * _minmax(x[:, FEATURES.index(name)]) for name, w in BLEND.items()}
        total = sum(parts.values(), np.zeros(len(candidates)))
        explain = tuple(
            {name: round(float(v[i]), 6) for name, v in parts.items()}
            for i in range(len(candidates))
        )
        return RerankScores(tuple(float(v) for v in total), (), explain)


def load_feature_model(path: str | Path) -> LogisticModel:
    """Weights written by ``clew train-reranker --kind features`` (the file or its directory)."""
    p = Path(path)
    if p.is_dir():
        p = p / "clew-features.json"
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelError(
            f"cannot read feature reranker weights {str(path)!r}: {exc}; expected the "
            "file (or directory) written by 'clew train-reranker --kind features'"
        ) from exc
    return LogisticModel.from_json(
        data, fmt=FORMAT, features=FEATURES, source=str(p), redo="retrain it", subset=True
    )


class FeatureReranker:
    """Trained logistic regression over :data:`FEATURES`; explains each feature's part. Its
    version is ``features-`` + the first 12 hex digits of the SHA-256 of its weights."""

    def __init__(self, model: LogisticModel, name: str = "features") -> None:
        self.model = model
        self.name = name
        canonical = json.dumps(model.to_json(FORMAT), sort_keys=True, separators=(",", ":"))
        self.version = "features-" + hashlib.sha256(canonical.encode()).hexdigest()[:12]

    def score(self, query: str, candidates: Sequence[RerankCandidate]) -> RerankScores:
        m = self.model
        parts = m.parts(_matrix(candidates, m.features))
        total = parts.sum(axis=1) + m.bias
        explain = tuple(
            {name: round(float(parts[i, j]), 6) for j, name in enumerate(m.features)}
            for i in range(len(candidates))
        )
        return RerankScores(tuple(float(v) for v in total), (), explain)


def recency(values: Sequence[float | None]) -> list[float]:
    """Creation times → [0, 1] within the candidate set (newest 1); unknown → 0."""
    known = [v for v in values if v is not None]
    if not known:
        return [0.0] * len(values)
    lo, hi = min(known), max(known)
    return [0.0 if v is None else (1.0 if hi - lo <= 0 else (v - lo) / (hi - lo)) for v in values]


SHIPPED = Path(__file__).with_name("reranker.json")
"""The feature weights clew ships (``rerank.model: ""``): fitted by ``bench/rerank.py --write``
on six train/dev sets, each weighing the same; test splits never read."""


@lru_cache(maxsize=1)
def shipped_feature_model() -> LogisticModel:
    """The shipped feature weights, read once per process."""
    return load_feature_model(SHIPPED)


def build_reranker(config: RerankConfig) -> Reranker:
    """The reranker a config names. Loading errors propagate (the engine then falls back)."""
    if config.kind == "features":
        if config.model == BLEND_MODEL:
            return BlendReranker()
        if not config.model:
            return FeatureReranker(shipped_feature_model(), name="features")
        return FeatureReranker(load_feature_model(config.model), name=f"features:{config.model}")
    if config.kind == "cross-encoder":
        from clew.models.cross_encoder import CrossEncoderReranker

        return CrossEncoderReranker(
            config.model, max_length=config.max_length or None, batch_size=config.batch_size
        )
    if config.kind == "llm":
        from clew.models.llm import ChatClient, LLMGrader, settings_for

        settings = settings_for(config.base_url, config.model, config.timeout_s)
        return LLMGrader(ChatClient(settings))
    raise ConfigError(
        f"rerank.kind={config.kind!r} has no reranker; allowed: {', '.join(RERANKERS)}"
    )
