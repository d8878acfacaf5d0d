"""The LangChain, LlamaIndex and Haystack adapters against the real libraries, over one small
real index (the packaged embedding model, two tenants): clew's order and ids, the provenance
carried as metadata, filter pass-through and translation, the scope as a wall no per-call
filter can widen, Haystack serialization inside a real Pipeline, and the import guards."""

from __future__ import annotations

import asyncio
import importlib
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from haystack import Pipeline
from haystack import component as hs_component
from haystack.dataclasses import Document as HsDocument
from langchain_core.runnables import RunnableLambda
from llama_index.core.schema import MetadataMode
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from clew import Engine
from clew.config import EngineConfig
from clew.errors import FilterError
from clew.integrations import haystack as hs
from clew.integrations import langchain as lc
from clew.integrations import llamaindex as li
from clew.integrations.common import hit_metadata
from clew.types import Document, Hit

pytestmark = pytest.mark.slow  # the packaged embedding model (small: well under a second)

CONFIG = EngineConfig().with_overrides(concepts={"spacy": False})
"""Identifier concepts only (no spaCy), the real embedding model."""

PAGES = [
    (
        "runbook",
        "Retry runbook",
        "# Payments\n\n## Retries\n\nWhen ERR-4012 appears, raise the "
        "retry budget of payments-gateway and page the ledger owner.",
        2024,
    ),
    (
        "incident",
        "INC-2031",
        "INC-2031: an ERR-4012 retry storm after the ledger timeout; the "
        "payments-gateway retried every charge.",
        2025,
    ),
    (
        "faq",
        "Refund FAQ",
        "Refunds settle in the nightly batch. ERR-4013 means the issuer declined the refund.",
        2023,
    ),
]
OWNER = {"a": "Amberfox", "b": "Blueheron"}
CORPUS = [
    Document(
        doc_id=f"{tenant}-{slug}",
        title=title,
        text=f"{text} Owner: {OWNER[tenant]}.",  # no cross-tenant twins to dedup
        source=f"{tenant}/{slug}.md",
        metadata={"tenant": tenant, "year": year},
        fmt="md",
    )
    for tenant in ("a", "b")
    for slug, title, text, year in PAGES
]
SOURCES = {d.doc_id: d.source for d in CORPUS}
QUERY = "ERR-4012 retry storm payments-gateway"


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("adapters") / "idx"
    with Engine(path, CONFIG, create=True) as engine:
        engine.ingest(CORPUS)
    return path


@pytest.fixture(scope="module")
def engine(index: Path) -> Iterator[Engine]:
    with Engine(index, CONFIG) as engine:
        yield engine


def hits(engine: Engine, query: str = QUERY, **kw: Any) -> tuple[Hit, ...]:
    found = engine.search(query, **kw).hits
    assert found, f"the fixture query {query!r} ({kw}) finds nothing: the test would be vacuous"
    return found


def tenants(metas: list[dict[str, Any]]) -> set[str]:
    return {m["metadata"]["tenant"] for m in metas}


def check_provenance(meta: dict[str, Any], hit: Hit, rank: int) -> None:
    """The metadata an adapter's document carries is the hit's, as plain JSON."""
    assert meta["chunk_id"] == hit.chunk_id
    assert meta["doc_id"] == hit.doc_id
    assert meta["title"] == hit.title
    assert meta["source"] == SOURCES[hit.doc_id]
    assert meta["score"] == hit.score
    assert meta["rank"] == rank
    assert meta["heading_path"] == list(hit.heading_path)
    assert meta["contributions"] == [c.to_dict() for c in hit.contributions]
    assert {c["leg"] for c in meta["contributions"]} <= {"lexical", "dense", "graph", "title_link"}
    assert meta["graph"] == (None if hit.graph is None else hit.graph.to_dict())
    assert meta["expansion"] == [p.to_dict() for p in hit.expansion]
    assert meta["metadata"] == hit.metadata
    assert "page" not in meta  # no hit of this corpus has a page
    assert isinstance(meta["release"], int)
    assert json.loads(json.dumps(meta)) == meta


