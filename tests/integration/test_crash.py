"""Crash consistency: an ingest process killed with SIGKILL at random points, and torn files.

The child (``python -m clew.testing.ingest_child``) uses the FAKE hash encoder, so it starts in
about a second and ingests a few hundred small documents in groups, each group one store commit
followed by a refresh that saves the derived index files. After every kill the index must
reopen consistent: every committed document searchable in every leg, nothing half-written, the
derived files valid or rebuilt; a final run completes and a rerun changes nothing.
"""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from clew import Document
from clew.backends.embedded.files import read_manifest
from clew.backends.embedded.graph import load_graph
from clew.backends.embedded.lexical import BM25Index
from clew.backends.embedded.vector import VectorIndex
from clew.testing.consistency import check_legs, check_store, make_corpus, write_corpus
from clew.testing.ingest_child import open_engine

DIM = 64  # FakeHashEncoder's default
N_DOCS = 400
GROUP = 8
SEED = 20240611
KILLS = 8


def spawn(index: Path, corpus: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "clew.testing.ingest_child", str(index), str(corpus), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def read_line(proc: subprocess.Popen[str], timeout: float = 30.0) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        proc.kill()
        raise AssertionError(f"child said nothing for {timeout}s")
    line = proc.stdout.readline()
    if not line:
        err = proc.stderr.read() if proc.stderr else ""
        raise AssertionError(f"child exited ({proc.wait()}) early: {err[-2000:]}")
    return line.strip()


def wait_for(proc: subprocess.Popen[str], prefix: str) -> list[str]:
    lines = []
    while True:
        line = read_line(proc)
        lines.append(line)
        if line.startswith(prefix):
            return lines


def kill(proc: subprocess.Popen[str]) -> bool:
    """SIGKILL the child; True if it was still running (False: it had already finished)."""
    proc.send_signal(signal.SIGKILL)
    code = proc.wait(timeout=10)
    finish(proc)
    assert code in (0, -signal.SIGKILL), code
    return code == -signal.SIGKILL


def finish(proc: subprocess.Popen[str]) -> None:
    proc.wait(timeout=30)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def derived_state(index: Path, release: int) -> dict[str, str]:
    """Each derived index on disk: 'valid' (loads, at or below the store's release), 'absent'
    (no manifest: never saved) or 'unreadable' (will be rebuilt). Never crashes."""
    out = {}
    from clew.config import DenseConfig

    loaders: dict[str, Any] = {
        "lexical": BM25Index.load,
        "vectors": lambda d: VectorIndex.load(d, DenseConfig()),
        "graph": load_graph,
    }
    for name, load in loaders.items():
        if not (index / f"{name}.json").exists():
            out[name] = "absent"
            continue
        idx = load(index)
        if idx is None:
            out[name] = "unreadable"
        else:
            assert idx.release <= release, f"{name} claims release {idx.release} > {release}"
            out[name] = "valid"
    return out


def check_index(index: Path, corpus: list[dict[str, Any]]) -> int:
    by_id = {r["id"]: r for r in corpus}
    with open_engine(index) as engine:
        state = check_store(index, by_id, DIM)
        derived_state(index, state.release)
        check_legs(engine, corpus, state.doc_ids)
        assert engine.stats()["release"] == state.release
    # the engine brought every derived file up to the store's release, and they load
    for name, status in derived_state(index, state.release).items():
        assert status == "valid", f"{name} is {status} after a reopen"
    for name in ("lexical", "vectors", "graph"):
        meta = read_manifest(index, name, str(_format(name)))
        assert meta is not None and int(meta["release"]) == state.release
    return len(state.doc_ids)


def _format(name: str) -> str:
    from clew.backends.embedded import graph, lexical, vector

    return {"lexical": lexical.FORMAT, "vectors": vector.FORMAT, "graph": graph.FORMAT}[name]


def stray_files(index: Path) -> list[str]:
    """Files that no manifest names: leftovers of an interrupted save."""
    keep = {"clew.sqlite", "clew.sqlite-wal", "clew.sqlite-shm", "write.lock", "traces"}
    keep |= {p.name for p in index.glob("calibration*.json")}  # written whole (os.replace)
    for name in ("lexical", "vectors", "graph"):
        meta = read_manifest(index, name, _format(name))
        keep.add(f"{name}.json")
        if meta is not None:
            keep.update(p.name for p in index.glob(f"{name}-{meta['stamp']}.*"))
    return sorted(p.name for p in index.iterdir() if p.name not in keep)


def test_sigkill_at_random_points_leaves_a_consistent_index(tmp_path: Path) -> None:
    corpus = make_corpus(N_DOCS, seed=SEED)
    path = write_corpus(tmp_path / "corpus.jsonl", corpus)
    index = tmp_path / "idx"
    rng = random.Random(SEED)
    seen: list[int] = []
    # two kills at chosen points: right after a store commit (no derived file saved yet), and
    # inside a derived-index save (data files written, manifest not yet replaced)
    for point in ("commit", "publish"):
        proc = spawn(index, path, "--group", str(GROUP), "--hold-at", point)
        wait_for(proc, f"holding {point}")
        kill(proc)
        # publish: the killed save's data files are there, its manifest never replaced
        assert bool(stray_files(index)) == (point == "publish"), stray_files(index)
        seen.append(check_index(index, corpus))
    assert seen[0] >= GROUP, "the commit before the hold must survive the kill"
    # then kills at seeded random points: after a random number of groups of this run, plus a
    # random delay shorter than a group takes (~25 ms), so that they land anywhere in a group's
    # embed → commit → derived saves; each run resumes where the last one stopped
    for _ in range(KILLS):
        proc = spawn(index, path, "--group", str(GROUP))
        group = seen[-1] // GROUP + rng.randrange(3)
        wait_for(proc, f"group {group} ")
        time.sleep(rng.uniform(0.0, 0.03))
        assert kill(proc), "the child finished before the kill"
        seen.append(check_index(index, corpus))
    assert seen == sorted(seen), f"committed documents went missing between kills: {seen}"
    assert seen[-1] < N_DOCS, seen

    proc = spawn(index, path, "--group", str(GROUP))
    out = wait_for(proc, "done")
    finish(proc)
    assert proc.returncode == 0, out
    kill_free = check_index(index, corpus)
    assert kill_free == N_DOCS
    assert stray_files(index) == []
    before = check_store(index, {r["id"]: r for r in corpus}, DIM)

    # rerun: nothing to do, nothing duplicated
    proc = spawn(index, path, "--group", "1000")
    wait_for(proc, "done")
    finish(proc)
    assert proc.returncode == 0
    after = check_store(index, {r["id"]: r for r in corpus}, DIM)
    assert after == before, (before, after)
    assert after.counts["concepts"] == N_DOCS  # one XID each, no duplicates


@pytest.mark.parametrize(
    "damage",
    [
        "truncate:lexical-*.npz",
        "truncate:lexical-*.terms",
        "truncate:vectors-*.npy",
        "truncate:graph-*.npz",
        "empty:lexical-*.npz",
        "garbage:graph-*.npz",
        "truncate:lexical.json",
        "truncate:vectors.json",
        "garbage:graph.json",
        "delete:vectors-*.npy",
    ],
)
def test_torn_derived_file_is_rebuilt_on_open(tmp_path: Path, damage: str) -> None:
    corpus = make_corpus(30, seed=1)
    index = tmp_path / "idx"
    docs = [
        Document(r["id"], r["title"], r["text"], r["id"], metadata=r["metadata"]) for r in corpus
    ]
    with open_engine(index) as engine:
        engine.ingest(docs[:20])
        engine.ingest(docs[20:])
        release = engine.store.release()
    how, pattern = damage.split(":")
    (target,) = sorted(index.glob(pattern))
    data = target.read_bytes()
    if how == "truncate":
        target.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        target.write_bytes(b"")
    elif how == "garbage":
        target.write_bytes(bytes(random.Random(0).randrange(256) for _ in range(len(data))))
    else:
        target.unlink()
    name = pattern.split("-")[0].split(".")[0]
    assert derived_state(index, release)[name] == "unreadable"
    # reopening rebuilds the damaged index from the store; search works on every leg
    with open_engine(index) as engine:
        check_legs(engine, corpus, {r["id"] for r in corpus})
    assert derived_state(index, release) == dict.fromkeys(("lexical", "vectors", "graph"), "valid")


def test_open_engine_is_not_confused_by_leftover_temp_files(tmp_path: Path) -> None:
    corpus = make_corpus(10, seed=2)
    index = tmp_path / "idx"
    docs = [Document(r["id"], r["title"], r["text"], r["id"]) for r in corpus]
    with open_engine(index) as engine:
        engine.ingest(docs[:5])
    # what a process killed mid-save leaves: a temp manifest and data files of an unpublished
    # stamp, both half-written
    (index / "lexical.json.tmp99999").write_text('{"format": "clew-bm25/1", "sta', "utf-8")
    (index / "graph-0123456789abcdef.npz").write_bytes(b"PK\x03\x04 torn")
    with open_engine(index) as engine:
        engine.ingest(docs[5:])
        check_legs(engine, corpus, {r["id"] for r in corpus})
    assert stray_files(index) == []
