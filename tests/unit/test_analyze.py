from __future__ import annotations

import pytest

from clew.ingest.analyze import ANALYZER_VERSION, analyze, concept_key, fold_plural


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ERR-4012", ["err-4012", "err", "4012"]),
        ("PAUSE_COLLECTION", ["pause_collection", "pause", "collection"]),
        ("idempotency_key", ["idempotency_key", "idempotency", "key"]),
    ],
)
def test_compound_tokens_kept_whole_and_split(text: str, expected: list[str]) -> None:
    assert analyze(text) == expected


def test_dotted_camel_case_identifier() -> None:
    tokens = analyze("RetryPolicy.MaxAttempts")
    assert tokens[0] == "retrypolicy.maxattempts"
    for part in ("retrypolicy", "maxattempts", "retry", "policy", "max", "attempts"):
        assert part in tokens
    # the folded form is added too, so "max attempts" in prose matches the identifier
    assert "attempt" in tokens


def test_nfkc_casefold_stop_words_and_plurals() -> None:
    assert analyze("The ﬁle Policies were retried") == ["file", "policy", "retried"]
    assert analyze("STRASSE straße") == ["strasse", "strasse"]


def test_plural_folding_is_light() -> None:
    assert fold_plural("payments") == "payment"
    assert fold_plural("retries") == "retry"
    assert fold_plural("status") == "status"
    assert fold_plural("address") == "address"
    assert fold_plural("gas") == "gas"
    assert fold_plural("v2s") == "v2s"


def test_unicode_words_are_not_split_at_accents() -> None:
    assert analyze("café Ünïcödé") == ["café", "ünïcödé"]


def test_query_and_document_share_the_analyzer() -> None:
    doc = analyze("Set RetryPolicy.MaxAttempts to 5 for ledger-writer")
    query = analyze("max attempts ledger writer")
    assert set(query) <= set(doc)


def test_concept_keys_merge_aliases_but_not_identifiers() -> None:
    assert concept_key("the PgBouncer migrations") == concept_key("pgbouncer migration")
    assert concept_key("ERR-4412", identifier=True) != concept_key("ERR-4413", identifier=True)


def test_version_string() -> None:
    assert ANALYZER_VERSION.startswith("clew-analyzer/")


def test_query_terms_weight_compound_parts() -> None:
    from clew.ingest.analyze import query_terms

    assert query_terms("ERR-4413 timeouts", 0.5) == {
        "err-4413": 1.0,
        "err": 0.5,
        "4413": 0.5,
        "timeout": 1.0,
    }
    assert query_terms("retry retry") == {"retry": 2.0}


def test_weighted_bm25_query_ranks_exact_identifier_first() -> None:
    import numpy as np

    from clew.backends.embedded.lexical import BM25Index

    idx = BM25Index()
    idx.add([(0, analyze("ERR-4412 ERR-4012 ERR-4102 errors")), (1, analyze("ERR-4413 in use"))])
    allowed = np.ones(2, dtype=bool)
    from clew.ingest.analyze import query_terms

    assert idx.search(query_terms("ERR-4413", 0.2), allowed, 2)[0].ordinal == 1