def test_the_corpus_makes_the_filter_tests_meaningful(engine: Engine) -> None:
    found = hits(engine)
    assert {h.metadata["tenant"] for h in found} == {"a", "b"}
    assert any(h.heading_path for h in found)


def test_hit_metadata_carries_a_page_only_when_the_hit_has_one(engine: Engine) -> None:
    hit = hits(engine)[0]
    assert "page" not in hit_metadata(hit, 1)
    paged = hit_metadata(replace(hit, page=3), 1)
    assert paged["page"] == 3 and paged["rank"] == 1 and paged["source"] == hit.source
    assert paged["release"] is None and paged["trace_id"] is None  # no result given


def test_a_hit_carries_its_documents_current_source(tmp_path: Path) -> None:
    doc = Document("d", "Moved page", "ERR-4012 notes.", "old/place.md", {"tenant": "a"})
    with Engine(tmp_path / "idx", CONFIG, create=True) as own:
        own.ingest([doc])
        retriever = lc.ClewRetriever(engine=own)
        assert [d.metadata["source"] for d in retriever.invoke("ERR-4012")] == ["old/place.md"]
        own.ingest([replace(doc, text="ERR-4012 notes, moved.", source="new/place.md")])
        assert [d.metadata["source"] for d in retriever.invoke("ERR-4012")] == ["new/place.md"]


# -- LangChain -------------------------------------------------------------------------------


def test_langchain_invoke_returns_clew_hits_in_order_with_provenance(engine: Engine) -> None:
    expected = hits(engine)
    docs = lc.ClewRetriever(engine=engine).invoke(QUERY)
    assert [d.id for d in docs] == [h.chunk_id for h in expected]
    assert [d.page_content for d in docs] == [h.text for h in expected]
    for rank, (doc, hit) in enumerate(zip(docs, expected, strict=True), 1):
        check_provenance(doc.metadata, hit, rank)


def test_langchain_options_and_per_call_overrides(engine: Engine) -> None:
    retriever = lc.ClewRetriever(engine=engine, k=2, filter={"tenant": "b"})
    docs = retriever.invoke(QUERY)
    assert [d.id for d in docs] == [h.chunk_id for h in hits(engine, k=2, filter={"tenant": "b"})]
    assert len(docs) == 2 and tenants([d.metadata for d in docs]) == {"b"}
    # a per-call filter replaces the constructor's; k too
    docs = retriever.invoke(QUERY, filter={"year": {"gte": 2025}}, k=5)
    assert {d.metadata["doc_id"] for d in docs} == {"a-incident", "b-incident"}
    lexical = retriever.invoke(QUERY, preset="lexical")
    assert {c["leg"] for d in lexical for c in d.metadata["contributions"]} == {"lexical"}
    with pytest.raises(TypeError, match="allowed per call"):
        retriever.invoke(QUERY, top_k=3)
    with pytest.raises(ValueError, match="filters"):  # a misspelt option is not ignored
        lc.ClewRetriever(engine=engine, filters={"tenant": "a"})
    with pytest.raises(FilterError, match="unknown range operator"):
        lc.ClewRetriever(engine=engine, filter={"year": {"after": 2020}})


def test_langchain_scope_is_a_wall(engine: Engine) -> None:
    scope = {"tenant": "a"}
    retriever = lc.ClewRetriever(engine=engine, scope=scope)
    scope["tenant"] = "b"  # changing the caller's dict afterwards changes nothing
    assert tenants([d.metadata for d in retriever.invoke(QUERY)]) == {"a"}
    assert retriever.invoke(QUERY, filter={"tenant": "b"}) == []
    for widening in ({"tenant": ["a", "b"]}, {"or": [{"tenant": "b"}, {"year": 2024}]}):
        docs = retriever.invoke(QUERY, filter=widening)
        assert docs and tenants([d.metadata for d in docs]) == {"a"}
    with pytest.raises(TypeError, match="scope is fixed"):
        retriever.invoke(QUERY, scope=None)
    assert retriever.scope == {"tenant": "a"}


