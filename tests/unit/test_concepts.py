from __future__ import annotations

from clew.config import ConceptConfig
from clew.ingest.concepts import ConceptExtractor, find_identifiers


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
