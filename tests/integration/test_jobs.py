"""Writers and readers: ingest jobs isolate bad documents, share the writer thread fairly and
yield to readers; a request reads one release."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from clew import Document, Engine
from clew.errors import LoadError
from clew.serve.jobs import BUSY_TURN, FOREIGN_ID, SHARE, TURN, JobManager
from clew.types import IngestReport


def _doc(i: int, text: str | None = None) -> Document:
    return Document(f"d{i}", f"Doc {i}", text or f"ERR-50{i:02d} note number {i}", f"d{i}")


class _Flaky:
    """Wraps a real engine; ingest fails for any batch containing a document named 'bad'."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.store = engine.store
        self.calls: list[int] = []

    def ingest(self, docs: Sequence[Document]) -> IngestReport:
        self.calls.append(len(docs))
        if any("bad" in d.doc_id for d in docs):
            raise LoadError("document 'bad' is binary; allowed: UTF-8 text")
        return self.engine.ingest(docs)


def test_one_bad_document_fails_alone_with_its_error(fake_engine: Engine) -> None:
    flaky = _Flaky(fake_engine)
    jobs = JobManager(flaky)  # type: ignore[arg-type]
    docs = [_doc(i) for i in range(40)]
    docs.insert(5, Document("bad-1", "Bad", "x", "bad"))
    job = jobs.submit(docs, "tester")
    assert jobs.join(timeout=60)
    status = jobs.get(job.job_id)
    jobs.close()
    assert status is not None and status["state"] == "done"
    assert status["total"] == 41 and status["failed"] == 1 and status["done"] == 40
    bad = next(d for d in status["documents"] if d["id"] == "bad-1")
    assert bad == {"id": "bad-1", "status": "failed", "error": bad["error"]}
    assert "binary" in bad["error"]
    assert status["release"] == fake_engine.store.release()
    assert status["finished_at"] >= status["created_at"]
    # the failing turn (a lone job's: TURN documents) was retried one by one; the other turn
    # went in whole
    assert flaky.calls == [TURN, *[1] * TURN, 41 - TURN]
    assert fake_engine.search("ERR-5007").hits[0].doc_id == "d7"


def test_a_job_where_everything_fails_is_failed(fake_engine: Engine) -> None:
    jobs = JobManager(_Flaky(fake_engine))  # type: ignore[arg-type]
    job = jobs.submit([Document("bad-2", "Bad", "x", "bad")], "tester")
    assert jobs.join(timeout=30)
    status = jobs.get(job.job_id)
    jobs.close()
    assert (
        status is not None and status["state"] == "failed" and "every document" in status["error"]
    )


def test_a_request_reads_one_release_while_a_write_lands(fake_engine: Engine) -> None:
    fake_engine.ingest([_doc(i) for i in range(5)])
    writer_done = threading.Event()

    def write() -> None:
        fake_engine.ingest([_doc(99, "ERR-5099 arrives while a request is reading")])
        writer_done.set()

    with fake_engine.reading() as snap:
        before = snap.release
        thread = threading.Thread(target=write)
        thread.start()
        deadline = time.monotonic() + 20
        while fake_engine.store.release() == before and time.monotonic() < deadline:
            time.sleep(0.01)
        assert fake_engine.store.release() > before  # the store write committed ...
        time.sleep(0.2)
        assert not writer_done.is_set()  # ... but the index refresh waits for the reader
        pinned = fake_engine.search("ERR-5099")
        assert pinned.release == before
        assert all(h.doc_id != "d99" for h in pinned.hits)
    thread.join(timeout=20)
    assert writer_done.is_set()
    after = fake_engine.search("ERR-5099")
    assert after.release > before and after.hits[0].doc_id == "d99"


def test_many_readers_and_a_writer_never_error(fake_engine: Engine) -> None:
    fake_engine.ingest([_doc(i) for i in range(10)])
    errors: list[BaseException] = []
    releases: list[int] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                res = fake_engine.search("ERR-5003 note", k=5)
                releases.append(res.release)
                assert res.hits
            except BaseException as exc:
                errors.append(exc)
                return

    readers = [threading.Thread(target=read) for _ in range(4)]
    for t in readers:
        t.start()
    for i in range(10, 30):
        fake_engine.ingest([_doc(i)])
    fake_engine.delete(["d10", "d11"])
    stop.set()
    for t in readers:
        t.join(timeout=30)
    assert not errors, errors[0]
    assert len(set(releases)) > 1  # the readers saw the releases move on


class _Slow:
    """Wraps a real engine; every ingest takes ``per_doc`` seconds per document first."""

    def __init__(self, engine: Engine, per_doc: float) -> None:
        self.engine, self.store, self.per_doc = engine, engine.store, per_doc
        self.order: list[str] = []

    def ingest(self, docs: Sequence[Document]) -> IngestReport:
        time.sleep(self.per_doc * len(docs))
        self.order.extend(d.doc_id for d in docs)
        return self.engine.ingest(docs)


