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
