"""Derived index files and the store are checked, never trusted blindly.

Each reproduction damages a real small index (FAKE hash encoder, identifier-only concepts) the way
it happens in the field: a manifest field edited in valid JSON, graph names shuffled, a bit flipped
in a data file, another index's ``clew.sqlite`` copied in at the same release, a write-ahead log
truncated or deleted, a page of garbage in the database. After a reopen the results must be
identical to a fresh build of what the store holds (and one WARNING names the file and the
reason), or the open must fail with a clear :class:`StoreError`.

Every damage test first shows, with the checks switched off (:func:`checks_off`), that the damage
changes what a search returns: so each test fails when the check it covers is missing.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clew import Document
from clew.backends.embedded import files
from clew.backends.embedded.graph import load_graph
from clew.backends.embedded.lexical import BM25Index
from clew.backends.embedded.store import DB_NAME, SQLiteStore
from clew.backends.embedded.vector import VectorIndex
from clew.cli import main
from clew.config import DenseConfig
from clew.errors import StoreError
from clew.testing.consistency import make_corpus
from clew.testing.ingest_child import open_engine

CORPUS = make_corpus(40, seed=3)
OTHER = make_corpus(40, group=1, seed=4)
LEGS = ("lexical", "dense", "graph", "hybrid")
MANIFESTS = ("lexical.json", "vectors.json", "graph.json")


def docs_of(rows: list[dict[str, Any]]) -> list[Document]:
    return [Document(r["id"], r["title"], r["text"], r["id"], metadata=r["metadata"]) for r in rows]


def build(index: Path, *batches: list[dict[str, Any]]) -> Path:
    """An index with one release per batch, closed and checkpointed (no ``-wal`` left)."""
    with open_engine(index) as engine:
        for rows in batches:
            engine.ingest(docs_of(rows))
    checkpoint(index)
    return index


def checkpoint(index: Path) -> None:
    conn = sqlite3.connect(index / DB_NAME)
    try:
        assert conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
    finally:
        conn.close()


def results(index: Path, rows: list[dict[str, Any]] = CORPUS) -> dict[str, Any]:
    """Release, counts and the hits of every leg for a few handles: chunk id, fused score and
    each contribution's leg, rank and raw score."""
    out: dict[str, Any] = {}
    with open_engine(index) as engine:
        stats = engine.stats()
        out["stats"] = {k: stats[k] for k in ("release", "documents", "chunks", "concepts")}
        for leg in LEGS:
            for row in rows[:8]:
                query = {
                    "lexical": f"{row['word']} record",
                    "dense": row["text"],
                    "graph": row["xid"],
                    "hybrid": f"{row['word']} {row['xid']}",
                }[leg]
                hits = engine.search(query, k=5, preset=leg).hits
                out[f"{leg}:{row['id']}"] = [
                    (
                        h.chunk_id,
                        round(h.score, 6),
                        [(c.leg, c.rank, round(c.raw_score, 4)) for c in h.contributions],
                    )
                    for h in hits
                ]
    return out


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Fresh builds (each in two releases) of CORPUS and OTHER, and their results."""
    root = tmp_path_factory.mktemp("fresh")
    a = build(root / "a", CORPUS[:20], CORPUS[20:])
    b = build(root / "b", OTHER[:20], OTHER[20:])
    return {"a": a, "b": b, "a_results": results(a), "b_results": results(b, CORPUS + OTHER)}


def copy_index(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("traces"))
    return dst


@contextmanager
def checks_off() -> Iterator[None]:
    """Load derived files the way clew did before the checks: sizes only, no checksum, no origin."""
    with pytest.MonkeyPatch.context() as mp:

        def sealed(path: Path) -> tuple[dict[str, Any] | None, str | None]:
            try:
                meta = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return None, None
            return (meta, None) if isinstance(meta, dict) else (None, None)

        def recorded_digest(path: Path) -> str:
            manifest = json.loads((path.parent / (path.name.split("-")[0] + ".json")).read_text())
            return str(manifest["files"][path.name][files.DIGEST])

        # raising=False: on a clew without the checks this is a no-op, and the tests still run
        mp.setattr(files, "_sealed", sealed, raising=False)
        mp.setattr(files, "file_digest", recorded_digest, raising=False)
        mp.setattr(files, "_origin_mismatch", lambda meta, source: None, raising=False)
        yield


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "clew.backends.embedded.files" and r.levelno == logging.WARNING
    ]


def assert_clean_reopen(index: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The rebuilt files were saved and verify: a second open warns about nothing."""
    caplog.clear()
    with open_engine(index) as engine:
        engine.stats()
        store = engine.store
        assert isinstance(store, SQLiteStore)
        assert BM25Index.load(index, source=store) is not None
        assert VectorIndex.load(index, DenseConfig(), source=store) is not None
        assert load_graph(index, store) is not None
    assert warnings_of(caplog) == []


