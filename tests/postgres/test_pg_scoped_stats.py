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
from clew.config import ConceptConfig, EngineConfig
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


def test_scoped_dense_hits_on_postgres_are_the_tenants_own(
    pg_server: Any, pg_schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above the HNSW threshold a scope still gets an exact scan of its own chunks
    (``dense.scoped_exact``): tenant a's dense hits and scores through the shared schema equal
    those of an embedded index of tenant a's documents alone. (pgvector's walk is exact on a
    corpus this small, so the scan each query asked for is recorded too.)"""
    import random

    from clew.backends.postgres.vector import PgVector

    asked: list[bool | None] = []
    search = PgVector.search

    def recorded(self: PgVector, *args: Any, exact: bool | None = None) -> Any:
        asked.append(exact)
        return search(self, *args, exact=exact)

    monkeypatch.setattr(PgVector, "search", recorded)

    rnd = random.Random(3)
    words = [f"w{i}" for i in range(300)]
    docs = [
        Document(
            f"{t}-{i}",
            f"note {i}",
            " ".join(rnd.choice(words) for _ in range(12)),
            t,
            {"tenant": t},
        )
        for t, count in (("a", 150), ("b", 300))
        for i in range(count)
    ]
    config = EngineConfig().with_overrides(
        dense={"hnsw_min_chunks": 50, "exact_max_allowed": 0, "ef_search": 8}
    )
    pg = Engine(
        f"{pg_server.url}&schema={pg_schema}",
        config,
        create=True,
        encoder=FakeHashEncoder(),
        extractor=ConceptExtractor(ConceptConfig(spacy=False)),
    )
    alone = _engine(tmp_path / "alone", [d for d in docs if d.metadata["tenant"] == "a"])
    try:
        pg.ingest(docs)
        assert pg.stats()["hnsw"]
        asked.clear()  # the ingest's own calibration searches, unscoped
        for i in range(10):
            query = " ".join(f"w{(11 * i + j) % 300}" for j in range(5))
            got = pg.search(query, k=30, preset="dense", scope={"tenant": "a"})
            want = alone.search(query, k=30, preset="dense")
            assert _same_dense(got, want), query
        assert asked and all(e is True for e in asked), asked
        asked.clear()
        pg.search("w1 w2 w3", k=30, preset="dense")
        assert asked == [None], "unscoped, the allowed count decides"
    finally:
        pg.close()
        alone.close()


def _same_dense(got: Any, want: Any) -> bool:
    """The same scores rank by rank (PostgreSQL sums in float4: equal to 1e-5) and the same
    chunks above the last score (ties there may order apart, and k cut them)."""
    a = [(h.chunk_id, h.contributions[0].raw_score) for h in got.hits]
    b = [(h.chunk_id, h.contributions[0].raw_score) for h in want.hits]
    if len(a) != len(b) or any(abs(x[1] - y[1]) > 1e-5 for x, y in zip(a, b, strict=True)):
        return False
    last = b[-1][1] + 1e-5 if b else 0.0
    return {c for c, s in a if s > last} == {c for c, s in b if s > last}
