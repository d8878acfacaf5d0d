"""Attacks on the API and the MCP tools by keys scoped to a tenant or an audience, one test (or
two) per hole found, each written so that it fails on the behaviour it pins down.

Keys: an unscoped admin, one read/remember key per tenant, a *scoped admin* for tenant a (admin
rights inside its scope only), an audience-scoped key and a key with only ``metrics: true``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.server.mcpserver.exceptions import ToolError

from clew import Engine
from clew.serve.api import create_app
from clew.serve.auth import KeyStore, Principal
from clew.serve.mcp import build_server
from clew.serve.settings import ServeSettings
from clew.testing.asgi import ApiClient
from clew.testing.fakes import fake_engine
from clew.types import Document

LIMIT = 200_000
"""max_body_bytes of the app under test."""
ROTATE = {
    "text": "Rotate the zeus-billing-db credentials before the audit on Friday.",
    "session": "ops",
    "time": "2026-03-01T09:00:00Z",
}


def corpus() -> list[Document]:
    docs = []
    for tenant, word in (("a", "AMBERFOX"), ("b", "BLUEHERON")):
        for i in range(1, 6):
            docs.append(
                Document(
                    f"{tenant}-0{i}",
                    f"{tenant} page {i}",
                    f"Runbook {i} of tenant {tenant}: ERR-40{i}2 retries. Codeword {word}.",
                    f"{tenant}-0{i}",
                    {"tenant": tenant},
                )
            )
    docs.append(
        Document("pub-1", "Public FAQ", "Refunds settle nightly.", "pub", {"audience": "public"})
    )
    return docs


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = fake_engine(tmp_path / "idx")
    engine.ingest(corpus())
    yield engine
    engine.close()


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    return tmp_path / "keys.yaml"


@pytest.fixture
def api(engine: Engine, keys_file: Path) -> Iterator[ApiClient]:
    keys = {
        "admin": KeyStore.add(keys_file, "ops", admin=True)[0],
        "a": KeyStore.add(keys_file, "tenant-a", scope={"tenant": "a"})[0],
        "b": KeyStore.add(keys_file, "tenant-b", scope={"tenant": "b"})[0],
        "a-admin": KeyStore.add(keys_file, "a-admin", scope={"tenant": "a"}, admin=True)[0],
        "public": KeyStore.add(keys_file, "support-bot", scope={"audience": "public"})[0],
        "metrics": KeyStore.add(keys_file, "prometheus", metrics=True)[0],
    }
    settings = ServeSettings(index=engine.directory, keys=keys_file, max_body_bytes=LIMIT)
    client = ApiClient(create_app(settings, engine), keys, no_5xx=True)
    yield client
    client.close()


def mcp_call(server: Any, tool: str, **arguments: Any) -> dict[str, Any]:
    async def run() -> Any:
        return await server.call_tool(tool, arguments)

    result = anyio.run(run)
    assert not result.is_error, result
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def mcp_error(server: Any, tool: str, **arguments: Any) -> str:
    with pytest.raises(ToolError) as caught:
        mcp_call(server, tool, **arguments)
    return str(caught.value)


A = Principal("tenant-a", {"tenant": "a"})
B = Principal("tenant-b", {"tenant": "b"})
A_ADMIN = Principal("a-admin", {"tenant": "a"}, admin=True)
PUBLIC = Principal("support-bot", {"audience": "public"})


# -- 1. memory takeover -------------------------------------------------------------------------


def test_the_same_memory_from_two_tenants_is_two_memories(api: ApiClient) -> None:
    r = api("POST", "/memories", "b", json=ROTATE)
    assert r.status_code == 201, r.text
    theirs = r.json()["id"]
    ids = {"b": theirs}
    for who in ("a", "a-admin", "admin"):  # a scoped admin stamps too; the unscoped one does not
        r = api("POST", "/memories", who, json=ROTATE)
        assert r.status_code == 201, r.text
        ids[who] = r.json()["id"]
    assert len(set(ids.values())) == 3 and ids["a"] == ids["a-admin"], ids  # a and a-admin: a's
    assert api("GET", f"/documents/{theirs}", "b").json()["metadata"]["tenant"] == "b"
    for who in ("a", "a-admin"):
        assert api("DELETE", f"/memories/{theirs}", who).status_code == 404
        assert api("GET", f"/documents/{theirs}", who).status_code == 404
    hits = api("POST", "/recall", "b", json={"query": "zeus-billing-db credentials"}).json()
    assert [h["doc_id"] for h in hits["hits"]] == [theirs]
    assert api("DELETE", f"/memories/{ids['a']}", "a").status_code == 200


def test_the_same_memory_from_two_tenants_over_mcp(engine: Engine) -> None:
    b, a, a_admin = (build_server(engine, p) for p in (B, A, A_ADMIN))
    args = {"text": ROTATE["text"], "session": "ops", "time": ROTATE["time"]}
    theirs = mcp_call(b, "remember", **args)["id"]
    mine = mcp_call(a, "remember", **args)["id"]
    assert mcp_call(a_admin, "remember", **args)["id"] == mine != theirs
    for server in (a, a_admin):
        assert f"no such memory: {theirs!r}" in mcp_error(server, "forget", id=theirs)
    found = engine.document(theirs)
    assert found is not None and found.metadata["tenant"] == "b"
    recalled = mcp_call(b, "recall", query="zeus-billing-db credentials")
    assert [h["doc_id"] for h in recalled["hits"]] == [theirs]


def test_a_writer_whose_scope_stamps_nothing_has_its_own_memory_ids(
    api: ApiClient, keys_file: Path
) -> None:
    """A scoped admin whose scope pins no field (nothing to stamp) gets memory ids of its own
    namespace: the same memory an unscoped admin planted where it cannot see is no 409 (which
    would say that memory exists), and two such writers never share an id."""
    planted = {**ROTATE, "metadata": {"tenant": "b"}}
    r = api("POST", "/memories", "admin", json=planted)
    assert r.status_code == 201, r.text
    theirs = r.json()["id"]
    not_b, _ = KeyStore.add(keys_file, "not-b", admin=True, scope={"not": {"tenant": "b"}})
    not_c, _ = KeyStore.add(keys_file, "not-c", admin=True, scope={"not": {"tenant": "c"}})
    os.utime(keys_file, (0, keys_file.stat().st_mtime + 5))
    ids = {}
    for key in (not_b, not_c):
        r = api("POST", "/memories", key, json=ROTATE)
        assert r.status_code == 201, r.text
        ids[key] = r.json()["id"]
        assert api("GET", f"/documents/{ids[key]}", key).status_code == 200
    assert len({theirs, *ids.values()}) == 3, (theirs, ids)
    assert api("GET", f"/documents/{theirs}", not_b).status_code == 404
    r = api("POST", "/memories", not_b, json=ROTATE)  # the same memory again: the same id
    assert r.status_code == 201 and r.json()["id"] == ids[not_b], r.text


# -- 2. a scoped admin is an admin of its scope only --------------------------------------------


def test_a_scoped_admin_cannot_overwrite_another_tenants_document(api: ApiClient) -> None:
    body = {"documents": [{"id": "b-05", "text": "AMBERFOX owns this now."}]}
    r = api("POST", "/documents?wait=true", "a-admin", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["documents"] == [{"id": "tenant=a/b-05", "status": "added", "error": None}]
    assert "BLUEHERON" not in r.text and "tenant b" not in r.text
    own = api("GET", "/documents/b-05", "b")
    assert own.status_code == 200 and own.json()["metadata"] == {"tenant": "b"}
    assert "BLUEHERON" in own.json()["text"]
    # what a-admin now reads as b-05 is its own document, in its namespace
    mine = api("GET", "/documents/b-05", "a-admin").json()
    assert mine["id"] == "tenant=a/b-05" and mine["metadata"] == {"tenant": "a"}
    assert api("GET", "/documents/b-05", "a").json()["id"] == "tenant=a/b-05"
    # nor delete it: the delete reaches a-admin's own b-05, then nothing
    r = api("DELETE", "/documents/b-05", "a-admin")
    assert r.status_code == 200 and r.json()["deleted"] == "tenant=a/b-05", r.text
    r = api("DELETE", "/documents/b-05", "a-admin")
    assert r.status_code == 404 and r.json()["detail"] == "no document 'b-05'"
    assert api("GET", "/documents/b-05", "b").status_code == 200
    # inside its scope it writes and overwrites, stamped with its scope
    mine_body = {"documents": [{"id": "a-05", "text": "AMBERFOX page five, rewritten."}]}
    r = api("POST", "/documents?wait=true", "a-admin", json=mine_body)
    assert r.status_code == 200 and r.json()["documents"][0]["status"] == "updated", r.text
    assert r.json()["documents"][0]["id"] == "a-05"  # an id it can see is updated in place
    assert api("GET", "/documents/a-05", "a").json()["metadata"] == {"tenant": "a"}


def test_a_scoped_write_does_not_say_whether_another_tenant_holds_the_id(api: ApiClient) -> None:
    """Taken by tenant b or free, a scoped admin's write of an id answers the same: the document
    lands in the key's namespace either way (before, a taken id was a 409, an oracle)."""

    def write(doc_id: str) -> dict[str, Any]:
        body = {"documents": [{"id": doc_id, "text": f"AMBERFOX note {doc_id}."}]}
        r = api("POST", "/documents?wait=true", "a-admin", json=body)
        assert r.status_code == 200, r.text
        out: dict[str, Any] = r.json()
        return out

    taken, free = write("b-01"), write("zz-01")
    assert taken["documents"] == [{"id": "tenant=a/b-01", "status": "added", "error": None}]
    assert free["documents"] == [{"id": "tenant=a/zz-01", "status": "added", "error": None}]
    assert set(taken) == set(free) and taken["state"] == free["state"] == "done"
    assert api("GET", "/documents/b-01", "b").json()["metadata"] == {"tenant": "b"}
    # both found by id and by search within tenant a; tenant b sees neither
    for doc_id in ("b-01", "zz-01", "tenant=a/b-01"):
        assert api("GET", f"/documents/{doc_id}", "a").status_code == 200
    hits = api("POST", "/search", "a", json={"query": "AMBERFOX note", "k": 20}).json()["hits"]
    assert {"tenant=a/b-01", "tenant=a/zz-01"} <= {h["doc_id"] for h in hits}
    assert api("GET", "/documents/zz-01", "b").status_code == 404
    assert api("GET", "/documents/tenant=a/b-01", "b").status_code == 404
    # a batch naming one document twice (by its id and by its namespaced id) is refused whole
    twice = {"documents": [{"id": "c-1", "text": "x"}, {"id": "tenant=a/c-1", "text": "y"}]}
    r = api("POST", "/documents?wait=true", "a-admin", json=twice)
    assert r.status_code == 422 and "names the same document as documents[0]" in r.text, r.text
    assert api("GET", "/documents/c-1", "a").status_code == 404
    # an unscoped admin may still put another tenant's document in a's namespace: that one
    # write is refused (409, nothing of it echoed); no tenant can make such an id
    planted = {"id": "tenant=a/x-9", "text": "BLUEHERON", "metadata": {"tenant": "b"}}
    api("POST", "/documents?wait=true", "admin", json={"documents": [planted]})
    r = api(
        "POST", "/documents?wait=true", "a-admin", json={"documents": [{"id": "x-9", "text": "y"}]}
    )
    assert r.status_code == 409 and "BLUEHERON" not in r.text, r.text


