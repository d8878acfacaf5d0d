"""The HTTP API in-process through httpx's ASGI transport: auth, scopes, validation, jobs, gates.

Most tests use the sample corpus indexed with the FAKE hash encoder (fast); the cited-answer test
uses the real model (``sample_index``).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clew import Engine
from clew.config import ConceptConfig
from clew.ingest.concepts import ConceptExtractor
from clew.serve.api import create_app
from clew.serve.auth import KeyStore
from clew.serve.settings import ServeSettings
from clew.testing.asgi import ApiClient
from clew.testing.fakes import FakeHashEncoder

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "sample"


@pytest.fixture(scope="module")
def fake_sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("api") / "idx"
    with _fake_engine(path, create=True) as engine:
        engine.ingest([SAMPLE])
    return path


def _fake_engine(path: Path, *, create: bool = False) -> Engine:
    return Engine(
        path,
        create=create,
        encoder=FakeHashEncoder(),
        extractor=ConceptExtractor(ConceptConfig(spacy=False)),
    )


Api = ApiClient


@pytest.fixture
def api(fake_sample: Path, tmp_path: Path) -> Iterator[Api]:
    index = tmp_path / "idx"
    shutil.copytree(fake_sample, index)
    keys_file = tmp_path / "keys.yaml"
    keys = {
        "admin": KeyStore.add(keys_file, "ops", admin=True)[0],
        "public": KeyStore.add(keys_file, "support-bot", scope={"audience": "public"})[0],
        "acme": KeyStore.add(keys_file, "acme-agent", scope={"tenant": "acme"})[0],
    }
    eval_dir = tmp_path / "eval"
    eval_dir.mkdir()
    settings = ServeSettings(
        index=index, keys=keys_file, eval_results=eval_dir, max_body_bytes=200_000
    )
    client = Api(create_app(settings, _fake_engine(index)), keys)
    yield client
    client.close()


def _doc_meta(api: Api, doc_id: str) -> dict[str, Any]:
    r = api("GET", f"/documents/{doc_id}")
    assert r.status_code == 200, r.text
    return dict(r.json()["metadata"])


# -- auth ---------------------------------------------------------------------------------------


def test_missing_or_invalid_key_is_401(api: Api) -> None:
    for who in (None, "clew_not-a-real-key"):
        r = api("POST", "/search", who=who, json={"query": "ERR-4413"})
        assert r.status_code == 401
        assert r.headers["www-authenticate"] == "Bearer"
        assert "API key" in r.json()["detail"]
    r = api("POST", "/search", who=None, json={"query": "x"}, headers={"X-API-Key": "wrong"})
    assert r.status_code == 401


def test_keys_are_hashed_at_rest_and_x_api_key_works(api: Api, tmp_path: Path) -> None:
    text = (tmp_path / "keys.yaml").read_text()
    for key in api.keys.values():
        assert key not in text
    r = api(
        "POST",
        "/search",
        who=None,
        json={"query": "ERR-4413"},
        headers={"X-API-Key": api.keys["admin"]},
    )
    assert r.status_code == 200


def test_keys_added_while_running_take_effect(api: Api, tmp_path: Path) -> None:
    import os

    new, _ = KeyStore.add(tmp_path / "keys.yaml", "late", scope={"audience": "public"})
    st = (tmp_path / "keys.yaml").stat()
    os.utime(tmp_path / "keys.yaml", (st.st_atime, st.st_mtime + 5))  # coarse mtime clocks
    assert api("POST", "/search", who=new, json={"query": "refund"}).status_code == 200


def test_keys_never_reach_traces_or_logs(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG")
    api("POST", "/documents?wait=true", json={"documents": [{"id": "k1", "text": "key test"}]})
    api("DELETE", "/documents/k1")
    api("POST", "/search", who="clew_wrong-key", json={"query": "x"})
    r = api("POST", "/search", who="public", json={"query": "duplicate charges"})
    trace_id = r.json()["trace_id"]
    trace = api("GET", f"/traces/{trace_id}", who="admin").json()
    assert trace["caller"] == "support-bot"
    dumped = json.dumps(trace)
    assert all(key not in dumped for key in api.keys.values())
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "ops" in logged  # the key's name is logged for writes ...
    assert all(key not in logged for key in [*api.keys.values(), "clew_wrong-key"])  # never a key


# -- scopes -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "asked",
    [
        None,
        {"audience": "internal"},
        {"audience": ["internal", "sre", "public"]},
        {"or": [{"audience": "sre"}, {"audience": "public"}]},
        {"not": {"audience": "public"}},
    ],
)
def test_a_scope_can_narrow_but_never_widen(api: Api, asked: Any) -> None:
    body: dict[str, Any] = {"query": "pgbouncer ERR-4012 ledger-writer payments", "k": 50}
    if asked is not None:
        body["filter"] = asked
    r = api("POST", "/search", who="public", json=body)
    assert r.status_code == 200, r.text
    docs = {h["doc_id"] for h in r.json()["hits"]}
    for doc in docs:
        assert _doc_meta(api, doc).get("audience") == "public", doc
    if asked == {"audience": "internal"} or asked == {"not": {"audience": "public"}}:
        assert docs == set()
    # the same query without the scope does reach documents the scope hides
    wide = api("POST", "/search", json={"query": body["query"], "k": 50}).json()["hits"]
    assert any(_doc_meta(api, h["doc_id"]).get("audience") != "public" for h in wide)


def test_a_document_outside_scope_is_404_like_a_missing_one(api: Api) -> None:
    assert _doc_meta(api, "service-catalog.md")["audience"] == "internal"
    hidden = api("GET", "/documents/service-catalog.md", who="public")
    missing = api("GET", "/documents/no-such-doc.md", who="public")
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json()["detail"] == "no document 'service-catalog.md'"
    assert api("GET", "/documents/service-catalog.md/similar", who="public").status_code == 404
    assert api("GET", "/documents/duplicate-charges.md", who="public").status_code == 200


def test_more_like_this_respects_the_scope(api: Api) -> None:
    r = api("GET", "/documents/duplicate-charges.md/similar?k=10", who="public")
    assert r.status_code == 200
    similar = r.json()["similar"]
    assert similar and all(s["doc_id"] != "duplicate-charges.md" for s in similar)
    for s in similar:
        assert _doc_meta(api, s["doc_id"]).get("audience") == "public"
    scores = [s["score"] for s in similar]
    assert scores == sorted(scores, reverse=True)


def test_a_scope_over_a_field_nothing_has_sees_nothing(api: Api) -> None:
    r = api("POST", "/search", who="acme", json={"query": "ERR-4413"})
    assert r.status_code == 200  # not a 422 naming the index's fields
    assert all(_doc_meta(api, h["doc_id"]).get("tenant") == "acme" for h in r.json()["hits"])


def test_traces_belong_to_their_caller(api: Api) -> None:
    trace_id = api("POST", "/search", who="public", json={"query": "refund"}).json()["trace_id"]
    assert api("GET", f"/traces/{trace_id}", who="public").status_code == 200
    assert api("GET", f"/traces/{trace_id}", who="acme").status_code == 404
    assert api("GET", f"/traces/{trace_id}", who="admin").status_code == 200
    assert api("GET", "/traces/tr-0000000000000000000", who="admin").status_code == 404
    assert api("GET", "/traces/..%2F..%2Fclew.sqlite", who="admin").status_code == 404


# -- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"query": ""}, ["body", "query"]),
        ({"query": "x", "k": 0}, ["body", "k"]),
        ({"query": "x", "k": 101}, ["body", "k"]),
        ({"query": "x" * 2001}, ["body", "query"]),
        ({"query": "x", "rerank": "magic"}, ["body", "rerank"]),
        ({"query": "x", "colour": "red"}, ["body", "colour"]),
        ({"query": "x", "filter": {"nofield": 1}}, ["body", "filter"]),
        ({"query": "x", "filter": {"audience": {"near": 1}}}, ["body", "filter"]),
        ({"query": "x", "filter": "audience"}, ["body", "filter"]),
    ],
)
def test_bad_input_is_a_422_naming_the_field(
    api: Api, body: dict[str, Any], loc: list[str]
) -> None:
    r = api("POST", "/search", json=body)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert any(d["loc"][: len(loc)] == loc for d in detail), detail
    assert all(d["msg"] for d in detail)


def test_deep_filters_and_bodies_are_bounded(api: Api) -> None:
    deep: dict[str, Any] = {"audience": "public"}
    for _ in range(40):
        deep = {"not": deep}
    r = api("POST", "/search", json={"query": "x", "filter": deep})
    assert r.status_code == 422 and "nested deeper" in r.text
    r = api("POST", "/search", content=b"[" * 100_000, headers={"content-type": "application/json"})
    assert r.status_code in (400, 422)
    big = {"documents": [{"id": "big", "text": "word " * 60_000}]}
    r = api("POST", "/documents", json=big)
    assert r.status_code == 413 and "max_body_bytes" in r.json()["detail"]


def test_writes_need_an_admin_key(api: Api) -> None:
    doc = {"documents": [{"id": "x1", "text": "hello"}]}
    assert api("POST", "/documents", who="public", json=doc).status_code == 403
    assert api("DELETE", "/documents/faq.md", who="public").status_code == 403
    assert api("GET", "/documents/faq.md", who="admin").status_code == 200


def test_document_batches_are_validated_before_any_write(api: Api) -> None:
    before = api("GET", "/health").json()["release"]
    dup = {"documents": [{"id": "a", "text": "one"}, {"id": "a", "text": "two"}]}
    r = api("POST", "/documents", json=dup)
    assert r.status_code == 422 and "appears twice" in r.text
    blank = {"documents": [{"id": "a", "text": "one"}, {"id": "b", "text": "   "}]}
    r = api("POST", "/documents", json=blank)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:3] == ["body", "documents", 1]
    assert api("GET", "/health").json()["release"] == before
    assert api("GET", "/documents/a").status_code == 404


# -- jobs, documents, deletes -------------------------------------------------------------------


def test_ingest_job_progress_then_search_then_delete(api: Api) -> None:
    docs = [
        {
            "id": f"note-{i}",
            "title": f"Note {i}",
            "text": f"ERR-77{i:02d} is raised when the flux capacitor number {i} overheats.",
            "metadata": {"audience": "public"},
        }
        for i in range(40)
    ]
    r = api("POST", "/documents", json={"documents": docs})
    assert r.status_code == 202
    job = r.json()
    assert job["total"] == 40 and job["status_url"].endswith(f"/jobs/{job['job_id']}")
    seen_states = set()
    for _ in range(600):
        status = api("GET", f"/jobs/{job['job_id']}").json()
        seen_states.add(status["state"])
        if status["state"] in ("done", "failed"):
            break
        threading.Event().wait(0.05)
    assert status["state"] == "done", status
    assert status["done"] == 40 and status["failed"] == 0
    assert {d["status"] for d in status["documents"]} == {"added"}
    hits = api("POST", "/search", who="public", json={"query": "ERR-7713"}).json()["hits"]
    assert hits[0]["doc_id"] == "note-13"
    # same batch again: unchanged, nothing rewritten
    again = api("POST", "/documents?wait=true", json={"documents": docs[:3]}).json()
    assert again["state"] == "done" and {d["status"] for d in again["documents"]} == {"unchanged"}
    r = api("DELETE", "/documents/note-13")
    assert r.status_code == 200 and r.json()["deleted"] == "note-13"
    hits = api("POST", "/search", json={"query": "ERR-7713", "k": 50}).json()["hits"]
    assert all(h["doc_id"] != "note-13" for h in hits)
    assert api("GET", "/documents/note-13").status_code == 404
    assert api("DELETE", "/documents/note-13").status_code == 404
    assert api("GET", "/jobs/nope").status_code == 404


def test_readers_answer_while_a_job_writes(api: Api) -> None:
    docs = [
        {"id": f"bulk-{i}", "text": f"Bulk note {i} about pgbouncer pools and ERR-4012 retries."}
        for i in range(64)
    ]
    job = api("POST", "/documents", json={"documents": docs}).json()

    async def readers() -> list[Any]:
        async def one(q: str) -> Any:
            return await api.client.post(
                "/search",
                json={"query": q, "k": 20},
                headers={"Authorization": f"Bearer {api.keys['admin']}"},
            )

        queries = ["pgbouncer pool", "ERR-4012", "refund twice", "ledger-writer retry"] * 6
        return list(await asyncio.gather(*(one(q) for q in queries)))

    responses = api.loop.run_until_complete(readers())
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses]
    for r in responses:
        body = r.json()
        trace = api("GET", f"/traces/{body['trace_id']}").json()
        assert trace["release"] == body["release"]  # one release per request, end to end
    final = api("POST", "/documents?wait=true", json={"documents": docs[:1]}).json()
    assert final["state"] == "done"
    assert api.app.state.clew.jobs.join(timeout=120)
    assert api("GET", f"/jobs/{job['job_id']}").json()["state"] == "done"


# -- gate, health, metrics, openapi -------------------------------------------------------------


def _results(eval_dir: Path, dataset: str, default: float, lexical: float) -> None:
    runs = [
        {"name": "lexical", "slices": {"all": {"ndcg@10": lexical}}},
        {"name": "dense", "slices": {"all": {"ndcg@10": 0.5}}},
        {"name": "graph", "slices": {"all": {"ndcg@10": 0.2}}},
        {"name": "default", "slices": {"all": {"ndcg@10": default}}},
    ]
    (eval_dir / f"{dataset}.json").write_text(json.dumps({"dataset": dataset, "runs": runs}))


def test_eval_gate_is_200_when_every_gate_passes_and_422_with_reasons(
    api: Api, tmp_path: Path
) -> None:
    eval_dir = tmp_path / "eval"
    r = api("GET", "/eval/gate")
    assert r.status_code == 422 and "no gates file" in r.json()["reasons"][0]
    (eval_dir / "gates.yaml").write_text(
        "gates:\n  - dataset: scifact\n    min: {ndcg@10: 0.70}\n    no_worse_than_best_leg: 0.01\n"
    )
    r = api("GET", "/eval/gate")
    assert r.status_code == 422 and "scifact: no eval results" in r.json()["reasons"][0]
    _results(eval_dir, "scifact", default=0.72, lexical=0.66)
    r = api("GET", "/eval/gate")
    assert r.status_code == 200, r.text
    assert r.json() == {"passed": True, "datasets": ["scifact"], "reasons": []}
    _results(eval_dir, "scifact", default=0.68, lexical=0.70)
    r = api("GET", "/eval/gate")
    assert r.status_code == 422
    reasons = r.json()["reasons"]
    assert len(reasons) == 2 and all(x.startswith("scifact") for x in reasons)
    table = api("GET", "/eval/table").json()["datasets"]["scifact"]
    assert table["default"]["all"]["ndcg@10"] == 0.68


def test_health_metrics_and_openapi(api: Api) -> None:
    assert api("GET", "/health", who=None).json() == {"status": "ok"}  # liveness, no counts
    health = api("GET", "/health").json()
    assert health["status"] == "ok" and health["documents"] == 34
    api("POST", "/search", json={"query": "ERR-4413"})
    api("POST", "/search", who=None, json={"query": "x"})
    text = api("GET", "/metrics").text
    assert 'clew_requests_total{endpoint="/search",method="POST",status="200"} 1.0' in text
    assert 'clew_requests_total{endpoint="/search",method="POST",status="401"} 1.0' in text
    assert 'clew_stage_duration_seconds_count{kind="search",stage="lexical"} 1.0' in text
    spec = api("GET", "/openapi.json", who=None).json()
    assert {"/search", "/ask", "/documents", "/jobs/{job_id}", "/eval/gate"} <= set(spec["paths"])


def test_a_reranker_that_cannot_load_falls_back_and_is_counted(
    fake_sample: Path, tmp_path: Path
) -> None:
    index = tmp_path / "idx"
    shutil.copytree(fake_sample, index)
    config = tmp_path / "config.yaml"
    config.write_text(f"rerank: {{kind: cross-encoder, model: {tmp_path / 'no-model'}}}\n")
    app = create_app(ServeSettings(index=index, no_auth=True, config=config), _fake_engine(index))
    client = Api(app, {})
    try:
        r = client("POST", "/search", who=None, json={"query": "ERR-4413"})
        assert r.status_code == 200
        assert r.json()["rerank"]["ran"] is False and r.json()["rerank"]["reason"]
        text = client("GET", "/metrics", who=None).text
        assert 'clew_rerank_fallbacks_total{reranker="cross-encoder"} 1.0' in text
    finally:
        client.close()


def test_dto_choices_match_the_engine() -> None:
    from typing import get_args

    from clew.serve.dto import CHOICES

    for name, (literal, allowed) in CHOICES.items():
        assert set(get_args(literal)) == set(allowed), name


def test_settings_refuse_unsafe_combinations(tmp_path: Path) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="loopback"):
        ServeSettings(index=tmp_path, no_auth=True, host="0.0.0.0")
    with pytest.raises(ValidationError, match="clew keys add"):
        ServeSettings(index=tmp_path)
    assert ServeSettings(index=tmp_path, no_auth=True).eval_dir == tmp_path / "eval"


# -- real model ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_ask_returns_a_cited_answer_with_why(sample_index: Path, tmp_path: Path) -> None:
    index = tmp_path / "idx"
    shutil.copytree(sample_index, index)
    app = create_app(ServeSettings(index=index, no_auth=True))
    client = Api(app, {})
    try:
        r = client("POST", "/ask", who=None, json={"question": "What does ERR-4413 mean?"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert not body["abstained"] and "[1]" in body["answer"]
        first = body["citations"][0]
        assert first["doc_id"] == "error-codes.md"
        assert first["why"]["legs"]
        assert body["release"] >= 1 and body["trace_id"]
        cli_keys = {"answer", "abstained", "citations", "hits", "dropped", "trace_id"}
        assert cli_keys <= set(body)
    finally:
        client.close()


def test_a_slow_llm_reranker_times_out_without_blocking_other_requests(
    fake_sample: Path, tmp_path: Path
) -> None:
    import time

    from clew.testing.chat_server import ChatServer

    index = tmp_path / "idx"
    shutil.copytree(fake_sample, index)
    with ChatServer(mode="slow", delay_s=30.0) as srv:
        config = tmp_path / "config.yaml"
        config.write_text(
            f"rerank: {{kind: llm, model: fake, base_url: '{srv.base_url}', timeout_s: 20}}\n"
        )
        settings = ServeSettings(index=index, no_auth=True, config=config, request_timeout_s=2)
        client = Api(create_app(settings, _fake_engine(index)), {})
        try:

            async def both() -> tuple[Any, Any, float]:
                slow = asyncio.ensure_future(
                    client.client.post("/search", json={"query": "ERR-4413"})
                )
                await asyncio.sleep(0.3)
                started = time.perf_counter()
                health = await client.client.get("/health")
                took = time.perf_counter() - started
                return await slow, health, took

            slow, health, took = client.loop.run_until_complete(both())
            assert health.status_code == 200 and took < 1.5  # the event loop was free
            assert slow.status_code == 504 and "request_timeout_s" in slow.json()["detail"]
        finally:
            srv.close()
            client.close()


def test_memories_remember_recall_forget_per_tenant(api: Api, tmp_path: Path) -> None:
    r = api(
        "POST",
        "/memories",
        who="acme",
        json={"text": "acme: pgbouncer pool raised to 400", "session": "s1", "time": "2026-03-01"},
    )
    assert r.status_code == 201, r.text
    mine = r.json()["id"]
    other = api(
        "POST",
        "/memories",
        json={"text": "globex: pgbouncer pool raised", "metadata": {"tenant": "globex"}},
    ).json()["id"]
    recalled = api("POST", "/recall", who="acme", json={"query": "pgbouncer pool"}).json()
    assert [h["doc_id"] for h in recalled["hits"]] == [mine]
    assert recalled["hits"][0]["metadata"]["tenant"] == "acme"  # stamped from the scope
    assert {"recency"} <= {c["leg"] for c in recalled["hits"][0]["contributions"]}
    window = {"query": "pgbouncer", "since": "2026-03-02", "session": "s1"}
    assert api("POST", "/recall", who="acme", json=window).json()["hits"] == []
    bad = api("POST", "/recall", who="acme", json={"query": "x", "as_of": "soon"})
    assert bad.status_code == 422 and "as_of='soon'" in bad.text
    # relations only to what the key can see
    r = api(
        "POST",
        "/memories",
        who="acme",
        json={"text": "follow-up", "relations": [{"type": "follows", "target": other}]},
    )
    assert r.status_code == 404
    assert api("DELETE", f"/memories/{other}", who="acme").status_code == 404
    assert api("DELETE", "/memories/faq.md").status_code == 404  # a document, not a memory
    keys_file = tmp_path / "keys.yaml"
    wide, _ = KeyStore.add(keys_file, "wide", scope={"audience": ["public", "internal"]})
    import os

    os.utime(keys_file, (0, keys_file.stat().st_mtime + 5))
    r = api("POST", "/memories", who=wide, json={"text": "no home for this"})
    assert r.status_code == 403 and "equality fields" in r.text
    gone = api("DELETE", f"/memories/{mine}", who="acme")
    assert gone.status_code == 200 and gone.json()["forgotten"] == mine
    assert api("POST", "/recall", who="acme", json={"query": "pgbouncer pool"}).json()["hits"] == []


@pytest.mark.slow
def test_jobs_run_in_a_writer_process_when_the_service_opens_the_index(
    sample_index: Path, tmp_path: Path
) -> None:
    import os

    index = tmp_path / "idx"
    shutil.copytree(sample_index, index)
    client = Api(create_app(ServeSettings(index=index, no_auth=True)), {})
    try:
        jobs = client.app.state.clew.jobs
        assert jobs.writer is not None and jobs.writer.pid is None  # started on the first job
        docs = [{"id": "proc-1", "text": "ERR-7781 means the flux capacitor is out of plutonium."}]
        r = client("POST", "/documents?wait=true", who=None, json={"documents": docs})
        assert r.status_code == 200, r.text
        status = {d["id"]: d for d in r.json()["documents"]}
        assert status["proc-1"]["status"] == "added", r.text
        assert jobs.writer.pid not in (None, os.getpid())
        # the server's own snapshot caught up: the next search sees it
        hits = client("POST", "/search", who=None, json={"query": "ERR-7781"}).json()["hits"]
        assert hits[0]["doc_id"] == "proc-1"
        pid = jobs.writer.pid
    finally:
        client.close()
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the writer process stopped with the service
