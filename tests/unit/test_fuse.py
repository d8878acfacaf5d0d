from __future__ import annotations

import pytest

from clew.retrieve.fuse import Fused, boost, convex, dedup, fuse, rrf
from clew.types import LegHit


def ids(o: int) -> str:
    return f"c{o:03d}"


def test_rrf_hand_computed() -> None:
    fused = rrf(
        {"lexical": [LegHit(1, 9.0)], "dense": [LegHit(2, 0.5), LegHit(1, 0.4)]},
        {"lexical": 1.0, "dense": 1.0},
        60,
        ids,
    )
    top = fused[0]
    assert top.ordinal == 1
    assert top.score == pytest.approx(1 / 61 + 1 / 62)
    assert top.score == pytest.approx(0.032522474, abs=1e-9)
    parts = {c.leg: (c.rank, c.raw_score, c.fused_part) for c in top.contributions}
    assert parts == {
        "lexical": (1, 9.0, pytest.approx(1 / 61)),
        "dense": (2, 0.4, pytest.approx(1 / 62)),
    }


def test_weights_scale_parts_and_zero_weight_leg_is_ignored() -> None:
    fused = rrf(
        {"lexical": [LegHit(1, 1.0)], "graph": [LegHit(2, 1.0)]},
        {"lexical": 2.0, "graph": 0.0},
        60,
        ids,
    )
    assert [f.ordinal for f in fused] == [1]
    assert fused[0].score == pytest.approx(2 / 61)


def test_ties_break_by_best_rank_then_legs_then_id() -> None:
    # 5: ranks (1) in one leg = 1/61; 3 and 4: same score, same rank, same legs -> id order
    lists = {"lexical": [LegHit(5, 1.0), LegHit(4, 1.0)], "dense": [LegHit(3, 1.0)]}
    fused = rrf(lists, {"lexical": 1.0, "dense": 1.0}, 60, ids)
    assert [f.ordinal for f in fused] == [3, 5, 4]
    # equal score: the hit with the better best rank wins over more legs
    lists2 = {
        "a": [LegHit(1, 1.0)],
        "b": [LegHit(9, 1.0), LegHit(2, 1.0)],
        "c": [LegHit(8, 1.0), LegHit(7, 1.0), LegHit(6, 1.0), LegHit(2, 1.0)],
    }
    # k = 0 and binary fractions: 0.75 == 1/2 + 1/4 exactly
    fused2 = rrf(lists2, {"a": 0.75, "b": 1.0, "c": 1.0}, 0, ids)
    by = {f.ordinal: f for f in fused2}
    assert by[1].score == by[2].score == 0.75
    assert [f.ordinal for f in fused2].index(1) < [f.ordinal for f in fused2].index(2)


def test_rrf_is_deterministic() -> None:
    lists = {
        "lexical": [LegHit(i, 10 - i) for i in range(10)],
        "dense": [LegHit(i, 1.0) for i in reversed(range(10))],
    }
    a = rrf(lists, {"lexical": 1.0, "dense": 1.0}, 60, ids)
    b = rrf(dict(reversed(list(lists.items()))), {"dense": 1.0, "lexical": 1.0}, 60, ids)
    assert a == b


def test_dedup_folds_same_content_into_best() -> None:
    fused = [Fused(1, 0.3, (), None), Fused(2, 0.2, (), None), Fused(3, 0.1, (), None)]
    out = dedup(fused, {1: "h1", 2: "h1", 3: "h3"}.__getitem__)
    assert [f.ordinal for f in out] == [1, 3]
    assert out[0].duplicates == (2,)


def test_convex_hand_computed() -> None:
    lists = {
        "lexical": [LegHit(1, 9.0), LegHit(3, 5.0), LegHit(4, 1.0)],
        "dense": [LegHit(2, 0.8), LegHit(1, 0.6), LegHit(4, 0.4)],
    }
    fused = convex(lists, {"lexical": 0.8, "dense": 1.2}, ids)
    by = {f.ordinal: f for f in fused}
    # each leg's scores are min-max normalized within its own list, then weighted
    assert by[1].score == pytest.approx(0.8 * 1.0 + 1.2 * 0.5)
    assert by[2].score == pytest.approx(1.2 * 1.0)
    assert by[3].score == pytest.approx(0.8 * 0.5)
    assert by[4].score == pytest.approx(0.0)
    assert [f.ordinal for f in fused] == [1, 2, 3, 4]
    parts = {c.leg: (c.rank, c.raw_score, c.fused_part) for c in by[1].contributions}
    assert parts == {
        "lexical": (1, 9.0, pytest.approx(0.8)),
        "dense": (2, 0.6, pytest.approx(0.6)),
    }


def test_convex_score_gaps_matter_where_rrf_sees_only_ranks() -> None:
    # the lexical leg's rank 1 is far ahead of its rank 2; the dense leg's two are near tied
    lists = {
        "lexical": [LegHit(1, 20.0), LegHit(2, 2.0), LegHit(5, 1.0)],
        "dense": [LegHit(2, 0.81), LegHit(1, 0.80), LegHit(5, 0.2)],
    }
    weights = {"lexical": 1.0, "dense": 1.0}
    assert [f.ordinal for f in convex(lists, weights, ids)][:2] == [1, 2]
    tied = rrf(lists, weights, 60, ids)  # same ranks both ways: RRF ties, broken by id
    assert tied[0].score == pytest.approx(tied[1].score)


def test_convex_single_score_list_weighs_fully_and_methods_dispatch() -> None:
    lists = {"lexical": [LegHit(7, 3.0)], "graph": [LegHit(8, 1.0), LegHit(9, 1.0)]}
    fused = convex(lists, {"lexical": 1.0, "graph": 0.15}, ids)
    assert fused[0].ordinal == 7 and fused[0].score == pytest.approx(1.0)
    assert {f.ordinal: f.score for f in fused}[8] == pytest.approx(0.15)  # flat list: all top
    assert convex({"lexical": []}, {"lexical": 1.0}, ids) == []
    assert convex(lists, {"lexical": 0.0, "graph": 0.0}, ids) == []
    assert fuse("rrf", lists, {"lexical": 1.0}, 60, ids)[0].score == pytest.approx(1 / 61)
    assert fuse("convex", lists, {"lexical": 1.0}, 60, ids)[0].score == pytest.approx(1.0)


def test_boost_raises_resorts_with_ties_in_fused_order_and_records_the_step() -> None:
    fused = [Fused(o, s, (), None) for o, s in ((1, 1.0), (2, 0.8), (3, 0.5), (4, 0.3))]
    out = boost(fused, {3: (2.0, 0.5), 4: (7.0, 0.5)}, "step")
    # 3 rises to 1.0 and ties with 1, which came first in fused order; 4 rises to 0.8 behind 2
    assert [f.ordinal for f in out] == [1, 3, 2, 4]
    assert [f.score for f in out] == [1.0, 1.0, 0.8, 0.8]
    steps = {
        f.ordinal: [(c.leg, c.rank, c.raw_score, c.fused_part) for c in f.contributions]
        for f in out
    }
    assert steps == {1: [], 3: [("step", 2, 2.0, 0.5)], 2: [], 4: [("step", 4, 7.0, 0.5)]}
    assert boost(fused, {}, "step") == fused
