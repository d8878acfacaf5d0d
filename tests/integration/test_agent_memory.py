"""Agent memory over time: remember / recall / forget, time windows, recency, as-of, typed
relations, transcripts, deletes that leave nothing behind, and a cache keyed by scope.

All with the FAKE hash encoder and identifier-only concepts (fast, deterministic)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from clew import Document, Engine
from clew.config import EngineConfig, preset_config
from clew.errors import LoadError, QueryError, StoreError
from clew.eval.answers import grounding
from clew.ingest.transcript import is_transcript, load_transcript

NOW_ISH = "2026-03-10T12:00:00Z"


def _remember_incident(engine: Engine) -> dict[str, str]:
    ids = {}
    ids["pool"] = engine.remember(
        "Connection pool exhausted on the primary database", session="s1", timestamp="2026-03-01"
    )
    ids["retries"] = engine.remember(
        "ledger-writer retries doubled ERR-4012",
        session="s1",
        timestamp="2026-03-02T08:00:00Z",
        relations=[("caused_by", ids["pool"])],
    )
    ids["lunch"] = engine.remember(
        "Team lunch moved to Friday", session="s2", timestamp="2026-03-05"
    )
    return ids


def _ids(result: Any) -> list[str]:
    return [h.doc_id for h in result.hits]


def test_recall_sees_memories_only_by_session_and_window(fake_engine: Engine) -> None:
    fake_engine.ingest([Document("doc-1", "Doc", "ERR-4012 in a corpus document", "doc-1")])
    ids = _remember_incident(fake_engine)
    assert set(_ids(fake_engine.recall("ERR-4012 retries", k=10))) <= set(ids.values())
    assert "doc-1" in _ids(fake_engine.search("ERR-4012", k=10))
    assert _ids(fake_engine.recall("lunch", session="s2")) == [ids["lunch"]]
    assert ids["lunch"] not in _ids(fake_engine.recall("lunch Friday", session="s1", k=10))
    window = fake_engine.recall("pool retries lunch", since="2026-03-02", until="2026-03-05")
    assert _ids(window) == [ids["retries"]]
    with pytest.raises(QueryError, match="since='2026-03-09' is after"):
        fake_engine.recall("x", since="2026-03-09", until="2026-03-01")
    with pytest.raises(QueryError, match="as_of='yesterday' is not a time"):
        fake_engine.recall("x", as_of="yesterday")


def test_as_of_answers_from_what_was_known_then(fake_engine: Engine) -> None:
    ids = _remember_incident(fake_engine)
    then = fake_engine.recall("pool retries ledger-writer", as_of="2026-03-01T23:00:00Z", k=10)
    assert _ids(then) == [ids["pool"]]  # the retries were remembered later
    later = fake_engine.recall("pool retries ledger-writer", as_of="2026-03-03", k=10)
    assert set(_ids(later)) == {ids["pool"], ids["retries"]}


def test_recency_is_its_own_contribution_after_fusion(fake_engine: Engine) -> None:
    old = fake_engine.remember("pgbouncer pool note one", timestamp="2025-01-01")
    new = fake_engine.remember("pgbouncer pool note two", timestamp="2026-03-09")
    fake_engine.ingest(
        [
            Document("d-old", "Old doc", "pgbouncer pool note", "d", {"created_at": "2025-01-01"}),
        ]
    )
    result = fake_engine.recall("pgbouncer pool note", as_of=NOW_ISH, k=5)
    assert _ids(result)[:2] == [new, old]  # equally good matches: the newer memory wins
    parts = {h.doc_id: {c.leg: c for c in h.contributions} for h in result.hits}
    assert parts[new]["recency"].fused_part > parts[old]["recency"].fused_part > 0
    assert parts[new]["recency"].raw_score == pytest.approx(1.5)  # age in days
    # documents are not weighted by default; they are when configured
    plain = fake_engine.search("pgbouncer pool note", k=5)
    doc = next(h for h in plain.hits if h.doc_id == "d-old")
    assert "recency" not in {c.leg for c in doc.contributions}
    docs_too = EngineConfig().with_overrides(recency={"documents": True})
    doc = next(
        h
        for h in fake_engine.search("pgbouncer pool note", config=docs_too).hits
        if h.doc_id == "d-old"
    )
    assert "recency" in {c.leg for c in doc.contributions}
    off = EngineConfig().with_overrides(recency={"memories": False})
    assert all(
        "recency" not in {c.leg for c in h.contributions}
        for h in fake_engine.search("pgbouncer pool note", config=off).hits
    )


def test_a_fresh_weak_memory_does_not_crowd_out_documents_in_search(fake_engine: Engine) -> None:
    """Recency lifts memories in recall, not in document search: a brand-new memory that only
    shares one word with the query ranks below the documents that match it."""
    docs = [
        Document(f"d{i}", f"Pool {i}", f"pgbouncer pool size {i} tuning notes", f"d{i}")
        for i in range(6)
    ]
    fake_engine.ingest(docs)
    fresh = fake_engine.remember("the lunch pool at noon", timestamp=None)
    found = fake_engine.search("pgbouncer pool", k=10)
    assert set(_ids(found)[:6]) == {f"d{i}" for i in range(6)}, _ids(found)
    assert all("recency" not in {c.leg for c in h.contributions} for h in found.hits)
    recalled = fake_engine.recall("pgbouncer pool", k=5)
    assert _ids(recalled) == [fresh]
    assert "recency" in {c.leg for c in recalled.hits[0].contributions}


def test_an_exact_identifier_is_never_buried_by_age(fake_engine: Engine) -> None:
    old = fake_engine.remember("OPS-7781 deploy freeze", timestamp="2020-01-01")
    for i in range(8):
        fake_engine.remember(f"deploy note {i} about the freeze", timestamp="2026-03-09")
    assert _ids(fake_engine.recall("OPS-7781 deploy freeze", k=3))[0] == old


def test_a_when_question_is_answered_with_the_day_the_memory_was_said(
    fake_engine: Engine,
) -> None:
    fake_engine.remember(
        "The payments team cutover is planned for June 21.", timestamp="2026-05-28"
    )
    fake_engine.remember("Work update: I switch teams.", timestamp="2026-04-20")
    fake_engine.ingest(
        [Document("notes", "Notes", "The payments team was founded in 2019.", "api")]
    )
    answer = fake_engine.ask("when did I switch to the payments team")
    assert answer.answer.startswith("2026-04-20: Work update: I switch teams. [1]")
    assert grounding(answer) == 1.0  # the day is the memory's own, as its sentence is
    assert "] The payments team was founded in 2019. [" in answer.answer  # a document: no day
    other = fake_engine.ask("which team am I on")  # not a time question: no days shown
    assert "2026-04-20:" not in other.answer


def test_a_question_about_now_is_answered_by_the_newer_memory(fake_engine: Engine) -> None:
    fake_engine.remember("I live in Easton.", timestamp="2025-09-15")
    fake_engine.remember(
        "Since the move last weekend I live in a house in Bedminster.", timestamp="2026-01-20"
    )
    assert fake_engine.ask("Where do I live now?").answer.startswith("Since the move")
    assert fake_engine.ask("Where do I live?").answer.startswith("I live in Easton.")


def test_typed_relations_become_graph_edges_with_their_names(fake_engine: Engine) -> None:
    ids = _remember_incident(fake_engine)
    cfg = preset_config("lexical").with_overrides(expand={"enabled": True})
    hits = fake_engine.search("ledger-writer retries doubled", config=cfg, k=5).hits
    reached = next(h for h in hits if h.doc_id == ids["pool"])
    steps = [s.edge for p in reached.expansion for s in p.steps]
    assert steps == ["CAUSED_BY"]
    back = fake_engine.search("connection pool exhausted primary", config=cfg, k=5).hits
    reached = next(h for h in back if h.doc_id == ids["retries"])
    assert [s.edge for p in reached.expansion for s in p.steps] == ["CAUSED_BY (reverse)"]
    # a relation to a concept: the memory mentions it, so the graph leg reaches it
    linked = fake_engine.remember(
        "we agreed to move the pool", relations=[("related_to", "concept:PGB-1")]
    )
    graph = fake_engine.search("PGB-1", config=preset_config("graph"), k=5)
    assert linked in _ids(graph)
    with pytest.raises(QueryError, match="not in the index"):
        fake_engine.remember("x", relations=[("caused_by", "mem-missing")])
    with pytest.raises(QueryError, match="type 'Caused By' is invalid"):
        fake_engine.remember("x", relations=[("Caused By", ids["pool"])])


def test_transcript_turns_become_memories(fake_engine: Engine, tmp_path: Path) -> None:
    chat = tmp_path / "incident.jsonl"
    turns = [
        {"speaker": "ana", "text": "pgbouncer ran out of connections", "time": "2026-03-01T09:12Z"},
        {"speaker": "bo", "text": "ERR-4012 started right after", "time": "2026-03-01T09:13:00Z"},
        {"speaker": "ana", "text": "", "time": "2026-03-01T09:14:00Z"},
        {"role": "assistant", "content": "Rolled back CHG-1187", "timestamp": "2026-03-01T09:40Z"},
    ]
    chat.write_text("\n".join(json.dumps(t) for t in turns) + "\n")
    assert is_transcript(chat)
    docs = load_transcript(chat)
    assert [d.metadata["speaker"] for d in docs] == ["ana", "bo", "assistant"]
    assert {d.metadata["session"] for d in docs} == {"incident"}
    assert docs[1].links == (f"follows::{docs[0].doc_id}",)
    report = fake_engine.ingest(docs)
    assert len(report.added) == 3
    assert fake_engine.ingest(load_transcript(chat)).unchanged == report.added  # idempotent
    assert _ids(fake_engine.recall("CHG-1187", session="incident"))[0] == docs[2].doc_id
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"speaker": "ana", "text": "hi", "time": "noon"}\n')
    with pytest.raises(LoadError, match=r"bad\.jsonl:1: timestamp 'noon'"):
        load_transcript(bad)


def _counts(engine: Engine) -> dict[str, int]:
    return engine.store.counts()


def test_forget_leaves_nothing_in_any_leg_path_replay_or_cache(fake_engine: Engine) -> None:
    ids = _remember_incident(fake_engine)
    gone = ids["pool"]
    expand = preset_config("lexical").with_overrides(expand={"enabled": True})
    queries = ["Connection pool exhausted primary", "ledger-writer retries doubled ERR-4012"]
    before = fake_engine.search(queries[0], k=10)  # cached and traced
    assert gone in _ids(before)
    assert gone in {
        h.doc_id for h in fake_engine.search(queries[1], config=expand, k=10).hits
    }  # reachable over CAUSED_BY
    concepts_before = {r[0] for r in _rows(fake_engine, "SELECT key FROM concepts")}

    fake_engine.forget(gone)

    for preset in ("lexical", "dense", "graph", "hybrid", "default"):
        for q in queries:
            hits = fake_engine.search(q, k=50, config=preset_config(preset)).hits
            assert gone not in _ids_of(hits), (preset, q)
    for q in queries:
        for h in fake_engine.search(q, config=expand, k=50).hits:
            assert h.doc_id != gone
            assert all(gone not in s.to and gone not in s.via for p in h.expansion for s in p.steps)
            assert all(not p.seed.startswith(gone) for p in h.expansion)
        answer = fake_engine.ask(q)
        assert all(c.doc_id != gone for c in answer.citations)
        assert gone not in _ids(fake_engine.recall(q, k=50))
    again = fake_engine.search(queries[0], k=10)
    assert not again.cached and gone not in _ids(again)
    replay = fake_engine.replay(before.trace_id or "")
    assert not replay.identical and replay.differences[0].startswith("release:")
    now_side = [d.split(" -> ", 1)[1] for d in replay.differences if " -> " in d]
    assert any(gone in d for d in replay.differences)  # it was there then ...
    assert all(gone not in d for d in now_side)  # ... and the replay no longer returns it
    assert fake_engine.document(gone) is None
    assert not _rows(fake_engine, "SELECT 1 FROM chunks WHERE doc_id = ?", gone)
    assert not _rows(fake_engine, "SELECT 1 FROM links WHERE doc_id = ?", gone)
    # its own identifiers have no mentions left, so those concepts are gone too
    concepts_after = {r[0] for r in _rows(fake_engine, "SELECT key FROM concepts")}
    assert concepts_after <= concepts_before
    snap = fake_engine.snapshot()
    assert all(d != gone for d in snap.graph_index.chunk_doc.values())
    assert gone not in snap.graph_index.doc_links.get(ids["retries"], [])
    with pytest.raises(StoreError, match="no memory"):
        fake_engine.forget(gone)


def test_deleting_a_document_removes_its_concepts_and_edges(fake_engine: Engine) -> None:
    fake_engine.ingest(
        [
            Document("a", "A", "ZQX-9001 only here. See [b](b).", "a", links=("b",)),
            Document("b", "B", "ZQX-9002 only here.", "b"),
        ]
    )
    assert "zqx-9001" in {r[0] for r in _rows(fake_engine, "SELECT key FROM concepts")}
    fake_engine.delete("a")
    assert "zqx-9001" not in {r[0] for r in _rows(fake_engine, "SELECT key FROM concepts")}
    assert fake_engine.search("ZQX-9001", config=preset_config("graph")).hits == ()
    assert "a" not in fake_engine.snapshot().graph_index.doc_links


def test_reingest_is_idempotent(fake_engine: Engine) -> None:
    docs = [
        Document("a", "A", "ERR-4012 and pgbouncer. See [b](b).", "a", links=("b",)),
        Document("b", "B", "ERR-4013 in ledger-writer.", "b"),
    ]
    fake_engine.ingest(docs)
    _remember_incident(fake_engine)
    counts = _counts(fake_engine)
    release = fake_engine.store.release()
    fake_engine.ingest(docs)
    _remember_incident(fake_engine)
    assert _counts(fake_engine) == counts
    assert fake_engine.store.release() == release


def test_cached_results_never_cross_scopes_or_releases(fake_engine: Engine) -> None:
    fake_engine.ingest(
        [
            Document("a1", "A", "ERR-4012 tenant a", "a1", {"tenant": "a"}),
            Document("b1", "B", "ERR-4012 tenant b", "b1", {"tenant": "b"}),
        ]
    )
    first = fake_engine.search("ERR-4012", scope={"tenant": "a"}, caller="a")
    assert not first.cached and _ids(first) == ["a1"]
    assert fake_engine.search("ERR-4012", scope={"tenant": "a"}, caller="a").cached
    other = fake_engine.search("ERR-4012", scope={"tenant": "b"}, caller="a")
    assert not other.cached and _ids(other) == ["b1"]
    assert not fake_engine.search("ERR-4012", scope={"tenant": "a"}, caller="b").cached
    assert fake_engine.search("  ERR-4012 ", scope={"tenant": "a"}, caller="a").cached
    fake_engine.ingest([Document("a2", "A2", "ERR-4012 again for a", "a2", {"tenant": "a"})])
    fresh = fake_engine.search("ERR-4012", scope={"tenant": "a"}, caller="a")
    assert not fresh.cached and set(_ids(fresh)) == {"a1", "a2"}
    off = _with_cache(fake_engine, size=0)
    try:
        off.search("ERR-4012")
        assert not off.search("ERR-4012").cached
    finally:
        off.close()


def _with_cache(engine: Engine, size: int) -> Engine:
    """A second engine on ``engine``'s index with a result cache of ``size`` per scope."""
    config = EngineConfig().with_overrides(cache={"size": size})
    return Engine(engine.directory, config, encoder=engine.encoder, extractor=engine.extractor)