def test_langchain_in_an_lcel_chain_and_async(engine: Engine) -> None:
    retriever = lc.ClewRetriever(engine=engine, scope={"tenant": "b"})
    chain = retriever | RunnableLambda(lambda docs: [d.metadata["chunk_id"] for d in docs])
    assert chain.invoke(QUERY) == [h.chunk_id for h in hits(engine, scope={"tenant": "b"})]
    docs = asyncio.run(retriever.ainvoke(QUERY, filter={"year": 2025}))  # per-call kwargs kept
    assert [d.metadata["doc_id"] for d in docs] == ["b-incident"]


# -- LlamaIndex ------------------------------------------------------------------------------


def test_llamaindex_retrieve_returns_clew_hits_with_provenance(engine: Engine) -> None:
    expected = hits(engine)
    nodes = li.ClewRetriever(engine).retrieve(QUERY)
    assert [n.node.node_id for n in nodes] == [h.chunk_id for h in expected]
    assert [n.score for n in nodes] == [h.score for h in expected]
    for rank, (scored, hit) in enumerate(zip(nodes, expected, strict=True), 1):
        node = scored.node
        check_provenance(node.metadata, hit, rank)
        assert node.get_content() == hit.text
        assert node.ref_doc_id == hit.doc_id
        shown = node.get_content(metadata_mode=MetadataMode.LLM)
        assert hit.title in shown and SOURCES[hit.doc_id] in shown
        assert "raw_score" not in shown and "contributions" not in shown
        assert "fused_part" not in node.get_content(metadata_mode=MetadataMode.EMBED)
        assert "contributions" in node.get_content(metadata_mode=MetadataMode.ALL)


def test_llamaindex_metadata_filters_translate_to_clew() -> None:
    def mf(*items: Any, condition: FilterCondition = FilterCondition.AND) -> MetadataFilters:
        return MetadataFilters(filters=list(items), condition=condition)

    eq_a = MetadataFilter(key="tenant", value="a")
    assert li.translate_filters(mf(eq_a)) == {"tenant": "a"}
    assert li.translate_filters(mf()) is None
    year = MetadataFilter(key="year", value=2024, operator=FilterOperator.GTE)
    assert li.translate_filters(mf(eq_a, year)) == {
        "and": [{"tenant": "a"}, {"year": {"gte": 2024}}]
    }
    assert li.translate_filters(mf(eq_a, year, condition=FilterCondition.OR)) == {
        "or": [{"tenant": "a"}, {"year": {"gte": 2024}}]
    }
    nin = MetadataFilter(key="tenant", value=["b"], operator=FilterOperator.NIN)
    assert li.translate_filters(mf(nin, mf(eq_a, condition=FilterCondition.NOT))) == {
        "and": [{"not": {"tenant": ["b"]}}, {"not": {"tenant": "a"}}]
    }
    with pytest.raises(FilterError, match=r"'text_match'.*allowed: ==, !=, >, >=, <, <=, in"):
        li.translate_filters(
            mf(MetadataFilter(key="title", value="Ref", operator=FilterOperator.TEXT_MATCH))
        )
    with pytest.raises(FilterError, match="needs a non-empty list"):
        li.translate_filters(mf(MetadataFilter(key="tenant", value="a", operator="in")))