def test_a_scoped_admins_documents_must_pass_its_scope(api: ApiClient, keys_file: Path) -> None:
    r = api(
        "POST",
        "/documents?wait=true",
        "a-admin",
        json={"documents": [{"id": "x-1", "text": "x", "metadata": {"tenant": "b"}}]},
    )
    assert r.status_code == 403 and "'tenant'" in r.json()["detail"], r.text
    # a scope its stamp cannot satisfy: nothing it writes passes, and it may not set the field
    # itself (every field of a scope is an access field, settable only to a pinned value)
    wide, _ = KeyStore.add(
        keys_file, "a-docs", admin=True, scope={"and": [{"tenant": "a"}, {"lang": ["en", "de"]}]}
    )
    narrow, _ = KeyStore.add(
        keys_file, "a-no-de", admin=True, scope={"and": [{"tenant": "a"}, {"not": {"lang": "de"}}]}
    )
    os.utime(keys_file, (0, keys_file.stat().st_mtime + 5))
    r = api("POST", "/documents?wait=true", wide, json={"documents": [{"id": "x-2", "text": "x"}]})
    assert r.status_code == 403, r.text
    assert "metadata field 'lang' does not pass the key's scope" in r.json()["detail"]
    en = {"documents": [{"id": "x-3", "text": "x", "metadata": {"lang": "en"}}]}
    r = api("POST", "/documents?wait=true", wide, json=en)
    assert r.status_code == 403 and "'lang'" in r.json()["detail"], r.text
    r = api(
        "POST", "/documents?wait=true", narrow, json={"documents": [{"id": "x-4", "text": "x"}]}
    )
    assert r.status_code == 200, r.text
    landed = r.json()["documents"][0]["id"]  # its scope says more than tenant a: its own namespace
    assert landed.startswith("tenant=a~") and landed.endswith("/x-4"), landed
    assert api("GET", f"/documents/{landed}", "a").json()["metadata"] == {"tenant": "a"}
    assert api("GET", "/documents/x-4", narrow).json()["id"] == landed
    for doc_id in ("x-1", "x-2", "x-3"):
        assert api("GET", f"/documents/{doc_id}", "admin").status_code == 404