def test_another_tenants_queries_do_not_move_a_scopes_cached_flag(fake_engine: Engine) -> None:
    fake_engine.ingest(
        [
            Document("a1", "A", "ERR-4012 tenant a", "a1", {"tenant": "a"}),
            Document("b1", "B", "ERR-4012 tenant b", "b1", {"tenant": "b"}),
        ]
    )
    small = _with_cache(fake_engine, size=1)
    try:
        assert not small.search("ERR-4012", scope={"tenant": "a"}).cached
        for query in ("ERR-4012", "tenant b", "tenant"):  # b alone fills a cache of one
            small.search(query, scope={"tenant": "b"})
        assert small.search("ERR-4012", scope={"tenant": "a"}).cached
        small.search("tenant a", scope={"tenant": "a"})  # a's own query does evict it
        assert not small.search("ERR-4012", scope={"tenant": "a"}).cached
    finally:
        small.close()


def _ids_of(hits: Any) -> list[str]:
    return [h.doc_id for h in hits]


def _rows(engine: Engine, sql: str, *args: Any) -> list[Any]:
    conn = sqlite3.connect(engine.directory / "clew.sqlite")
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


@pytest.mark.slow
def test_entity_resolution_across_sessions(tmp_path: Path) -> None:
    from clew.config import ConceptConfig
    from clew.ingest.concepts import ConceptExtractor
    from clew.testing.fakes import FakeHashEncoder

    engine = Engine(
        tmp_path / "idx",
        create=True,
        encoder=FakeHashEncoder(),
        extractor=ConceptExtractor(ConceptConfig(spacy=True)),
    )
    try:
        a = engine.remember(
            "We restarted PgBouncer at noon.", session="mon", timestamp="2026-03-02"
        )
        b = engine.remember("pgbouncer looks healthy again.", session="tue", timestamp="2026-03-03")
        c = engine.remember(
            "The pgbouncer migration is done.", session="wed", timestamp="2026-03-04"
        )
        d = engine.remember("ERR-4412 means retry later.", session="wed", timestamp="2026-03-04")
        e = engine.remember("ERR-4413 means do not retry.", session="wed", timestamp="2026-03-04")
        merged = {x["key"]: x for x in engine.concepts(merged_only=True)}
        pgb = merged["pgbouncer"]
        assert pgb["kind"] == "identifier" and pgb["chunks"] == 3
        assert {"PgBouncer", "pgbouncer"} <= set(pgb["aliases"])
        assert any("migration" in alias for alias in pgb["aliases"])  # the phrase resolved
        keys = {x["key"] for x in engine.concepts()}
        assert {"err-4412", "err-4413"} <= keys  # one character apart: never merged
        graph = preset_config("graph")
        assert set(_ids(engine.search("PgBouncer", config=graph, k=10))) == {a, b, c}
        assert _ids(engine.search("ERR-4412", config=graph, k=10)) == [d]
        assert _ids(engine.search("ERR-4413", config=graph, k=10)) == [e]
    finally:
        engine.close()
