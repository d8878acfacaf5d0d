"""Engine behaviour on small real fixtures, with the FAKE hash encoder (fast, deterministic)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clew import Document, Engine
from clew.config import ConceptConfig, preset_config
from clew.errors import FilterError, QueryError, StoreError
from clew.ingest.concepts import ConceptExtractor
from clew.testing.fakes import FakeHashEncoder

DOCS = [
    Document(
        "inc-1",
        "INC-1 postmortem",
        "ERR-4012 timeouts in payments-gateway after "
        "CHG-7 changed pgbouncer pool size.\n\nLedger-writer retried RetryPolicy.MaxAttempts "
        "times.",
        "inc-1",
        metadata={"audience": "sre", "tenant": "acme"},
    ),
    Document(
        "inc-2",
        "INC-2 postmortem",
        "Duplicate charges followed the ERR-4012 retry storm in ledger-writer.",
        "inc-2",
        metadata={"audience": "internal", "tenant": "acme"},
        links=("inc-1",),
    ),
    Document(
        "faq",
        "FAQ",
        "Customers billed twice get a refund. Use idempotency_key on every charge request.",
        "faq",
        metadata={"audience": "public"},
    ),
    Document(
        "codes",
        "Error codes",
        "ERR-4412 means a reused idempotency_key. ERR-4413 means the key expired.",
        "codes",
        metadata={"audience": "public"},
    ),
    Document(
        "pool",
        "pgbouncer",
        "pgbouncer pool exhaustion breaks payments-gateway, ledger-writer and settlement-batcher.",
        "pool",
        metadata={"audience": "sre"},
    ),
]


def ingest(engine: Engine, docs: list[Document] = DOCS) -> None:
    engine.ingest(docs)


def chunk_ids(result: object) -> list[str]:
    return [h.chunk_id for h in result.hits]  # type: ignore[attr-defined]


def test_search_returns_provenance_for_every_hit(fake_engine: Engine) -> None:
    ingest(fake_engine)
    result = fake_engine.search("ERR-4012", k=5)
    assert result.hits and result.release == 1
    assert "identifier" in result.route.features
    # the learned router: an identifier pushes the split towards lexical, and says so
    assert result.route.weighed_by.startswith("router-")
    assert "identifier 1 → lexical" in result.route.reason
    assert result.route.signals["identifier"] == 1.0
    plain = fake_engine.search("pgbouncer pool exhaustion", k=5).route.legs
    legs = result.route.legs
    assert legs["lexical"] / legs["dense"] > plain["lexical"] / plain["dense"]
    for hit in result.hits:
        assert hit.contributions
        assert hit.score == pytest.approx(sum(c.fused_part for c in hit.contributions))
        for c in hit.contributions:  # convex: weight × the score min-max normalized in its list
            assert 0.0 <= c.fused_part <= legs[c.leg] + 1e-9
    assert any(c.fused_part == pytest.approx(legs[c.leg]) for c in result.hits[0].contributions)
    rules = fake_engine.search("ERR-4012", k=5, preset="rules")
    assert rules.route.weighed_by == "rules"
    assert rules.route.legs["lexical"] > rules.route.legs["dense"]
    for hit in rules.hits:
        for c in hit.contributions:  # RRF: weight / (k + rank)
            assert c.fused_part == pytest.approx(rules.route.legs[c.leg] / (60 + c.rank))
    top = result.hits[0]
    assert "ERR-4012" in top.text
    graph = [h for h in result.hits if h.graph is not None]
    assert graph and "err-4012" in graph[0].graph.concepts  # type: ignore[union-attr]
    for stage in ("filter", "route", "lexical", "dense", "graph", "fuse", "total"):
        assert stage in result.timings_ms


def test_two_runs_are_identical(fake_engine: Engine) -> None:
    ingest(fake_engine)
    a = fake_engine.search("pgbouncer pool ERR-4012", k=10)
    b = fake_engine.search("pgbouncer pool ERR-4012", k=10)
    assert a.hits == b.hits
    assert [h.score for h in a.hits] == [h.score for h in b.hits]


def test_reingest_unchanged_is_a_noop(fake_engine: Engine) -> None:
    ingest(fake_engine)
    before = fake_engine.store.counts()
    report = fake_engine.ingest(DOCS)
    assert report.added == () and report.updated == () and len(report.unchanged) == len(DOCS)
    assert report.chunks_written == 0
    assert fake_engine.store.release() == 1
    assert fake_engine.store.counts() == before


def test_update_replaces_in_every_leg(fake_engine: Engine) -> None:
    ingest(fake_engine)
    changed = Document(
        "faq",
        "FAQ",
        "Refunds now take ZX-99 business days.",
        "faq",
        metadata={"audience": "public"},
    )
    report = fake_engine.ingest([changed])
    assert report.updated == ("faq",)
    for preset in ("lexical", "dense", "graph"):
        old = fake_engine.search("billed twice refund idempotency_key", preset=preset, k=20)
        assert all("billed twice" not in h.text for h in old.hits), preset
    for preset in ("lexical", "graph"):
        new = fake_engine.search("ZX-99", preset=preset, k=5)
        assert new.hits and new.hits[0].doc_id == "faq", preset


def test_delete_reaches_every_leg(fake_engine: Engine) -> None:
    ingest(fake_engine)
    for preset in ("lexical", "dense", "graph"):
        hits = fake_engine.search("pgbouncer settlement-batcher", preset=preset, k=10).hits
        assert "pool" in {h.doc_id for h in hits}, preset
    fake_engine.delete("pool")
    for preset in ("lexical", "dense", "graph"):
        hits = fake_engine.search("pgbouncer settlement-batcher", preset=preset, k=50).hits
        assert "pool" not in {h.doc_id for h in hits}, preset
    # the concept only that document mentioned is gone from the graph
    keys = {c[1] for c in fake_engine.store.graph_rows().concepts}
    assert "settlement-batcher" not in keys
    with pytest.raises(StoreError, match="no document with id 'pool'"):
        fake_engine.delete("pool")


def test_reopen_catches_up_from_saved_indexes(tmp_path: Path) -> None:
    kw = {"encoder": FakeHashEncoder(), "extractor": ConceptExtractor(ConceptConfig(spacy=False))}
    with Engine(tmp_path / "i", create=True, **kw) as e:  # type: ignore[arg-type]
        e.ingest(DOCS[:3])
        first = e.search("ERR-4012", k=5)
    with Engine(tmp_path / "i", **kw) as e:  # type: ignore[arg-type]
        assert e.search("ERR-4012", k=5).hits == first.hits
        e.ingest(DOCS[3:])
    with Engine(tmp_path / "i", **kw) as e:  # type: ignore[arg-type]
        assert e.search("ERR-4413", preset="lexical", k=1).hits[0].doc_id == "codes"


AUDIENCES = ["public", "internal", "sre"]


@pytest.mark.parametrize("audience", AUDIENCES)
def test_filter_applies_inside_every_leg(fake_engine: Engine, audience: str) -> None:
    ingest(fake_engine)
    snap = fake_engine.snapshot()
    flt = {"audience": audience}
    allowed_docs = {d.doc_id for d in DOCS if d.metadata["audience"] == audience}
    mask = snap.allowed(json.dumps(flt))
    query = "ERR-4012 pgbouncer idempotency_key payments-gateway ledger-writer refund"
    for leg in ("lexical", "dense", "graph"):
        result = fake_engine.search(query, preset=leg, k=100, filter=flt)
        unfiltered = fake_engine.search(query, preset=leg, k=100)
        got = {h.chunk_id for h in result.hits}
        assert {h.doc_id for h in result.hits} <= allowed_docs, leg
        allowed_unfiltered = {h.chunk_id for h in unfiltered.hits if h.doc_id in allowed_docs}
        if leg == "graph":
            # graph reach under a filter never exceeds the visible part of the full reach
            assert got <= allowed_unfiltered
        else:
            assert got == allowed_unfiltered, leg
    dense = fake_engine.search(query, preset="dense", k=100, filter=flt)
    assert len(dense.hits) == int(mask.sum()), "dense sees exactly the allowed chunks"


def test_filter_graph_reach_does_not_cross_hidden_chunks(fake_engine: Engine) -> None:
    ingest(fake_engine)
    # "settlement-batcher" co-occurs with payments-gateway only in the sre-only 'pool' doc:
    # with a public+internal filter the 2-hop walk must not learn that edge from it.
    flt = {"audience": ["public", "internal"]}
    walk = preset_config("graph").with_overrides(graph={"method": "walk"})
    full = fake_engine.search("settlement-batcher", config=walk, k=50)
    reached = {h.doc_id: h for h in full.hits}
    assert reached["pool"].graph.hops == 1  # type: ignore[union-attr]
    assert reached["inc-2"].graph.hops == 2  # type: ignore[union-attr]
    assert "ledger-writer" in reached["inc-2"].graph.via  # type: ignore[union-attr]
    res = fake_engine.search("settlement-batcher", config=walk, k=50, filter=flt)
    assert res.hits == ()
    # PageRank: the same wall; the full walk reaches inc-2 over a path from the seed concept
    ppr = preset_config("graph").with_overrides(graph={"method": "ppr"})
    full = fake_engine.search("settlement-batcher", config=ppr, k=50)
    reached = {h.doc_id: h for h in full.hits}
    trail = reached["inc-2"].graph
    assert trail is not None and trail.seed == "settlement-batcher" and trail.hops >= 2
    assert trail.steps[0].via == "settlement-batcher" and trail.steps[0].to.startswith("pool")
    res = fake_engine.search("settlement-batcher", config=ppr, k=50, filter=flt)
    assert res.hits == ()


def test_filter_errors(fake_engine: Engine) -> None:
    ingest(fake_engine)
    with pytest.raises(FilterError, match="appear in no document"):
        fake_engine.search("x", filter={"team": "a"})
    with pytest.raises(FilterError):
        fake_engine.search("x", filter="{bad")


@pytest.mark.parametrize("query", ["", "   ", "x" * 2001])
def test_bad_queries(fake_engine: Engine, query: str) -> None:
    ingest(fake_engine)
    with pytest.raises(QueryError):
        fake_engine.search(query)


def test_bad_k(fake_engine: Engine) -> None:
    ingest(fake_engine)
    with pytest.raises(QueryError, match="k=0 is invalid"):
        fake_engine.search("x", k=0)


def test_content_hash_dedup(fake_engine: Engine) -> None:
    twin = Document("faq-copy", "FAQ", DOCS[2].text, "faq-copy", metadata={"audience": "public"})
    ingest(fake_engine, [*DOCS, twin])
    res = fake_engine.search("billed twice refund", preset="lexical", k=10)
    docs = [h.doc_id for h in res.hits]
    assert docs.count("faq") + docs.count("faq-copy") == 1
    assert any(h.duplicates for h in res.hits)


def test_live_mask_matches_store(fake_engine: Engine) -> None:
    ingest(fake_engine)
    snap = fake_engine.snapshot()
    assert np.flatnonzero(snap.live).tolist() == fake_engine.store.live_ordinals().tolist()


class _FailingEncoder(FakeHashEncoder):
    """FAKE encoder that fails on its second call, to simulate a crash mid-ingest."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def encode(self, texts: Sequence[str]) -> Any:
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("simulated failure in the second batch")
        return super().encode(texts)


