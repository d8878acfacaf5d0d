"""Two writers on one index: serialized by the write lock or rejected with a clear error.

Processes and threads both; readers never take the lock and keep answering during writes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from clew import Document
from clew.errors import StoreError
from clew.ingest.analyze import analyze
from clew.testing.consistency import check_legs, check_store, make_corpus, write_corpus
from clew.testing.ingest_child import open_engine

DIM = 64


def docs_of(rows: list[dict[str, Any]]) -> list[Document]:
    return [Document(r["id"], r["title"], r["text"], r["id"], metadata=r["metadata"]) for r in rows]


def spawn(index: Path, corpus: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "clew.testing.ingest_child", str(index), str(corpus), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def communicate(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def wait_line(proc: subprocess.Popen[str], prefix: str, timeout: float = 30) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"child exited: {proc.wait()} {proc.stderr.read()[-2000:]}")  # type: ignore[union-attr]
        if line.startswith(prefix):
            return
    raise AssertionError(f"no {prefix!r} within {timeout}s")


def test_two_processes_ingesting_at_once_both_land_exactly_once(tmp_path: Path) -> None:
    index = tmp_path / "idx"
    a, b = make_corpus(150, group=0, seed=3), make_corpus(150, group=1, seed=3)
    pa = write_corpus(tmp_path / "a.jsonl", a)
    pb = write_corpus(tmp_path / "b.jsonl", b)
    procs = [spawn(index, p, "--group", "6", "--wait", "120") for p in (pa, pb)]
    # generous: two processes interleave 25 ingests each, and a loaded CI box is slow
    results = [communicate(p, timeout=300) for p in procs]
    for code, out, err in results:
        assert code == 0, (out, err[-3000:])
        assert out.splitlines()[-1].startswith("done"), out
    corpus = {r["id"]: r for r in a + b}
    state = check_store(index, corpus, DIM)
    assert state.doc_ids == set(corpus)
    assert state.counts["concepts"] == len(corpus)
    with open_engine(index) as engine:
        check_legs(engine, a + b, state.doc_ids)


def test_second_writer_process_gets_a_clear_error_and_writes_nothing(tmp_path: Path) -> None:
    index = tmp_path / "idx"
    rows = make_corpus(20, group=0, seed=4)
    other = make_corpus(5, group=1, seed=4)
    holder = spawn(
        index, write_corpus(tmp_path / "a.jsonl", rows), "--group", "10", "--hold-at", "commit"
    )
    try:
        wait_line(holder, "holding commit")  # inside ingest: holds the write lock
        with open_engine(index, write_timeout=0.3) as engine:
            before = check_store(index, {r["id"]: r for r in rows + other}, DIM)
            # readers never take the lock: search answers while the other process writes
            assert engine.search(rows[0]["xid"], k=3).hits[0].doc_id == rows[0]["id"]
            started = time.monotonic()
            with pytest.raises(StoreError) as info:
                engine.ingest(docs_of(other))
            assert time.monotonic() - started < 5
            message = str(info.value)
            assert str(index) in message
            assert f"pid {holder.pid}" in message and "try again" in message, message
            with pytest.raises(StoreError, match="being written by another process"):
                engine.delete(rows[0]["id"])
            after = check_store(index, {r["id"]: r for r in rows + other}, DIM)
            assert after == before
            holder.send_signal(signal.SIGKILL)
            holder.wait(timeout=10)
            # the kernel released the dead holder's lock: the next write goes through
            engine.ingest(docs_of(other))
            state = check_store(index, {r["id"]: r for r in rows + other}, DIM)
            assert {r["id"] for r in other} <= state.doc_ids
            check_legs(engine, other, state.doc_ids)
    finally:
        if holder.poll() is None:
            holder.kill()
        communicate(holder)


def test_two_threads_ingesting_while_readers_search(tmp_path: Path) -> None:
    index = tmp_path / "idx"
    groups = [make_corpus(60, group=g, seed=5) for g in range(2)]
    seed_rows = make_corpus(5, group=2, seed=5)
    errors: list[BaseException] = []
    releases: dict[int, list[int]] = {}
    stop = threading.Event()
    with open_engine(index, write_timeout=30) as engine:
        engine.ingest(docs_of(seed_rows))

        def write(rows: list[dict[str, Any]]) -> None:
            try:
                docs = docs_of(rows)
                for i in range(0, len(docs), 4):
                    engine.ingest(docs[i : i + 4])
            except BaseException as exc:  # reported below
                errors.append(exc)

        def read(n: int) -> None:
            seen = releases.setdefault(n, [])
            try:
                while not stop.is_set():
                    result = engine.search(seed_rows[n]["xid"], k=3)
                    assert result.hits[0].doc_id == seed_rows[n]["id"]
                    seen.append(result.release)
            except BaseException as exc:
                errors.append(exc)

        writers = [threading.Thread(target=write, args=(rows,)) for rows in groups]
        readers = [threading.Thread(target=read, args=(n,)) for n in range(2)]
        for t in readers + writers:
            t.start()
        for t in writers:
            t.join(timeout=120)
        stop.set()
        for t in readers:
            t.join(timeout=30)
        assert not errors, errors
        for seen in releases.values():
            assert seen and seen == sorted(seen), "a reader saw the release go backwards"
        all_rows = seed_rows + groups[0] + groups[1]
        state = check_store(index, {r["id"]: r for r in all_rows}, DIM)
        assert state.doc_ids == {r["id"] for r in all_rows}
        assert state.release == 1 + 2 * 15  # every ingest call one release, none lost
        check_legs(engine, all_rows, state.doc_ids)


def test_second_writer_thread_or_engine_is_rejected_after_the_wait(tmp_path: Path) -> None:
    index = tmp_path / "idx"
    rows = make_corpus(6, group=0, seed=6)
    entered, release = threading.Event(), threading.Event()
    with (
        open_engine(index, write_timeout=0.2) as engine,
        open_engine(index, write_timeout=0.2) as other,
    ):
        engine.ingest(docs_of(rows[:2]))
        write = engine.store.write

        def slow_write(records: Any) -> int:
            entered.set()
            release.wait(10)
            return write(records)

        engine.store.write = slow_write  # type: ignore[method-assign]
        worker = threading.Thread(target=engine.ingest, args=(docs_of(rows[2:4]),))
        worker.start()
        try:
            assert entered.wait(10)
            # another thread of the same engine, and another engine of the same process
            with pytest.raises(StoreError, match=r"being written by another thread") as info:
                engine.ingest(docs_of(rows[4:]))
            assert str(index) in str(info.value)
            with pytest.raises(
                StoreError, match=rf"another thread of this process \(pid {os.getpid()}\)"
            ):
                other.delete(rows[0]["id"])
            assert engine.search(rows[0]["xid"], k=1).hits[0].doc_id == rows[0]["id"]
        finally:
            release.set()
            worker.join(timeout=30)
        engine.ingest(docs_of(rows[4:]))
        other.refresh()
        state = check_store(index, {r["id"]: r for r in rows}, DIM)
        assert state.doc_ids == {r["id"] for r in rows}
        check_legs(other, rows, state.doc_ids)


@pytest.mark.parametrize("when", ["max_ordinal", "live_ordinals", "iter_tokens", "graph_rows"])
def test_refresh_racing_a_commit_reads_one_release(tmp_path: Path, when: str) -> None:
    """A reader's catch-up reads the store in one transaction: a writer that commits in the
    middle of it (another engine, another connection) is seen entirely or not at all, and the
    snapshot is labelled with the release it holds."""
    index = tmp_path / "idx"
    rows = make_corpus(12, group=0, seed=7)
    with open_engine(index) as writer, open_engine(index) as reader:
        writer.ingest(docs_of(rows[:6]))
        reader.refresh()
        writer.delete(rows[1]["id"])  # a release the reader must catch up with
        store = reader.store
        original = getattr(store, when)
        fired = []

        def racing(*args: Any, **kwargs: Any) -> Any:
            if not fired:
                fired.append(writer.ingest(docs_of(rows[6:])).release)  # commits mid-refresh
            return original(*args, **kwargs)

        setattr(store, when, racing)
        try:
            reader.refresh()
        finally:
            setattr(store, when, original)
        assert fired
        snap = reader._releases.latest
        assert snap is not None
        # the snapshot holds exactly the documents of the release it is labelled with
        want = {r["id"] for r in rows[:6]} - {rows[1]["id"]}
        if snap.release == fired[0]:
            want |= {r["id"] for r in rows[6:]}
        else:
            assert snap.release == fired[0] - 1, (snap.release, fired)
        found = set()
        for r in rows:
            hits = snap.lexical_index.search(analyze(r["word"]), snap.live, 3)
            if hits:
                found.add(snap.store.fetch([hits[0].ordinal])[hits[0].ordinal].doc_id)
            graph_hits = snap.graph_index.search(r["xid"], snap.live, 3)
            assert bool(graph_hits) == (r["id"] in want), r["id"]
        assert found == want, (snap.release, fired, sorted(found ^ want))
        reader.refresh()
        state = check_store(index, {r["id"]: r for r in rows}, DIM)
        assert reader.stats()["release"] == state.release == fired[0]
        check_legs(reader, rows, state.doc_ids)