def test_a_scoped_admin_reads_only_its_own_traces_and_jobs(api: ApiClient) -> None:
    trace_b = api("POST", "/search", "b", json={"query": "ERR-4012"}).json()["trace_id"]
    trace_own = api("POST", "/search", "a-admin", json={"query": "ERR-4012"}).json()["trace_id"]
    assert api("GET", f"/traces/{trace_b}", "a-admin").status_code == 404
    assert api("GET", f"/traces/{trace_b}", "admin").status_code == 200
    assert api("GET", f"/traces/{trace_own}", "a-admin").status_code == 200
    body = {"documents": [{"id": "b-06", "text": "BLUEHERON six", "metadata": {"tenant": "b"}}]}
    theirs = api("POST", "/documents?wait=true", "admin", json=body).json()["job_id"]
    r = api("GET", f"/jobs/{theirs}", "a-admin")
    assert r.status_code == 404 and "b-06" not in r.text
    assert r.json()["detail"] == f"no job {theirs!r} (finished jobs are kept for a while)"
    own_body = {"documents": [{"id": "a-06", "text": "AMBERFOX six"}]}
    own = api("POST", "/documents?wait=true", "a-admin", json=own_body).json()["job_id"]
    assert api("GET", f"/jobs/{own}", "a-admin").status_code == 200
    assert api("GET", f"/jobs/{own}", "admin").status_code == 200  # the unscoped admin: all


