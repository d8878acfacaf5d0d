"""A scoped caller's numbers on PostgreSQL are those of an index of its own documents.

The two-tenant corpus of ``tests/integration/test_tenants.py`` in one PostgreSQL schema: tenant
a's search through its scope must give the hits, ranks and raw scores of an embedded index of
tenant a's documents alone (BM25 statistics, concept idf, hub cuts and PageRank within the
scope), and the answer's evidence and confidence likewise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clew import Engine
from clew.config import ConceptConfig
from clew.ingest.concepts import ConceptExtractor
from clew.testing.fakes import FakeHashEncoder
from clew.types import Document

DOCS = [
    ("runbook", "When ERR-4012 appears, raise RetryPolicy.MaxAttempts on payments-gateway."),
    ("incident", "INC-2031: an ERR-4012 retry storm after the ledger_writer timeout {w}."),
    ("faq", "Refunds settle in the nightly batch. ERR-4013 means a refund was declined {w}."),
    ("pool", "pgbouncer-core ran out of connections during the ERR-4012 storm."),
]
QUERIES = ["ERR-4012", "retry storm ledger_writer", "refund declined ERR-4013", "pgbouncer-core"]


def corpus(tenants: tuple[str, ...]) -> list[Document]:
    out = []
    for t in tenants:
        extra = {"a": "quietly", "b": "loudly loudly loudly"}[t]
        for slug, text in DOCS:
            out.append(Document(f"{t}-{slug}", slug, text.format(w=extra), t, {"tenant": t}))
        if t == "b":  # tenant b has more of everything: it shifts global statistics
            out += [
                Document(
                    f"b-x{i}", "x", f"ERR-4012 retry storm {i} pgbouncer-core", "b", {"tenant": "b"}
                )
                for i in range(6)
            ]
    return out


def _engine(target: str | Path, docs: list[Document]) -> Engine:
    engine = Engine(
        target,
        create=True,
        encoder=FakeHashEncoder(),
        extractor=ConceptExtractor(ConceptConfig(spacy=False)),
    )
    engine.ingest(docs)
    return engine


def _numbers(result: Any) -> list[Any]:
    return [
        (h.chunk_id, [(c.leg, c.rank, round(c.raw_score, 5)) for c in h.contributions])
        for h in result.hits
    ]


@pytest.mark.parametrize("preset", ["default", "lexical", "graph"])
def test_scoped_numbers_on_postgres_are_the_tenants_own(
    pg_server: Any, pg_schema: str, tmp_path: Path, preset: str
) -> None:
    pg = _engine(f"{pg_server.url}&schema={pg_schema}_{preset}", corpus(("a", "b")))
    alone = _engine(tmp_path / "alone", corpus(("a",)))
    try:
        scope = {"tenant": "a"}
        for query in QUERIES:
            got = pg.search(query, k=20, preset=preset, scope=scope)
            want = alone.search(query, k=20, preset=preset)
            assert _numbers(got) == _numbers(want), (preset, query)
            assert got.route == want.route
            asked = pg.ask(query, preset=preset, scope=scope)
            own = alone.ask(query, preset=preset)
            assert asked.evidence == pytest.approx(own.evidence, abs=1e-6), query
            assert asked.confidence == pytest.approx(own.confidence, abs=1e-6)
            assert asked.abstained == own.abstained
    finally:
        pg.close()
        alone.close()
