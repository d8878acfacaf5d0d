"""Writers and readers: ingest jobs isolate bad documents; a request reads one release."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from clew import Document, Engine
from clew.errors import LoadError
from clew.serve.jobs import JobManager
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
    # the failing group was retried one by one; the other groups went in whole
    assert flaky.calls[0] == 32 and flaky.calls.count(1) == 32 and flaky.calls[-1] == 9
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

    with fake_engine._reading() as snap:
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