def test_failure_mid_ingest_keeps_committed_batches_only(tmp_path: Path) -> None:
    enc = _FailingEncoder()
    engine = Engine(
        tmp_path / "i",
        create=True,
        encoder=enc,
        extractor=ConceptExtractor(ConceptConfig(spacy=False)),
    )
    many = [
        Document(f"d{i}", f"Doc {i}", f"ERR-{1000 + i} " + "filler text " * 4000, f"d{i}")
        for i in range(12)
    ]
    with pytest.raises(RuntimeError, match="second batch"):
        engine.ingest(many)
    committed = set(engine.store.doc_hashes([d.doc_id for d in many]))
    assert 0 < len(committed) < len(many)
    engine.refresh()
    for doc_id in committed:
        n = int(doc_id[1:])
        hits = engine.search(f"ERR-{1000 + n}", preset="lexical", k=1).hits
        assert hits and hits[0].doc_id == doc_id
    missing = next(d for d in many if d.doc_id not in committed)
    n = int(missing.doc_id[1:])
    assert all(h.doc_id != missing.doc_id for h in engine.search(f"ERR-{1000 + n}", k=50).hits)
    # the next ingest completes the rest; nothing is duplicated
    engine._encoder = FakeHashEncoder()
    report = engine.ingest(many)
    assert set(report.added) == {d.doc_id for d in many} - committed
    assert engine.store.counts()["documents"] == len(many)
    engine.close()