def test_llamaindex_filters_pass_through_and_scope_holds(engine: Engine) -> None:
    b_only = MetadataFilters(filters=[MetadataFilter(key="tenant", value="b")])
    nodes = li.ClewRetriever(engine, filters=b_only).retrieve(QUERY)
    assert [n.node.node_id for n in nodes] == [
        h.chunk_id for h in hits(engine, filter={"tenant": "b"})
    ]
    both = li.ClewRetriever(engine, filter={"year": 2025}, filters=b_only, k=3)
    assert [n.node.metadata["doc_id"] for n in both.retrieve(QUERY)] == ["b-incident"]
    scoped = li.ClewRetriever(engine, scope={"tenant": "a"}, filters=b_only)
    assert scoped.retrieve(QUERY) == []
    widening = MetadataFilters(
        filters=[MetadataFilter(key="tenant", value=["a", "b"], operator=FilterOperator.IN)]
    )
    scoped = li.ClewRetriever(engine, scope={"tenant": "a"}, filter=widening)
    nodes = asyncio.run(scoped.aretrieve(QUERY))
    assert nodes and tenants([n.node.metadata for n in nodes]) == {"a"}


# -- Haystack --------------------------------------------------------------------------------


def _meta(field: str, op: str, value: Any) -> dict[str, Any]:
    return {"field": f"meta.{field}", "operator": op, "value": value}


def test_haystack_filters_translate_to_clew() -> None:
    assert hs.translate_filters(None) is None and hs.translate_filters({}) is None
    assert hs.translate_filters(_meta("tenant", "==", "a")) == {"tenant": "a"}
    assert hs.translate_filters(_meta("tenant", "!=", "a")) == {"not": {"tenant": "a"}}
    assert hs.translate_filters(_meta("tenant", "not in", ["a"])) == {"not": {"tenant": ["a"]}}
    nested = {
        "operator": "OR",
        "conditions": [
            {
                "operator": "AND",
                "conditions": [_meta("tenant", "in", ["a", "b"]), _meta("year", ">", 2023)],
            },
            {"operator": "NOT", "conditions": [_meta("year", "<=", "2024-06-01")]},
        ],
    }
    assert hs.translate_filters(nested) == {
        "or": [
            {"and": [{"tenant": ["a", "b"]}, {"year": {"gt": 2023}}]},
            {"not": {"year": {"lte": "2024-06-01"}}},
        ]
    }
    bad = [
        (_meta("title", "like", "Ref%"), r"operator 'like' is not supported by clew; allowed: =="),
        ({"operator": "XOR", "conditions": [_meta("tenant", "==", "a")]}, "'XOR'.*AND, OR, NOT"),
        ({"field": "content", "operator": "==", "value": "x"}, "document metadata only"),
        ({"tenant": "a"}, "not a Haystack filter"),
        (_meta("tenant", "==", ["a"]), "for membership use 'in'"),
        (_meta("year", ">", "soon"), "not a number or ISO 8601 time"),
    ]
    for spec, message in bad:
        with pytest.raises(FilterError, match=message):
            hs.translate_filters(spec)


def test_haystack_run_returns_clew_hits_with_score_and_provenance(engine: Engine) -> None:
    expected = hits(engine)
    docs = hs.ClewRetriever(engine=engine).run(QUERY)["documents"]
    assert all(isinstance(d, HsDocument) for d in docs)
    assert [d.id for d in docs] == [h.chunk_id for h in expected]
    assert [d.score for d in docs] == [h.score for h in expected]
    assert [d.content for d in docs] == [h.text for h in expected]
    for rank, (doc, hit) in enumerate(zip(docs, expected, strict=True), 1):
        check_provenance(doc.meta, hit, rank)


