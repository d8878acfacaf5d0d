"""Learning from a BEIR train split: reranker training data and feature weights.

Everything here reads the *train* split (or whichever split the caller names) and mines its
examples with clew's own retriever: hard negatives are the non-relevant chunks the default
pipeline ranks highest for a query, so a reranker learns to fix the retriever's real mistakes.

- :func:`mine_examples` → (query, relevant chunk texts, hard-negative texts) per query, the
  input of :func:`clew.train.cross_encoder.train_cross_encoder`.
- :func:`train_features` → logistic-regression weights for the feature reranker.

The abstention calibration, which reads a split the same way, is :mod:`clew.train.calibrate`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from clew.config import EngineConfig
from clew.engine import Engine
from clew.eval.datasets import Dataset, EvalQuery
from clew.models.cross_encoder import passage_text
from clew.models.logistic import LogisticModel, fit_logistic
from clew.retrieve.rerank import FEATURES


def quiet_config(config: EngineConfig) -> EngineConfig:
    """``config`` with traces off: mining and calibration run many queries nobody inspects."""
    return replace(config, trace=replace(config.trace, enabled=False))


def with_progress(items: Sequence[EvalQuery], desc: str, on: bool) -> Iterable[EvalQuery]:
    """``items``, behind a tqdm progress bar labelled ``desc`` when ``on``."""
    if not on:
        return items
    from tqdm import tqdm

    bar: Iterable[EvalQuery] = tqdm(items, desc=desc, unit="q", dynamic_ncols=True)
    return bar


def relevant_docs(dataset: Dataset, qid: str) -> set[str]:
    """The documents judged relevant (grade > 0) to query ``qid``."""
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
    cfg = quiet_config(config or engine.config)
    layout = engine.snapshot().graph_index.layout()
    for q in with_progress(dataset.queries, "mine", progress):
        relevant = relevant_docs(dataset, q.qid)
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
    cfg = quiet_config(base.with_overrides(rerank={"kind": "features", "model": ""}))
    xs: list[list[float]] = []
    ys: list[float] = []
    for q in with_progress(dataset.queries, "features", progress):
        relevant = relevant_docs(dataset, q.qid)
        if not relevant:
            continue
        run = engine.retrieve(q.text, k=cfg.rerank.pool, filter=q.filter, config=cfg)
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


def fit_features_across(
    rows: Sequence[
        tuple[str, np.ndarray[Any, np.dtype[np.float64]], np.ndarray[Any, np.dtype[np.float64]]]
    ],
    *,
    l2: float = 1.0,
    features: Sequence[str] = FEATURES,
) -> LogisticModel:
    """One feature reranker from several train sets' :func:`feature_rows` (name, x, y), each
    set weighing the same however many candidates it has (rows scaled so the total is the
    number of rows, which keeps ``l2`` comparable with a single-set fit)."""
    kept = [(name, x, y) for name, x, y in rows if len(y)]
    if not kept:
        raise ValueError("no candidates; give train sets with judged queries")
    total = sum(len(y) for _, _, y in kept)
    x = np.vstack([x for _, x, _ in kept])
    y = np.concatenate([y for _, _, y in kept])
    weight = np.concatenate([np.full(len(y), total / (len(y) * len(kept))) for _, _, y in kept])
    info = {
        "datasets": {name: {"candidates": len(y), "relevant": int(y.sum())} for name, _, y in kept},
        "l2": l2,
        "balanced": "each dataset weighs the same",
    }
    return fit_logistic(x, y, features, l2=l2, info=info, sample_weight=weight)
