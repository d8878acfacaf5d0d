"""Answers: abstention calibrated on data, citations, and the "why these sources" trail.

Abstention reads the *evidence*: rank agreement between the legs (RRF scores depend on ranks
only), how much of the query's idf mass the best chunks cover, how far the top dense and lexical
scores stand above the rest of their own lists (z-scores), the best answer sentence's term
overlap, and two raw cosines of the embedder (the top dense hit's and the best answer
sentence's: only they tell a paraphrase that shares no term with its answer from an unrelated
question). A logistic regression over these gives P(answerable). ``bench/calibrate.py`` fits
the shipped one across six train corpora (answerable questions against questions of another
domain's corpora and questions marked unanswerable), with the threshold that answers 90% of
every corpus's answerable questions.
Cosines are on the embedder's own scale, so a calibration that reads them holds for the embedder
it was fitted with; the shipped file also carries a *portable* fit without them, used for any
other embedder and where no dense leg ran. ``clew calibrate`` fits one on a judged split,
``clew calibrate --self`` sets an index's own threshold; ``answer.calibration`` points at a file.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from clew.compose.assemble import Context
from clew.errors import ModelError
from clew.models.logistic import LogisticModel, fit_logistic
from clew.retrieve.named import LEG as TITLE_IDENTIFIER
from clew.types import LEGS, Hit, JSONValue, RerankStatus

EVIDENCE: tuple[str, ...] = (
    "fused_top",
    "agreement",
    "coverage",
    "coverage3",
    "dense_gap",
    "lexical_gap",
    "sentence",
    "dense_top",
    "sentence_cosine",
)
"""Abstention features, in the order of the calibration file."""
COSINE_EVIDENCE: frozenset[str] = frozenset({"dense_top", "sentence_cosine"})
"""The features that read the embedder's raw cosines (the top dense hit's, and the best answer
sentence's): they tell a paraphrase from an unrelated question where no term is shared, but their
scale is the embedder's own, so a calibration that uses them holds for the embedder it was fitted
with only (:meth:`Calibration.for_embedder`)."""
FORMAT = "clew-abstain/1"
NOT_FOUND = "The indexed sources do not contain an answer to this question."


@dataclass(frozen=True, slots=True)
class Citation:
    n: int
    doc_id: str
    chunk_id: str
    title: str
    url: str
    why: dict[str, JSONValue]
    spans: tuple[tuple[int, int], ...] = ()
    """Character offsets ``(start, end)`` in the chunk's text of the sentences the answer took
    from it (its supporting sentences; empty for a generative answer)."""
    sentences: tuple[str, ...] = ()
    """Those sentences as the answer shows them."""
    page: int | None = None
    """The page (1-based) of a paged source (PDF) the cited chunk starts on."""

    @property
    def where(self) -> str:
        """The source as a reader cites it: its title, and ``p. N`` for a page of a PDF."""
        return self.title if self.page is None else f"{self.title}, p. {self.page}"

    def to_dict(self) -> dict[str, JSONValue]:
        return {
            "n": self.n,
            "doc_id": self.doc_id,
            "chunk_id": self.chunk_id,
            "title": self.title,
            "url": self.url,
            "page": self.page,
            "why": self.why,
            "spans": [[a, b] for a, b in self.spans],
            "sentences": list(self.sentences),
        }


@dataclass(frozen=True, slots=True)
class Answer:
    question: str
    answer: str
    abstained: bool
    mode: str
    """``extractive``, ``generative``, or ``extractive`` after a generative fallback."""
    citations: tuple[Citation, ...]
    hits: tuple[Hit, ...]
    context: Context
    confidence: float
    """Calibrated P(the sources answer the question)."""
    threshold: float
    evidence: dict[str, float]
    nearest: tuple[Hit, ...] = ()
    """When abstaining: the closest misses."""
    fallback: str = ""
    """Why a generative answer fell back to the extractive one (empty if it did not)."""
    trace_id: str | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)
    release: int | None = None
    """The index release every stage of this answer read."""
    rerank: RerankStatus | None = None
    """Whether the reranker ran or fell back, and why (None when none was configured)."""
    verdict: str | None = None
    """``yes`` or ``no`` for a yes/no question about named subjects that the sentences decide
    (:mod:`clew.compose.verdict`; the answer then opens with it); None otherwise."""
    verdict_reason: str = ""

    def to_dict(self) -> dict[str, JSONValue]:
        return {
            "question": self.question,
            "answer": self.answer,
            "abstained": self.abstained,
            "mode": self.mode,
            "confidence": round(self.confidence, 4),
            "threshold": round(self.threshold, 4),
            "evidence": {k: round(v, 4) for k, v in self.evidence.items()},
            "fallback": self.fallback,
            "verdict": self.verdict,
            "verdict_reason": self.verdict_reason,
            "citations": [c.to_dict() for c in self.citations],
            "nearest": [
                {"chunk_id": h.chunk_id, "doc_id": h.doc_id, "title": h.title, "score": h.score}
                for h in self.nearest
            ],
            "hits": [h.to_dict() for h in self.hits],
            "kept": [h.chunk_id for h in self.context.kept],
            "dropped": [
                {"chunk_id": d.chunk_id, "reason": d.reason, "detail": d.detail}
                for d in self.context.dropped
            ],
            "context_tokens": self.context.tokens,
            "release": self.release,
            "rerank": None if self.rerank is None else self.rerank.to_dict(),
            "trace_id": self.trace_id,
            "timings_ms": dict(self.timings_ms),
        }


# -- abstention ---------------------------------------------------------------------------------


def _gap(scores: Sequence[float]) -> float:
    """How far the top score stands above its own list, in standard deviations."""
    if len(scores) < 3:
        return 0.0
    arr = np.asarray(scores, dtype=np.float64)
    std = float(arr.std())
    return float((arr[0] - arr.mean()) / std) if std > 1e-12 else 0.0


def coverage(query_weights: Mapping[str, float], tokens: set[str]) -> float:
    total = sum(query_weights.values())
    if total <= 0:
        return 0.0
    return sum(w for t, w in query_weights.items() if t in tokens) / total


def evidence_features(
    *,
    leg_scores: Mapping[str, Sequence[float]],
    leg_top: Mapping[str, Sequence[str]],
    hits: Sequence[Hit],
    leg_weights: Mapping[str, float],
    unit: float,
    coverages: Sequence[float],
    sentence_overlap: float,
    dense_top: float = 0.0,
    sentence_cosine: float = 0.0,
) -> dict[str, float]:
    """The abstention features of one retrieval (see :data:`EVIDENCE`)."""
    run_legs = [leg for leg in LEGS if leg_weights.get(leg, 0.0) > 0 and leg in leg_scores]
    best = sum(leg_weights[leg] for leg in run_legs) * unit if run_legs else 1.0
    fused = 0.0
    agree = 0.0
    if hits:
        top = hits[0]
        fused = sum(c.fused_part for c in top.contributions if c.leg in LEGS) / best
        if run_legs:
            agree = sum(top.chunk_id in leg_top.get(leg, ())[:10] for leg in run_legs) / len(
                run_legs
            )
    return {
        "fused_top": min(fused, 1.0),
        "agreement": agree,
        "coverage": coverages[0] if coverages else 0.0,
        "coverage3": max(coverages[:3], default=0.0),
        "dense_gap": _gap(leg_scores.get("dense", ())),
        "lexical_gap": _gap(leg_scores.get("lexical", ())),
        "sentence": sentence_overlap,
        "dense_top": dense_top,
        "sentence_cosine": sentence_cosine,
    }


@dataclass(frozen=True, slots=True)
class Calibration:
    """P(answerable) from the evidence features, and the threshold below which to abstain."""

    model: LogisticModel
    threshold: float
    portable: Calibration | None = None
    """A fit without the cosine features (:data:`COSINE_EVIDENCE`), for an embedder other than
    the one this was fitted with, or an answer with no dense leg or encoder."""

    @property
    def info(self) -> dict[str, Any]:
        return self.model.info

    @property
    def embedder(self) -> str:
        """The embedder the calibration was fitted with ("" when the file does not say)."""
        return str(self.info.get("embedder", ""))

    @property
    def reads_cosines(self) -> bool:
        return bool(COSINE_EVIDENCE & set(self.model.features))

    def probability(self, evidence: Mapping[str, float]) -> float:
        return self.model.probability(evidence)

    def without_cosines(self) -> Calibration:
        """This calibration, or its portable fit when this one reads cosines (itself when it
        has none)."""
        return self.portable if self.reads_cosines and self.portable is not None else self

    def for_embedder(self, name: str) -> Calibration:
        """The fit that holds for embedder ``name``: this one when it reads no cosines or was
        fitted with that embedder (or does not say with which), else its portable fit."""
        if not self.reads_cosines or not self.embedder or self.embedder == name:
            return self
        return self.without_cosines()

    def to_json(self) -> dict[str, Any]:
        out = {**self.model.to_json(FORMAT), "threshold": self.threshold}
        if self.portable is not None:
            out["portable"] = self.portable.to_json()
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: str) -> Calibration:
        model = LogisticModel.from_json(
            data,
            fmt=FORMAT,
            features=EVIDENCE,
            source=source,
            redo="run 'clew calibrate' again",
            subset=True,
        )
        portable = None
        if data.get("portable") is not None:
            if not isinstance(data["portable"], Mapping):
                raise ModelError(f"{source!r}: 'portable' must be a calibration object")
            portable = cls.from_json(data["portable"], f"{source} (portable)")
            if portable.reads_cosines:
                raise ModelError(f"{source!r}: the portable fit must not read cosine features")
        try:
            return cls(model, float(data["threshold"]), portable)
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"{source!r} has no valid threshold: {exc}") from exc


def load_calibration(path: str = "") -> Calibration:
    """A calibration file, or the one shipped with clew when ``path`` is empty."""
    if not path:
        text = resources.files("clew.compose").joinpath("abstain.json").read_text("utf-8")
        return Calibration.from_json(json.loads(text), "clew/compose/abstain.json")
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelError(
            f"cannot read abstention calibration {path!r}: {exc}; expected a file written by "
            "'clew calibrate'"
        ) from exc
    return Calibration.from_json(data, path)


def fit_calibration(
    answerable: Sequence[Mapping[str, float]],
    unanswerable: Sequence[Mapping[str, float]],
    *,
    answer_rate: float | None = 0.9,
    l2: float = 1.0,
    info: Mapping[str, Any] | None = None,
) -> Calibration:
    """Logistic regression answerable-vs-not, then the threshold from the data.

    ``answer_rate``: the threshold is the highest that still answers this share of the
    answerable queries (abstain only on evidence weaker than theirs); ``None``: the threshold
    of best balanced accuracy."""
    rows = [[e.get(f, 0.0) for f in EVIDENCE] for e in (*answerable, *unanswerable)]
    x: npt.NDArray[np.float64] = np.asarray(rows, dtype=np.float64)
    y: npt.NDArray[np.float64] = np.r_[np.ones(len(answerable)), np.zeros(len(unanswerable))]
    model = fit_logistic(x, y, EVIDENCE, l2=l2)
    probs = 1.0 / (1.0 + np.exp(-np.clip(model.logits(x), -50.0, 50.0)))
    pos_probs = np.sort(probs[y == 1])
    if answer_rate is not None:
        if not 0.0 < answer_rate <= 1.0:
            raise ModelError(f"answer_rate={answer_rate!r} is invalid; allowed: (0, 1]")
        cut = math.floor((1.0 - answer_rate) * len(pos_probs) + 1e-9)
        threshold = float(pos_probs[min(cut, len(pos_probs) - 1)]) if len(pos_probs) else 0.5
    else:
        threshold, best = 0.5, -1.0
        for t in np.unique(probs):
            acc = _balanced(probs, y, float(t))
            if acc > best + 1e-12:
                threshold, best = float(t), acc
    meta = dict(info or {})
    meta.update(
        {
            "rule": f"answer {answer_rate:.0%} of answerable" if answer_rate else "balanced",
            "balanced_accuracy": round(_balanced(probs, y, threshold), 4),
            "n_pos": len(answerable),
            "n_neg": len(unanswerable),
        }
    )
    return Calibration(replace(model, info=meta), threshold)


def _balanced(probs: npt.NDArray[np.float64], y: npt.NDArray[np.float64], t: float) -> float:
    pos = probs >= t
    tpr = float((pos & (y == 1)).sum() / max((y == 1).sum(), 1))
    tnr = float((~pos & (y == 0)).sum() / max((y == 0).sum(), 1))
    return (tpr + tnr) / 2


# -- why these sources -----------------------------------------------------------------------


def why(hit: Hit, matched_terms: Sequence[str], kept_rank: int | None) -> dict[str, JSONValue]:
    """The trail that led to a cited chunk: terms and concepts → edges → chunk → document."""
    trail: list[dict[str, JSONValue]] = []
    legs = {c.leg: c for c in hit.contributions}
    if "lexical" in legs and matched_terms:
        trail.append(
            {
                "from": "query terms",
                "terms": list(matched_terms),
                "edges": [],
                "chunk": hit.chunk_id,
                "document": hit.doc_id,
            }
        )
    if "dense" in legs:
        trail.append(
            {
                "from": "meaning",
                "cosine": round(legs["dense"].raw_score, 4),
                "edges": [],
                "chunk": hit.chunk_id,
                "document": hit.doc_id,
            }
        )
    if hit.graph is not None and (hit.graph.seed or hit.graph.steps):
        # Personalized PageRank: the strongest path from a seed (a query concept or a top
        # lexical / dense passage) to this chunk
        first = hit.graph.steps[0] if hit.graph.steps else None
        concept = first is not None and first.edge == "MENTIONS" and first.via == hit.graph.seed
        trail.append(
            {
                "from": "graph walk",
                "seed": hit.graph.seed,
                "seed_kind": "concept" if concept else "passage",
                "edges": [s.to_dict() for s in hit.graph.steps],
                "chunk": hit.chunk_id,
                "document": hit.doc_id,
            }
        )
    elif hit.graph is not None:
        edges: list[JSONValue] = []
        if hit.graph.hops >= 2:
            edges.append({"edge": "RELATED_TO", "via": list(hit.graph.via)})
        edges.append({"edge": "MENTIONS"})
        trail.append(
            {
                "from": "linked concepts",
                "concepts": list(hit.graph.concepts),
                "edges": edges,
                "chunk": hit.chunk_id,
                "document": hit.doc_id,
            }
        )
    if TITLE_IDENTIFIER in legs:
        trail.append(
            {
                "from": "identifier title",
                "title": " > ".join((hit.title, *hit.heading_path)),
                "edges": [],
                "chunk": hit.chunk_id,
                "document": hit.doc_id,
            }
        )
    for path in hit.expansion[:2]:
        trail.append(
            {
                "from": "title link" if path.by_title else "graph expansion",
                "seed": path.seed,
                "edges": [s.to_dict() for s in path.steps],
                "chunk": hit.chunk_id,
                "document": hit.doc_id,
            }
        )
    return {
        "trail": trail,
        "legs": [c.to_dict() for c in hit.contributions],
        "rerank": None if hit.rerank is None else hit.rerank.to_dict(),
        "context": (
            f"kept at rank {kept_rank} of the assembled context"
            if kept_rank is not None
            else "below the assembled context's score floor; its sentence answered"
        ),
    }


def url_of(hit: Hit) -> str:
    for key in ("url", "source", "path"):
        value = hit.metadata.get(key)
        if isinstance(value, str) and value:
            return value
    return hit.doc_id
