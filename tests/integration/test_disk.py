"""A read-only index directory and a full disk: clear errors, and the index left as it was.

Real mechanisms only: SQLite's own page limit (a genuine SQLITE_FULL), a small tmpfs filled to
the last block, a tmpfs remounted read-only, and a directory this process may not write. The
tests run as root here, and root writes through file modes, so the permission case runs its
reader as ``nobody`` (``setpriv``); mounts are skipped where this process may not mount.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from clew import Document, Engine
from clew.backends.embedded.store import DB_NAME
from clew.config import ConceptConfig
from clew.errors import StoreError
from clew.ingest.concepts import ConceptExtractor
from clew.testing.consistency import check_legs, check_store, make_corpus
from clew.testing.fakes import FakeHashEncoder
from clew.testing.ingest_child import open_engine

DIM = 64


def docs_of(rows: list[dict[str, Any]]) -> list[Document]:
    return [Document(r["id"], r["title"], r["text"], r["id"], metadata=r["metadata"]) for r in rows]


def fingerprint(index: Path) -> dict[str, bytes]:
    """Bytes of the database and of every derived file (what 'left as it was' compares)."""
    names = [DB_NAME] + [
        p.name
        for p in index.iterdir()
        if p.name.split("-")[0].split(".")[0] in ("lexical", "vectors", "graph")
    ]
    return {name: (index / name).read_bytes() for name in sorted(names)}


def checkpoint(index: Path, mode: str) -> None:
    conn = sqlite3.connect(index / DB_NAME)
    try:
        busy, _, _ = conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
        assert busy == 0
    finally:
        conn.close()


@contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    path.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory: Path) -> Path:
    """Write zeros until the file system is full; returns the filler file."""
    path = directory / "filler"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for block in (1 << 16, 512):
            try:
                while True:
                    os.write(fd, b"\0" * block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    return path


# -- disk full --------------------------------------------------------------------------------


def test_sqlite_full_is_a_clear_error_and_changes_nothing(tmp_path: Path) -> None:
    index = tmp_path / "idx"
    rows = make_corpus(40, seed=11)
    corpus = {r["id"]: r for r in rows}
    with open_engine(index) as engine:
        engine.ingest(docs_of(rows[:10]))
        before = check_store(index, corpus, DIM)
        conn = engine.store._conn()  # the connection this thread's writes use
        (pages,) = conn.execute("PRAGMA page_count").fetchone()
        conn.execute(f"PRAGMA max_page_count = {pages}")  # the database may not grow: full
        with pytest.raises(StoreError) as info:
            engine.ingest(docs_of(rows[10:]))
        message = str(info.value)
        assert str(index) in message and "disk is full" in message, message
        assert check_store(index, corpus, DIM) == before
        assert engine.stats()["release"] == before.release
        check_legs(engine, rows, before.doc_ids)  # searchable, nothing of the failed batch
        conn.execute("PRAGMA max_page_count = 1073741823")
        engine.ingest(docs_of(rows[10:]))  # the same connection recovers
        after = check_store(index, corpus, DIM)
        assert after.doc_ids == set(corpus) and after.release == before.release + 1
        check_legs(engine, rows, after.doc_ids)


def test_full_file_system_fails_the_store_write_cleanly(tmp_path: Path) -> None:
    rows = make_corpus(60, seed=12)
    corpus = {r["id"]: r for r in rows}
    with tmpfs(tmp_path / "mnt", "2m") as mnt:
        index = mnt / "idx"
        with open_engine(index) as engine:  # a running service: open before the disk fills
            engine.ingest(docs_of(rows[:20]))
            checkpoint(index, "TRUNCATE")  # an empty WAL: the next write must grow it
            before = check_store(index, corpus, DIM)
            files = fingerprint(index)
            filler = fill(mnt)
            with pytest.raises(StoreError) as info:
                engine.ingest(docs_of(rows[20:]))
            message = str(info.value)
            assert str(index) in message and "disk is full" in message, message
            check_legs(engine, rows, before.doc_ids)
            assert engine.stats()["release"] == before.release
            # a new process cannot even open the index on a full disk (SQLite must size its
            # WAL index): a clear error too, and still nothing changes
            try:
                open_engine(index).close()
            except StoreError as exc:
                assert str(index) in str(exc), exc
            assert fingerprint(index) == files
            filler.unlink()
            engine.ingest(docs_of(rows[20:]))
            check_legs(engine, rows, set(corpus))
        assert check_store(index, corpus, DIM).release == before.release + 1


def test_full_file_system_during_a_derived_save_keeps_the_old_files(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rows = make_corpus(400, seed=13)
    corpus = {r["id"]: r for r in rows}
    with tmpfs(tmp_path / "mnt", "6m") as mnt:
        index = mnt / "idx"
        with open_engine(index) as engine:
            engine.ingest(docs_of(rows[:-1]))  # one big transaction: a long WAL
            checkpoint(index, "PASSIVE")  # WAL copied into the database; its space is reused
            derived = {
                p.name: p.read_bytes()
                for p in index.iterdir()
                if p.name.split("-")[0].split(".")[0] in ("lexical", "vectors", "graph")
            }
            filler = fill(mnt)
            with caplog.at_level(logging.WARNING, "clew"):
                # the store commit fits in the reused WAL; the derived files fit nowhere
                report = engine.ingest(docs_of(rows[-1:]))
            assert report.added == (rows[-1]["id"],)
            check_legs(engine, rows, set(corpus))  # served from memory
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any(str(index) in w and "No space left" in w for w in warnings), warnings
        # the old derived files are intact and nothing half-written is left behind
        assert {p.name: p.read_bytes() for p in index.iterdir() if p.name in derived} == derived
        others = {p.name for p in index.iterdir() if p.name not in derived}
        # (calibration.json: the first ingest's measured threshold, written before the fill)
        allowed = {DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm", "write.lock", "calibration.json"}
        assert others <= allowed, others
        state = check_store(index, corpus, DIM)
        assert state.doc_ids == set(corpus)
        filler.unlink()
        with open_engine(index) as engine:  # catches up from the old files
            check_legs(engine, rows, set(corpus))
        for name in ("lexical", "vectors", "graph"):
            assert json.loads((index / f"{name}.json").read_text())["release"] == state.release


# -- read-only --------------------------------------------------------------------------------


def test_explicit_read_only_engine_searches_and_refuses_writes(tmp_path: Path) -> None:
    index = tmp_path / "idx"
    rows = make_corpus(12, seed=14)
    corpus = {r["id"]: r for r in rows}
    with open_engine(index) as engine:
        engine.ingest(docs_of(rows[:8]))
    (index / "graph.json").unlink()  # stale derived files must not be rewritten read-only
    before = check_store(index, corpus, DIM)
    files = fingerprint(index)
    with Engine(
        index,
        read_only=True,
        encoder=FakeHashEncoder(),
        extractor=ConceptExtractor(ConceptConfig(spacy=False)),
    ) as engine:
        assert engine.store.read_only
        check_legs(engine, rows, before.doc_ids)
        assert engine.search(rows[0]["xid"], k=1).trace_id is None  # no trace file either
        for write in (
            lambda: engine.ingest(docs_of(rows[8:])),
            lambda: engine.delete(rows[0]["id"]),
        ):
            with pytest.raises(StoreError) as info:
                write()
            assert str(index) in str(info.value) and "read-only" in str(info.value)
    assert check_store(index, corpus, DIM) == before
    assert fingerprint(index) == files
    assert not (index / "graph.json").exists() and not (index / "traces").exists()
    with pytest.raises(StoreError, match="read-only"):
        Engine(tmp_path / "new", create=True, read_only=True)
    assert not (tmp_path / "new").exists()


def test_read_only_file_system(tmp_path: Path) -> None:
    rows = make_corpus(12, seed=15)
    corpus = {r["id"]: r for r in rows}
    with tmpfs(tmp_path / "mnt", "4m") as mnt:
        index = mnt / "idx"
        with open_engine(index) as engine:
            engine.ingest(docs_of(rows))
        before = check_store(index, corpus, DIM)
        files = fingerprint(index)
        done = subprocess.run(["mount", "-o", "remount,ro", str(mnt)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot remount read-only: {done.stderr!r}")
        with open_engine(index) as engine:
            assert engine.store.read_only
            check_legs(engine, rows, before.doc_ids)
            with pytest.raises(StoreError) as info:
                engine.ingest(docs_of(rows[:1]))
            message = str(info.value)
            assert str(index) in message and "read-only file system" in message, message
        with pytest.raises(StoreError) as created:
            open_engine(mnt / "other")
        assert str(mnt / "other") in str(created.value), created.value
        assert fingerprint(index) == files


_AS_NOBODY = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from clew import Document
    from clew.errors import StoreError
    from clew.testing.consistency import check_legs, make_corpus
    from clew.testing.ingest_child import open_engine

    index = Path(sys.argv[1])
    rows = make_corpus(12, seed=16)
    out = {}
    with open_engine(index) as engine:
        out["read_only"] = engine.store.read_only
        check_legs(engine, rows, {r["id"] for r in rows[:8]})
        try:
            engine.ingest([Document(r["id"], r["title"], r["text"], r["id"]) for r in rows[8:]])
        except StoreError as exc:
            out["ingest"] = str(exc)
        try:
            engine.delete(rows[0]["id"])
        except StoreError as exc:
            out["delete"] = str(exc)
    try:
        open_engine(index / "sub")
    except StoreError as exc:
        out["create"] = str(exc)
    print(json.dumps(out))
    """
)


