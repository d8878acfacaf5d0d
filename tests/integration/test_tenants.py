"""Per-tenant isolation over the HTTP API and the MCP tools.

Two tenants whose documents use the SAME titles, identifiers and words (and one document with
byte-identical text in both, so content-hash dedup has a cross-tenant twin to fold), links that
cross tenants (so graph expansion has an edge into the other tenant), one scoped key per tenant
and an admin key. Every endpoint a tenant key can call, with any filter it can send, must show
nothing of the other tenant: no document, chunk, citation, path step, suggestion, trace, job,
and no word of its text.

The last tests pin side channels: the route must not reveal identifiers only another tenant
mentions, a filter error must not name another tenant's fields, and every number a response
carries (BM25, concept idf, PageRank, evidence, confidence, abstention) must be that of an index of
the tenant's own documents: statistics are computed within the caller's scope.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.server.mcpserver.exceptions import ToolError

from clew import Engine
from clew.config import ConceptConfig, EngineConfig
from clew.ingest.concepts import ConceptExtractor
from clew.serve.api import create_app
from clew.serve.auth import KeyStore, Principal
from clew.serve.mcp import build_server
from clew.serve.settings import ServeSettings
from clew.testing.asgi import ApiClient
from clew.testing.consistency import without_query
from clew.testing.fakes import FakeHashEncoder
from clew.types import Document

SECRET = {"a": "AMBERFOX", "b": "BLUEHERON"}
"""A word only each tenant's own documents contain."""
PAGES = [
    (
        "runbook",
        "Retry runbook",
        "When ERR-4012 appears, raise RetryPolicy.MaxAttempts on payments-gateway.\n\n"
        "Page the ledger_writer owner if INC-2031 repeats. Codeword {secret}.",
    ),
    (
        "incident",
        "INC-2031 incident",
        "INC-2031: an ERR-4012 retry storm after the ledger_writer timeout.\n\n"
        "The payments-gateway retried every charge. {secret} tracked the follow-up.",
    ),
    (
        "faq",
        "Refund FAQ",
        "Refunds settle in the nightly settlement batch. ERR-4013 means a refund was declined "
        "by the issuer; {secret} keeps the list of issuers.",
    ),
    ("twin", "Shared boilerplate", "Retry budget: ERR-4012 retries stop after five attempts."),
]
QUERIES = [
    "ERR-4012",
    "what else is related to ERR-4012?",
    "What caused INC-2031 after the ledger_writer timeout?",
    "Retry runbook RetryPolicy.MaxAttempts payments-gateway",
    "refund issuers ERR-4013",
    "AMBERFOX BLUEHERON codeword",
    "Retry budget five attempts",
]
WIDENING = [
    None,
    {"tenant": "b"},
    {"tenant": ["a", "b"]},
    {"or": [{"tenant": "a"}, {"tenant": "b"}]},
    {"or": [{"tenant": "a"}, {"not": {"tenant": "a"}}]},
    {"not": {"tenant": "a"}},
    {"not": {"tenant": "zzz"}},
    {"or": [{"tenant": "a"}, {"project": "zeus"}]},
]


def corpus(tenants: tuple[str, ...] = ("a", "b")) -> list[Document]:
    docs = []
    for tenant in tenants:
        other = "b" if tenant == "a" else "a"
        for slug, title, text in PAGES:
            meta: dict[str, Any] = {"tenant": tenant}
            if tenant == "b":
                meta["project"] = "zeus"  # a field only tenant b's documents have
            links = [f"{tenant}-incident"] if slug != "incident" else [f"{tenant}-runbook"]
            if slug == "runbook":
                links.append(f"{other}-faq")  # a link into the other tenant
            docs.append(
                Document(
                    doc_id=f"{tenant}-{slug}",
                    title=title,
                    text=text.format(secret=SECRET[tenant]),
                    source=f"{tenant}-{slug}",
                    metadata=meta,
                    links=tuple(links),
                )
            )
    if "b" in tenants:  # an identifier only tenant b's documents mention
        docs.append(
            Document(
                "b-secret", "Private", "ERR-9999 is BLUEHERON's own code.", "b", {"tenant": "b"}
            )
        )
    return docs


INGEST = EngineConfig().with_overrides(chunk={"max_tokens": 32, "overlap_tokens": 4})


def open_engine(path: Path, docs: list[Document]) -> Engine:
    engine = Engine(
        path,
        INGEST,
        create=True,
        encoder=FakeHashEncoder(),
        extractor=ConceptExtractor(ConceptConfig(spacy=False)),
    )
    engine.ingest(docs)
    return engine


