"""IR metrics with trec_eval semantics, as pure functions over a ranked list and graded qrels.

``qrels`` maps a document id to its integer relevance grade. A grade above 0 is relevant; a grade
of 0 (or below) is judged non-relevant; a document absent from ``qrels`` is unjudged and counts as
non-relevant. ``ranked`` is best first. Only the first occurrence of a document id in ``ranked``
counts: later duplicates are dropped before scoring (trec_eval never sees duplicates because a
run is keyed by document id).

Every metric agrees with ``trec_eval`` (checked against ``pytrec_eval`` in the unit tests):

=================  ========================  ==============================================
clew name          trec_eval measure         notes
=================  ========================  ==============================================
``ndcg@k``         ``ndcg_cut.k``            linear gain = grade, discount 1/log2(rank + 1)
``recall@k``       ``recall.k``
``mrr@k``          ``recip_rank``            trec_eval's is uncut; equal on a run cut at k
``map@k``          ``map_cut.k``             divided by all relevant docs, not those in k
=================  ========================  ==============================================
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence

from clew.eval.datasets import EvalError

__all__ = [
    "METRIC_NAMES",
    "average_precision_at_k",
    "canonical_metric",
    "evaluate",
    "mean_metrics",
    "mrr_at_k",
    "ndcg_at_k",
    "parse_metric",
    "percentile",
    "recall_at_k",
    "score",
]

METRIC_NAMES: tuple[str, ...] = ("ndcg", "recall", "mrr", "map")
"""Metric families accepted by :func:`parse_metric`, each written ``name@k``."""

_METRIC_RE = re.compile(r"^\s*([a-z]+)@(\d+)\s*$", re.IGNORECASE)
_ALLOWED = "ndcg@K, recall@K, mrr@K or map@K with an integer K >= 1 (e.g. ndcg@10)"


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise EvalError(f"k={k!r} is invalid; allowed: an integer >= 1")


def _top_k(ranked: Sequence[str], k: int) -> list[str]:
    """The first ``k`` distinct document ids of ``ranked``, in order."""
    _check_k(k)
    seen: set[str] = set()
    top: list[str] = []
    for doc_id in ranked:
        if doc_id in seen:
            continue
        seen.add(doc_id)
        top.append(doc_id)
        if len(top) == k:
            break
    return top


def _num_relevant(qrels: Mapping[str, int]) -> int:
    return sum(1 for grade in qrels.values() if grade > 0)


def ndcg_at_k(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """nDCG@k as trec_eval's ``ndcg_cut.k``.

    DCG sums ``grade / log2(rank + 1)`` over the top ``k`` (1-based rank; unjudged and non-positive
    grades gain 0). The ideal DCG sorts every judged document with grade > 0 by grade, descending,
    and cuts it at ``k``. 0.0 when no document is relevant. Duplicate ids in ``ranked`` count only
    at their first occurrence.
    """
    top = _top_k(ranked, k)
    ideal = sorted((grade for grade in qrels.values() if grade > 0), reverse=True)[:k]
    if not ideal:
        return 0.0
    dcg = math.fsum(
        max(qrels.get(doc_id, 0), 0) / math.log2(rank + 1)
        for rank, doc_id in enumerate(top, start=1)
    )
    idcg = math.fsum(grade / math.log2(rank + 1) for rank, grade in enumerate(ideal, start=1))
    return dcg / idcg


def recall_at_k(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """Relevant documents (grade > 0) in the top ``k`` over all relevant documents.

    0.0 when no document is relevant. Duplicate ids in ``ranked`` count only at their first
    occurrence.
    """
    top = _top_k(ranked, k)
    num_rel = _num_relevant(qrels)
    if num_rel == 0:
        return 0.0
    return sum(1 for doc_id in top if qrels.get(doc_id, 0) > 0) / num_rel


def mrr_at_k(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """1 / rank of the first relevant document (grade > 0) within the top ``k``, else 0.0.

    Duplicate ids in ``ranked`` count only at their first occurrence.
    """
    for rank, doc_id in enumerate(_top_k(ranked, k), start=1):
        if qrels.get(doc_id, 0) > 0:
            return 1.0 / rank
    return 0.0


def average_precision_at_k(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    """Average precision cut at ``k`` as trec_eval's ``map_cut.k``.

    Sums precision@i at each rank i <= k that holds a relevant document (grade > 0) and divides by
    the number of relevant documents overall (not only those within ``k``). 0.0 when no document
    is relevant. Duplicate ids in ``ranked`` count only at their first occurrence.
    """
    top = _top_k(ranked, k)
    num_rel = _num_relevant(qrels)
    if num_rel == 0:
        return 0.0
    hits = 0
    total = 0.0
    for rank, doc_id in enumerate(top, start=1):
        if qrels.get(doc_id, 0) > 0:
            hits += 1
            total += hits / rank
    return total / num_rel


_FUNCTIONS: dict[str, Callable[[Sequence[str], Mapping[str, int], int], float]] = {
    "ndcg": ndcg_at_k,
    "recall": recall_at_k,
    "mrr": mrr_at_k,
    "map": average_precision_at_k,
}


def parse_metric(name: str) -> tuple[str, int]:
    """Split ``"nDCG@10"`` into ``("ndcg", 10)``; case-insensitive, surrounding spaces ignored.

    Raises :class:`EvalError` naming the allowed forms for anything else.
    """
    match = _METRIC_RE.match(name) if isinstance(name, str) else None
    if match is None:
        raise EvalError(f"unknown metric {name!r}; allowed: {_ALLOWED}")
    family = match.group(1).lower()
    k = int(match.group(2))
    if family not in _FUNCTIONS or k < 1:
        raise EvalError(f"unknown metric {name!r}; allowed: {_ALLOWED}")
    return family, k


def canonical_metric(name: str) -> str:
    """The lower-case ``family@k`` spelling of a metric name (``"NDCG@10"`` -> ``"ndcg@10"``)."""
    family, k = parse_metric(name)
    return f"{family}@{k}"


def score(metric: str, ranked: Sequence[str], qrels: Mapping[str, int]) -> float:
    """One metric, named as :func:`parse_metric` accepts, for one query."""
    family, k = parse_metric(metric)
    return _FUNCTIONS[family](ranked, qrels, k)


def route_gain(ranked: Sequence[str], qrels: Mapping[str, int]) -> float:
    """The router's per-query objective: the mean of nDCG@10 and Recall@5."""
    return 0.5 * (ndcg_at_k(ranked, qrels, 10) + recall_at_k(ranked, qrels, 5))


