"""Background ingest jobs: one writer thread, per-document progress and errors.

A batch is ingested in groups; each group is one engine ingest (transactional per store batch).
When a group fails, its documents are retried one by one, so one bad document fails alone with
its own error and the rest land. Readers keep answering meanwhile: every request reads one
pinned snapshot of the index (:meth:`clew.Engine._reading`), so results never mix releases.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from clew.errors import ClewError
from clew.retrieve.engine import Engine
from clew.types import Document

__all__ = ["Job", "JobManager"]

log = logging.getLogger(__name__)

GROUP = 32
"""Documents per engine ingest call: progress granularity and failure isolation."""


@dataclass
class Job:
    job_id: str
    documents: list[Document]
    submitted_by: str
    state: str = "queued"
    status: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    release: int | None = None
    error: str | None = None
    created_at: float = field(default_factory=time.time)
    finished_at: float | None = None

    def snapshot(self) -> dict[str, Any]:
        """A consistent copy for GET /jobs/{id} (taken under the manager's lock)."""
        docs = [
            {"id": d.doc_id, "status": self.status[d.doc_id], "error": self.errors.get(d.doc_id)}
            for d in self.documents
        ]
        return {
            "job_id": self.job_id,
            "state": self.state,
            "total": len(self.documents),
            "done": sum(1 for d in docs if d["status"] not in ("pending", "failed")),
            "failed": sum(1 for d in docs if d["status"] == "failed"),
            "documents": docs,
            "release": self.release,
            "error": self.error,
            "created_at": self.created_at,
            "finished_at": self.finished_at,
        }


class JobManager:
    """Queues ingest jobs and runs them one at a time on a single writer thread."""

    def __init__(
        self,
        engine: Engine,
        *,
        keep: int = 1_000,
        on_document: Callable[[str], None] | None = None,
    ) -> None:
        self._engine = engine
        self._keep = keep
        self._on_document = on_document
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._lock = threading.Lock()
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._idle = threading.Event()
        self._idle.set()
        self._thread = threading.Thread(target=self._work, name="clew-ingest", daemon=True)
        self._thread.start()

    def submit(self, documents: Sequence[Document], submitted_by: str) -> Job:
        job = Job(uuid.uuid4().hex, list(documents), submitted_by)
        job.status = {d.doc_id: "pending" for d in documents}
        with self._lock:
            self._jobs[job.job_id] = job
            self._prune()
            self._idle.clear()
        self._queue.put(job)
        return job

    def get(self, job_id: str) -> dict[str, Any] | None:
        with self._lock:
            job = self._jobs.get(job_id)
            return None if job is None else job.snapshot()

    def wait(self, job_id: str, timeout: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout
        while True:
            snap = self.get(job_id)
            if snap is None or snap["state"] in ("done", "failed"):
                return snap
            if time.monotonic() >= deadline:
                return snap
            time.sleep(0.05)

    def join(self, timeout: float | None = None) -> bool:
        """Wait until every submitted job has finished."""
        return self._idle.wait(timeout)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=60)

    def _prune(self) -> None:
        finished = [j for j in self._jobs.values() if j.state in ("done", "failed")]
        for job in finished[: max(0, len(finished) - self._keep)]:
            del self._jobs[job.job_id]

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            try:
                self._run(job)
            except Exception as exc:  # never kill the writer thread
                log.exception("ingest job %s failed", job.job_id)
                with self._lock:
                    job.state, job.error = "failed", f"internal error: {type(exc).__name__}"
                    job.finished_at = time.time()
            finally:
                with self._lock:
                    if self._queue.empty():
                        self._idle.set()

    def _run(self, job: Job) -> None:
        with self._lock:
            job.state = "running"
        docs = job.documents
        for start in range(0, len(docs), GROUP):
            group = docs[start : start + GROUP]
            try:
                self._ingest(job, group)
            except Exception:
                for doc in group:  # isolate the bad document(s)
                    try:
                        self._ingest(job, [doc])
                    except ClewError as exc:
                        self._fail(job, doc.doc_id, str(exc))
                    except Exception as exc:
                        log.exception("ingest of document %r failed", doc.doc_id)
                        self._fail(job, doc.doc_id, f"internal error: {type(exc).__name__}")
        with self._lock:
            job.release = self._engine.store.release()
            ok = any(s != "failed" for s in job.status.values())
            job.state = "done" if ok or not docs else "failed"
            if not ok and docs:
                job.error = "every document failed; see documents[].error"
            job.finished_at = time.time()

    def _ingest(self, job: Job, group: list[Document]) -> None:
        report = self._engine.ingest(group)
        with self._lock:
            for name, ids in (
                ("added", report.added),
                ("updated", report.updated),
                ("unchanged", report.unchanged),
            ):
                for doc_id in ids:
                    job.status[doc_id] = name
                    job.errors.pop(doc_id, None)
        if self._on_document is not None:
            for name, ids in (
                ("added", report.added),
                ("updated", report.updated),
                ("unchanged", report.unchanged),
            ):
                for _ in ids:
                    self._on_document(name)

    def _fail(self, job: Job, doc_id: str, message: str) -> None:
        with self._lock:
            job.status[doc_id] = "failed"
            job.errors[doc_id] = message
        if self._on_document is not None:
            self._on_document("failed")
