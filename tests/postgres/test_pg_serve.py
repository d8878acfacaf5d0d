"""The HTTP API and the MCP server over a PostgreSQL store (the sample index, real model)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from clew.backends.copy import copy_index
from clew.backends.embedded.store import SQLiteStore
from clew.backends.postgres.store import PostgresStore
from clew.serve.api import create_app
from clew.serve.auth import KeyStore
from clew.serve.settings import ServeSettings
from clew.testing.asgi import ApiClient

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def url(sample_index: Path, pg_server: Any) -> str:
    target = pg_server.url + "&schema=serve_sample"
    src, dst = SQLiteStore(sample_index), PostgresStore(target, create=True)
    try:
        copy_index(src, dst)
    finally:
        src.close()
        dst.close()
    return target


def test_settings_keep_a_url_and_make_paths_of_directories(url: str, tmp_path: Path) -> None:
    assert ServeSettings(index=url, no_auth=True).index == url
    assert ServeSettings(index=str(tmp_path), no_auth=True).index == tmp_path


@pytest.fixture
def api(url: str, tmp_path: Path) -> Iterator[ApiClient]:
    keys_file = tmp_path / "keys.yaml"
    keys = {
        "admin": KeyStore.add(keys_file, "ops", admin=True)[0],
        "public": KeyStore.add(keys_file, "bot", scope={"audience": "public"})[0],
    }
    client = ApiClient(create_app(ServeSettings(index=url, keys=keys_file)), keys, no_5xx=True)
    yield client
    client.close()


def test_api_searches_postgres_with_scopes(api: ApiClient) -> None:
    r = api("POST", "/search", "admin", json={"query": "ERR-4413", "k": 5})
    assert r.status_code == 200, r.text
    hits = r.json()["hits"]
    assert hits and hits[0]["doc_id"]
    r = api("POST", "/search", "public", json={"query": "pgbouncer pool", "k": 50})
    assert r.status_code == 200
    for hit in r.json()["hits"]:
        doc = api("GET", f"/documents/{hit['doc_id']}", "admin").json()
        assert doc["metadata"]["audience"] == "public"
    assert api("POST", "/search", None, json={"query": "x"}).status_code == 401


def test_mcp_over_postgres(url: str, tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        # trust auth on the test socket: the password is accepted and must never be printed
        args=[
            "-m",
            "clew.serve.mcp",
            "--store",
            url.replace("postgres:@", "postgres:secret@"),
            "--log-level",
            "INFO",
        ],
        env={"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
        cwd=ROOT,
    )

    async def run() -> None:
        with (tmp_path / "mcp.log").open("w") as err, anyio.fail_after(180):
            async with (
                stdio_client(params, errlog=err) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                result = await session.call_tool("search", {"query": "ERR-4413", "k": 3})
                assert not result.is_error
                assert isinstance(result.structured_content, dict)
                assert result.structured_content["hits"]

    anyio.run(run)
    log = (tmp_path / "mcp.log").read_text()
    assert "serving postgresql://postgres:***@" in log and "secret" not in log