def evaluate(
    run: Mapping[str, Sequence[str]],
    qrels: Mapping[str, Mapping[str, int]],
    metrics: Sequence[str],
) -> dict[str, dict[str, float]]:
    """Score every query that has qrels: query id -> canonical metric name -> value.

    Metric names are returned in canonical lower-case form (``"ndcg@10"``). A query with qrels but
    missing from ``run`` scores 0 on every metric; run entries without qrels are ignored.
    """
    if isinstance(metrics, str):
        raise EvalError(f"metrics={metrics!r} is invalid; allowed: a sequence of metric names")
    parsed: dict[str, tuple[str, int]] = {}
    for metric in metrics:
        family, k = parse_metric(metric)
        parsed.setdefault(f"{family}@{k}", (family, k))
    result: dict[str, dict[str, float]] = {}
    for qid, judged in qrels.items():
        ranked = run.get(qid, ())
        result[qid] = {
            name: _FUNCTIONS[family](ranked, judged, k) for name, (family, k) in parsed.items()
        }
    return result


def mean_metrics(
    per_query: Mapping[str, Mapping[str, float]], qids: Iterable[str] | None = None
) -> dict[str, float]:
    """Mean of each metric over ``qids`` (default: every query in ``per_query``).

    Repeated ids in ``qids`` count once. Every selected query must have scores, and the same
    metrics; otherwise :class:`EvalError`. No queries selected gives ``{}``.
    """
    selected = list(per_query) if qids is None else list(dict.fromkeys(qids))
    if not selected:
        return {}
    missing = [qid for qid in selected if qid not in per_query]
    if missing:
        shown = ", ".join(repr(q) for q in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise EvalError(
            f"no per-query scores for query id {shown}{more}; allowed: ids of queries with qrels"
        )
    names = list(per_query[selected[0]])
    for qid in selected:
        if set(per_query[qid]) != set(names):
            raise EvalError(
                f"query {qid!r} has metrics {sorted(per_query[qid])}; expected the same metrics "
                f"as query {selected[0]!r}: {sorted(names)}"
            )
    n = len(selected)
    return {name: math.fsum(per_query[qid][name] for qid in selected) / n for name in names}


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0..100) with linear interpolation, as ``numpy.percentile``.

    0.0 for no values.
    """
    if isinstance(p, bool) or not isinstance(p, int | float) or not 0.0 <= p <= 100.0:
        raise EvalError(f"percentile p={p!r} is invalid; allowed: a number in 0..100")
    if not values:
        return 0.0
    ordered = sorted(float(v) for v in values)
    position = (len(ordered) - 1) * (float(p) / 100.0)
    lower = math.floor(position)
    upper = min(lower + 1, len(ordered) - 1)
    fraction = position - lower
    low, high = ordered[lower], ordered[upper]
    diff = high - low
    # numpy's _lerp: interpolate from the nearer end so the result is exact at both ends.
    return high - diff * (1.0 - fraction) if fraction >= 0.5 else low + diff * fraction
