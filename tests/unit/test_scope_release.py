"""A scoped caller's release is its scope's: the last release that wrote or removed a chunk its
scope lets through. Another tenant's writes and deletes move neither the ``release`` a scoped
response carries nor its ``cached`` flag (the result cache is keyed on the scope's release);
the scope's own writes, deletes and documents moved out of it move both."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from clew.engine import Engine
from clew.testing.fakes import fake_engine
from clew.types import Document

A = {"tenant": "a"}


def _doc(doc_id: str, tenant: str, text: str) -> Document:
    return Document(doc_id, doc_id, text, doc_id, {"tenant": tenant})


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    eng = fake_engine(tmp_path / "idx")
    eng.ingest(
        [
            _doc("a-1", "a", "The ERR-4413 error means the idempotency key is in use."),
            _doc("a-2", "a", "Refunds are settled within five business days."),
            _doc("b-1", "b", "The ERR-4413 error at tenant b means something else entirely."),
        ]
    )
    yield eng
    eng.close()


def _seen(engine: Engine) -> tuple[int, bool, list[str], int]:
    result = engine.search("ERR-4413 idempotency key", k=5, scope=A)
    answer = engine.ask("What does ERR-4413 mean?", scope=A)
    assert answer.release == result.release
    return result.release, result.cached, [h.chunk_id for h in result.hits], engine.release(A)


def test_another_tenants_writes_move_nothing_a_scoped_caller_sees(engine: Engine) -> None:
    release, cached, hits, view = _seen(engine)
    assert release == view == engine.release() == 1 and not cached
    assert _seen(engine)[1]  # the same request again: served from the cache
    engine.ingest([_doc("b-2", "b", "Tenant b's ERR-4413 runbook, version two.")])
    engine.delete("b-1")
    engine.ingest([_doc("b-3", "b", "Another note of tenant b.")])
    assert engine.release() == 4  # the index moved three times
    after = _seen(engine)
    assert after == (release, True, hits, view)  # a sees none of it: still cached, release 1


def test_the_scopes_own_writes_and_deletes_move_its_release(engine: Engine) -> None:
    first = _seen(engine)
    engine.ingest([_doc("b-2", "b", "noise of tenant b")])  # release 2, not a's
    engine.ingest([_doc("a-3", "a", "ERR-4413 also appears in the idempotency guide.")])
    added = _seen(engine)
    assert added[0] == added[3] == 3 and not added[1] and "a-3#0" in " ".join(added[2])
    engine.ingest([_doc("b-3", "b", "more noise")])  # release 4
    engine.delete("a-2")  # release 5: a document a could see is gone
    removed = _seen(engine)
    assert removed[0] == 5 and not removed[1]
    assert first[0] < added[0] < removed[0]


def test_a_document_moved_out_of_the_scope_moves_its_release(engine: Engine) -> None:
    before = _seen(engine)
    # a-2 is rewritten as tenant b's: a's scope lost it, though no chunk of a's was written
    engine.ingest([_doc("a-2", "b", "Refunds are settled within five business days.")])
    after = _seen(engine)
    assert after[0] == engine.release() == 2 and after[0] > before[0] and not after[1]
    assert engine.release({"tenant": "b"}) == 2


def test_an_empty_scope_and_the_unscoped_release(engine: Engine) -> None:
    assert engine.release({"tenant": "nobody"}) == 0
    assert engine.release() == engine.stats()["release"] == 1
    assert engine.search("ERR-4413", scope={"tenant": "nobody"}).release == 0
    # an unscoped caller sees the index's release
    engine.ingest([_doc("b-2", "b", "noise")])
    assert engine.search("ERR-4413").release == 2
    assert engine.release(A) == 1


def test_tombstones_keep_one_row_per_metadata(engine: Engine) -> None:
    for i in range(5):
        engine.ingest([_doc("a-x", "a", f"version {i} of a note")])
    engine.delete("a-x")
    rows = engine.store.removed_rows()
    assert sorted(meta["tenant"] for _, meta in rows) == ["a"]
    assert rows[0][0] == engine.release()


def test_a_release_scope_is_checked(engine: Engine) -> None:
    with pytest.raises(Exception, match="filter"):
        engine.release({"tenant": {"bogus-op": 1}})