def test_another_tenants_writes_show_in_nothing_a_scoped_key_reads(api: ApiClient) -> None:
    """The release a scoped key's search, ask, job and delete carry is its scope's, and its
    cached results stay cached, however much tenant b writes meanwhile; the metrics gauge is
    the index's release."""

    def seen() -> tuple[Any, ...]:
        found = api("POST", "/search", "a", json={"query": "AMBERFOX ERR-4012", "k": 3}).json()
        asked = api("POST", "/ask", "a", json={"question": "What is ERR-4012?"}).json()
        hits = [(h["chunk_id"], h["score"]) for h in found["hits"]]
        return found["release"], found["cached"], hits, asked["release"]

    first = seen()
    assert first[0] == first[3] == 1 and seen()[1] is True
    for doc_id, text in (("b-09", "BLUEHERON ERR-4012 notes."), ("b-01", "BLUEHERON, new.")):
        body = {"documents": [{"id": doc_id, "text": text, "metadata": {"tenant": "b"}}]}
        job = api("POST", "/documents?wait=true", "admin", json=body).json()
        assert job["state"] == "done" and job["release"] >= 2, job  # the index's release
    assert api("DELETE", "/documents/b-02", "admin").status_code == 200
    assert api("POST", "/memories", "b", json=ROTATE).status_code == 201
    assert api("GET", "/health", "admin").json()["release"] > 3
    assert seen() == (1, True, first[2], 1)  # a sees none of it
    assert f"clew_index_release {float(api('GET', '/health', 'admin').json()['release'])}" in (
        api("GET", "/metrics", "metrics").text
    )
    # a's own writes move a's release: a job of a-admin, then its delete
    body = {"documents": [{"id": "a-09", "text": "AMBERFOX ERR-4012 addendum."}]}
    mine = api("POST", "/documents?wait=true", "a-admin", json=body).json()
    now = api("GET", "/health", "admin").json()["release"]
    assert mine["release"] == now and seen()[:2] == (now, False)
    gone = api("DELETE", "/documents/a-09", "a-admin").json()
    assert gone["release"] == now + 1 == seen()[0]


# -- 3. access fields ----------------------------------------------------------------------------