def test_derived_files_keep_one_generation_and_rebuild_when_missing(tmp_path: Path) -> None:
    kw: dict[str, Any] = {
        "encoder": FakeHashEncoder(),
        "extractor": ConceptExtractor(ConceptConfig(spacy=False)),
    }
    path = tmp_path / "i"
    with Engine(path, create=True, **kw) as e:
        e.ingest(DOCS[:3])
        e.ingest(DOCS[3:])
    for name in ("lexical", "vectors", "graph"):
        manifest = json.loads((path / f"{name}.json").read_text())
        files = sorted(p.name for p in path.glob(f"{name}-*"))
        assert files and all(manifest["stamp"] in f for f in files), (name, files)
    for f in path.glob("lexical-*"):
        f.unlink()  # a manifest naming files that are gone: rebuilt from the store
    with Engine(path, **kw) as e:
        assert e.search("ERR-4413", preset="lexical", k=1).hits[0].doc_id == "codes"


def test_fuzzy_linking_follows_every_release(fake_engine: Engine) -> None:
    """The one-edit fuzzy index is carried from release to release (building it anew took
    seconds on a large vocabulary): concepts added later are found, deleted ones are not."""
    from clew import Document

    def doc(doc_id: str, concept: str) -> Document:
        return Document(
            doc_id, doc_id, f"notes {doc_id}", doc_id, links=(f"related_to::concept:{concept}",)
        )

    def found(query: str) -> list[str]:
        return [h.doc_id for h in fake_engine.search(query, preset="graph", k=5).hits]

    fake_engine.ingest([doc("d1", "zookeeper")])
    assert found("zookeepr") == ["d1"]  # one deletion away
    fake_engine.ingest([doc("d2", "kubernetes")])
    assert found("kubernets") == ["d2"]  # a key of a later release
    assert found("zookeepr") == ["d1"]
    fake_engine.delete("d1")
    assert found("zookeepr") == []  # gone with its document
