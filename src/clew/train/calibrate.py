"""Abstention calibration from a BEIR split: when the evidence is too weak to answer.

Each query is asked once as is (answerable) and once with its relevant documents hidden
(unanswerable: nearby but wrong evidence remains), optionally alongside questions the corpus
cannot answer (another dataset's queries); :func:`calibrate` fits the abstention model on their
evidence features and :func:`check_calibration` measures one on queries it was not fit on.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from clew.compose.answer import EVIDENCE, Calibration, fit_calibration
from clew.compose.offtopic import OFF_TOPIC, evidence_config, self_calibrated
from clew.config import EngineConfig
from clew.engine import Engine
from clew.errors import ConfigError
from clew.eval.datasets import Dataset, EvalQuery, unanswerable_queries
from clew.models.logistic import fit_logistic
from clew.train.features import relevant_docs, with_progress


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
    cfg = evidence_config(config or engine.config)
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
    scope: Any = None,
) -> list[dict[str, float]]:
    """Evidence features of questions the corpus cannot answer (another dataset's queries),
    asked as a caller of ``scope`` (None: unscoped)."""
    cfg = evidence_config(config or engine.config)
    out = []
    items = [EvalQuery(str(i), q) for i, q in enumerate(questions)]
    for q in with_progress(items, "unrelated", progress):
        answer = engine.answer(q.text, k=None, filter=None, config=cfg, scope=scope).answer
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


# -- across corpora ------------------------------------------------------------------------------

KINDS: tuple[str, ...] = ("answerable", "hidden", "unrelated", "unanswerable")
"""Evidence kinds of one corpus: its questions as is; with their relevant documents hidden;
other corpora's questions; its own questions marked ``metadata.answerable: false``."""


def corpus_evidence(
    engine: Engine,
    dataset: Dataset,
    config: EngineConfig | None = None,
    *,
    unrelated: Sequence[str] = (),
    limit: int | None = None,
    seed: int = 0,
    progress: bool = False,
) -> dict[str, list[dict[str, float]]]:
    """Every evidence kind of :data:`KINDS` for one corpus (``unrelated``: questions it cannot
    answer, e.g. other corpora's)."""
    positive, hidden = abstention_evidence(
        engine, dataset, config, limit=limit, seed=seed, progress=progress
    )
    far = unrelated_evidence(engine, unrelated, config, progress=progress)
    traps = [q.text for q in unanswerable_queries(dataset)]
    return {
        "answerable": positive,
        "hidden": hidden,
        "unrelated": far,
        "unanswerable": unrelated_evidence(engine, traps, config, progress=progress),
    }


def fit_across(
    evidence: Mapping[str, Mapping[str, Sequence[dict[str, float]]]],
    *,
    answer_rate: float = 0.9,
    l2: float = 1.0,
    features: Sequence[str] = EVIDENCE,
    info: Mapping[str, Any] | None = None,
    rule: str = "median",
) -> Calibration:
    """One calibration from several corpora: each corpus weighs the same (its answerable and its
    unanswerable rows each carry half of it). Per corpus, the threshold that answers
    ``answer_rate`` of its answerable questions; the calibration's is their median (``rule``
    ``median``: the typical corpus answers that share) or the lowest (``min``: every corpus
    does, however many unrelated questions that lets through)."""
    if rule not in ("median", "min"):
        raise ConfigError(f"rule={rule!r} is invalid; allowed: median, min")
    rows: list[list[float]] = []
    labels: list[float] = []
    weights: list[float] = []
    for kinds in evidence.values():
        pos = list(kinds.get("answerable", ()))
        neg = [e for k in ("hidden", "unrelated", "unanswerable") for e in kinds.get(k, ())]
        for group, label in ((pos, 1.0), (neg, 0.0)):
            for e in group:
                rows.append([e.get(f, 0.0) for f in features])
                labels.append(label)
                weights.append(0.5 / max(len(group), 1))
    x = np.asarray(rows, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    model = fit_logistic(x, y, features, l2=l2, sample_weight=np.asarray(weights) * len(rows))
    cuts = []
    for kinds in evidence.values():
        probs = np.sort([model.probability(e) for e in kinds.get("answerable", ())])
        if len(probs):
            cut = math.floor((1.0 - answer_rate) * len(probs) + 1e-9)
            cuts.append(float(probs[min(cut, len(probs) - 1)]))
    threshold = (float(np.median(cuts)) if rule == "median" else min(cuts)) if cuts else 0.5
    meta = dict(info or {})
    meta.update(
        {
            "rule": f"{'the median' if rule == 'median' else 'every'} corpus answers "
            f"{answer_rate:.0%} of its answerable questions",
            "corpora": {
                name: {k: len(v) for k, v in kinds.items()} for name, kinds in evidence.items()
            },
        }
    )
    return Calibration(replace(model, info=meta), threshold)


def rates(
    calibration: Calibration, kinds: Mapping[str, Sequence[dict[str, float]]]
) -> dict[str, float]:
    """Share answered of the answerable questions, share abstained of each unanswerable kind."""
    out: dict[str, float] = {}
    for kind, items in kinds.items():
        if not items:
            continue
        answered = [calibration.probability(e) >= calibration.threshold for e in items]
        share = sum(answered) / len(items)
        out["answered" if kind == "answerable" else f"abstained_{kind}"] = round(
            share if kind == "answerable" else 1.0 - share, 4
        )
    return out


# -- a user's own corpus -------------------------------------------------------------------------


def calibrate_self(
    engine: Engine,
    config: EngineConfig | None = None,
    *,
    base: Calibration | None = None,
    progress: bool = False,
    scope: Any = None,
) -> tuple[Calibration, dict[str, float]]:
    """A calibration for a corpus with no judged questions (``clew calibrate --self``): the
    weights of ``base`` (default: the shipped calibration), the threshold from how clew's
    off-topic questions score on this corpus (:func:`offtopic_threshold`); and the share of
    those questions it abstains on. With ``scope``, the questions are asked as a caller of that
    scope (what it holds alone sets the threshold; :func:`clew.engine.calibration_file` names
    where the engine looks for it), and ``info["scope"]`` records it."""
    from clew.compose.answer import load_calibration
    from clew.filters import parse_filter, to_json

    node = to_json(parse_filter(scope))
    base = (base or load_calibration("")).for_embedder(engine.embedder_name)
    far = unrelated_evidence(engine, OFF_TOPIC, config, progress=progress, scope=node)
    cal = self_calibrated(base, far, scope=node)
    return cal, rates(cal, {"unrelated": far})