Api = ApiClient


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = open_engine(tmp_path / "idx", corpus())
    yield engine
    engine.close()


@pytest.fixture
def api(engine: Engine, tmp_path: Path) -> Iterator[Api]:
    keys_file = tmp_path / "keys.yaml"
    keys = {
        "admin": KeyStore.add(keys_file, "ops", admin=True)[0],
        "a": KeyStore.add(keys_file, "tenant-a", scope={"tenant": "a"})[0],
        "b": KeyStore.add(keys_file, "tenant-b", scope={"tenant": "b"})[0],
    }
    client = Api(
        create_app(ServeSettings(index=engine.directory, keys=keys_file), engine), keys, no_5xx=True
    )
    yield client
    client.close()


def assert_only(tenant: str, payload: Any, what: str) -> set[str]:
    """Every document and chunk id in ``payload`` is ``tenant``'s, and no word of the other
    tenant's text appears (the caller's own query aside). Returns the documents seen."""
    other = "b" if tenant == "a" else "a"
    text = json.dumps(without_query(payload), ensure_ascii=False)
    assert SECRET[other] not in text, f"{what}: the other tenant's text"
    assert f'"{other}-' not in text, f"{what}: an id of the other tenant"
    ids = set(re.findall(r'"([ab]-[a-z]+)(?:#[^"]*)?"', text))
    assert all(i.startswith(f"{tenant}-") for i in ids), (what, ids)
    assert "ERR-9999" not in text or tenant == "b", what
    return {i for i in ids if "#" not in i}


def foreign_field(tenant: str, spec: Any) -> bool:
    """Whether a filter names ``project``, a field only tenant b's documents have."""
    return tenant == "a" and "project" in json.dumps(spec)


# -- the API ------------------------------------------------------------------------------------


@pytest.mark.parametrize("tenant", ["a", "b"])
def test_search_and_ask_never_cross_tenants(api: Api, tenant: str) -> None:
    seen: set[str] = set()
    for query in QUERIES:
        for spec in WIDENING:
            for extra in ({}, {"expand": True}, {"preset": "graph", "expand": True}):
                body: dict[str, Any] = {"query": query, "k": 50, **extra}
                if spec is not None:
                    body["filter"] = spec
                r = api("POST", "/search", tenant, json=body)
                if foreign_field(tenant, spec):
                    # a field only the other tenant has is unknown to this caller, like a typo
                    assert r.status_code == 422 and "zeus" not in r.text, (body, r.text)
                    continue
                assert r.status_code == 200, (body, r.text)
                seen |= assert_only(tenant, r.json(), f"search {body}")
            ask: dict[str, Any] = {"question": query, "expand": True}
            if spec is not None:
                ask["filter"] = spec
            r = api("POST", "/ask", tenant, json=ask)
            if foreign_field(tenant, spec):
                assert r.status_code == 422, (ask, r.text)
                continue
            assert r.status_code == 200, (ask, r.text)
            assert_only(tenant, r.json(), f"ask {ask}")
    # not vacuous: the tenant does find its own documents, the twin included
    assert {f"{tenant}-{slug}" for slug, _, _ in PAGES} <= seen


def test_the_admin_sees_both_tenants(api: Api) -> None:
    """The fixture is not vacuous: unscoped, the same queries reach both tenants."""
    hits = api("POST", "/search", "admin", json={"query": "ERR-4012 runbook", "k": 50}).json()
    docs = {h["doc_id"] for h in hits["hits"]}
    assert {"a-runbook", "b-runbook"} <= docs


def test_documents_and_similar_of_the_other_tenant_are_404(api: Api) -> None:
    for doc_id in ("b-runbook", "b-twin", "b-secret"):
        hidden = api("GET", f"/documents/{doc_id}", "a")
        missing = api("GET", f"/documents/{doc_id}-nope", "a")
        assert hidden.status_code == missing.status_code == 404
        assert hidden.json()["detail"] == f"no document {doc_id!r}"
        assert api("GET", f"/documents/{doc_id}/similar", "a").status_code == 404
    own = api("GET", "/documents/a-runbook", "a")
    assert own.status_code == 200 and SECRET["a"] in own.text
    for doc_id in ("a-runbook", "a-twin", "a-incident"):
        r = api("GET", f"/documents/{doc_id}/similar?k=100", "a")
        assert r.status_code == 200
        docs = assert_only("a", r.json(), f"similar {doc_id}")
        assert docs - {doc_id}, "no own neighbours at all"
    assert api("DELETE", "/documents/b-runbook", "a").status_code == 403
    assert api("GET", "/documents/b-runbook", "admin").status_code == 200


