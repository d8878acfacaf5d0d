from __future__ import annotations

import pytest

from clew.compose.assemble import assemble, jaccard
from clew.config import AssembleConfig
from clew.errors import ConfigError
from clew.types import Hit


def hit(cid: str, score: float, text: str, tokens: int = 100) -> Hit:
    return Hit(
        chunk_id=cid,
        doc_id=cid.split("#")[0],
        title="",
        text=text,
        score=score,
        metadata={},
        contributions=(),
        token_count=tokens,
    )


def test_keeps_in_score_order_within_budget() -> None:
    hits = [
        hit("b#0", 0.02, "beta text here", 150),
        hit("a#0", 0.03, "alpha words", 150),
        hit("c#0", 0.019, "gamma other words", 150),
    ]
    ctx = assemble(hits, AssembleConfig(token_budget=320))
    assert [h.chunk_id for h in ctx.kept] == ["a#0", "b#0"]
    assert ctx.tokens == 300
    assert [(d.chunk_id, d.reason) for d in ctx.dropped] == [("c#0", "budget")]
    assert "20 left of 320" in ctx.dropped[0].detail


def test_a_smaller_later_hit_can_still_fit() -> None:
    hits = [
        hit("a#0", 0.03, "one", 200),
        hit("b#0", 0.029, "two", 200),
        hit("c#0", 0.028, "three", 50),
    ]
    ctx = assemble(hits, AssembleConfig(token_budget=260))
    assert [h.chunk_id for h in ctx.kept] == ["a#0", "c#0"]


def test_near_duplicates_are_skipped_with_the_twin_named() -> None:
    text = "pgbouncer pool exhausted during peak traffic on february twelfth"
    hits = [
        hit("a#0", 0.03, text),
        hit("b#0", 0.029, text + " again"),
        hit("c#0", 0.028, "completely different content about payouts"),
    ]
    ctx = assemble(hits)
    assert [h.chunk_id for h in ctx.kept] == ["a#0", "c#0"]
    (d,) = ctx.dropped
    assert d.reason == "near_duplicate" and "with a#0" in d.detail


def test_score_floor_is_half_the_top_by_default() -> None:
    hits = [hit("a#0", 0.04, "x1"), hit("b#0", 0.021, "x2"), hit("c#0", 0.019, "x3")]
    ctx = assemble(hits)
    assert [h.chunk_id for h in ctx.kept] == ["a#0", "b#0"]
    assert ctx.dropped[0].reason == "floor"


def test_empty_and_jaccard_and_validation() -> None:
    ctx = assemble([])
    assert ctx.kept == () and ctx.tokens == 0
    assert jaccard(frozenset({"a", "b"}), frozenset({"b", "c"})) == pytest.approx(1 / 3)
    with pytest.raises(ConfigError, match=r"assemble\.jaccard"):
        AssembleConfig(jaccard=0.0)
