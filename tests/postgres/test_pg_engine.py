"""The engine on a PostgreSQL store answers like the embedded engine on the same corpus.

Both ingest the bundled sample corpus with the deterministic FAKE hash encoder and spaCy-free
concepts; the PostgreSQL engine runs its three legs in SQL (pg_search BM25 with the engine's
k1/b, pgvector, the SQL graph leg) with the filter compiled to one predicate."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from clew import Engine
from clew.config import ConceptConfig, ExpandConfig, preset_config
from clew.ingest.concepts import ConceptExtractor
from clew.testing.fakes import FakeHashEncoder

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "sample"

QUERIES = [
    "ERR-4413",
    "ERR-4012 timeout",
    "customer was billed twice",
    "what else broke after the pgbouncer migration",
    "pgbouncer pool exhausted",
    "idempotency key retries",
    "which services are affected if pgbouncer-core runs out of connections",
    "feature flag rollout",
    "fraud scorer",
    "settlement cutoff",
]


def _engine(target: str | Path) -> Engine:
    return Engine(
        target,
        create=True,
        encoder=FakeHashEncoder(),
        extractor=ConceptExtractor(ConceptConfig(spacy=False)),
    )


@pytest.fixture(scope="module")
def engines(
    pg_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Engine, Engine]]:
    embedded = _engine(tmp_path_factory.mktemp("emb") / "idx")
    embedded.ingest([SAMPLE])
    pg = _engine(pg_server.url + "&schema=engine_sample")
    pg.ingest([SAMPLE])
    yield embedded, pg
    embedded.close()
    pg.close()


def ids(result: Any) -> list[str]:
    return [h.chunk_id for h in result.hits]


@pytest.mark.parametrize("preset", ["default", "lexical", "dense", "graph"])
def test_same_top10_as_embedded(engines: tuple[Engine, Engine], preset: str) -> None:
    embedded, pg = engines
    assert pg.url is not None and embedded.url is None
    for query in QUERIES:
        want = embedded.search(query, k=10, preset=preset)
        got = pg.search(query, k=10, preset=preset)
        assert ids(got) == ids(want), (preset, query)
        assert got.route == want.route
        for a, b in zip(got.hits, want.hits, strict=True):
            assert [c.leg for c in a.contributions] == [c.leg for c in b.contributions]
            for ca, cb in zip(a.contributions, b.contributions, strict=True):
                assert ca.rank == cb.rank
                assert ca.raw_score == pytest.approx(cb.raw_score, rel=1e-4, abs=1e-5), (
                    query,
                    ca.leg,
                )


@pytest.mark.parametrize("flt", [{"audience": "public"}, {"audience": ["internal", "sre"]}])
def test_filter_inside_every_sql_leg(engines: tuple[Engine, Engine], flt: dict[str, Any]) -> None:
    embedded, pg = engines
    for query in QUERIES[:6]:
        for preset in ("lexical", "dense", "graph", "default"):
            cfg = replace(preset_config(preset), expand=ExpandConfig(enabled=True))
            got = pg.search(query, k=20, filter=flt, config=cfg)
            want = embedded.search(query, k=20, filter=flt, config=cfg)
            assert ids(got) == ids(want), (query, preset)
            for hit in got.hits:
                doc = pg.document(hit.doc_id)
                assert doc is not None
                audience = doc.metadata["audience"]
                allowed = flt["audience"]
                assert audience == allowed or audience in allowed


def test_scope_is_anded_and_unknown_filter_field_is_an_error(
    engines: tuple[Engine, Engine],
) -> None:
    _, pg = engines
    res = pg.search("pgbouncer", k=50, filter={"audience": "sre"}, scope={"audience": "public"})
    assert res.hits == ()
    with pytest.raises(Exception, match="appear in no document"):
        pg.search("pgbouncer", filter={"colour": "red"})


def test_delete_and_reingest_on_postgres(pg_server: Any, tmp_path: Path) -> None:
    pg = _engine(pg_server.url + "&schema=engine_delete")
    try:
        pg.ingest([SAMPLE])
        before = pg.search("ERR-4413", k=5)
        doc = before.hits[0].doc_id
        pg.delete([doc])
        after = pg.search("ERR-4413", k=20)
        assert doc not in {h.doc_id for h in after.hits}
        for preset in ("lexical", "dense", "graph"):
            assert doc not in {h.doc_id for h in pg.search("ERR-4413", k=50, preset=preset).hits}
        report = pg.ingest([SAMPLE])
        assert len(report.added) >= 1
        again = pg.ingest([SAMPLE])
        assert not again.added and not again.updated
        assert pg.search("ERR-4413", k=1).hits[0].doc_id == doc
    finally:
        pg.close()