def test_documents_an_admin_writes_for_b_are_invisible_to_a(api: Api) -> None:
    docs = [
        {
            "id": "b-new",
            "text": "ERR-4012 hotfix notes: BLUEHERON rolled it back.",
            "metadata": {"tenant": "b"},
        },
        {
            "id": "b-new-2",
            "text": "AMBERFOX lookalike: ERR-4012 retry budget.",
            "metadata": {"tenant": "b"},
        },
        {"id": "untagged", "text": "ERR-4012 notes nobody owns.", "title": "Untagged"},
    ]
    r = api("POST", "/documents?wait=true", "admin", json={"documents": docs})
    assert r.status_code == 200 and r.json()["state"] == "done", r.text
    for query in ("ERR-4012 hotfix notes", "AMBERFOX lookalike retry budget", "notes nobody owns"):
        a = api("POST", "/search", "a", json={"query": query, "k": 50}).json()
        assert_only("a", a, query)
        assert "untagged" not in {h["doc_id"] for h in a["hits"]}
    b = api("POST", "/search", "b", json={"query": "ERR-4012 hotfix notes", "k": 50}).json()
    assert "b-new" in {h["doc_id"] for h in b["hits"]}
    assert api("GET", "/documents/b-new", "a").status_code == 404
    assert api("GET", "/documents/b-new", "b").status_code == 200


def test_tenants_may_not_write_or_read_jobs(api: Api) -> None:
    body = {"documents": [{"id": "b-sneak", "text": "x", "metadata": {"tenant": "b"}}]}
    assert api("POST", "/documents", "a", json=body).status_code == 403
    job = api("POST", "/documents?wait=true", "admin", json={"documents": [body["documents"][0]]})
    assert job.status_code == 200
    job_id = job.json()["job_id"]
    for tenant in ("a", "b"):
        r = api("GET", f"/jobs/{job_id}", tenant)
        assert r.status_code == 403 and "b-sneak" not in r.text
    assert api("GET", f"/jobs/{job_id}", "admin").status_code == 200


def test_traces_of_the_other_tenant_are_404(api: Api) -> None:
    trace_b = api("POST", "/search", "b", json={"query": "ERR-4012 BLUEHERON"}).json()["trace_id"]
    ask_b = api("POST", "/ask", "b", json={"question": "What is ERR-4012?"}).json()["trace_id"]
    trace_a = api("POST", "/search", "a", json={"query": "ERR-4012"}).json()["trace_id"]
    for trace_id in (trace_b, ask_b):
        r = api("GET", f"/traces/{trace_id}", "a")
        assert r.status_code == 404 and r.json()["detail"] == f"no trace {trace_id!r}"
        assert api("GET", f"/traces/{trace_id}", "b").status_code == 200
    own = api("GET", f"/traces/{trace_a}", "a")
    assert own.status_code == 200
    assert_only("a", own.json(), "own trace")


# -- the MCP tools ------------------------------------------------------------------------------


def call(server: Any, tool: str, **arguments: Any) -> dict[str, Any]:
    async def run() -> Any:
        return await server.call_tool(tool, arguments)

    result = anyio.run(run)
    assert not result.is_error, result
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def test_mcp_tools_never_cross_tenants(engine: Engine) -> None:
    a = build_server(engine, Principal("tenant-a", {"tenant": "a"}))
    b = build_server(engine, Principal("tenant-b", {"tenant": "b"}))
    seen: set[str] = set()
    for query in QUERIES:
        for spec in WIDENING:
            args = {} if spec is None else {"filter": spec}
            if foreign_field("a", spec):
                with pytest.raises(
                    ToolError, match=r"appear in no document; known fields: tenant$"
                ):
                    call(a, "search", query=query, k=50, **args)
                continue
            seen |= assert_only("a", call(a, "search", query=query, k=50, **args), query)
            assert_only("a", call(a, "ask", question=query, **args), query)
        assert_only("a", call(a, "recall", query=query), query)
    assert "a-runbook" in seen

    mid = call(b, "remember", text="BLUEHERON memo: ERR-4012 budget doubled.")["id"]
    assert call(b, "recall", query="ERR-4012 budget memo")["hits"][0]["doc_id"] == mid
    assert mid not in json.dumps(call(a, "recall", query="ERR-4012 budget memo"))
    assert mid not in json.dumps(call(a, "search", query="ERR-4012 budget memo", k=50))
    for target in (mid, "b-runbook"):
        with pytest.raises(ToolError, match=f"no such memory: {target!r}"):
            call(a, "forget", id=target)
    assert engine.document(mid) is not None  # a could not delete b's memory


