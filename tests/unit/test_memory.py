"""clew.memory: memories as documents (FAKE encoder: fast and deterministic)."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest

from clew import Document, Engine
from clew.errors import QueryError, StoreError
from clew.memory import MAX_MEMORY_CHARS, memory_document, memory_id, said_on

T0 = "2026-03-01T12:00:00Z"
CORPUS = [
    Document(
        "codes",
        "API error codes",
        "ERR-4413 means the idempotency key expired.",
        "codes",
        metadata={"audience": "public", "tenant": "acme"},
    ),
]


def stored(engine: Engine, doc_id: str) -> dict[str, Any]:
    found = engine.store.document(doc_id)
    assert found is not None, doc_id
    return found[0]


def hit_ids(engine: Engine, query: str, **kw: Any) -> list[str]:
    return [h.doc_id for h in engine.search(query, k=10, **kw).hits]


def test_remember_stores_a_memory_document(fake_engine: Engine) -> None:
    text = "Deploy freeze starts Friday (ticket OPS-7781)\nAsk Priya before any hotfix."
    mid = fake_engine.remember(text, session="s-1", timestamp=T0, metadata={"topic": "deploys"})
    assert re.fullmatch(r"mem-[0-9a-f]{16}", mid)
    doc = stored(fake_engine, mid)
    assert doc["title"] == "Deploy freeze starts Friday (ticket OPS-7781)"
    assert doc["source"] == "memory"
    assert doc["text"] == text
    assert doc["metadata"] == {
        "kind": "memory",
        "session": "s-1",
        "created_at": T0,
        "topic": "deploys",
    }
    assert hit_ids(fake_engine, "OPS-7781")[0] == mid
    assert mid in hit_ids(fake_engine, "OPS-7781", filter={"kind": "memory", "session": "s-1"})


def test_same_memory_twice_is_one_document(fake_engine: Engine) -> None:
    first = fake_engine.remember("the VPN needs MFA", session="s", timestamp=T0)
    release = fake_engine.store.release()
    docs = fake_engine.store.counts()["documents"]
    # the same instant written another way gives the same id
    again = fake_engine.remember(
        "the VPN needs MFA", session="s", timestamp="2026-03-01T13:00:00+01:00"
    )
    assert again == first
    assert fake_engine.store.counts()["documents"] == docs
    assert fake_engine.store.release() == release
    as_datetime = memory_document(
        "the VPN needs MFA", session="s", timestamp=dt.datetime(2026, 3, 1, 12, 0)
    )
    assert as_datetime.doc_id == first
    # any of session, time or text changes the id
    assert memory_document("the VPN needs MFA", session="t", timestamp=T0).doc_id != first
    assert memory_document("the VPN needs MFA", timestamp=T0).doc_id != first
    later = memory_document("the VPN needs MFA", session="s", timestamp="2026-03-01T12:00:01Z")
    assert later.doc_id != first
    assert memory_document("the VPN needs mfa", session="s", timestamp=T0).doc_id != first


def test_default_time_is_now_in_utc() -> None:
    before = dt.datetime.now(dt.UTC)
    doc = memory_document("something")
    created = doc.metadata["created_at"]
    assert created.endswith("Z") and "+" not in created
    parsed = dt.datetime.fromisoformat(created.replace("Z", "+00:00"))
    assert before <= parsed <= dt.datetime.now(dt.UTC)
    assert doc.metadata["session"] is None


def test_title_is_the_first_line_cut_to_80_chars() -> None:
    doc = memory_document("\n\n  " + "x" * 200 + "\nsecond line", timestamp=T0)
    assert doc.title == "x" * 80


def test_stamp_wins_over_user_metadata(fake_engine: Engine) -> None:
    fake_engine.ingest(CORPUS)
    mid = fake_engine.remember(
        "acme wants weekly settlement reports",
        timestamp=T0,
        metadata={"tenant": "globex", "audience": "internal", "priority": 2},
        stamp={"tenant": "acme", "audience": "public"},
    )
    meta = stored(fake_engine, mid)["metadata"]
    assert meta["tenant"] == "acme" and meta["audience"] == "public" and meta["priority"] == 2
    assert mid in hit_ids(fake_engine, "weekly settlement reports", scope={"tenant": "acme"})
    assert mid not in hit_ids(fake_engine, "weekly settlement reports", filter={"tenant": "globex"})


def test_forget_removes_it_from_search(fake_engine: Engine) -> None:
    fake_engine.ingest(CORPUS)
    mid = fake_engine.remember("the canary region is eu-west-3 (OPS-9001)", timestamp=T0)
    assert mid in hit_ids(fake_engine, "OPS-9001")
    release = fake_engine.store.release()
    assert fake_engine.forget(mid) == fake_engine.store.release() > release
    assert mid not in hit_ids(fake_engine, "OPS-9001")
    assert fake_engine.store.document(mid) is None
    with pytest.raises(StoreError, match=re.escape(repr(mid))):
        fake_engine.forget(mid)
    with pytest.raises(StoreError, match="mem-0000"):
        fake_engine.forget("mem-0000")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"text": ""}, "empty"),
        ({"text": " \n\t "}, "empty"),
        ({"text": 42}, "must be a string"),
        ({"text": None}, "must be a string"),
        ({"text": "x" * (MAX_MEMORY_CHARS + 1)}, f"at most {MAX_MEMORY_CHARS}"),
        ({"session": ""}, "session=''"),
        ({"session": 7}, "session=7"),
        ({"timestamp": "yesterday"}, "'yesterday' is not an ISO 8601 time"),
        ({"timestamp": 1700000000}, "timestamp=1700000000"),
        ({"metadata": ["a"]}, "metadata must be an object"),
        ({"metadata": {"kind": "note"}}, "'kind' is reserved"),
        ({"metadata": {"session": "x"}}, "'session' is reserved"),
        ({"metadata": {"created_at": T0}}, "'created_at' is reserved"),
        ({"metadata": {"tags": {"a", "b"}}}, "metadata.tags="),
        ({"metadata": {"score": float("nan")}}, "finite numbers"),
        ({"metadata": {"deep": {"x": [1, object()]}}}, r"metadata.deep.x\[1\]"),
        ({"metadata": {"": 1}}, "key '' is invalid"),
        ({"stamp": "tenant=acme"}, "stamp must be an object"),
    ],
)
def test_invalid_arguments_name_the_value(
    fake_engine: Engine, kwargs: dict[str, Any], message: str
) -> None:
    args: dict[str, Any] = {"text": "a valid memory", "timestamp": T0, **kwargs}
    text = args.pop("text")
    with pytest.raises(QueryError, match=message):
        fake_engine.remember(text, **args)
    assert fake_engine.store.counts()["documents"] == 0


def test_forget_needs_an_id(fake_engine: Engine) -> None:
    with pytest.raises(QueryError, match="non-empty string"):
        memory_id("  ")


def test_the_day_a_memory_was_said_is_read_from_its_own_metadata_only() -> None:
    doc = memory_document("switched teams", timestamp="2026-04-20T23:30:00-02:00")
    assert said_on(doc.metadata) == "2026-04-21"  # UTC
    assert said_on({"created_at": "2026-04-20T09:00:00Z"}) is None  # a document, not a memory
    assert said_on({"kind": "memory", "created_at": 1776700000}) is None
    assert said_on({"kind": "memory"}) is None
