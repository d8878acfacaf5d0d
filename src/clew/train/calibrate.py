"""Abstention calibration from a BEIR split: when the evidence is too weak to answer.

Each query is asked once as is (answerable) and once with its relevant documents hidden
(unanswerable: nearby but wrong evidence remains), optionally alongside questions the corpus
cannot answer (another dataset's queries); :func:`calibrate` fits the abstention model on their
evidence features and :func:`check_calibration` measures one on queries it was not fit on.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from clew.compose.answer import Calibration, fit_calibration
from clew.config import EngineConfig
from clew.engine import Engine
from clew.eval.datasets import Dataset, EvalQuery
from clew.train.features import quiet_config, relevant_docs, with_progress


def _evidence_config(config: EngineConfig) -> EngineConfig:
    """No traces, and no abstention: calibration needs the evidence of every query."""
    cfg = quiet_config(config)
    return replace(cfg, answer=replace(cfg.answer, abstain=False))


def abstention_evidence(
    engine: Engine,
    dataset: Dataset,
    config: EngineConfig | None = None,
    *,
    limit: int | None = None,
    seed: int = 0,
    progress: bool = False,
) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """Evidence features of each query as is, and with its relevant documents hidden."""
    cfg = _evidence_config(config or engine.config)
    queries = [q for q in dataset.queries if relevant_docs(dataset, q.qid)]
    if limit is not None and len(queries) > limit:
        queries = sorted(random.Random(seed).sample(queries, limit), key=lambda q: q.qid)
    positive: list[dict[str, float]] = []
    negative: list[dict[str, float]] = []
    for q in with_progress(queries, "evidence", progress):
        args: dict[str, Any] = {"k": None, "filter": q.filter, "config": cfg}
        answer = engine.answer(q.text, **args).answer
        positive.append(answer.evidence)
        hidden = engine.answer(
            q.text, exclude_docs=sorted(relevant_docs(dataset, q.qid)), **args
        ).answer
        negative.append(hidden.evidence)
    return positive, negative


def unrelated_evidence(
    engine: Engine,
    questions: Sequence[str],
    config: EngineConfig | None = None,
    *,
    progress: bool = False,
) -> list[dict[str, float]]:
    """Evidence features of questions the corpus cannot answer (another dataset's queries)."""
    cfg = _evidence_config(config or engine.config)
    out = []
    items = [EvalQuery(str(i), q) for i, q in enumerate(questions)]
    for q in with_progress(items, "unrelated", progress):
        answer = engine.answer(q.text, k=None, filter=None, config=cfg).answer
        out.append(answer.evidence)
    return out


def calibrate(
    engine: Engine,
    dataset: Dataset,
    config: EngineConfig | None = None,
    *,
    unrelated: Sequence[str] = (),
    answer_rate: float | None = 0.9,
    limit: int | None = None,
    seed: int = 0,
    progress: bool = False,
    evidence: dict[str, Any] | None = None,
) -> Calibration:
    """Fit the abstention model: each query as is (answerable) against the same query with its
    relevant documents hidden, plus ``unrelated`` questions (both unanswerable). ``evidence``,
    when given, receives the three lists of features."""
    positive, negative = abstention_evidence(
        engine, dataset, config, limit=limit, seed=seed, progress=progress
    )
    far = unrelated_evidence(engine, unrelated, config, progress=progress)
    if evidence is not None:
        evidence.update({"answerable": positive, "hidden": negative, "unrelated": far})
    info = {
        "dataset": dataset.name,
        "split": dataset.split,
        "queries": len(positive),
        "unrelated": len(far),
        "embedder": engine.store.get_meta("embedder"),
        "negatives": "the same queries with their relevant documents hidden, and unrelated "
        "questions",
    }
    return fit_calibration(positive, [*negative, *far], answer_rate=answer_rate, info=info)


def check_calibration(
    calibration: Calibration,
    positive: Sequence[dict[str, float]],
    negative: Sequence[dict[str, float]],
    unrelated: Sequence[dict[str, float]] = (),
) -> dict[str, float]:
    """How a calibration does on queries it was not fit on: share answered when answerable,
    share abstained with the evidence hidden, and on unrelated questions."""

    def share(items: Sequence[dict[str, float]], answered: bool) -> float:
        hits = sum((calibration.probability(e) >= calibration.threshold) == answered for e in items)
        return round(hits / max(len(items), 1), 4)

    out = {
        "queries": float(len(positive)),
        "answered_when_answerable": share(positive, True),
        "abstained_when_evidence_hidden": share(negative, False),
    }
    if unrelated:
        out["unrelated"] = float(len(unrelated))
        out["abstained_when_unrelated"] = share(unrelated, False)
    return out