def test_a_key_may_not_write_an_access_field_its_scope_does_not_pin(api: ApiClient) -> None:
    memo = {"text": "Wire the refund to IBAN XX00 today.", "metadata": {"tenant": "b"}}
    r = api("POST", "/memories", "public", json=memo)
    assert r.status_code == 403, r.text
    detail = r.json()["detail"]
    assert "'tenant'" in detail and "does not pin it" in detail
    hits = api("POST", "/recall", "b", json={"query": "wire the refund IBAN"}).json()["hits"]
    assert hits == []
    # pinned to another value: refused too, naming the value the scope pins
    r = api("POST", "/memories", "a", json={"text": "x", "metadata": {"tenant": "b"}})
    assert r.status_code == 403 and "pins it to 'a'" in r.json()["detail"]
    # a field some other key's scope names is an access field for every scoped writer
    r = api("POST", "/memories", "a", json={"text": "x", "metadata": {"audience": "public"}})
    assert r.status_code == 403 and "'audience'" in r.json()["detail"]
    doc = {"documents": [{"id": "a-07", "text": "x", "metadata": {"audience": "public"}}]}
    r = api("POST", "/documents?wait=true", "a-admin", json=doc)
    assert r.status_code == 403 and "'audience'" in r.json()["detail"]
    # the pinned value itself, and fields no scope names, are fine
    ok = {"text": "AMBERFOX note", "metadata": {"tenant": "a", "topic": "ops"}}
    assert api("POST", "/memories", "a", json=ok).status_code == 201
    # the unscoped admin writes anything
    anything = {"text": "y", "metadata": {"tenant": "b", "audience": "public"}}
    assert api("POST", "/memories", "admin", json=anything).status_code == 201


def test_access_fields_over_mcp(engine: Engine, keys_file: Path) -> None:
    KeyStore.add(keys_file, "tenant-b", scope={"tenant": "b"})
    KeyStore.add(keys_file, "support-bot", scope={"audience": "public"})
    fields = KeyStore.load(keys_file).access_fields()
    assert fields == {"tenant", "audience"}
    public = build_server(engine, PUBLIC, access_fields=fields)
    text = mcp_error(public, "remember", text="Wire the refund today.", metadata={"tenant": "b"})
    assert "'tenant'" in text and "does not pin it" in text
    b = build_server(engine, B)
    assert mcp_call(b, "recall", query="wire the refund")["hits"] == []
    # its own scope's fields are access fields even without a keys file
    a = build_server(engine, A)
    assert "pins it to 'a'" in mcp_error(a, "remember", text="x", metadata={"tenant": "b"})
    assert mcp_call(a, "remember", text="AMBERFOX", metadata={"tenant": "a"})["id"]


# -- 4. health and metrics ----------------------------------------------------------------------


def test_health_counts_and_metrics_need_a_key_with_the_right(api: ApiClient) -> None:
    for who in (None, "clew_wrong", "public", "a", "a-admin"):
        r = api("GET", "/health", who)
        assert r.status_code == 200 and r.json() == {"status": "ok"}, (who, r.text)
    for who in ("metrics", "admin"):
        health = api("GET", "/health", who).json()
        assert health["documents"] == 11 and health["chunks"] >= 11, who
    r = api("GET", "/metrics", None)
    assert r.status_code == 401 and "clew_requests_total" not in r.text
    for who in ("public", "a", "a-admin"):
        r = api("GET", "/metrics", who)
        assert r.status_code == 403 and "metrics: true" in r.json()["detail"], who
    for who in ("metrics", "admin"):
        r = api("GET", "/metrics", who)
        assert r.status_code == 200 and "clew_requests_total" in r.text
    # the metrics key is not an admin and reads within no tenant's scope but its own (none)
    body = {"documents": [{"id": "m-1", "text": "x"}]}
    assert api("POST", "/documents", "metrics", json=body).status_code == 403


# -- 5. streamed bodies -------------------------------------------------------------------------


