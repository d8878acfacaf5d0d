"""The MCP server end to end: spawned over stdio and driven by the MCP SDK's own client."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp.types import CallToolResult, TextContent

from clew.serve.auth import KeyStore

ROOT = Path(__file__).resolve().parents[2]
SESSION_TIMEOUT_S = 180


def server_params(
    index: Path, *extra: str, env: dict[str, str] | None = None
) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "clew.serve.mcp", "--index", str(index), *extra],
        env={"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **(env or {})},
        cwd=ROOT,
    )


@asynccontextmanager
async def connect(params: StdioServerParameters, errlog: Path) -> AsyncIterator[ClientSession]:
    with errlog.open("w", encoding="utf-8") as err:
        async with (
            stdio_client(params, errlog=err) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


def drive(
    params: StdioServerParameters,
    errlog: Path,
    body: Callable[[ClientSession], Awaitable[None]],
) -> None:
    async def run() -> None:
        with anyio.fail_after(SESSION_TIMEOUT_S):
            async with connect(params, errlog) as session:
                await body(session)

    anyio.run(run)


async def call(client: ClientSession, tool: str, /, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, error_text(result)
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def error_text(result: CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, TextContent))


@pytest.fixture
def index(sample_index: Path, tmp_path: Path) -> Path:
    """A private copy of the sample index (the tests write to it)."""
    path = tmp_path / "idx"
    shutil.copytree(sample_index, path)
    return path


@pytest.mark.slow
def test_tools_search_ask_remember_forget(index: Path, tmp_path: Path) -> None:
    errlog = tmp_path / "server.log"

    async def body(session: ClientSession) -> None:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert set(tools) == {"search", "ask", "remember", "recall", "forget"}
        for name in ("search", "ask"):
            schema = tools[name].input_schema
            props = schema["properties"]
            assert set(props) == {"query" if name == "search" else "question", "k", "filter"}
            k = props["k"]
            if name == "ask":  # optional: the engine's own default (20 hits) when omitted
                assert k["default"] is None
                k = next(x for x in k["anyOf"] if x.get("type") == "integer")
            else:
                assert k["default"] == 10
            assert (k["type"], k["minimum"], k["maximum"]) == ("integer", 1, 100)
            assert schema["required"] == ["query" if name == "search" else "question"]
            assert all(p.get("description") for p in props.values())
        remember_props = tools["remember"].input_schema["properties"]
        assert set(remember_props) == {"text", "session", "time", "metadata", "relations"}
        recall_props = tools["recall"].input_schema["properties"]
        assert set(recall_props) == {"query", "session", "since", "until", "as_of", "k"}
        assert tools["remember"].input_schema["required"] == ["text"]
        assert tools["forget"].input_schema["required"] == ["id"]
        assert tools["search"].annotations is not None
        assert tools["search"].annotations.read_only_hint is True

        found = await call(session, "search", query="ERR-4413", k=3)
        assert set(found) >= {"query", "route", "hits", "release", "timings_ms"}
        assert found["hits"][0]["doc_id"] == "error-codes.md"
        assert "ERR-4413" in found["hits"][0]["text"]
        assert found["hits"][0]["contributions"]

        answer = await call(session, "ask", question="What does ERR-4413 mean?")
        assert not answer["abstained"]
        assert "ERR-4413" in answer["answer"] and "[1]" in answer["answer"]
        assert answer["citations"][0]["n"] == 1
        assert {c["doc_id"] for c in answer["citations"]} & {"error-codes.md", "idempotency.md"}

        text = "Deploy freeze for the ledger cluster until OPS-7781 closes.\nAsk Priya first."
        mid = (
            await call(
                session,
                "remember",
                text=text,
                session="chat-1",
                time="2026-03-01T12:00:00Z",
                metadata={"topic": "deploys"},
            )
        )["id"]
        assert mid.startswith("mem-")
        again = await call(
            session, "remember", text=text, session="chat-1", time="2026-03-01T12:00:00Z"
        )
        assert again["id"] == mid
        hits = (await call(session, "search", query="OPS-7781 deploy freeze", k=5))["hits"]
        assert hits[0]["doc_id"] == mid
        assert hits[0]["metadata"]["kind"] == "memory"
        assert hits[0]["metadata"]["session"] == "chat-1"
        assert hits[0]["metadata"]["created_at"] == "2026-03-01T12:00:00Z"
        later = await call(
            session,
            "remember",
            text="The OPS-7781 freeze was lifted",
            session="chat-1",
            time="2026-03-05T09:00:00Z",
            relations=[{"type": "follows", "target": mid}],
        )
        recalled = await call(session, "recall", query="OPS-7781 freeze", session="chat-1")
        assert {h["doc_id"] for h in recalled["hits"]} == {later["id"], mid}
        assert all("recency" in {c["leg"] for c in h["contributions"]} for h in recalled["hits"])
        before = await call(session, "recall", query="OPS-7781", as_of="2026-03-02T00:00:00Z")
        assert [h["doc_id"] for h in before["hits"]] == [mid]  # the later one was not known yet
        await call(session, "forget", id=later["id"])

        gone = await call(session, "forget", id=mid)
        assert gone["forgotten"] == mid and gone["release"] > found["release"]
        hits = (await call(session, "search", query="OPS-7781 deploy freeze", k=5))["hits"]
        assert mid not in {h["doc_id"] for h in hits}
        again_gone = await session.call_tool("forget", {"id": mid})
        assert again_gone.is_error and f"no such memory: {mid!r}" in error_text(again_gone)

    drive(server_params(index), errlog, body)


@pytest.mark.slow
def test_bad_arguments_are_tool_errors_not_crashes(index: Path, tmp_path: Path) -> None:
    async def body(session: ClientSession) -> None:
        bad = await session.call_tool("search", {"query": "ERR-4413", "k": 0})
        assert bad.is_error and "greater than or equal to 1" in error_text(bad)
        bad = await session.call_tool("search", {"query": "ERR-4413", "k": 101})
        assert bad.is_error and "less than or equal to 100" in error_text(bad)
        # the engine's own errors, with its clear messages
        bad = await session.call_tool("search", {"query": "   "})
        assert bad.is_error and "query is empty" in error_text(bad)
        bad = await session.call_tool("search", {"query": "x", "filter": {"colour": "red"}})
        assert bad.is_error and "colour" in error_text(bad) and "known fields" in error_text(bad)
        bad = await session.call_tool("ask", {"question": "x", "filter": {"audience": {"near": 1}}})
        assert bad.is_error and "allowed: gt, gte, lt, lte" in error_text(bad)
        bad = await session.call_tool("remember", {"text": "x", "metadata": {"kind": "note"}})
        assert bad.is_error and "'kind' is reserved" in error_text(bad)
        bad = await session.call_tool("remember", {"text": "x", "time": "yesterday"})
        assert bad.is_error and "not an ISO 8601 time" in error_text(bad)
        bad = await session.call_tool("forget", {"id": "no-such-doc"})
        assert bad.is_error and "no such memory: 'no-such-doc'" in error_text(bad)
        # still serving
        assert (await call(session, "search", query="ERR-4413", k=1))["hits"]

    drive(server_params(index), tmp_path / "server.log", body)
    assert "Traceback" not in (tmp_path / "server.log").read_text(encoding="utf-8")


def _audiences(index: Path) -> dict[str, str]:
    """doc id → audience of every document in the index, read directly from the store."""
    from clew.backends.embedded.store import SQLiteStore

    store = SQLiteStore(index)
    try:
        out = {}
        for doc_id in ("error-codes.md", "feature-flags.md", "chg-1187-pgbouncer-migration.md"):
            found = store.document(doc_id)
            assert found is not None, doc_id
            out[doc_id] = found[0]["metadata"].get("audience")
        return out
    finally:
        store.close()


@pytest.mark.slow
def test_a_scoped_key_never_sees_outside_its_scope(index: Path, tmp_path: Path) -> None:
    assert _audiences(index) == {
        "error-codes.md": "public",
        "feature-flags.md": "internal",
        "chg-1187-pgbouncer-migration.md": "sre",
    }
    keys = tmp_path / "keys.yaml"
    key, _ = KeyStore.add(keys, "support-bot", scope={"audience": "public"})
    params = server_params(index, "--keys", str(keys), env={"CLEW_API_KEY": key})
    errlog = tmp_path / "server.log"
    queries = [
        "ERR-4413",
        "operational feature flags",
        "pgbouncer migration CHG-1187",
        "what else broke after the pgbouncer migration",
        "ledger writer runbook",
    ]

    async def body(session: ClientSession) -> None:
        seen = 0
        for query in queries:
            for flt in (None, {"audience": "internal"}, {"audience": ["internal", "sre"]}):
                args: dict[str, Any] = {"query": query, "k": 20}
                if flt is not None:
                    args["filter"] = flt
                hits = (await call(session, "search", **args))["hits"]
                assert all(h["metadata"].get("audience") == "public" for h in hits), (query, flt)
                if flt is not None:
                    assert hits == []
                seen += len(hits)
                answer = await call(
                    session, "ask", question=query, **({"filter": flt} if flt else {})
                )
                docs = [c["doc_id"] for c in answer["citations"]] + [
                    h["doc_id"] for h in answer["hits"]
                ]
                assert not {"feature-flags.md", "chg-1187-pgbouncer-migration.md"} & set(docs)
                assert all(h["metadata"].get("audience") == "public" for h in answer["hits"])
        assert seen > 0

        # a scoped key may remember: its stamp makes the memory visible to its own scope
        mid = (await call(session, "remember", text="Acme asked for weekly payout reports."))["id"]
        hits = (await call(session, "search", query="weekly payout reports", k=5))["hits"]
        assert hits[0]["doc_id"] == mid and hits[0]["metadata"]["audience"] == "public"
        # ... and forget its memories, but nothing outside its scope and no corpus document;
        # a hidden document reads exactly like an unknown id
        for doc_id in ("feature-flags.md", "error-codes.md", "mem-0000000000000000"):
            denied = await session.call_tool("forget", {"id": doc_id})
            assert denied.is_error
            assert error_text(denied).endswith(f"no such memory: {doc_id!r}")
        assert (await call(session, "forget", id=mid))["forgotten"] == mid

    drive(params, errlog, body)
    log = errlog.read_text(encoding="utf-8")
    assert key not in log
    assert _audiences(index)["feature-flags.md"] == "internal"  # still there


@pytest.mark.slow
def test_a_key_without_stamp_may_not_remember(index: Path, tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    key, _ = KeyStore.add(keys, "reader", scope={"not": {"audience": "sre"}})
    params = server_params(index, "--keys", str(keys), "--key", key)

    async def body(session: ClientSession) -> None:
        denied = await session.call_tool("remember", {"text": "a note"})
        assert denied.is_error and "may not store memories" in error_text(denied)
        assert "reader" in error_text(denied)
        denied = await session.call_tool("forget", {"id": "error-codes.md"})
        assert denied.is_error and "may not forget memories" in error_text(denied)
        hits = (await call(session, "search", query="pgbouncer migration", k=20))["hits"]
        assert hits and all(h["metadata"].get("audience") != "sre" for h in hits)

    drive(params, tmp_path / "server.log", body)


def _run_server(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "CLEW_API_KEY"}
    return subprocess.run(
        [sys.executable, "-m", "clew.serve.mcp", *args],
        env={**base, "HF_HUB_OFFLINE": "1", **(env or {})},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def test_an_invalid_key_exits_with_an_error(tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    KeyStore.add(keys, "support-bot", scope={"audience": "public"})
    index = tmp_path / "idx"  # the key is checked before the index is opened
    wrong = "clew_not-a-real-key-0123456789"
    done = _run_server("--index", str(index), "--keys", str(keys), env={"CLEW_API_KEY": wrong})
    assert done.returncode == 2
    assert "the API key is not valid" in done.stderr and str(keys) in done.stderr
    assert wrong not in done.stderr and wrong not in done.stdout
    assert done.stdout == ""

    done = _run_server("--index", str(index), "--keys", str(keys))
    assert done.returncode == 2 and "CLEW_API_KEY" in done.stderr

    done = _run_server("--index", str(index), "--key", wrong)
    assert done.returncode == 2 and "--key needs --keys" in done.stderr
    assert wrong not in done.stderr


def test_an_invalid_key_fails_the_client_connection(tmp_path: Path) -> None:
    """What an MCP client sees: the server process exits before it answers ``initialize``."""
    keys = tmp_path / "keys.yaml"
    KeyStore.add(keys, "support-bot", scope={"audience": "public"})
    params = server_params(
        tmp_path / "idx", "--keys", str(keys), env={"CLEW_API_KEY": "clew_wrong"}
    )

    async def body(session: ClientSession) -> None:
        raise AssertionError("initialize should not succeed")

    with pytest.raises(ExceptionGroup) as caught:
        drive(params, tmp_path / "server.log", body)
    assert caught.group_contains(MCPError, match="Connection closed")
    assert "the API key is not valid" in (tmp_path / "server.log").read_text(encoding="utf-8")


def test_missing_index_exits_with_an_error(tmp_path: Path) -> None:
    done = _run_server("--index", str(tmp_path / "nowhere"))
    assert done.returncode == 2
    assert "no clew index at" in done.stderr
    assert json.dumps(str(tmp_path / "nowhere"))[1:-1] in done.stderr


def test_main_refuses_to_start_with_a_clear_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from clew.serve.mcp import main

    monkeypatch.setenv("CLEW_API_KEY", "clew_some-key")
    assert main(["--index", str(tmp_path / "idx"), "--keys", str(tmp_path / "none.yaml")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "none.yaml" in err and "does not exist" in err
    assert "clew_some-key" not in err

    monkeypatch.delenv("CLEW_API_KEY")
    bad = tmp_path / "bad.yaml"
    bad.write_text("fusion: {rrf_k: -1}\n", encoding="utf-8")
    assert main(["--index", str(tmp_path / "idx"), "--config", str(bad)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "rrf_k" in err
