"""The API's document endpoints beyond search: ``GET /documents`` (scoped, paged), front matter
in ``POST /documents``, revoked keys, and the offline ``/docs`` page. In-process (httpx's ASGI
transport) over a small corpus indexed with the FAKE hash encoder."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clew import Engine
from clew.cli import main
from clew.serve.api import create_app
from clew.serve.auth import KeyStore
from clew.serve.settings import ServeSettings
from clew.testing.asgi import ApiClient
from clew.testing.fakes import fake_engine
from clew.types import Document


def _corpus() -> list[Document]:
    docs = [
        Document(f"{t}-0{i}", f"{t} page {i}", f"Runbook {i} of tenant {t}.", "x", {"tenant": t})
        for t in ("a", "b")
        for i in range(1, 6)
    ]
    docs.append(Document("pub-1", "FAQ", "Refunds settle nightly.", "x", {"audience": "public"}))
    return docs


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = fake_engine(tmp_path / "idx")
    engine.ingest(_corpus())
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
        "a-admin": KeyStore.add(keys_file, "a-admin", scope={"tenant": "a"}, admin=True)[0],
        "public": KeyStore.add(keys_file, "support-bot", scope={"audience": "public"})[0],
    }
    settings = ServeSettings(index=engine.directory, keys=keys_file, max_body_bytes=200_000)
    client = ApiClient(create_app(settings, engine), keys, no_5xx=True)
    yield client
    client.close()


def _listed(api: ApiClient, who: str, **params: Any) -> list[str]:
    """Every id GET /documents lists for ``who``, following ``next`` page by page."""
    out: list[str] = []
    after = None
    while True:
        query = {**params, **({"after": after} if after else {})}
        r = api("GET", "/documents", who, params=query)
        assert r.status_code == 200, r.text
        body = r.json()
        out += [d["id"] for d in body["documents"]]
        if body["next"] is None:
            return out
        assert body["next"] == out[-1]
        after = body["next"]


# -- GET /documents -------------------------------------------------------------------------------


def test_list_documents_shows_each_key_its_own(api: ApiClient) -> None:
    everything = sorted(d.doc_id for d in _corpus())
    assert _listed(api, "admin") == everything
    assert _listed(api, "a") == ["a-01", "a-02", "a-03", "a-04", "a-05"]
    assert _listed(api, "public") == ["pub-1"]
    r = api("GET", "/documents", "a")
    doc = r.json()["documents"][0]
    assert doc == {
        "id": "a-01",
        "title": "a page 1",
        "source": "x",
        "chunks": 1,
        "release": 1,
        "metadata": {"tenant": "a"},
    }


def test_list_documents_pages_without_gaps_or_repeats(api: ApiClient) -> None:
    r = api("GET", "/documents", "admin", params={"limit": 3})
    body = r.json()
    assert [d["id"] for d in body["documents"]] == ["a-01", "a-02", "a-03"]
    assert body["next"] == "a-03"
    assert _listed(api, "admin", limit=3) == _listed(api, "admin")
    assert _listed(api, "a", limit=2) == _listed(api, "a")
    r = api("GET", "/documents", "a", params={"limit": 5})  # exactly one full page
    assert r.json()["next"] is None


def test_a_hidden_id_as_cursor_tells_a_scoped_key_nothing(api: ApiClient) -> None:
    for after in ("b-01", "b-00-not-there"):  # one that exists outside the scope, one that doesn't
        r = api("GET", "/documents", "a", params={"after": after})
        assert r.json() == {"documents": [], "next": None}
    r = api("GET", "/documents", "public", params={"after": "a-05"})
    assert [d["id"] for d in r.json()["documents"]] == ["pub-1"]


@pytest.mark.parametrize("limit", [0, -1, 1001, "x"])
def test_list_documents_limit_is_bounded(api: ApiClient, limit: Any) -> None:
    r = api("GET", "/documents", "admin", params={"limit": limit})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["query", "limit"]


def test_list_documents_needs_a_key(api: ApiClient) -> None:
    assert api("GET", "/documents", None).status_code == 401


# -- revoked keys ---------------------------------------------------------------------------------


def test_a_revoked_key_no_longer_authenticates(
    api: ApiClient, keys_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert api("GET", "/documents", "a").status_code == 200
    assert main(["keys", "revoke", "tenant-a", "--file", str(keys_file)]) == 0
    assert "revoked key 'tenant-a'" in capsys.readouterr().err
    r = api("GET", "/documents", "a")
    assert r.status_code == 401, "the running service re-reads the keys file"
    assert api("GET", "/documents", "public").status_code == 200, "the other keys still work"


# -- front matter through POST /documents ---------------------------------------------------------

NOTE = """---
title: Vault runbook
team: storage
tags: [vault, seal]
reviewed: 2026-03-01
links: [pub-1]
---
# Unsealing