# -- damaged derived files ------------------------------------------------------------------


def edit_manifest(name: str, change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def damage(index: Path) -> None:
        path = index / name
        meta = json.loads(path.read_text(encoding="utf-8"))
        change(meta)
        path.write_text(json.dumps(meta), encoding="utf-8")

    return damage


def set_n_docs(meta: dict[str, Any]) -> None:
    meta["n_docs"] = 1


def shuffle_keys(meta: dict[str, Any]) -> None:
    keys = list(meta["keys"])
    random.Random(0).shuffle(keys)
    assert keys != meta["keys"]
    meta["keys"] = keys


def flip_vector_bit(index: Path) -> None:
    """One bit of the exponent of the largest component of the first chunk's vector."""
    (path,) = index.glob("vectors-*.npy")
    matrix = np.load(path)
    j = int(np.argmax(np.abs(matrix[1])))  # row 1: ordinal 1, the first chunk
    data = bytearray(path.read_bytes())
    start = len(data) - matrix.nbytes
    data[start + (matrix.shape[1] + j) * 4 + 3] ^= 0x40  # little-endian: the high byte
    path.write_bytes(bytes(data))


def swap_terms(index: Path) -> None:
    """Two vocabulary lines swapped: same size, every term id of the two now wrong."""
    (path,) = index.glob("lexical-*.terms")
    lines = path.read_text(encoding="utf-8").split("\n")
    target = {CORPUS[0]["word"], CORPUS[1]["word"]}
    i, j = (n for n, t in enumerate(lines) if t in target)
    lines[i], lines[j] = lines[j], lines[i]
    path.write_text("\n".join(lines), encoding="utf-8")


@pytest.mark.parametrize(
    ("damage", "named", "reason"),
    [
        pytest.param(
            edit_manifest("lexical.json", set_n_docs),
            "lexical.json",
            "does not match its checksum",
            id="lexical-manifest-n_docs-1",
        ),
        pytest.param(
            edit_manifest("graph.json", shuffle_keys),
            "graph.json",
            "does not match its checksum",
            id="graph-manifest-keys-shuffled",
        ),
        pytest.param(flip_vector_bit, ".npy", "sha256 checksum", id="vectors-bit-flip"),
        pytest.param(swap_terms, ".terms", "sha256 checksum", id="lexical-terms-swapped"),
    ],
)
def test_damaged_derived_file_is_discarded_and_rebuilt(
    tmp_path: Path,
    fresh: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
    damage: Callable[[Path], None],
    named: str,
    reason: str,
) -> None:
    control = copy_index(fresh["a"], tmp_path / "control")
    damage(control)
    with checks_off():
        assert results(control) != fresh["a_results"], "the damage changes nothing: no test"

    index = copy_index(fresh["a"], tmp_path / "idx")
    damage(index)
    caplog.set_level(logging.WARNING)
    assert results(index) == fresh["a_results"]
    (warning,) = warnings_of(caplog)
    assert named in warning and reason in warning and str(index) in warning, warning
    assert_clean_reopen(index, caplog)


def test_store_of_another_index_at_the_same_release(
    tmp_path: Path, fresh: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Another index's ``clew.sqlite`` copied in: derived files of this one must not be used."""

    def swap_store(index: Path) -> None:
        shutil.copy(fresh["b"] / DB_NAME, index / DB_NAME)

    assert fresh["a_results"]["stats"]["release"] == fresh["b_results"]["stats"]["release"] == 2
    control = copy_index(fresh["a"], tmp_path / "control")
    swap_store(control)
    with checks_off():
        assert results(control, CORPUS + OTHER) != fresh["b_results"]

    index = copy_index(fresh["a"], tmp_path / "idx")
    swap_store(index)
    caplog.set_level(logging.WARNING)
    assert results(index, CORPUS + OTHER) == fresh["b_results"]
    found = warnings_of(caplog)
    assert len(found) == 3, found
    for name, warning in zip(sorted(MANIFESTS), sorted(found), strict=True):
        assert name in warning and "built from another store" in warning, warning
    assert_clean_reopen(index, caplog)


def test_store_of_a_diverged_copy_at_the_same_release(
    tmp_path: Path, fresh: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A copy of the directory (same store id) that then committed other documents as the same
    release number: the commit time of that release tells the two apart."""
    index = copy_index(fresh["a"], tmp_path / "idx")
    clone = copy_index(fresh["a"], tmp_path / "clone")
    build(index, OTHER[:5])
    build(clone, OTHER[5:10])
    expected = results(clone, CORPUS + OTHER)
    assert expected["stats"]["release"] == 3
    control = copy_index(index, tmp_path / "control")
    shutil.copy(clone / DB_NAME, control / DB_NAME)
    with checks_off():
        assert results(control, CORPUS + OTHER) != expected

    shutil.copy(clone / DB_NAME, index / DB_NAME)
    caplog.set_level(logging.WARNING)
    assert results(index, CORPUS + OTHER) == expected
    found = warnings_of(caplog)
    assert len(found) == 3, found
    assert all("reflects release 3" in w and "the store's is release 3" in w for w in found), found
    assert_clean_reopen(index, caplog)


def test_store_made_before_ids_is_migrated_and_old_manifests_rebuilt(
    tmp_path: Path, fresh: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A store without ``store_id`` and manifests without checksums (an older clew): the first
    writer gives the store an id; the unverifiable files are rebuilt, with a warning each."""
    index = copy_index(fresh["a"], tmp_path / "idx")
    conn = sqlite3.connect(index / DB_NAME)
    with conn:
        conn.execute("DELETE FROM meta WHERE key = 'store_id'")
    conn.close()
    for name in MANIFESTS:
        meta = json.loads((index / name).read_text(encoding="utf-8"))
        meta = {k: v for k, v in meta.items() if k not in ("digest", "origin")}
        meta["files"] = {f: entry["size"] for f, entry in meta["files"].items()}
        (index / name).write_text(json.dumps(meta), encoding="utf-8")
    read_only = SQLiteStore(index, read_only=True)
    assert read_only.store_id is None  # a reader writes nothing, not even an id
    read_only.close()

    caplog.set_level(logging.WARNING)
    assert results(index) == fresh["a_results"]
    found = warnings_of(caplog)
    assert len(found) == 3 and all("no checksum" in w for w in found), found
    store = SQLiteStore(index)
    assert store.store_id is not None and len(store.store_id) == 32
    store.close()
    assert_clean_reopen(index, caplog)


# -- a store that lost committed releases -----------------------------------------------------


@pytest.mark.parametrize("checkpointed", [False, True], ids=["fresh-wal", "checkpointed-r1"])
@pytest.mark.parametrize("how", ["delete", "header-only", "half"])
def test_truncated_or_deleted_wal_is_refused(
    tmp_path: Path, fresh: dict[str, Any], checkpointed: bool, how: str
) -> None:
    """The files as a crash left them (the writer never checkpointed release 2), then the WAL
    truncated or lost: the store falls back to release 0 or 1 while the derived files (fsynced
    after each commit) reflect release 2. Opening is an error, never the older release."""
    live = tmp_path / "live"
    crashed = tmp_path / "crashed"
    engine = open_engine(live)
    try:
        engine.ingest(docs_of(CORPUS[:20]))
        if checkpointed:
            checkpoint(live)  # release 1 is in clew.sqlite itself, release 2 only in the WAL
        engine.ingest(docs_of(CORPUS[20:]))
        assert engine.store.release() == 2
        crashed.mkdir()
        for path in live.iterdir():
            if path.is_file() and path.name != f"{DB_NAME}-shm":
                shutil.copy(path, crashed / path.name)
    finally:
        engine.close()
    wal = crashed / f"{DB_NAME}-wal"
    assert wal.stat().st_size > 0
    if how == "delete":
        wal.unlink()
    elif how == "header-only":
        wal.write_bytes(wal.read_bytes()[:32])
    else:
        wal.write_bytes(wal.read_bytes()[: wal.stat().st_size // 2])

    # control: the store itself really lost release 2, and raw SQLite says nothing
    probe = copy_index(crashed, tmp_path / "probe")
    conn = sqlite3.connect(probe / DB_NAME)
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'release'").fetchone()
    except sqlite3.OperationalError:  # not even the tables survived
        row = None
    finally:
        conn.close()
    survived = int(row[0]) if row else 0
    assert survived < 2

    for _ in range(2):  # refused every time, not only the first
        with pytest.raises(StoreError, match="lost committed releases") as info:
            open_engine(crashed)
        message = str(info.value)
        assert "reflects release 2" in message and f"{DB_NAME}-wal" in message
        assert all(name in message for name in MANIFESTS), message
        assert "\n" not in message
        with pytest.raises(StoreError, match="lost committed releases"):
            SQLiteStore(crashed, read_only=True)

    # what the message offers: delete the manifests to accept the older release
    for name in MANIFESTS:
        (crashed / name).unlink()
    if survived == 1:
        assert results(crashed) == results(build(tmp_path / "r1", CORPUS[:20]))
    else:
        assert results(crashed)["stats"] == {
            "release": 0,
            "documents": 0,
            "chunks": 0,
            "concepts": 0,
        }


def test_concurrent_release_is_not_a_loss(tmp_path: Path, fresh: dict[str, Any]) -> None:
    """Manifests newer than the store a reader already pinned are a race, not a loss: no
    warning (a reader pinned at release 2 while a writer saved release 3)."""
    index = copy_index(fresh["a"], tmp_path / "idx")
    with open_engine(index) as reader:
        store = reader.store
        assert isinstance(store, SQLiteStore)
        with store.reading():
            assert store.release() == 2
            with open_engine(index) as writer:  # commits release 3 and saves its files
                writer.ingest(docs_of(OTHER[:3]))
            assert BM25Index.load(index, source=store) is None  # not for this snapshot
        assert BM25Index.load(index, source=store) is not None
    with open_engine(index) as engine:
        assert engine.stats()["release"] == 3


# -- a damaged database file ------------------------------------------------------------------


def garbage_page(db: Path, page: int | str) -> int:
    """Overwrite one 4096-byte page with random bytes; ``"chunks"``: the chunks table's root."""
    if page == "chunks":
        conn = sqlite3.connect(db)
        try:
            page = int(
                conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'chunks'").fetchone()[
                    0
                ]
            )
        finally:
            conn.close()
    assert isinstance(page, int)
    offset = (page - 1) * 4096
    with open(db, "r+b") as f:
        f.seek(offset)
        f.write(random.Random(page).randbytes(4096))
    return offset


@pytest.mark.parametrize("page", [2, "chunks"], ids=["offset-4096", "chunks-root"])
def test_garbage_page_is_a_store_error_naming_the_file(
    tmp_path: Path, fresh: dict[str, Any], page: int | str
) -> None:
    index = copy_index(fresh["a"], tmp_path / "idx")
    garbage_page(index / DB_NAME, page)
    with pytest.raises(StoreError) as info, open_engine(index) as engine:
        for leg in LEGS:
            engine.search(CORPUS[0]["word"], k=5, preset=leg)
        engine.stats()
        engine.document(CORPUS[0]["id"])
    message = str(info.value)
    assert "is corrupt" in message and str(index / DB_NAME) in message and "\n" not in message
    assert isinstance(info.value.__cause__, sqlite3.DatabaseError)


@pytest.mark.parametrize("command", ["search", "stats"])
def test_cli_reports_a_garbage_page_in_one_line(
    tmp_path: Path,
    sample_index: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    index = copy_index(sample_index, tmp_path / "idx")
    if (index / f"{DB_NAME}-wal").exists():
        checkpoint(index)
    garbage_page(index / DB_NAME, 2)  # 4096 bytes at offset 4096
    argv = ["search", "pgbouncer migration", "--index", str(index)]
    code = main(argv if command == "search" else ["stats", "--index", str(index)])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("clew: error: "), err
    assert "corrupt" in err and str(index / DB_NAME) in err and "Traceback" not in err
