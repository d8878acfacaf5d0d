"""Title links on a hand-built graph: which titles a concept goes by, where the named document
joins, provenance, and the access mask (a hidden document is neither a target nor counted)."""

from __future__ import annotations

import numpy as np
import pytest

from clew.config import GraphConfig
from clew.errors import ConfigError
from clew.index.graph import GraphIndex, title_keys, titles_lead
from clew.protocols import GraphRows
from clew.retrieve.fuse import Fused
from clew.retrieve.titles import EDGE, LEG, title_links
from clew.types import Contribution

# ordinal: doc, seq
CHUNKS = [
    (0, "leland", 0),  # the top hit: mentions "Maximum Overdrive" and "Wilmington"
    (1, "other-1", 0),
    (2, "other-2", 0),
    (3, "other-3", 0),
    (4, "overdrive", 0),  # titled "Maximum Overdrive (film)", far down the pool
    (5, "overdrive", 1),
    (6, "wilm-a", 0),  # "Wilmington" titles three documents: generic, leads nowhere ...
    (7, "wilm-b", 0),
    (8, "wilm-c", 0),
    (9, "pool", 0),  # "pool": a one-word common noun titles nothing
]
CONCEPTS = [
    (1, "maximum overdrive", "Maximum Overdrive", "entity"),
    (2, "wilmington", "Wilmington", "entity"),
    (3, "pool", "pool", "phrase"),
]
MENTIONS = [(0, 1, 2), (0, 2, 1), (0, 3, 1), (4, 1, 1)]
TITLES = [
    ("leland", "Leland, North Carolina"),
    ("overdrive", "Maximum Overdrive (film)"),
    ("wilm-a", "Wilmington"),
    ("wilm-b", "Wilmington"),
    ("wilm-c", "Wilmington"),
    ("pool", "Pool"),
    ("other-1", "Other one"),
    ("other-2", "Other two"),
    ("other-3", "Other three"),
]


def graph() -> GraphIndex:
    rows = GraphRows(CONCEPTS, MENTIONS, CHUNKS, [], TITLES)
    return GraphIndex.build(rows, len(CHUNKS), release=1)


def ids(o: int) -> str:
    return f"c{o}"


def pool() -> list[Fused]:
    return [
        Fused(o, 1.0 - 0.1 * i, (Contribution("lexical", i + 1, 5.0 - i, 1.0 - 0.1 * i),), None)
        for i, o in enumerate([0, 1, 2, 3])
    ]


def run(allowed: np.ndarray | None = None, **cfg: int) -> tuple[list[Fused], int]:
    g = graph()
    mask = np.ones(len(CHUNKS), dtype=bool) if allowed is None else allowed
    return title_links(pool(), g, lambda: mask, GraphConfig(**cfg), ids)  # type: ignore[arg-type]


def test_title_keys() -> None:
    assert title_keys("Charmed (TV series)") >= {"charmed", "charmed tv series"}
    assert title_keys("ERR-4012") == {"err-4012"}
    assert title_keys("the Pro Bowls") == {"pro bowls", "pro bowl"}
    assert title_keys("SW-2207: Vehicle not responding") == {"sw-2207 vehicle not responding"}
    assert title_keys("") == set() and title_keys("x" * 121) == set()
    assert title_keys("The") == set()


def test_graph_maps_concepts_to_the_documents_they_title() -> None:
    g = graph()
    about = {g.keys[r]: docs for r, docs in g.about.items()}
    assert about["maximum overdrive"] == ("overdrive",)
    assert about["wilmington"] == ("wilm-a", "wilm-b", "wilm-c")  # kept: the cap is per caller
    assert not titles_lead(g, g.key_to_row["pool"], g.stats())  # a common noun titles nothing


def test_a_word_that_is_a_name_only_outside_the_scope_titles_nothing_inside_it() -> None:
    # chunk 2 (another tenant's) calls "pool" an entity: the stored kind is entity, but for a
    # scope without chunk 2 "pool" is the common noun chunk 0 calls it, as in an index of the
    # scope's documents alone
    mentions = [(0, 1, 2, 1), (0, 2, 1, 1), (0, 3, 1, 0), (4, 1, 1, 1), (2, 3, 1, 1)]
    concepts = [(3, "pool", "Pool", "entity") if c[0] == 3 else c for c in CONCEPTS]
    g = GraphIndex.build(GraphRows(concepts, mentions, CHUNKS, [], TITLES), len(CHUNKS), 1)
    head = [
        Fused(o, 1.0 - 0.1 * i, (Contribution("lexical", i + 1, 5.0 - i, 1.0 - 0.1 * i),), None)
        for i, o in enumerate([0, 1, 3])
    ]
    cfg = GraphConfig(title_links=3)
    everything = np.ones(len(CHUNKS), dtype=bool)
    scope = everything.copy()
    scope[2] = False

    def brought(graph: GraphIndex, mask: np.ndarray, scoped: bool) -> list[int]:
        stats = graph.stats(mask) if scoped else None
        out = title_links(head, graph, lambda: mask, cfg, ids, None, stats)[0]  # type: ignore[arg-type]
        return [f.ordinal for f in out]

    assert 9 in brought(g, everything, scoped=False)  # for everyone, "pool" is a name
    inside = brought(g, scope, scoped=True)
    assert 9 not in inside and 4 in inside
    alone = GraphIndex.build(
        GraphRows(
            CONCEPTS,
            [m for m in mentions if m[0] != 2],
            [c for c in CHUNKS if c[0] != 2],
            [],
            [t for t in TITLES if t[0] != "other-2"],
        ),
        len(CHUNKS),
        1,
    )
    assert inside == brought(alone, scope, scoped=False)