The ERR-7001 code means the vault is sealed; see [the FAQ](pub-1).
"""


def test_front_matter_becomes_metadata_and_title_not_text(api: ApiClient, engine: Engine) -> None:
    r = api(
        "POST",
        "/documents?wait=true",
        json={"documents": [{"id": "vault.md", "text": NOTE, "metadata": {"team": "sre"}}]},
    )
    assert r.status_code == 200 and r.json()["state"] == "done", r.text
    doc = api("GET", "/documents/vault.md").json()
    assert doc["title"] == "Vault runbook"
    assert doc["metadata"] == {  # as a markdown file's: dates as ISO strings, links kept
        "team": "sre",
        "tags": ["vault", "seal"],
        "reviewed": "2026-03-01",
        "links": ["pub-1"],
    }
    assert doc["source"] == "api"
    assert doc["text"].startswith("# Unsealing") and "title:" not in doc["text"]
    assert all("---" not in c["text"] and "reviewed" not in c["text"] for c in doc["chunks"])
    # the front matter's and the text's links are graph links, as for a markdown file
    assert ("vault.md", "pub-1") in set(engine.store.graph_rows().links)
    hits = api("POST", "/search", json={"query": "ERR-7001", "filter": {"tags": "seal"}}).json()
    assert [h["doc_id"] for h in hits["hits"]] == ["vault.md"], "front matter fields filter"


def test_the_request_title_wins_and_plain_text_is_unchanged(api: ApiClient) -> None:
    docs = [
        {"id": "t1", "text": NOTE, "title": "Given"},
        {"id": "t2", "text": "---\nteam: x\n---\nNo heading here, plain words."},
        {"id": "t3", "text": "Plain text\n---\nwith a rule, no front matter."},
    ]
    r = api("POST", "/documents?wait=true", json={"documents": docs})
    assert r.status_code == 200 and r.json()["state"] == "done", r.text
    assert api("GET", "/documents/t1").json()["title"] == "Given"
    t2 = api("GET", "/documents/t2").json()
    assert (t2["title"], t2["metadata"]) == ("t2", {"team": "x"}), "no title: the id"
    t3 = api("GET", "/documents/t3").json()
    assert t3["metadata"] == {} and t3["text"] == docs[2]["text"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("---\nteam: [unclosed\n---\nbody", "document 'bad' has malformed front matter"),
        ("---\n- a\n- b\n---\nbody", "document 'bad': front matter must be a mapping"),
        ("---\nkind: memory\n---\nbody", "metadata key 'kind' (front matter) is reserved"),
    ],
)
def test_bad_front_matter_is_a_422_on_the_text(api: ApiClient, text: str, message: str) -> None:
    r = api(
        "POST",
        "/documents",
        json={"documents": [{"id": "ok", "text": "x"}, {"id": "bad", "text": text}]},
    )
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"] == ["body", "documents", 1, "text"]
    assert (
        message in detail["msg"] and "/tmp" not in detail["msg"] and "upload" not in detail["msg"]
    )
    assert api("GET", "/documents/ok").status_code == 404, "nothing of the batch is written"


def test_front_matter_cannot_widen_a_scoped_writer(api: ApiClient) -> None:
    """A scoped admin may not use front matter to set an access field to another tenant."""
    text = "---\ntenant: b\n---\nPlanted in tenant b's view."
    r = api("POST", "/documents", "a-admin", json={"documents": [{"id": "plant", "text": text}]})
    assert r.status_code == 403 and "tenant" in r.json()["detail"], r.text
    text = "---\naudience: public\n---\nPlanted in the public view."
    r = api("POST", "/documents", "a-admin", json={"documents": [{"id": "plant", "text": text}]})
    assert r.status_code == 403 and "audience" in r.json()["detail"], r.text
    text = "---\ntenant: a\nteam: x\n---\nMine."
    r = api(
        "POST", "/documents?wait=true", "a-admin", json={"documents": [{"id": "own", "text": text}]}
    )
    assert r.status_code == 200, r.text
    assert api("GET", "/documents/own", "a").json()["metadata"] == {"tenant": "a", "team": "x"}
    assert api("GET", "/documents/plant", "admin").status_code == 404


# -- /docs offline --------------------------------------------------------------------------------


def test_docs_page_loads_nothing_from_outside(api: ApiClient) -> None:
    r = api("GET", "/docs", None)  # like /openapi.json: no key needed
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    page = r.text
    assert "http://" not in page and "https://" not in page and "//cdn" not in page
    assets = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert len(assets) == 3, assets  # script, style sheet, icon
    types = {".js": "javascript", ".css": "text/css", ".png": "image/png"}
    for url in assets:
        assert url.startswith("/docs/static/"), url
        got = api("GET", url, None)
        assert got.status_code == 200, url
        assert types[Path(url).suffix] in got.headers["content-type"], url
        assert len(got.content) > 500, url
    spec = re.search(r"url: '([^']+)'", page)
    assert spec is not None and api("GET", spec.group(1), None).status_code == 200
    assert "SwaggerUIBundle" in api("GET", "/docs/static/swagger-ui-bundle.js", None).text
    assert api("GET", "/redoc", None).status_code == 404, "ReDoc would need a CDN"
    assert api("GET", "/docs/static/../../pyproject.toml", None).status_code == 404


def test_the_served_swagger_ui_reads_the_spec_fastapi_writes(api: ApiClient) -> None:
    """FastAPI writes OpenAPI 3.1; Swagger UI before 5 shows only "Unable to render this
    definition" for it (swagger-ui-bundle 1.1.0 ships 4.15.5; swagger-ui-bundle-v2 ships 5.x)."""
    from clew.serve.docs import swagger_ui_version

    spec = api("GET", "/openapi.json", None).json()
    assert spec["openapi"].startswith("3.1")
    assert swagger_ui_version() >= (5,), (
        f"Swagger UI {swagger_ui_version()} cannot render OpenAPI 3.1; install "
        "swagger-ui-bundle-v2 (Swagger UI 5) in place of swagger-ui-bundle"
    )