def test_jobs_take_turns_so_a_small_job_is_not_stuck_behind_a_big_one(
    fake_engine: Engine,
) -> None:
    slow = _Slow(fake_engine, per_doc=0.01)
    jobs = JobManager(slow)  # type: ignore[arg-type]
    big = jobs.submit([_doc(i) for i in range(10 * TURN)], "bulk")
    small = jobs.submit([Document("hot", "Hot", "ERR-5999 hot fix", "hot")], "oncall")
    assert jobs.join(timeout=60)
    jobs.close()
    # the small job went in within the first two turns (round robin: the big job may have had
    # a whole turn before the small one came, then shares the next one), not after all of the
    # big one (first come, first served)
    assert slow.order.index("hot") <= TURN + SHARE < 10 * TURN
    assert jobs.get(big.job_id)["state"] == jobs.get(small.job_id)["state"] == "done"  # type: ignore[index]


def test_the_writer_yields_to_busy_readers(fake_engine: Engine) -> None:
    slow = _Slow(fake_engine, per_doc=0.002)
    busy = threading.Event()
    jobs = JobManager(slow, readers_busy=busy.is_set, share=0.5)  # type: ignore[arg-type]
    jobs.submit([_doc(i) for i in range(4 * TURN)], "bulk")
    assert jobs.join(timeout=60)
    assert jobs.paused_s == 0.0 and jobs.turns == 4  # nobody reading: full speed
    busy.set()
    started = time.monotonic()
    jobs.submit([_doc(i) for i in range(1000, 1000 + 4 * BUSY_TURN)], "bulk")
    assert jobs.join(timeout=60)
    shared = time.monotonic() - started
    jobs.close()
    # while readers are busy, fewer, bigger turns (fewer new releases) ...
    assert jobs.turns == 4 + 4
    # ... and the writer pauses about as long as it writes (share 0.5), except after its last
    # turn: at least the 3 turns' sleeps of the fake ingest
    assert jobs.paused_s >= 3 * BUSY_TURN * 0.002
    assert shared >= jobs.paused_s + 4 * BUSY_TURN * 0.002


def test_a_scoped_job_does_not_overwrite_a_document_outside_its_scope(
    fake_engine: Engine,
) -> None:
    fake_engine.ingest([Document("b-1", "B", "BLUEHERON secret", "b", {"tenant": "b"})])
    jobs = JobManager(fake_engine)
    docs = [
        Document("b-1", "A", "AMBERFOX took it", "a", {"tenant": "a"}),
        Document("a-1", "A", "AMBERFOX own", "a", {"tenant": "a"}),
    ]
    job = jobs.submit(docs, "a-admin", scope={"tenant": "a"})
    assert jobs.join(timeout=60)
    jobs.close()
    status = jobs.get(job.job_id)
    assert status is not None and status["state"] == "done"
    by_id = {d["id"]: d for d in status["documents"]}
    assert by_id["b-1"] == {
        "id": "b-1",
        "status": "failed",
        "error": FOREIGN_ID.format(doc_id="b-1"),
    }
    assert by_id["a-1"]["status"] == "added"
    kept = fake_engine.document("b-1")
    assert kept is not None and kept.metadata == {"tenant": "b"} and "BLUEHERON" in kept.text
    assert jobs.get(job.job_id, owner=lambda who: who == "someone-else") is None


def test_waiting_jobs_share_a_turn_and_the_later_write_of_an_id_wins(
    fake_engine: Engine,
) -> None:
    gate = threading.Event()

    class _Gated(_Slow):
        def ingest(self, docs: Sequence[Document]) -> IngestReport:
            gate.wait(30)  # hold the writer until every job is queued
            return super().ingest(docs)

    slow = _Gated(fake_engine, per_doc=0.0)
    jobs = JobManager(slow)  # type: ignore[arg-type]
    first = jobs.submit([_doc(0)], "warm-up")  # the writer takes this turn and waits
    time.sleep(0.2)
    small = [jobs.submit([_doc(i)], f"user-{i}") for i in range(1, 6)]
    old = jobs.submit([_doc(50, "ERR-5050 the old text")], "bulk")
    new = jobs.submit([_doc(50, "ERR-5050 the new text")], "editor")  # same id, later
    gate.set()
    assert jobs.join(timeout=60)
    jobs.close()
    for job in (first, *small, old, new):
        assert jobs.get(job.job_id)["state"] == "done"  # type: ignore[index]
    # the five small jobs and the first of the two writers of d50 went in one ingest (one
    # refresh), the later writer of d50 in the next one
    assert jobs.turns == 3
    assert slow.order == ["d0", "d1", "d2", "d3", "d4", "d5", "d50", "d50"]
    stored = fake_engine.document("d50")
    assert stored is not None and "the new text" in stored.text
