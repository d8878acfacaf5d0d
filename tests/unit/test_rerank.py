"""The rerank stage (ordering, fallback, provenance) and the feature reranker."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from clew.errors import ModelError
from clew.models.logistic import fit_logistic
from clew.protocols import RerankCandidate, RerankScores
from clew.retrieve.fuse import Fused
from clew.retrieve.rerank import (
    FEATURES,
    FORMAT,
    BlendReranker,
    FeatureReranker,
    load_feature_model,
    rerank,
)
from clew.types import Contribution


class Fixed:
    name = "fixed"

    def __init__(self, scores: Sequence[float | None], notes: tuple[str, ...] = ()) -> None:
        self.scores = tuple(scores)
        self.notes = notes

    def score(self, query: str, candidates: Sequence[RerankCandidate]) -> RerankScores:
        return RerankScores(self.scores, self.notes)


class Raises:
    name = "raises"

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def score(self, query: str, candidates: Sequence[RerankCandidate]) -> RerankScores:
        raise self.exc


def pool(n: int) -> list[Fused]:
    return [
        Fused(i, 0.1 - i * 0.01, (Contribution("lexical", i + 1, 1.0, 0.1 - i * 0.01),), None)
        for i in range(n)
    ]


def cands(n: int, **features: list[float]) -> list[RerankCandidate]:
    return [
        RerankCandidate(f"c{i}", "", f"text {i}", {k: v[i] for k, v in features.items()})
        for i in range(n)
    ]


def test_promotes_by_score_and_keeps_scores_monotone() -> None:
    out = rerank("q", pool(5), cands(4), Fixed([0.1, 0.9, 0.5, 0.9]), keep=4)
    assert [f.ordinal for f in out.pool] == [1, 3, 2, 0, 4]  # tie 1 vs 3: fused order
    scores = [f.score for f in out.pool]
    assert scores == sorted(scores, reverse=True)
    assert scores[:4] == [f.score for f in pool(4)]  # the head's score slots, reassigned
    last = out.pool[0].contributions[-1]
    assert last.leg == "rerank" and last.rank == 1 and last.raw_score == 0.9
    assert last.fused_part == pytest.approx(0.1 - 0.09)
    note = out.notes[1]
    assert (note.before, note.after, note.score) == (2, 1, 0.9)
    assert out.status.ran and out.status.pool == 4


def test_keep_places_the_rest_of_the_pool_in_fused_order() -> None:
    out = rerank("q", pool(5), cands(5), Fixed([0.0, 0.1, 0.2, 0.3, 0.4]), keep=2)
    assert [f.ordinal for f in out.pool] == [4, 3, 0, 1, 2]


def test_unscored_candidates_follow_scored_ones() -> None:
    out = rerank("q", pool(3), cands(3), Fixed([None, 0.0, None], ("no grade for c1",)), keep=3)
    assert [f.ordinal for f in out.pool] == [1, 0, 2]
    assert out.status.notes == ("no grade for c1",)
    assert out.notes[0].score is None


@pytest.mark.parametrize(
    ("reranker", "reason"),
    [
        (Raises(ValueError("invalid JSON")), "ValueError: invalid JSON"),
        (Raises(TimeoutError("timed out")), "TimeoutError: timed out"),
        (Fixed([1.0]), "returned 1 scores for 3 candidates"),
        (Fixed([1.0, float("nan"), 0.0]), "non-finite"),
    ],
)
def test_any_failure_falls_back_to_fused_order(reranker: object, reason: str) -> None:
    before = pool(4)
    out = rerank("q", before, cands(3), reranker, keep=3)  # type: ignore[arg-type]
    assert out.pool == before
    assert not out.status.ran and reason in out.status.reason
    assert out.notes == {}


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), asyncio.CancelledError()])
def test_cancellation_propagates(exc: BaseException) -> None:
    with pytest.raises(type(exc)):
        rerank("q", pool(3), cands(3), Raises(exc), keep=3)


def test_blend_is_the_documented_min_max_mix() -> None:
    c = cands(3, cosine=[0.2, 0.6, 0.4], concept_overlap=[0.0, 0.0, 1.0], pagerank=[1.0, 0.0, 0.5])
    got = BlendReranker().score("q", c)
    expected = [0.6 * 0 + 0.25 * 0 + 0.15 * 1, 0.6 * 1 + 0 + 0, 0.6 * 0.5 + 0.25 + 0.15 * 0.5]
    assert got.scores == pytest.approx(expected)
    assert got.explain[2] == pytest.approx(
        {"cosine": 0.3, "concept_overlap": 0.25, "pagerank": 0.075}
    )


def test_logistic_regression_learns_the_signal_and_explains(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, len(FEATURES)))
    y = (x[:, 0] + 0.5 * x[:, 1] + rng.normal(scale=0.3, size=400) > 0).astype(float)
    model = fit_logistic(x, y, FEATURES, info={"source": "test"})
    assert model.weights[0] > model.weights[1] > 0
    assert abs(model.weights[5]) < 0.5 * model.weights[1]
    assert fit_logistic(x, y, FEATURES, info={"source": "test"}) == model  # deterministic
    path = tmp_path / "clew-features.json"
    path.write_text(json.dumps(model.to_json(FORMAT)))
    loaded = load_feature_model(tmp_path)
    assert loaded == model
    reranker = FeatureReranker(loaded)
    feats = [dict(zip(FEATURES, row, strict=True)) for row in x[:5].tolist()]
    got = reranker.score("q", [RerankCandidate(str(i), "", "", f) for i, f in enumerate(feats)])
    for score, explain in zip(got.scores, got.explain, strict=True):
        assert score == pytest.approx(sum(explain.values()) + model.bias, abs=1e-4)
        assert set(explain) == set(FEATURES)


def test_feature_weights_file_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"missing\.json"):
        load_feature_model(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "other"}))
    with pytest.raises(ModelError, match="is not a"):
        load_feature_model(bad)


def test_a_weights_file_may_use_a_subset_of_the_features_in_any_order(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    names = ("graph", "cosine", "bm25")  # e.g. a file fitted before `fused` existed, reordered
    x = rng.normal(size=(300, len(names)))
    y = (x[:, 0] - x[:, 2] > 0).astype(float)
    model = fit_logistic(x, y, names, info={})
    path = tmp_path / "w.json"
    path.write_text(json.dumps(model.to_json(FORMAT)))
    reranker = FeatureReranker(load_feature_model(path))
    feats = [{"cosine": 0.0, "bm25": 0.0, "graph": g, "fused": 9.0} for g in (0.0, 1.0)]
    got = reranker.score("q", [RerankCandidate(str(i), "", "", f) for i, f in enumerate(feats)])
    assert got.scores[1] > got.scores[0]  # the graph column is read by name, not position
    assert set(got.explain[0]) == set(names)

    data = json.loads(path.read_text())
    data["features"] = ["graph", "cosine", "warp"]
    path.write_text(json.dumps(data))
    with pytest.raises(ModelError, match=r"'warp' unknown.*retrain it"):
        load_feature_model(path)
    data["features"] = ["graph", "graph", "bm25"]
    path.write_text(json.dumps(data))
    with pytest.raises(ModelError, match="fitted on features"):
        load_feature_model(path)


def test_leg_features_carry_the_fused_share_and_the_graph_rank() -> None:
    from clew.retrieve.rerank import leg_features

    f = Fused(
        3,
        0.5,
        (Contribution("lexical", 2, 7.0, 0.3), Contribution("graph", 4, 0.01, 0.2)),
        None,
    )
    got = leg_features(f, top_score=2.0)
    assert got["fused"] == pytest.approx(0.25)
    assert got["graph"] == pytest.approx(0.25)
    assert got["best_rank"] == pytest.approx(0.5) and got["legs"] == 2.0
    plain = leg_features(Fused(1, 0.5, (Contribution("dense", 1, 0.9, 0.5),), None))
    assert plain["graph"] == 0.0 and plain["fused"] == 0.0
