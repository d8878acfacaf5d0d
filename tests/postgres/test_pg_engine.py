"""The engine on a PostgreSQL store answers like the embedded engine on the same corpus.

Both ingest the bundled sample corpus with the deterministic FAKE hash encoder and spaCy-free
concepts; the PostgreSQL engine runs its three legs in SQL (pg_search BM25 with the engine's
k1/b, pgvector, the SQL graph leg) with the filter compiled to one predicate."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
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


def assert_same_up_to_near_ties(got: Any, want: Any) -> None:
    """The same ranking, except that hits whose fused scores tie within float noise may swap.

    PostgreSQL computes BM25 in float64 SQL, the embedded index in float32 numpy: raw scores
    agree to about 1e-7. Convex fusion and graph expansion compute with the scores themselves,
    so two hits that tie within that noise (or a tie at the cut-off) can come in either order."""
    scores = [h.score for h in want.hits]
    assert [h.score for h in got.hits] == pytest.approx(scores, rel=1e-5, abs=1e-9)
    for a, b in zip(got.hits, want.hits, strict=True):
        if a.chunk_id == b.chunk_id:
            continue
        tied = {h.chunk_id for h in want.hits if h.score == pytest.approx(a.score, rel=1e-5)}
        at_cutoff = scores[-1] == pytest.approx(a.score, rel=1e-5)
        assert a.chunk_id in tied or at_cutoff, (a.chunk_id, b.chunk_id)


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


@pytest.mark.parametrize("flt", [None, {"audience": "public"}])
@pytest.mark.parametrize("method", ["walk", "ppr"])
def test_graph_leg_matches_embedded(
    engines: tuple[Engine, Engine], method: str, flt: dict[str, Any] | None
) -> None:
    """Both graph methods, with and without a filter: the same hits, scores and graph trails
    (the PPR walk runs over the graph the PostgreSQL backend loads once per release)."""
    embedded, pg = engines
    cfg = preset_config("default").with_overrides(
        graph={"method": method}, fusion={"graph_weight": 1.0}
    )
    walked = 0
    for query in QUERIES:
        want = embedded.search(query, k=10, filter=flt, config=cfg)
        got = pg.search(query, k=10, filter=flt, config=cfg)
        assert_same_up_to_near_ties(got, want)
        assert [h.graph for h in got.hits] == [h.graph for h in want.hits], query
        walked += sum(1 for h in got.hits if h.graph is not None and h.graph.steps)
    assert walked > 0 or method == "walk"


@pytest.mark.parametrize("flt", [{"audience": "public"}, {"audience": ["internal", "sre"]}])
def test_filter_inside_every_sql_leg(engines: tuple[Engine, Engine], flt: dict[str, Any]) -> None:
    embedded, pg = engines
    for query in QUERIES[:6]:
        for preset in ("lexical", "dense", "graph", "default"):
            cfg = replace(preset_config(preset), expand=ExpandConfig(enabled=True))
            got = pg.search(query, k=20, filter=flt, config=cfg)
            want = embedded.search(query, k=20, filter=flt, config=cfg)
            assert_same_up_to_near_ties(got, want)
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


def _no_copies(engine: Engine) -> None:
    snap = engine.snapshot()
    assert snap.sql is not None
    assert snap._lexical is None and snap._vector is None, "an in-memory copy was built"


def test_features_reranker_answers_and_similar_match_embedded_without_memory_copies(
    engines: tuple[Engine, Engine],
) -> None:
    """Feature reranking (cosine, BM25, concept overlap, PageRank of the candidates), answer
    idf and "more like this" read the candidates from the database, never an in-memory copy of
    the lexical or vector index, and agree with the embedded engine."""
    embedded, pg = engines
    features = replace(
        preset_config("default"), rerank=replace(preset_config("default").rerank, kind="features")
    )
    for query in QUERIES:
        want = embedded.search(query, k=10, config=features)
        got = pg.search(query, k=10, config=features)
        assert got.rerank is not None and got.rerank.ran
        assert ids(got) == ids(want), query
        for a, b in zip(got.hits, want.hits, strict=True):
            assert a.score == pytest.approx(b.score, rel=1e-4, abs=1e-6)
    for question in QUERIES[:5]:
        a, b = pg.ask(question), embedded.ask(question)
        assert (a.answer, a.abstained) == (b.answer, b.abstained), question
        assert a.confidence == pytest.approx(b.confidence, abs=1e-6)
        assert [c.chunk_id for c in a.citations] == [c.chunk_id for c in b.citations]
    doc = embedded.search("pgbouncer pool exhausted", k=1).hits[0].doc_id
    for flt in (None, {"audience": "public"}):
        got_similar = pg.similar(doc, k=5, filter=flt)
        want_similar = embedded.similar(doc, k=5, filter=flt)
        assert got_similar, flt
        assert [(s.doc_id, s.chunk_id) for s in got_similar] == [
            (s.doc_id, s.chunk_id) for s in want_similar
        ]
        assert [s.score for s in got_similar] == pytest.approx([s.score for s in want_similar])
    _no_copies(pg)


def test_filter_field_errors_match_embedded_and_name_only_fields_in_scope(
    engines: tuple[Engine, Engine],
) -> None:
    embedded, pg = engines
    cases: list[tuple[Any, Any]] = [
        ({"colour": "red"}, None),
        ({"and": [{"audience": "sre"}, {"team": "x"}]}, None),
        ({"colour": "red"}, {"audience": "public"}),
        ({"colour": "red"}, {"audience": "nobody-has-this"}),  # empty scope: no error, no hits
        ({"audience": "public"}, {"tenant": "unknown-field"}),
    ]
    for flt, scope in cases:
        outcomes = []
        for engine in (embedded, pg):
            try:
                outcomes.append(("hits", ids(engine.search("pgbouncer", filter=flt, scope=scope))))
            except Exception as exc:  # the same class and message from both backends
                outcomes.append((type(exc).__name__, str(exc)))
        assert outcomes[0] == outcomes[1], (flt, scope)
    _no_copies(pg)


def test_memories_recency_and_expansion_on_postgres(pg_server: Any, tmp_path: Path) -> None:
    """Recency weighting reads created_at and kind of the fused candidates from the database;
    expansion walks the graph leg's in-memory graph, with a filter as a mask."""
    embedded = _engine(tmp_path / "emb")
    pg = _engine(pg_server.url + "&schema=engine_memories")
    try:
        for engine in (embedded, pg):
            engine.ingest([SAMPLE])
            for i, text in enumerate(
                [
                    "pgbouncer pool exhausted again after the deploy",
                    "ERR-4413 seen on checkout, retried",
                    "pgbouncer settings rolled back",
                ]
            ):
                engine.remember(text, session="s1", timestamp=f"2026-11-{20 + i:02d}T10:00:00Z")
        now = 1_796_000_000.0  # a fixed reference time, after every memory
        for query in ("pgbouncer", "ERR-4413 checkout"):
            want = embedded.recall(query, k=5, as_of=now)
            got = pg.recall(query, k=5, as_of=now)
            assert ids(got) == ids(want)
            assert [[(c.leg, c.rank) for c in h.contributions] for h in got.hits] == [
                [(c.leg, c.rank) for c in h.contributions] for h in want.hits
            ]
        cfg = replace(preset_config("default"), expand=ExpandConfig(enabled=True))
        for flt in (None, {"audience": "sre"}):
            want = embedded.search(
                "what else broke after the pgbouncer migration", config=cfg, filter=flt, k=20
            )
            got = pg.search(
                "what else broke after the pgbouncer migration", config=cfg, filter=flt, k=20
            )
            assert_same_up_to_near_ties(got, want)
            paths = {h.chunk_id: h.expansion for h in want.hits}
            for h in got.hits:  # the same path to every hit both return
                if h.chunk_id in paths:
                    assert [(p.seed, p.hops) for p in h.expansion] == [
                        (p.seed, p.hops) for p in paths[h.chunk_id]
                    ]
            if flt is None:
                assert any(h.expansion for h in got.hits)
        _no_copies(pg)
        # a path with no SQL form can still ask for an in-memory copy: built from the database
        snap, want_snap = pg.snapshot(), embedded.snapshot()
        assert snap.lexical_index.n_docs == want_snap.lexical_index.n_docs > 0

        def rows(s: Any) -> dict[str, Any]:
            live = np.flatnonzero(s.live).tolist()
            s.load_keys(live)
            return {s.keys[o][0]: s.vector_index.matrix[o] for o in live}

        got_rows, want_rows = rows(snap), rows(want_snap)
        assert got_rows.keys() == want_rows.keys()
        assert all(np.allclose(got_rows[c], want_rows[c]) for c in want_rows)
    finally:
        embedded.close()
        pg.close()