def test_haystack_filters_policy_top_k_and_scope(engine: Engine) -> None:
    b_only = _meta("tenant", "==", "b")
    retriever = hs.ClewRetriever(engine=engine, filters=b_only)
    docs = retriever.run(QUERY, top_k=2)["documents"]
    assert [d.id for d in docs] == [h.chunk_id for h in hits(engine, k=2, filter={"tenant": "b"})]
    recent = _meta("year", ">=", 2025)
    replaced = retriever.run(QUERY, filters=recent)["documents"]
    assert {d.meta["doc_id"] for d in replaced} == {"a-incident", "b-incident"}
    merging = hs.ClewRetriever(engine=engine, filters=b_only, filter_policy="merge")
    assert [d.meta["doc_id"] for d in merging.run(QUERY, filters=recent)["documents"]] == [
        "b-incident"
    ]
    scoped = hs.ClewRetriever(engine=engine, scope={"tenant": "a"})
    assert scoped.run(QUERY, filters=b_only)["documents"] == []
    widening = {"operator": "OR", "conditions": [b_only, _meta("tenant", "==", "a")]}
    docs = scoped.run(QUERY, filters=widening)["documents"]
    assert docs and tenants([d.meta for d in docs]) == {"a"}
    assert asyncio.run(scoped.run_async(QUERY, filters=b_only)) == {"documents": []}
    with pytest.raises(FilterError, match="'regex'"):
        hs.ClewRetriever(engine=engine, filters=_meta("title", "regex", "R.*"))


@hs_component
class ChunkIds:
    @hs_component.output_types(ids=list[str])
    def run(self, documents: list[HsDocument]) -> dict[str, list[str]]:
        return {"ids": [d.id for d in documents]}


def test_haystack_serializes_without_the_engine_and_runs_in_a_pipeline(
    engine: Engine, index: Path
) -> None:
    scope, b_only = {"tenant": "a"}, _meta("tenant", "==", "b")
    retriever = hs.ClewRetriever(
        str(index), top_k=3, scope=scope, filters=_meta("year", ">=", 2024), config=CONFIG
    )
    data = retriever.to_dict()
    assert data["type"] == "clew.integrations.haystack.ClewRetriever"
    params = data["init_parameters"]
    assert params["index"] == str(index) and params["scope"] == scope and "engine" not in params
    assert json.loads(json.dumps(data)) == data  # plain JSON: no Engine inside
    copy = hs.ClewRetriever.from_dict(data)
    assert copy.to_dict() == data and copy.scope == scope
    # given an engine, the index it opened is what is recorded
    given = hs.ClewRetriever(engine=engine).to_dict()["init_parameters"]
    assert given["index"] == str(index) and given["config"] == CONFIG.to_dict()

    pipe = Pipeline()
    pipe.add_component("retriever", copy)
    pipe.add_component("ids", ChunkIds())
    pipe.connect("retriever.documents", "ids.documents")
    # Haystack deserializes only from modules on its allowlist: clew's must be named
    loaded = Pipeline.loads(
        pipe.dumps(), allowed_modules=["clew.integrations.haystack", ChunkIds.__module__]
    )
    try:
        expected = hits(engine, k=3, filter={"year": {"gte": 2024}}, scope=scope)
        for p in (pipe, loaded):
            out = p.run({"retriever": {"query": QUERY}})
            assert out["ids"]["ids"] == [h.chunk_id for h in expected]
            out = p.run({"retriever": {"query": QUERY, "filters": b_only}})
            assert out["ids"]["ids"] == []
    finally:
        copy.close()
        loaded.get_component("retriever").close()
        retriever.close()


# -- import guards ---------------------------------------------------------------------------


def test_import_clew_imports_no_adapter_and_no_framework() -> None:
    code = (
        "import sys, clew\n"
        "bad = ('clew.integrations', 'langchain', 'llama_index', 'haystack')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in bad or "
        "m.startswith('clew.integrations')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("module", "framework", "extra"),
    [
        ("langchain", "langchain_core", "langchain"),
        ("llamaindex", "llama_index", "llamaindex"),
        ("haystack", "haystack", "haystack"),
    ],
)
def test_a_missing_framework_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, module: str, framework: str, extra: str
) -> None:
    for name in list(sys.modules):
        if name == framework or name.startswith(framework + "."):
            monkeypatch.setitem(sys.modules, name, None)  # an import of it now fails
    monkeypatch.setitem(sys.modules, framework, None)
    monkeypatch.delitem(sys.modules, f"clew.integrations.{module}")
    with pytest.raises(ImportError, match=rf"pip install 'clew\[{extra}\]'"):
        importlib.import_module(f"clew.integrations.{module}")