def test_a_chunked_body_over_the_limit_is_413(api: ApiClient) -> None:
    sent = [0]

    async def hundred_megabytes() -> AsyncIterator[bytes]:
        yield b'{"documents": [{"id": "big", "text": "'
        chunk = b"x" * 65_536
        for _ in range(100 * 1024 * 1024 // len(chunk)):
            sent[0] += len(chunk)
            yield chunk
        yield b'"}]}'

    r = api(
        "POST",
        "/documents",
        "admin",
        content=hundred_megabytes(),
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 413, r.text
    assert r.json()["detail"] == f"request body is over {LIMIT} bytes (max_body_bytes)"
    assert sent[0] < 2 * LIMIT  # reading stopped at the limit
    assert api("GET", "/documents/big", "admin").status_code == 404
    # a streamed body under the limit still works
    small = json.dumps({"documents": [{"id": "small", "text": "tiny"}]}).encode()

    async def stream() -> AsyncIterator[bytes]:
        for i in range(0, len(small), 7):
            yield small[i : i + 7]

    json_type = {"content-type": "application/json"}
    r = api("POST", "/documents?wait=true", "admin", content=stream(), headers=json_type)
    assert r.status_code == 200 and r.json()["state"] == "done", r.text


# -- 6. memory and recall errors name their field ------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "loc"),
    [
        ("/memories", {"text": "x", "time": "yesterday"}, ["body", "time"]),
        ("/memories", {"text": "   "}, ["body", "text"]),
        ("/memories", {"text": "x", "session": "  "}, ["body", "session"]),
        ("/memories", {"text": "x", "metadata": {"kind": "note"}}, ["body", "metadata", "kind"]),
        (
            "/memories",
            {"text": "x", "metadata": {"created_at": 1}},
            ["body", "metadata", "created_at"],
        ),
        (
            "/memories",
            {"text": "x", "relations": [{"type": "follows", "target": "concept:"}]},
            ["body", "relations", 0],
        ),
        (
            "/memories",
            {"text": "x", "relations": [{"type": "follows", "target": "no-such-doc"}]},
            ["body", "relations"],
        ),
        ("/recall", {"query": "x", "as_of": "soon"}, ["body", "as_of"]),
        (
            "/recall",
            {"query": "x", "since": "2026-03-02", "until": "2026-03-01"},
            ["body", "since"],
        ),
        ("/recall", {"query": "x", "until": "never"}, ["body", "until"]),
        ("/recall", {"query": "x", "session": "  "}, ["body", "session"]),
        ("/recall", {"query": "   "}, ["body", "query"]),
    ],
)
def test_memory_errors_name_the_field(
    api: ApiClient, path: str, body: dict[str, Any], loc: list[Any]
) -> None:
    r = api("POST", path, "admin", json=body)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert [d["loc"] for d in detail] == [loc], detail
    assert detail[0]["msg"]


# -- 7. reserved memory keys on documents -------------------------------------------------------


@pytest.mark.parametrize("key", ["kind", "session", "created_at"])
def test_documents_may_not_set_reserved_memory_keys(api: ApiClient, key: str) -> None:
    docs = [
        {"id": "ok-1", "text": "fine"},
        {"id": "fake-memory", "text": "I am a memory now", "metadata": {key: "memory"}},
    ]
    r = api("POST", "/documents?wait=true", "admin", json={"documents": docs})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail[0]["loc"] == ["body", "documents", 1, "metadata", key]
    assert f"{key!r} is reserved" in detail[0]["msg"]
    for doc_id in ("ok-1", "fake-memory"):
        assert api("GET", f"/documents/{doc_id}", "admin").status_code == 404


def test_mcp_memories_may_not_set_reserved_keys(engine: Engine) -> None:
    for principal in (A, Principal("ops", None, admin=True)):
        server = build_server(engine, principal)
        for key in ("kind", "session", "created_at"):
            text = mcp_error(server, "remember", text="x", metadata={key: "memory"})
            assert f"{key!r} is reserved" in text


# -- 8. one slow job does not hold up the others ------------------------------------------------


def test_a_small_job_is_not_queued_behind_a_big_one(api: ApiClient) -> None:
    n = 160
    big = [{"id": f"bulk-{i}", "text": f"Bulk note {i} about ERR-4012 retries."} for i in range(n)]
    first = api("POST", "/documents", "admin", json={"documents": big}).json()["job_id"]
    small = api(
        "POST", "/documents?wait=true", "admin", json={"documents": [{"id": "hot", "text": "hot"}]}
    ).json()
    assert small["state"] == "done"
    status = api("GET", f"/jobs/{first}", "admin").json()
    assert status["state"] == "running" and status["done"] < n, status  # it went first
    assert api.app.state.clew.jobs.join(timeout=120)
    assert api("GET", f"/jobs/{first}", "admin").json()["done"] == n


# -- 10. a hidden document and a missing one: the same work ---------------------------------------


def test_hidden_and_missing_documents_do_the_same_work(
    api: ApiClient, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real_document, real_visible = engine.store.document, engine._visible

    def document(doc_id: str) -> Any:
        calls.append("fetch")
        return real_document(doc_id)

    def visible(*args: Any, **kwargs: Any) -> bool:
        calls.append("visible")
        return real_visible(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(engine.store, "document", document)
        patch.setattr(engine, "_visible", visible)
        work = {}
        for doc_id in ("b-01", "b-01-nope"):
            calls.clear()
            r = api("GET", f"/documents/{doc_id}", "a")
            assert r.status_code == 404 and r.json() == {"detail": f"no document {doc_id!r}"}
            work[doc_id] = list(calls)
        # the id as given, then the id in the key's namespace (neither is a's)
        assert work["b-01"] == work["b-01-nope"] == ["fetch", "visible"] * 2

    # timing: medians of alternating requests (reported; constant time is not promised)
    times: dict[str, list[float]] = {"hidden": [], "missing": []}
    for i in range(150):
        for name, doc_id in (("hidden", "b-01"), ("missing", f"b-01-{i}")):
            started = time.perf_counter()
            api("GET", f"/documents/{doc_id}", "a")
            times[name].append(time.perf_counter() - started)
    hidden, missing = (statistics.median(times[n]) for n in ("hidden", "missing"))
    print(f"GET /documents: hidden {hidden * 1e3:.3f} ms, missing {missing * 1e3:.3f} ms median")
    assert hidden < 1.5 * missing  # far looser than measured; a gross difference fails


# -- 9. readers during ingest: the first search of a new release builds its caches alone ---------


def test_the_first_read_of_a_new_release_runs_alone() -> None:
    import threading

    from clew.serve.api import FirstReadAlone

    release = [1]
    running, most = [0], [0]
    lock = threading.Lock()

    def read() -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.2)  # a cold snapshot: the first search builds the caches
        with lock:
            running[0] -= 1
        return release[0]

    gate = FirstReadAlone(lambda: release[0])

    def burst() -> list[float]:
        started = time.perf_counter()
        done: list[float] = []
        threads = [
            threading.Thread(target=lambda: (gate.run(read), done.append(time.perf_counter())))
            for _ in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sorted(x - started for x in done)

    times = burst()
    # one ran alone (0.2 s), then the other three together (0.2 s more), not four at once
    assert most[0] == 3 and times[1] >= 0.35, (most, times)
    most[0] = 0
    burst()  # the same release: no gate
    assert most[0] == 4
    release[0] = 2  # a write landed: the next burst's first read runs alone again
    most[0] = 0
    burst()
    assert most[0] == 3


def test_memory_relations_name_documents_as_the_key_does(api: ApiClient, engine: Engine) -> None:
    """A scoped key names its own documents by the ids it wrote them under, in relations too;
    another tenant's document of that id is not a target (404, as if missing)."""
    body = {"documents": [{"id": "runbook", "text": "AMBERFOX runbook for the vault."}]}
    assert api("POST", "/documents?wait=true", "a-admin", json=body).status_code == 200
    memo = {"text": "The vault runbook was followed.", "relations": []}
    memo["relations"] = [{"type": "follows", "target": "runbook"}]
    r = api("POST", "/memories", "a", json=memo)
    assert r.status_code == 201, r.text
    assert _links(engine, r.json()["id"]) == ["follows::tenant=a/runbook"]
    memo["relations"] = [{"type": "follows", "target": "b-01"}]
    r = api("POST", "/memories", "a", json=memo)
    assert r.status_code == 404 and r.json()["detail"] == "no document 'b-01'", r.text
    server = build_server(engine, A)
    made = mcp_call(
        server,
        "remember",
        text="The runbook again.",
        relations=[{"type": "follows", "target": "runbook"}],
    )
    assert _links(engine, made["id"]) == ["follows::tenant=a/runbook"]
    assert "target 'b-01' is not in the index" in mcp_error(
        server, "remember", text="x", relations=[{"type": "follows", "target": "b-01"}]
    )


def _links(engine: Engine, doc_id: str) -> list[str]:
    conn = sqlite3.connect(engine.directory / "clew.sqlite")
    try:
        rows = conn.execute("SELECT target FROM links WHERE doc_id = ?", (doc_id,)).fetchall()
    finally:
        conn.close()
    return sorted(r[0] for r in rows)
