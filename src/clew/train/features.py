"""Learning from a BEIR train split: reranker training data, feature weights, abstention.

Everything here reads the *train* split (or whichever split the caller names) and mines its
examples with clew's own retriever: hard negatives are the non-relevant chunks the default
pipeline ranks highest for a query, so a reranker learns to fix the retriever's real mistakes.

- :func:`mine_examples` → (query, relevant chunk texts, hard-negative texts) per query, the
  input of :func:`clew.models.cross_encoder.train_cross_encoder`.
- :func:`train_features` → logistic-regression weights for the feature reranker.
- :func:`calibrate` → the abstention calibration: each query once as is (answerable) and once
  with its relevant documents hidden (unanswerable: nearby but wrong evidence remains).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from clew.compose.answer import Calibration, fit_calibration
from clew.config import EngineConfig
from clew.engine import Engine
from clew.eval.datasets import Dataset, EvalQuery
from clew.models.cross_encoder import passage_text
from clew.models.logistic import LogisticModel, fit_logistic
from clew.retrieve.rerank import FEATURES


def _quiet(config: EngineConfig) -> EngineConfig:
    return replace(config, trace=replace(config.trace, enabled=False))


def _evidence_config(config: EngineConfig) -> EngineConfig:
    """No traces, and no abstention: calibration needs the evidence of every query."""
    cfg = _quiet(config)
    return replace(cfg, answer=replace(cfg.answer, abstain=False))


def _progress(items: Sequence[EvalQuery], desc: str, on: bool) -> Iterable[EvalQuery]:
    if not on:
        return items
    from tqdm import tqdm

    bar: Iterable[EvalQuery] = tqdm(items, desc=desc, unit="q", dynamic_ncols=True)
    return bar


def _relevant(dataset: Dataset, qid: str) -> set[str]:
    return {d for d, g in dataset.qrels.get(qid, {}).items() if g > 0}


def mine_examples(
    engine: Engine,
    dataset: Dataset,
    config: EngineConfig | None = None,
    *,
    pool: int = 40,
    negatives: int = 15,
    progress: bool = False,
) -> Iterator[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """Per query with judged documents: (query, relevant passages, hard-negative passages).

    Positives are the relevant documents' best-ranked chunks (their first chunk when the
    retriever missed them); negatives the top-ranked chunks of other documents."""
    cfg = _quiet(config or engine.config)
    layout = engine._snap().graph.layout()
    for q in _progress(dataset.queries, "mine", progress):
        relevant = _relevant(dataset, q.qid)
        if not relevant:
            continue
        result = engine.search(q.text, k=pool, filter=q.filter, config=cfg)
        positives: dict[str, str] = {}
        negs: list[str] = []
        for h in result.hits:
            if h.doc_id in relevant:
                positives.setdefault(h.doc_id, passage_text(h.title, h.text))
            elif len(negs) < negatives:
                negs.append(passage_text(h.title, h.text))
        missing = [
            layout.doc_chunks[d][0]
            for d in sorted(relevant - set(positives))
            if d in layout.doc_chunks
        ]
        for row in engine.store.fetch(missing).values():
            positives.setdefault(row.doc_id, passage_text(row.title, row.text))
        if positives and negs:
            yield q.text, tuple(positives.values()), tuple(negs)


def feature_rows(
    engine: Engine,
    dataset: Dataset,
    config: EngineConfig | None = None,
    *,
    progress: bool = False,
) -> tuple[np.ndarray[Any, np.dtype[np.float64]], np.ndarray[Any, np.dtype[np.float64]]]:
    """Feature matrix and relevance labels of every reranker candidate of every query."""
    base = config or engine.config
    cfg = _quiet(base.with_overrides(rerank={"kind": "features", "model": ""}))
    xs: list[list[float]] = []
    ys: list[float] = []
    for q in _progress(dataset.queries, "features", progress):
        relevant = _relevant(dataset, q.qid)
        if not relevant:
            continue
        run = engine._retrieve(q.text, k=cfg.rerank.pool, filter=q.filter, preset=None, config=cfg)
        docs = engine.store.fetch(list(run.features))
        for ordinal, feats in run.features.items():
            row = docs.get(ordinal)
            if row is None:
                continue
            xs.append([feats[name] for name in FEATURES])
            ys.append(1.0 if row.doc_id in relevant else 0.0)
    return np.asarray(xs, dtype=np.float64).reshape(-1, len(FEATURES)), np.asarray(ys)


def train_features(
    engine: Engine,
    dataset: Dataset,
    config: EngineConfig | None = None,
    *,
    l2: float = 1.0,
    progress: bool = False,
) -> LogisticModel:
    x, y = feature_rows(engine, dataset, config, progress=progress)
    info = {
        "dataset": dataset.name,
        "split": dataset.split,
        "candidates": len(y),
        "relevant": int(y.sum()),
        "l2": l2,
    }
    return fit_logistic(x, y, FEATURES, l2=l2, info=info)


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
    queries = [q for q in dataset.queries if _relevant(dataset, q.qid)]
    if limit is not None and len(queries) > limit:
        queries = sorted(random.Random(seed).sample(queries, limit), key=lambda q: q.qid)
    positive: list[dict[str, float]] = []
    negative: list[dict[str, float]] = []
    for q in _progress(queries, "evidence", progress):
        args: dict[str, Any] = {"k": None, "filter": q.filter, "preset": None, "config": cfg}
        answer, _, _ = engine._ask(q.text, **args)
        positive.append(answer.evidence)
        hidden, _, _ = engine._ask(q.text, exclude_docs=sorted(_relevant(dataset, q.qid)), **args)
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
    for q in _progress(items, "unrelated", progress):
        answer, _, _ = engine._ask(q.text, k=None, filter=None, preset=None, config=cfg)
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
