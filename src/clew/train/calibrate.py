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
from pathlib import Path
from typing import Any

import numpy as np

from clew.compose.answer import EVIDENCE, Calibration, fit_calibration
from clew.config import EngineConfig
from clew.engine import Engine
from clew.errors import ConfigError
from clew.eval.datasets import Dataset, EvalQuery, unanswerable_queries
from clew.models.logistic import fit_logistic
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
) -> Calibration:
    """One calibration from several corpora: each corpus weighs the same (its answerable and its
    unanswerable rows each carry half of it), and the threshold is the highest at which every
    corpus still answers ``answer_rate`` of its answerable questions."""
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
    threshold = 1.0
    for kinds in evidence.values():
        probs = np.sort([model.probability(e) for e in kinds.get("answerable", ())])
        if len(probs):
            cut = math.floor((1.0 - answer_rate) * len(probs))
            threshold = min(threshold, float(probs[min(cut, len(probs) - 1)]))
    meta = dict(info or {})
    meta.update(
        {
            "rule": f"every corpus answers {answer_rate:.0%} of its answerable questions",
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


def leave_one_out(
    evidence: Mapping[str, Mapping[str, Sequence[dict[str, float]]]],
    **fit: Any,
) -> dict[str, dict[str, float]]:
    """Per corpus, the rates of a calibration fitted on the other corpora only."""
    out: dict[str, dict[str, float]] = {}
    for name, kinds in evidence.items():
        rest = {n: k for n, k in evidence.items() if n != name}
        cal = fit_across(rest, **fit)
        out[name] = {"threshold": round(cal.threshold, 4), **rates(cal, kinds)}
    return out


# -- a user's own corpus -------------------------------------------------------------------------

SELF_WORDS = 6
"""Content words of a self-made question: a sentence's most specific words, in its order — short
enough that the sentence is not simply looked up, long enough to name what it is about."""


def self_questions(engine: Engine, n: int = 100, seed: int = 0) -> list[tuple[EvalQuery, str]]:
    """Questions made from the corpus itself, each with the document it came from as its only
    relevant document: from ``n`` chunks drawn at random (one per document), a sentence of at
    least 8 words cut to its :data:`SELF_WORDS` highest-idf analyzer terms. Each comes with
    the id of its document."""
    from clew.compose.extract import split_sentences
    from clew.ingest.analyze import analyze

    store = engine.store
    top = store.max_ordinal()
    order = list(range(top + 1))
    random.Random(seed).shuffle(order)
    snap = engine.snapshot()
    out: list[tuple[EvalQuery, str]] = []
    used: set[str] = set()
    for start in range(0, len(order), 256):
        if len(out) >= n:
            break
        rows = store.fetch(order[start : start + 256])
        for o in order[start : start + 256]:
            row = rows.get(o)
            if row is None or row.doc_id in used or len(out) >= n:
                continue
            spans = [row.text[a:b] for a, b in split_sentences(row.text)]
            spans = [x for x in spans if len(x.split()) >= 8]
            if not spans:
                continue
            sentence = spans[random.Random(f"{seed}:{o}").randrange(len(spans))]
            terms = list(dict.fromkeys(analyze(sentence)))
            idf = snap.idf(terms, None)
            keep = set(sorted(terms, key=lambda t: (-idf.get(t, 0.0), t))[:SELF_WORDS])
            words = [t for t in terms if t in keep]
            if len(words) < 3:
                continue
            used.add(row.doc_id)
            out.append((EvalQuery(f"self-{o}", " ".join(words)), row.doc_id))
    return out


def self_evidence(
    engine: Engine,
    config: EngineConfig | None = None,
    *,
    n: int = 100,
    seed: int = 0,
    progress: bool = False,
) -> dict[str, list[dict[str, float]]]:
    """The evidence kinds of a corpus with no judged questions: its self-made questions
    (:func:`self_questions`) as is and with their document hidden, and clew's off-topic
    questions as the unrelated ones."""
    from clew.train.offtopic import OFF_TOPIC

    made = self_questions(engine, n, seed)
    if len(made) < 10:
        raise ConfigError(
            f"the index yields {len(made)} self-made questions; allowed: at least 10 "
            "(ingest more documents, or calibrate on a judged dataset with --dataset)"
        )
    queries = tuple(q for q, _ in made)
    qrels = {q.qid: {doc: 1} for q, doc in made}
    dataset = Dataset("self", Path("."), "self", queries, qrels, 0)
    return corpus_evidence(engine, dataset, config, unrelated=OFF_TOPIC, progress=progress)


def calibrate_self(
    engine: Engine,
    config: EngineConfig | None = None,
    *,
    n: int = 100,
    answer_rate: float = 0.9,
    seed: int = 0,
    progress: bool = False,
) -> tuple[Calibration, dict[str, float]]:
    """A calibration for a corpus with no judged questions (``clew calibrate --self``): fitted on
    :func:`self_evidence` (answerable against unrelated; the hidden-document questions are
    reported, not fitted: a near miss often does answer a self-made question), with the
    threshold that answers ``answer_rate`` of the self-made questions; and its in-sample rates."""
    kinds = self_evidence(engine, config, n=n, seed=seed, progress=progress)
    fit = {k: v for k, v in kinds.items() if k != "hidden"}
    info = {
        "dataset": "self",
        "queries": len(kinds["answerable"]),
        "unrelated": len(kinds["unrelated"]),
    }
    cal = fit_across({"self": fit}, answer_rate=answer_rate, info=info)
    return cal, rates(cal, kinds)