def test_named_document_joins_at_title_rank_with_its_path() -> None:
    out, brought = run()
    assert brought == 1
    assert [f.ordinal for f in out] == [0, 1, 4, 2, 3]  # the document's first chunk, rank 3
    linked = out[2]
    assert out[1].score > linked.score > out[3].score
    (part,) = [c for c in linked.contributions if c.leg == LEG]
    assert part.rank == 3 and part.fused_part == pytest.approx(linked.score)
    (path,) = linked.expansion
    assert path.seed == "c0" and path.hops == 1 and path.by_title
    assert [(s.edge, s.via, s.to) for s in path.steps] == [(EDGE, "maximum overdrive", "c4")]


def test_the_path_names_the_concept_by_its_key_not_by_whoever_wrote_it_first() -> None:
    # the stored label is the first surface form written, perhaps by another tenant
    # ("MAXIMUM OVERDRIVE"): the path of a caller's title link must not show it
    shouted = [(1, "maximum overdrive", "MAXIMUM OVERDRIVE", "entity"), *CONCEPTS[1:]]
    g = GraphIndex.build(GraphRows(shouted, MENTIONS, CHUNKS, [], TITLES), len(CHUNKS), 1)
    mask = np.ones(len(CHUNKS), dtype=bool)
    out, _ = title_links(pool(), g, lambda: mask, GraphConfig(), ids)  # type: ignore[arg-type]
    assert out == run()[0]
    assert out[2].expansion[0].steps[0].via == "maximum overdrive"


def test_the_mask_is_asked_only_when_a_top_hit_names_a_title() -> None:
    def never() -> np.ndarray:
        raise AssertionError("the mask was built for a pool whose top hit names no title")

    quiet = [Fused(1, 1.0, (), None), Fused(0, 0.9, (), None), Fused(2, 0.8, (), None)]
    assert title_links(quiet, graph(), never, GraphConfig(), ids) == (quiet, 0)


def test_rank_and_off() -> None:
    assert [f.ordinal for f in run(title_rank=2)[0]] == [0, 4, 1, 2, 3]
    assert run(title_links=0) == (pool(), 0)


def test_a_document_already_ahead_is_left_where_it_is() -> None:
    g = graph()
    head = [Fused(0, 1.0, (), None), Fused(4, 0.9, (), None), Fused(1, 0.8, (), None)]
    everything = np.ones(len(CHUNKS), dtype=bool)
    out, brought = title_links(head, g, lambda: everything, GraphConfig(), ids)
    assert brought == 0 and out == head


def test_hidden_target_is_never_brought_and_its_next_chunk_is_not_used() -> None:
    allowed = np.ones(len(CHUNKS), dtype=bool)
    allowed[4] = False  # the titled document's first chunk is hidden; its second is not
    out, _ = run(allowed)
    assert 4 not in {f.ordinal for f in out} and out[2].ordinal == 5
    allowed[5] = False
    assert run(allowed) == (pool(), 0)


def test_generic_title_counts_only_allowed_documents() -> None:
    # three documents are titled "Wilmington": generic, so it leads nowhere ...
    assert all(g.ordinal not in (6, 7, 8) for g in run()[0])
    # ... but a caller who sees only one of them gets the same as a corpus holding only it
    allowed = np.ones(len(CHUNKS), dtype=bool)
    allowed[[4, 5, 7, 8]] = False
    out, brought = run(allowed, title_links=2)
    assert brought == 1 and out[2].ordinal == 6


def test_config_checks() -> None:
    with pytest.raises(ConfigError, match=r"graph\.title_rank=1 is invalid; allowed: 2\.\.100"):
        GraphConfig(title_rank=1)
    with pytest.raises(ConfigError, match=r"graph\.title_links=11"):
        GraphConfig(title_links=11)


def test_a_document_already_shown_gives_way_to_the_next_one_named() -> None:
    # the top hit also names "Cape Fear" (once, so "Maximum Overdrive", named twice, is its
    # first choice); the overdrive document already stands fifth
    chunks = [*CHUNKS, (10, "capefear", 0), (11, "other-4", 0)]
    concepts = [*CONCEPTS, (4, "cape fear", "Cape Fear", "entity")]
    mentions = [*MENTIONS, (0, 4, 1), (10, 4, 1)]
    titles = [*TITLES, ("capefear", "Cape Fear"), ("other-4", "Other four")]
    g = GraphIndex.build(GraphRows(concepts, mentions, chunks, [], titles), len(chunks), release=1)
    head = [
        Fused(o, 1.0 - 0.1 * i, (Contribution("lexical", i + 1, 5.0 - i, 1.0 - 0.1 * i),), None)
        for i, o in enumerate([0, 1, 2, 3, 4, 11])
    ]
    everything = np.ones(len(chunks), dtype=bool)

    def order(shown: int) -> list[int]:
        cfg = GraphConfig(title_shown=shown)
        return [f.ordinal for f in title_links(head, g, lambda: everything, cfg, ids)[0]]

    assert order(6) == [0, 1, 10, 2, 3, 4, 11]  # overdrive is shown: Cape Fear joins
    assert order(5) == [0, 1, 10, 2, 3, 4, 11]
    assert order(4) == [0, 1, 4, 2, 3, 11]  # fifth is past the shown hits: moved up
    assert order(0) == order(4)  # 0: only the hits ahead of title_rank are passed over
    with pytest.raises(ConfigError, match=r"graph\.title_shown=101"):
        GraphConfig(title_shown=101)
