"""The BM25 formulas (clew.index.bm25) against values computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from clew.backends.embedded.lexical import BM25Index
from clew.index import bm25


def test_idf() -> None:
    assert bm25.idf(10, 2) == pytest.approx(math.log(4.4))  # 1 + 8.5 / 2.5
    assert bm25.idf(10, 0) == pytest.approx(math.log(22.0))  # 1 + 10.5 / 0.5: the highest
    assert bm25.idf(1, 1) == pytest.approx(math.log(4 / 3))  # 1 + 0.5 / 1.5
    assert 0 < bm25.idf(5, 5) < bm25.idf(5, 4) < bm25.idf(5, 0)  # never negative, falls with df
    assert bm25.idf(10, 2) == bm25.idf(10.0, 2.0)  # int or float counts: the same bits


def test_average_length() -> None:
    assert bm25.average_length(30.0, 3) == 10.0
    assert bm25.average_length(0.0, 0) == 0.0
    assert bm25.average_length(7.0, 0) == 7.0  # no chunks: divided by 1, not by 0


def test_length_norm_and_saturation() -> None:
    assert bm25.length_norm(10, 10.0, 0.9, 0.4) == pytest.approx(0.9)  # an average chunk: k1
    assert bm25.length_norm(20, 10.0, 1.2, 0.75) == pytest.approx(2.1)  # 1.2 · (0.25 + 1.5)
    assert bm25.length_norm(20, 10.0, 1.2, 0.0) == pytest.approx(1.2)  # b = 0: no length
    assert bm25.saturation(1, 0.9, 0.9) == pytest.approx(1.0)  # 1.9 / 1.9
    assert bm25.saturation(3, 2.1, 1.2) == pytest.approx(6.6 / 5.1)
    assert bm25.saturation(1e9, 2.1, 1.2) == pytest.approx(2.2)  # saturates at k1 + 1
    assert bm25.term_score(2.0, 0.5, 3, 2.1, 1.2) == pytest.approx(6.6 / 5.1)
    assert bm25.term_score(math.log(2), 1.0, 1, 0.9, 0.9) == pytest.approx(math.log(2))


def test_array_variants_keep_float32() -> None:
    lengths = np.array([10, 20, 5], dtype=np.float32)
    tf = np.array([1, 3, 2], dtype=np.float32)
    norm = bm25.length_norms(lengths, 10.0, 1.2, 0.75)
    assert norm.dtype == np.float32
    assert norm.tolist() == pytest.approx([1.2, 2.1, 0.75])  # 1.2 · (0.25 + 0.375)
    sat = bm25.saturations(tf, norm, 1.2)
    assert sat.dtype == np.float32
    assert sat.tolist() == pytest.approx([2.2 / 2.2, 6.6 / 5.1, 4.4 / 2.75], rel=1e-6)
    scores = bm25.term_scores(2.0, 0.5, tf, norm, 1.2)
    assert scores.dtype == np.float32
    assert scores.tolist() == pytest.approx(sat.tolist())
    # the float32 weight times the float32 saturations, exactly
    assert np.array_equal(scores, np.float32(2.0 * 0.5) * sat)
    for i in range(3):  # each element is the scalar formula, rounded to float32
        scalar = bm25.term_score(2.0, 0.5, float(tf[i]), float(norm[i]), 1.2)
        assert float(scores[i]) == pytest.approx(scalar, rel=1e-6)


def test_the_embedded_index_scores_with_them() -> None:
    idx = BM25Index()
    idx.add([(0, ["a", "b", "a"]), (1, ["b", "c"])])
    # "a": in 1 of 2 chunks, idf ln(1 + 1.5 / 1.5) = ln 2; mean length 2.5
    assert idx.idf("a") == pytest.approx(math.log(2.0))
    assert idx.idf("zzz") == pytest.approx(math.log(1 + 2.5 / 0.5))  # df 0
    scores = idx.scores(["a"], 2, k1=0.9, b=0.4)
    assert scores is not None
    norm = 0.9 * (0.6 + 0.4 * 3 / 2.5)  # chunk 0: 3 tokens, "a" twice
    assert float(scores[0]) == pytest.approx(math.log(2.0) * 2 * 1.9 / (2 + norm), rel=1e-6)
    assert float(scores[1]) == 0.0


def test_ceiling_bounds_every_score_on_the_terms() -> None:
    terms, idf = {"a": 1.0, "b": 0.5, "gone": 1.0}, {"a": 2.0, "b": 1.0}
    top = bm25.ceiling(terms, idf, 1.2)
    assert top == pytest.approx(2.2 * (2.0 + 0.5))  # a term without idf counts 0
    for tf in (1.0, 5.0, 1e6):
        norm = bm25.length_norm(10, 10.0, 1.2, 0.75)
        score = sum(bm25.term_score(idf[t], terms[t], tf, norm, 1.2) for t in ("a", "b"))
        assert score < top
    assert score == pytest.approx(top, rel=1e-5)  # saturated: approaches it
