from __future__ import annotations

import math
import random

import numpy as np
import pytest

from clew.eval.datasets import EvalError
from clew.eval.metrics import (
    average_precision_at_k,
    canonical_metric,
    evaluate,
    mean_metrics,
    mrr_at_k,
    ndcg_at_k,
    parse_metric,
    percentile,
    recall_at_k,
    score,
)

# Three relevant docs (a=2, b=1, d=1), one judged non-relevant (c=0); d is never retrieved.
QRELS = {"a": 2, "b": 1, "c": 0, "d": 1}
RANKED = ["x", "a", "c", "b", "y"]
IDCG = 2 / math.log2(2) + 1 / math.log2(3) + 1 / math.log2(4)  # grades 2, 1, 1 at ranks 1..3


def test_ndcg_hand_computed() -> None:
    assert ndcg_at_k(RANKED, QRELS, 1) == 0.0
    # a (gain 2) at rank 2; the ideal list is cut at k=2: 2/log2(2) + 1/log2(3).
    assert ndcg_at_k(RANKED, QRELS, 2) == pytest.approx((2 / math.log2(3)) / (2 + 1 / math.log2(3)))
    assert ndcg_at_k(RANKED, QRELS, 3) == pytest.approx((2 / math.log2(3)) / IDCG)
    # b (gain 1) at rank 4.
    expected = (2 / math.log2(3) + 1 / math.log2(5)) / IDCG
    assert ndcg_at_k(RANKED, QRELS, 5) == pytest.approx(expected)
    assert ndcg_at_k(RANKED, QRELS, 100) == pytest.approx(expected)
    assert ndcg_at_k(["a", "b", "d"], QRELS, 3) == pytest.approx(1.0)
    assert ndcg_at_k(["b", "a"], {"a": 2, "b": 1}, 2) == pytest.approx(
        (1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3))
    )


def test_recall_mrr_map_hand_computed() -> None:
    assert recall_at_k(RANKED, QRELS, 1) == 0.0
    assert recall_at_k(RANKED, QRELS, 2) == pytest.approx(1 / 3)
    assert recall_at_k(RANKED, QRELS, 5) == pytest.approx(2 / 3)
    assert mrr_at_k(RANKED, QRELS, 1) == 0.0
    assert mrr_at_k(RANKED, QRELS, 2) == 0.5
    assert mrr_at_k(RANKED, QRELS, 10) == 0.5
    # Relevant at ranks 2 (P@2 = 1/2) and 4 (P@4 = 2/4), divided by all 3 relevant docs.
    assert average_precision_at_k(RANKED, QRELS, 3) == pytest.approx(0.5 / 3)
    assert average_precision_at_k(RANKED, QRELS, 5) == pytest.approx(1 / 3)
    assert average_precision_at_k(["a", "b", "d"], QRELS, 3) == pytest.approx(1.0)


def test_no_relevant_and_empty_run_score_zero() -> None:
    for qrels in ({}, {"a": 0, "b": 0}):
        for fn in (ndcg_at_k, recall_at_k, mrr_at_k, average_precision_at_k):
            assert fn(["a", "b"], qrels, 10) == 0.0
    for fn in (ndcg_at_k, recall_at_k, mrr_at_k, average_precision_at_k):
        assert fn([], QRELS, 10) == 0.0


def test_duplicates_count_once() -> None:
    qrels = {"a": 1, "b": 1}
    ranked = ["a", "a", "b"]
    assert recall_at_k(ranked, qrels, 2) == 1.0
    assert ndcg_at_k(ranked, qrels, 2) == pytest.approx(1.0)
    assert average_precision_at_k(ranked, qrels, 2) == pytest.approx(1.0)
    assert mrr_at_k(["x", "x", "a"], qrels, 2) == 0.5


def test_bad_k() -> None:
    for k in (0, -1):
        with pytest.raises(EvalError, match=rf"k={k} is invalid; allowed: an integer >= 1"):
            ndcg_at_k(RANKED, QRELS, k)


def test_parse_metric() -> None:
    assert parse_metric("ndcg@10") == ("ndcg", 10)
    assert parse_metric("nDCG@10") == ("ndcg", 10)
    assert parse_metric("Recall@5") == ("recall", 5)
    assert parse_metric("MRR@10") == ("mrr", 10)
    assert parse_metric(" map@100 ") == ("map", 100)
    assert canonical_metric("NDCG@010") == "ndcg@10"
    for bad in ("ndcg", "ndcg@", "ndcg@0", "p@10", "ndcg@1.5", "ndcg_cut_10", ""):
        with pytest.raises(EvalError, match=r"unknown metric .*allowed: ndcg@K, recall@K"):
            parse_metric(bad)