# -- side channels ----------------------------------------------------------------------


def test_route_does_not_reveal_identifiers_of_other_tenants(api: Api) -> None:
    probe = api("POST", "/search", "a", json={"query": "ERR-9999 status"}).json()
    blank = api("POST", "/search", "a", json={"query": "ERR-9990 status"}).json()

    def without_dense(route: dict[str, Any]) -> dict[str, Any]:
        # the dense signals differ with the query's text (two strings embed differently),
        # whoever else is in the index; everything else must be the same
        signals = {k: v for k, v in route["signals"].items() if k.startswith("lexical_")}
        return {**{k: v for k, v in route.items() if k != "signals"}, "signals": signals}

    assert without_dense(probe["route"]) == without_dense(blank["route"])


def test_filter_errors_do_not_reveal_other_tenants_fields(api: Api) -> None:
    theirs = api("POST", "/search", "a", json={"query": "x", "filter": {"project": "zeus"}})
    nobody = api("POST", "/search", "a", json={"query": "x", "filter": {"colour": "red"}})
    assert theirs.status_code == nobody.status_code
    assert "project" not in nobody.text


VARIANTS: list[dict[str, Any]] = [
    {},
    {"expand": True},
    {"preset": "graph", "expand": True},
    {"preset": "lexical"},
    {"rerank": "features"},
]
"""Request options whose numbers a tenant sees: fusion, expansion, the graph leg's PageRank and
hub cuts, the feature reranker's BM25/PageRank signals."""


def _comparable(payload: dict[str, Any]) -> dict[str, Any]:
    """A response without what legitimately differs between two indexes: trace ids, timings,
    the release number and the cache flag."""
    drop = {"trace_id", "timings_ms", "release", "cached"}
    return {k: v for k, v in payload.items() if k not in drop}


def test_every_number_is_that_of_the_tenants_own_index(api: Api, tmp_path: Path) -> None:
    """Search and ask for tenant a through the shared index answer exactly (bit for bit) what an
    index of tenant a's documents alone answers: hits, ranks, raw scores, fused parts, graph
    trails, expansion paths, route, evidence, confidence, abstention and citations."""
    alone = open_engine(tmp_path / "alone", corpus(("a",)))
    alone_api = Api(
        create_app(ServeSettings(index=alone.directory, no_auth=True), alone), {}, no_5xx=True
    )
    try:
        for query in QUERIES:
            for extra in VARIANTS:
                body = {"query": query, "k": 50, **extra}
                shared = api("POST", "/search", "a", json=body).json()
                own = alone_api("POST", "/search", None, json=body).json()
                assert _comparable(shared) == _comparable(own), body
                ask = {"question": query, **extra}
                shared = api("POST", "/ask", "a", json=ask).json()
                own = alone_api("POST", "/ask", None, json=ask).json()
                assert _comparable(shared) == _comparable(own), ask
    finally:
        alone_api.close()
        alone.close()


@pytest.mark.parametrize("verb", ["/search", "/ask"])
def test_words_only_another_tenant_has_are_indistinguishable_from_unknown_words(
    api: Api, verb: str
) -> None:
    """The oracle of the attack: tenant a adds a word to its question; a word only tenant b's
    documents contain must change nothing a word no document contains would not (coverage,
    confidence and abstention included). Presets without the dense leg: an embedding of a
    different query is different whatever the index holds."""
    field = "query" if verb == "/search" else "question"

    def answer(word: str, preset: str) -> str:
        body = {field: f"ERR-4012 retry storm {word}", "preset": preset}
        return json.dumps(_comparable(api("POST", verb, "a", json=body).json()))

    # each word of tenant b's against a control of the same shape that no document contains
    pairs = [(SECRET["b"], "QUILLWORT"), ("zeus", "quux"), ("ERR-9999", "ERR-9990")]
    for preset in ("lexical", "graph"):
        for word, control in pairs:
            probe = answer(word, preset)
            assert probe.replace(word, control) == answer(control, preset), (word, preset)


