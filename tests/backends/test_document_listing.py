"""``Engine.documents`` on every backend: what a caller's scope lets it list, and paging."""

from __future__ import annotations

from typing import Any

import pytest

from clew.errors import QueryError
from clew.types import Document, DocumentSummary

# ``backend`` (tests/backends/conftest.py): fresh engines on each backend in turn


def _corpus() -> list[Document]:
    docs = [
        Document(
            f"{tenant}-{i}",
            f"{tenant} runbook {i}",
            f"Runbook {i} of tenant {tenant}: ERR-40{i}2 retries.\n\nA second paragraph "
            + "about retries. " * (200 * i),
            f"{tenant}/{i}.md",
            {"tenant": tenant},
        )
        for tenant in ("a", "b")
        for i in (1, 2)
    ]
    docs.append(
        Document("pub", "Public FAQ", "Refunds settle nightly.", "faq.md", {"audience": "public"})
    )
    return docs


def test_documents_lists_what_the_scope_lets_through(backend: Any) -> None:
    engine = backend()
    release = engine.ingest(_corpus()).release
    everything = engine.documents()
    assert [d.doc_id for d in everything] == ["a-1", "a-2", "b-1", "b-2", "pub"]
    first = everything[0]
    assert isinstance(first, DocumentSummary)
    assert (first.title, first.source, first.metadata) == ("a runbook 1", "a/1.md", {"tenant": "a"})
    assert first.release == release
    stored = engine.document("a-2")
    assert stored is not None and everything[1].chunks == len(stored.chunks) > 1
    assert first.to_dict() == {
        "id": "a-1",
        "title": "a runbook 1",
        "source": "a/1.md",
        "chunks": first.chunks,
        "release": release,
        "metadata": {"tenant": "a"},
    }

    def ids(scope: Any, **kw: Any) -> list[str]:
        return [d.doc_id for d in engine.documents(scope=scope, **kw)]

    assert ids({"tenant": "a"}) == ["a-1", "a-2"]
    assert ids({"audience": "public"}) == ["pub"]
    assert ids({"tenant": "zz"}) == [], "a scope that matches nothing lists nothing"
    # paging: a scoped caller pages over its own documents only; an id outside the scope as
    # `after` tells it nothing (the same as an id that does not exist)
    assert ids({"tenant": "b"}, limit=1) == ["b-1"]
    assert ids({"tenant": "b"}, after="b-1") == ["b-2"]
    assert ids({"tenant": "a"}, after="a-2") == ids({"tenant": "a"}, after="a-2x") == []
    engine.delete(["a-1"])
    assert ids({"tenant": "a"}) == ["a-2"], "a deleted document is not listed"


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"limit": 0}, "limit=0 is invalid; allowed: 1..100000"),
        ({"limit": True}, "limit=True is invalid"),
        ({"after": 3}, "after=3 is invalid; allowed: a document id"),
    ],
)
def test_documents_bad_arguments_name_the_value(
    backend: Any, kw: dict[str, Any], message: str
) -> None:
    engine = backend()
    with pytest.raises(QueryError, match=message.replace("(", r"\(").replace(")", r"\)")):
        engine.documents(**kw)