def test_score_dispatches() -> None:
    assert score("recall@5", RANKED, QRELS) == recall_at_k(RANKED, QRELS, 5)
    assert score("NDCG@3", RANKED, QRELS) == ndcg_at_k(RANKED, QRELS, 3)
    assert score("mrr@10", RANKED, QRELS) == 0.5
    assert score("map@5", RANKED, QRELS) == pytest.approx(1 / 3)
    with pytest.raises(EvalError, match="unknown metric 'bleu@4'"):
        score("bleu@4", RANKED, QRELS)


def test_evaluate_and_mean() -> None:
    qrels = {"q1": QRELS, "q2": {"z": 1}, "q3": {"a": 1}}
    run = {"q1": RANKED, "q2": ["z"], "extra": ["a"]}  # q3 missing from run; extra has no qrels
    per_query = evaluate(run, qrels, ["Recall@5", "mrr@10", "recall@5"])
    assert set(per_query) == {"q1", "q2", "q3"}
    assert per_query["q1"] == {"recall@5": pytest.approx(2 / 3), "mrr@10": 0.5}
    assert per_query["q2"] == {"recall@5": 1.0, "mrr@10": 1.0}
    assert per_query["q3"] == {"recall@5": 0.0, "mrr@10": 0.0}
    means = mean_metrics(per_query)
    assert means["recall@5"] == pytest.approx((2 / 3 + 1) / 3)
    assert means["mrr@10"] == pytest.approx(0.5)
    assert mean_metrics(per_query, ["q1", "q2", "q1"]) == {
        "recall@5": pytest.approx((2 / 3 + 1) / 2),
        "mrr@10": pytest.approx(0.75),
    }
    assert mean_metrics(per_query, []) == {}
    assert mean_metrics({}) == {}
    with pytest.raises(EvalError, match="no per-query scores for query id 'nope'"):
        mean_metrics(per_query, ["q1", "nope"])
    with pytest.raises(EvalError, match="unknown metric 'ndcg'"):
        evaluate(run, qrels, ["ndcg"])
    with pytest.raises(EvalError, match="expected the same metrics"):
        mean_metrics({"a": {"ndcg@10": 1.0}, "b": {"recall@5": 1.0}})


def test_percentile_matches_numpy() -> None:
    assert percentile([], 50) == 0.0
    assert percentile([3.0], 95) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    rng = random.Random(7)
    values = [rng.uniform(0, 100) for _ in range(37)]
    for p in (0, 1, 12.5, 50, 90, 95, 99, 100):
        assert percentile(values, p) == pytest.approx(float(np.percentile(values, p)), abs=1e-12)
    for bad in (-1, 100.5, math.nan):
        with pytest.raises(EvalError, match=r"percentile p=.* is invalid; allowed: a number in"):
            percentile(values, bad)


def _parity_fixture() -> tuple[dict[str, dict[str, int]], dict[str, dict[str, float]]]:
    rng = random.Random(20240611)
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for q in range(20):
        qid = f"q{q}"
        pool = [f"d{q}_{i}" for i in range(40)]
        judged = rng.sample(pool, 12)
        grades = {doc: rng.choice((0, 1, 2)) for doc in judged}
        grades[judged[0]] = rng.choice((1, 2))  # at least one relevant doc per query
        qrels[qid] = grades
        ranked = rng.sample(pool, 30)
        run[qid] = {doc: 100.0 - rank for rank, doc in enumerate(ranked)}  # strictly decreasing
    return qrels, run


def test_parity_with_pytrec_eval() -> None:
    pytrec_eval = pytest.importorskip("pytrec_eval")
    qrels, run = _parity_fixture()
    measures = {"ndcg_cut.10", "recall.5,10,20,100", "map_cut.100"}
    expected = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    top10 = {
        qid: dict(sorted(docs.items(), key=lambda kv: -kv[1])[:10]) for qid, docs in run.items()
    }
    expected_rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)

    ranked = {qid: sorted(docs, key=lambda d: -docs[d]) for qid, docs in run.items()}
    names = ["ndcg@10", "recall@5", "recall@10", "recall@20", "recall@100", "mrr@10", "map@100"]
    ours = evaluate(ranked, qrels, names)
    assert set(ours) == set(expected) == set(qrels)
    pairs = {
        "ndcg@10": "ndcg_cut_10",
        "recall@5": "recall_5",
        "recall@10": "recall_10",
        "recall@20": "recall_20",
        "recall@100": "recall_100",
        "map@100": "map_cut_100",
    }
    nonzero = 0
    for qid in qrels:
        for ours_name, trec_name in pairs.items():
            assert ours[qid][ours_name] == pytest.approx(expected[qid][trec_name], abs=1e-6), (
                qid,
                ours_name,
            )
            nonzero += ours[qid][ours_name] > 0
        assert ours[qid]["mrr@10"] == pytest.approx(expected_rr[qid]["recip_rank"], abs=1e-6)
    assert nonzero > 40  # the fixture exercises non-trivial values