def test_directory_this_user_cannot_write(tmp_path: Path) -> None:
    rows = make_corpus(12, seed=16)
    corpus = {r["id"]: r for r in rows}
    base = Path(tempfile.mkdtemp(prefix="clew-ro-"))
    try:
        base.chmod(0o755)
        index = base / "idx"
        with open_engine(index) as engine:
            engine.ingest(docs_of(rows[:8]))
        (index / "vectors.json").unlink()  # stale: the reader rebuilds it in memory only
        index.chmod(0o555)
        before = check_store(index, corpus, DIM)
        files = fingerprint(index)
        names = sorted(p.name for p in index.iterdir())
        script = [sys.executable, "-c", _AS_NOBODY, str(index)]
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(base)}
        if os.geteuid() == 0:
            if shutil.which("setpriv") is None:
                pytest.skip("root writes any directory; no setpriv to run as another user")
            nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
            probe = [*nobody, sys.executable, "-c", "import clew.testing.consistency"]
            if subprocess.run(probe, capture_output=True, env=env, timeout=60).returncode:
                pytest.skip("user nobody cannot run this Python (its files are not readable)")
            script = [*nobody, *script]
        done = subprocess.run(script, capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        out = json.loads(done.stdout.strip().splitlines()[-1])
        assert out["read_only"] is True
        for key in ("ingest", "delete"):
            assert str(index) in out[key] and "not writable" in out[key], out[key]
            assert "read-only" in out[key], out[key]
        assert str(index / "sub") in out["create"], out["create"]
        assert "Permission denied" in out["create"] or "not writable" in out["create"]
        assert check_store(index, corpus, DIM) == before
        assert fingerprint(index) == files
        assert sorted(p.name for p in index.iterdir()) == names
    finally:
        for path in (base, *base.rglob("*")):
            if path.is_dir():
                path.chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)
