"""Linking query words to concepts: identifiers exactly, names unfolded, words one edit away."""

from __future__ import annotations

from clew.index.graph import GraphIndex
from clew.protocols import GraphRows

CONCEPTS = [
    (1, "bms-e18", "BMS-E18", "identifier"),
    (2, "4.2.1", "4.2.1", "identifier"),
    (3, "rui matos", "Rui Matos", "entity"),
    (4, "payment", "payments", "phrase"),
    (5, "dep-opo-01", "DEP-OPO-01", "identifier"),
]


def graph() -> GraphIndex:
    chunks = [(o, f"d{o}", 0) for o in range(12)]
    mentions = [(0, 1, 1), (1, 2, 1), (2, 3, 1), (3, 4, 1), (4, 5, 1), (5, 4, 1)]
    return GraphIndex.build(GraphRows(CONCEPTS, mentions, chunks, []), len(chunks), release=1)


def linked(query: str) -> list[tuple[str, str]]:
    return [(c.key, c.how) for c in graph().link(query)]


def test_an_identifier_never_links_to_its_neighbour() -> None:
    assert linked("BMS-E17") == []
    assert linked("what is bms-e17") == []


def test_a_version_never_links_to_the_next_one() -> None:
    assert linked("changes in 4.2.0") == []
    assert linked("changes in 4.2.1") == [("4.2.1", "identifier")]


def test_an_identifier_links_whole_not_by_its_tail() -> None:
    assert linked("OPO-01") == []
    assert linked("status of DEP-OPO-01") == [("dep-opo-01", "identifier")]


def test_a_name_links_as_written() -> None:
    assert linked("what did Rui Matos say") == [("rui matos", "exact")]


def test_plain_words_still_fold_and_link_fuzzily() -> None:
    assert linked("refund the payments") == [("payment", "exact")]
    assert linked("refund the paymnet") == [("payment", "fuzzy")]


def test_pmi_ranks_related_concepts_by_co_occurrence_over_chance() -> None:
    """`common` shares more chunks with the seed than `rare` does (3 against 2) but is in 19
    chunks where `rare` is in 3: by count `common` is the related concept kept, by PMI `rare`."""
    from clew.config import GraphConfig

    concepts = [(1, "seed", "seed", "phrase"), (2, "common", "common", "phrase")]
    concepts.append((3, "rare", "rare", "phrase"))
    chunks = [(o, f"d{o}", 0) for o in range(100)]
    mentions = [(o, 1, 1) for o in range(4)]
    mentions += [(o, 2, 1) for o in (0, 1, 2, *range(10, 26))]
    mentions += [(o, 3, 1) for o in (0, 1, 50)]
    g = GraphIndex.build(GraphRows(concepts, mentions, chunks, []), len(chunks), release=1)
    allowed = [True] * 100

    def reached(weighting: str) -> set[int]:
        cfg = GraphConfig(related_weighting=weighting, related_per_concept=1, pagerank_weight=0)
        return {h.ordinal for h in g.search("seed", allowed, 40, cfg)}

    assert 50 not in reached("count") and {10, 25} <= reached("count")
    assert 50 in reached("pmi") and not {10, 25} & reached("pmi")
