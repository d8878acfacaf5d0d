from __future__ import annotations

import pytest

from clew.config import ConceptConfig
from clew.ingest.concepts import ConceptExtractor, find_identifiers, identifier_shaped


def test_identifier_patterns() -> None:
    text = (
        "ERR-4012 hit payments-gateway; set RetryPolicy.MaxAttempts and idempotency_key, "
        "flip PAUSE_COLLECTION, see ledger.settlement.cutoff_hour and `pgbouncer`, "
        "e.g. runbook.md, LedgerWriter"
    )
    found = find_identifiers(text)
    for ident in (
        "ERR-4012",
        "RetryPolicy.MaxAttempts",
        "idempotency_key",
        "PAUSE_COLLECTION",
        "ledger.settlement.cutoff_hour",
        "pgbouncer",
        "LedgerWriter",
    ):
        assert ident in found
    assert "runbook.md" not in found and "e.g" not in found


def test_identifiers_differing_by_one_character_stay_distinct() -> None:
    (mentions,) = ConceptExtractor(ConceptConfig(spacy=False)).extract(["ERR-4412 and ERR-4413"])
    assert sorted(m.concept.key for m in mentions) == ["err-4412", "err-4413"]


def test_spacy_entities_and_phrases_merge_aliases() -> None:
    texts = ["The PgBouncer migration broke payouts.", "We rolled back the pgbouncer migrations."]
    a, b = ConceptExtractor().extract(texts)
    keys_a = {m.concept.key for m in a}
    keys_b = {m.concept.key for m in b}
    assert "pgbouncer migration" in keys_a & keys_b
    assert all(m.count >= 1 for m in a)


@pytest.mark.parametrize(
    ("text", "identifier"),
    [
        ("the BMS-E17 alarm", "BMS-E17"),
        ("deploy DEP-OPO-01 now", "DEP-OPO-01"),
        ("release 4.2.0 ships", "4.2.0"),
        ("v2.3 is out", "v2.3"),
        ("gene p53 binds", "p53"),
        ("IL-6 levels", "IL-6"),
        ("ERR-4012.", "ERR-4012"),
    ],
)
def test_identifier_shaped_words_are_taken_whole(text: str, identifier: str) -> None:
    assert find_identifiers(text) == [identifier]


def test_no_piece_of_an_identifier_is_one() -> None:
    assert find_identifiers("DEP-OPO-01 and x-BMS-E17") == ["DEP-OPO-01", "x-BMS-E17"]


@pytest.mark.parametrize(
    "text", ["pi is 3.14", "on 2024-05-01", "Non-Hodgkin cells", "e.g. this", "see notes.md"]
)
def test_numbers_dates_words_and_files_are_not_identifiers(text: str) -> None:
    assert find_identifiers(text) == []


def test_identifier_shape() -> None:
    assert identifier_shaped("BMS-E17") and identifier_shaped("4.2.0")
    assert not identifier_shaped("3.14") and not identifier_shaped("matos")
    assert not identifier_shaped("X" * 101 + "-1")  # too long to be one


def test_names_are_not_plural_folded() -> None:
    (mentions,) = ConceptExtractor().extract(["Rui Matos approved the deploy on Friday."])
    keys = {m.concept.key for m in mentions}
    assert "rui matos" in keys and "rui mato" not in keys


def test_entities_cut_from_an_identifier_are_left_out() -> None:
    (mentions,) = ConceptExtractor().extract(["Ask Dana about BMS-E17 and DEP-OPO-01 today."])
    keys = {m.concept.key for m in mentions}
    assert {"bms-e17", "dep-opo-01"} <= keys
    assert not keys & {"dep", "e17", "opo-01", "bms"}
