"""The identifier-title step on hand-built fused lists: which titles and headings name the
query's identifier (whole, casefolded), how far the named hit moves, its provenance, and the
rows it reads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from clew.config import PRESETS, EngineConfig
from clew.errors import ConfigError
from clew.protocols import ChunkRow
from clew.retrieve.fuse import Fused
from clew.retrieve.named import LEG, query_identifiers, title_identifiers
from clew.types import Contribution

# ordinal: (title, heading path)
TITLES: dict[int, tuple[str, tuple[str, ...]]] = {
    0: ("SW-2209: Vehicle battery too low", ()),  # a near neighbour of the code asked
    1: ("Retry summary", ("API error codes", "Retry summary")),  # lists every code
    2: ("SW-2207: Unlock request timed out", ()),  # the page about the code
    3: ("API error code reference", ("API error codes", "ERR-4413: Idempotency key in use")),
    4: ("Unlocking a bike", ()),
}


def row(o: int) -> ChunkRow:
    title, headings = TITLES[o]
    return ChunkRow(o, f"c{o}", f"d{o}", title, "text", f"h{o}", headings, {})


class Rows:
    """The store's rows, recording which ordinals were asked for."""

    def __init__(self) -> None:
        self.asked: list[list[int]] = []

    def __call__(self, ordinals: Sequence[int]) -> Mapping[int, ChunkRow]:
        self.asked.append(list(ordinals))
        return {o: row(o) for o in ordinals if o in TITLES}


def fused() -> list[Fused]:
    scores = [1.0, 0.9, 0.8, 0.7, 0.6]
    return [
        Fused(o, s, (Contribution("lexical", o + 1, 10.0 - o, s),), None)
        for o, s in enumerate(scores)
    ]


def test_query_identifiers_are_whole_and_casefolded() -> None:
    assert query_identifiers("what does LOCK-E31 mean") == {"lock-e31"}
    assert query_identifiers("SW-2207") == {"sw-2207"}
    assert query_identifiers("customer was billed twice") == frozenset()


def test_the_page_titled_by_the_identifier_rises_and_says_why() -> None:
    rows = Rows()
    out = title_identifiers(fused(), rows, query_identifiers("SW-2207"), 0.25, depth=5)
    assert [f.ordinal for f in out] == [2, 0, 1, 3, 4]  # 0.8 + 0.25 passes 1.0
    top = out[0]
    assert top.score == pytest.approx(1.05)
    assert top.contributions[-1] == Contribution(LEG, 1, 1.0, 0.25)
    # SW-2209 is not SW-2207: the near neighbour gains nothing
    assert all(c.leg != LEG for f in out[1:] for c in f.contributions)
    assert rows.asked == [[0, 1, 2, 3, 4]]


def test_a_section_heading_names_the_identifier_too() -> None:
    out = title_identifiers(fused(), Rows(), query_identifiers("ERR-4413"), 0.25, depth=5)
    assert [f.ordinal for f in out] == [0, 3, 1, 2, 4]  # 0.7 + 0.25 passes 0.9, not 1.0
    assert out[1].contributions[-1] == Contribution(LEG, 2, 1.0, 0.25)


def test_nothing_to_match_reads_no_rows_and_changes_nothing() -> None:
    rows = Rows()
    before = fused()
    assert title_identifiers(before, rows, query_identifiers("billed twice"), 0.25, 5) == before
    assert title_identifiers(before, rows, query_identifiers("SW-2207"), 0.0, 5) == before
    assert rows.asked == []


def test_only_the_top_depth_hits_are_read() -> None:
    rows = Rows()
    out = title_identifiers(fused(), rows, query_identifiers("SW-2207"), 0.25, depth=2)
    assert rows.asked == [[0, 1]]
    assert [f.ordinal for f in out] == [0, 1, 2, 3, 4]


def test_the_baselines_leave_the_step_out_and_the_weight_is_checked() -> None:
    assert EngineConfig().fusion.title_identifier > 0
    for name in ("hybrid", "lexical", "dense", "graph", "rules"):
        assert PRESETS[name].fusion.title_identifier == 0.0
    with pytest.raises(ConfigError, match=r"fusion\.title_identifier"):
        EngineConfig().with_overrides(fusion={"title_identifier": -1.0})


def test_the_share_is_the_identifiers_part_of_the_query_idf_mass() -> None:
    from clew.ingest.analyze import query_terms
    from clew.retrieve.named import identifier_share

    asked = query_identifiers("SW-2207")
    alone = query_terms("SW-2207", 0.5)
    assert identifier_share(alone, dict.fromkeys(alone, 3.0), asked) == pytest.approx(1.0)
    passing = query_terms("SW-2207 but the display says charging", 0.5)
    idf = {t: 3.0 for t in passing}
    share = identifier_share(passing, idf, asked)
    # the whole token (1) and its two parts (0.5 each) of those plus display, says, charging
    assert share == pytest.approx(2.0 / 5.0)
    # a rarer identifier weighs more of the query
    assert identifier_share(passing, {**idf, "sw-2207": 9.0}, asked) > share
    # no idf at all (an empty scope): the whole part, never a division by zero
    assert identifier_share(passing, {}, asked) == 1.0
    assert identifier_share(passing, idf, frozenset()) == 0.0