@pytest.mark.slow
def test_entity_resolution_sees_only_the_writers_scope(tmp_path: Path) -> None:
    """A memory tenant a writes resolves "the X migration" against names tenant a can see:
    an identifier only tenant b's document has (``ZeusVault``) is no different from one nobody
    has (``QeusVault``), in the concepts the memory links to and in what a's queries link to.
    The same tenant's own names still resolve."""
    engine = Engine(
        tmp_path / "idx",
        create=True,
        encoder=FakeHashEncoder(),
        extractor=ConceptExtractor(ConceptConfig(spacy=True)),
    )
    a, scope_a = {"tenant": "a"}, {"tenant": "a"}
    try:
        engine.ingest(
            [
                Document(
                    "b-vault", "Vault", "We restarted ZeusVault at noon.", "b", {"tenant": "b"}
                ),
                Document("a-pool", "Pool", "We restarted PgBouncer at noon.", "a", {"tenant": "a"}),
            ]
        )
        routes = {}
        for word in ("zeusvault", "qeusvault"):
            engine.remember(
                f"The {word} migration failed.", timestamp="2026-03-01", stamp=a, scope=scope_a
            )
            found = engine.search(word, scope=scope_a, preset="graph", k=5)
            routes[word] = (found.route.to_dict(), [h.chunk_id for h in found.hits])
        assert routes["zeusvault"] == routes["qeusvault"]
        assert routes["zeusvault"][1] == []  # nothing links: the word is not a known name here
        # a's own identifier still resolves across a's writes
        mine = engine.remember(
            "The pgbouncer migration is done.", timestamp="2026-03-02", stamp=a, scope=scope_a
        )
        hits = engine.search("PgBouncer", scope=scope_a, preset="graph", k=5).hits
        assert mine in {h.doc_id for h in hits}
    finally:
        engine.close()


KIND_A = [
    Document(
        "a1",
        "Rollout",
        "the phoenix rollout slipped because the release train was late. the office moved to "
        "phoenix last year; the pgbouncer pool was resized.",
        "a",
        {"tenant": "a"},
    ),
    Document(
        "a2",
        "Notes",
        "our release train runs weekly; the phoenix rollout depends on it and on pgbouncer.",
        "a",
        {"tenant": "a"},
    ),
]
KIND_B = [
    Document(
        "b1",
        "Trip",
        "Phoenix is a city in Arizona. We flew to Phoenix, Arizona with Maria Lopez.",
        "b",
        {"tenant": "b"},
    ),
    Document(
        "b2",
        "Phoenix Rollout",
        "The Phoenix Rollout team met Maria Lopez in Phoenix. PgBouncer was restarted.",
        "b",
        {"tenant": "b"},
    ),
]


@pytest.mark.slow
def test_concept_kinds_are_those_of_the_scope(tmp_path: Path) -> None:
    """A word tenant a's documents write as a plain phrase (``phoenix``, ``pgbouncer``) that
    tenant b's call a named entity or an identifier is a phrase for a: the route (named
    concepts), the plan, graph weights, title links and what a's writes resolve against are
    those of an index of a's documents alone. After b's documents go, the concept is a phrase
    for everyone. (An unscoped writer resolves names against all it sees: one batch of both
    tenants' documents links a's ``pgbouncer pool`` to b's ``PgBouncer``.)"""

    def engine(path: Path, *tenants: list[Document]) -> Engine:
        e = Engine(
            path,
            create=True,
            encoder=FakeHashEncoder(),
            extractor=ConceptExtractor(ConceptConfig(spacy=True)),
        )
        for docs in tenants:  # each tenant's writes under its scope, as its service key writes
            e.ingest(docs, scope={"tenant": docs[0].metadata["tenant"]})
        return e

    scope = {"tenant": "a"}
    shared = engine(tmp_path / "shared", KIND_B, KIND_A)
    alone = engine(tmp_path / "alone", KIND_A)
    try:
        kinds = {c["key"]: c["kind"] for c in shared.concepts()}
        assert kinds["phoenix rollout"] == "entity" and kinds["pgbouncer"] == "identifier"
        for memory in ("The pgbouncer migration failed.", "The phoenix office closed."):
            at = "2026-03-01"
            shared.remember(memory, timestamp=at, stamp=scope, scope=scope)
            alone.remember(memory, timestamp=at, stamp=scope)
        queries = ("phoenix", "Phoenix", "phoenix rollout", "what delayed the phoenix rollout")
        expand = dataclasses.replace(
            EngineConfig(), expand=dataclasses.replace(EngineConfig().expand, enabled=True)
        )
        for query in (*queries, "pgbouncer migration", "PgBouncer"):
            for extra in ({}, {"preset": "graph"}, {"config": expand}):
                mine = shared.search(query, scope=scope, k=10, **extra).to_dict()
                own = alone.search(query, k=10, **extra).to_dict()
                assert _comparable(mine) == _comparable(own), (query, extra)
        shared.delete(["b1", "b2"])
        kinds = {c["key"]: c["kind"] for c in shared.concepts()}
        assert kinds["phoenix rollout"] == "phrase" and kinds["pgbouncer"] == "phrase"
    finally:
        shared.close()
        alone.close()
