"""Background ingest jobs: one writer, fair across jobs, yielding to readers.

The engine serializes writers, so the service has exactly one writer (a thread, or a writer
process driven by a thread). What it shares fairly is its time, in *turns*: each turn is one
engine ingest (and so one new release and one index refresh).

- **Round robin across jobs.** A turn takes up to :data:`SHARE` documents (and
  :data:`SHARE_CHARS` characters, at least one document) from each waiting job in queue order,
  up to :data:`TURN` documents (:data:`TURN_CHARS` characters) in all, or :data:`BUSY_TURN`
  while readers are busy; a job with documents left goes to the back of the queue. A
  1,000-document (or one very slow) job therefore delays a small job posted after it by one
  turn, not by the whole job, and a job alone in the queue goes in whole turns. Documents of
  several jobs share one ingest because every ingest makes a new release, and each new release
  stalls readers (the refresh holds the engine's read-write lock exclusively, then the first
  search builds the release's caches: together several seconds on SciFact): fewer, fuller
  turns keep readers answering. Only jobs with the same scope share a turn (entity resolution
  is per scope), and a job never overtakes an earlier job that writes one of its ids, so the
  later write of an id still wins.
- **Readers first.** Ingest (embedding, concept extraction, the refresh) competes with searches
  for the same cores and the same GIL. While searches are being served (``readers_busy()``
  says so), the writer thread pauses after each turn so that it writes at most ``share`` of the
  time (``share=0.5``: a turn that took 0.4 s is followed by a 0.4 s pause, at most
  :data:`MAX_PAUSE_S`). With no readers it writes at full speed.
- **Failure isolation.** When a turn's ingest fails, its documents are retried one by one, so
  one bad document fails alone with its own error and the rest land.
- **A writer process** (:class:`ProcessWriter`, what ``clew serve`` uses): the ingest itself
  runs in a child process with its own engine on the same index, at a lower CPU priority
  (``nice``). Chunking, concept extraction (spaCy) and embedding then hold neither the
  server's GIL nor its encoder (whose lock a query would otherwise wait on behind a batch of
  chunks), and the OS gives the cores to readers first. After each turn the job thread brings
  the server's snapshot up to the new release (:meth:`Engine.refresh`). Without one (an engine
  passed in, as tests do), turns run in the job thread itself.
- **Scope.** A job submitted by a scoped key carries its scope: just before each turn is
  written, a document whose id already belongs to a document outside that scope is failed
  ("cannot be written with this key") instead of overwriting it (the API checks this when the
  job is submitted too; this closes the window until the write).

Readers keep answering meanwhile: every request reads one pinned snapshot of the index
(:meth:`clew.Engine.reading`), so results never mix releases.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import multiprocessing
import os
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clew.engine import Engine
from clew.errors import ClewError
from clew.filters import matches
from clew.types import Document, IngestReport

__all__ = [
    "BUSY_TURN",
    "FOREIGN_ID",
    "SHARE",
    "SHARE_CHARS",
    "TURN",
    "TURN_CHARS",
    "Job",
    "JobManager",
    "ProcessWriter",
    "foreign_ids",
]

log = logging.getLogger(__name__)

TURN = 32
"""Most documents per turn (one engine ingest call, one index refresh)."""
TURN_CHARS = 160_000
"""Most characters of text per turn (a turn holds at least one document)."""
BUSY_TURN = 128
"""Most documents per turn while readers are busy: every turn ends with a new release, and
each new release stalls readers (the refresh, then the first search's per-release caches), so
under read load the writer makes fewer, bigger releases."""
BUSY_TURN_CHARS = 640_000
SHARE = 8
"""Most documents one job contributes to a turn while other jobs wait."""
SHARE_CHARS = 40_000
"""Most characters one job contributes to a turn while other jobs wait."""
MAX_PAUSE_S = 60.0
"""The longest pause after one turn while readers are busy."""
FOREIGN_ID = "document id {doc_id!r} cannot be written with this key"


def foreign_ids(engine: Engine, doc_ids: Sequence[str], scope: Any) -> list[str]:
    """The ids among ``doc_ids`` that already belong to a document ``scope`` hides (None: no
    scope, nothing is foreign). One query finds which ids exist; only those are read."""
    if scope is None or not doc_ids:
        return []
    existing = engine.store.doc_hashes(list(doc_ids))
    out = []
    for doc_id in doc_ids:
        if doc_id not in existing:
            continue
        found = engine.store.document(doc_id)
        if found is not None and not matches(found[0]["metadata"], scope):
            out.append(doc_id)
    return out


def _takes_scope(ingest: Callable[..., Any]) -> bool:
    """Whether ``Engine.ingest`` accepts ``scope=`` (entity resolution within a scope)."""
    try:
        return "scope" in inspect.signature(ingest).parameters
    except (TypeError, ValueError):
        return False


class WriterError(ClewError):
    """A clew error raised by the writer process (its message, as the engine wrote it)."""


class ProcessWriter:
    """``Engine.ingest`` in a child process: its own engine on the same index (the engine's
    write lock serializes it with any other writer), its own GIL and encoder, at ``nice``
    (lower CPU priority than the server). Started on the first ingest; restarted if it dies.

    It holds its own copy of the in-memory derived indexes (and refreshes them after each
    write), so it costs about the server's memory for the index again."""

    def __init__(
        self,
        index: str | Path,
        config: str | Path | None = None,
        *,
        write_timeout: float = 60.0,
        nice: int = 10,
        start_timeout: float = 300.0,
    ) -> None:
        self._args = (str(index), None if config is None else str(config), write_timeout, nice)
        self._start_timeout = start_timeout
        self._ctx = multiprocessing.get_context("spawn")
        self._proc: Any = None
        self._conn: Any = None

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else int(self._proc.pid)

    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(
            target=_writer_main, args=(child, *self._args), name="clew-writer", daemon=True
        )
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        if not parent.poll(self._start_timeout):
            self._stop(kill=True)
            raise RuntimeError(f"the writer process did not start in {self._start_timeout:g} s")
        kind, payload = parent.recv()
        if kind != "ready":
            self._stop(kill=True)
            raise WriterError(f"the writer process cannot open the index: {payload}")

    def ingest(self, docs: Sequence[Document], scope: Any = None) -> IngestReport:
        if self._proc is None or not self._proc.is_alive():
            self._stop(kill=True)
            self._start()
        try:
            self._conn.send((list(docs), scope))
            kind, payload = self._conn.recv()
        except (EOFError, OSError):
            self._stop(kill=True)
            raise RuntimeError("the writer process died during an ingest") from None
        if kind == "ok":
            report: IngestReport = payload
            return report
        if kind == "clew":
            raise WriterError(str(payload))
        raise RuntimeError(f"the writer process failed: {payload}")

    def _stop(self, *, kill: bool) -> None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if conn is not None:
            if not kill:
                with contextlib.suppress(OSError, ValueError):
                    conn.send(None)
            conn.close()
        if proc is not None:
            proc.join(timeout=0 if kill else 60)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=10)

    def close(self) -> None:
        self._stop(kill=False)

    def kill(self) -> None:
        self._stop(kill=True)


def _writer_main(
    conn: Any, index: str, config: str | None, write_timeout: float, nice: int
) -> None:
    """The writer process: open the index, then ingest what the server sends until None."""
    with contextlib.suppress(OSError):
        os.nice(nice)
    try:
        from clew.config import EngineConfig

        cfg = EngineConfig.from_yaml(config) if config else EngineConfig()
        engine = Engine(index, cfg, write_timeout=write_timeout)
        scoped = _takes_scope(engine.ingest)
    except Exception as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    try:
        conn.send(("ready", None))
        while True:
            message = conn.recv()
            if message is None:
                break
            docs, scope = message
            reply: tuple[str, Any]
            try:
                if scoped and scope is not None:
                    reply = ("ok", engine.ingest(docs, scope=scope))
                else:
                    reply = ("ok", engine.ingest(docs))
            except ClewError as exc:
                reply = ("clew", str(exc))
            except Exception as exc:
                log.exception("writer process: ingest failed")
                reply = ("internal", type(exc).__name__)
            conn.send(reply)
    except (EOFError, OSError):
        pass  # the server went away: nothing to answer
    finally:
        engine.close()


@dataclass
class Job:
    job_id: str
    documents: list[Document]
    submitted_by: str
    scope: dict[str, Any] | None = None
    """The submitting key's scope: ids outside it are not overwritten."""
    state: str = "queued"
    status: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    release: int | None = None
    error: str | None = None
    created_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    next: int = 0
    """Index of the first document not yet taken into a turn."""
    after: list[Job] = field(default_factory=list)
    """Earlier jobs that write one of this job's ids: it waits until they have finished."""

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

    @property
    def finished(self) -> bool:
        return self.state in ("done", "failed")

    @property
    def left(self) -> int:
        return len(self.documents) - self.next

    def take(self, most: int, most_chars: int) -> list[Document]:
        """Up to ``most`` next documents and ``most_chars`` characters (at least one)."""
        group: list[Document] = []
        chars = 0
        while self.next < len(self.documents) and len(group) < most:
            doc = self.documents[self.next]
            if group and chars + len(doc.text) > most_chars:
                break
            group.append(doc)
            chars += len(doc.text)
            self.next += 1
        return group


@dataclass
class _Turn:
    """One engine ingest: documents of one or more jobs (of one scope)."""

    scope: dict[str, Any] | None
    parts: list[tuple[Job, list[Document]]] = field(default_factory=list)

    @property
    def documents(self) -> list[Document]:
        return [d for _, docs in self.parts for d in docs]

    def job_of(self) -> dict[str, Job]:
        return {d.doc_id: job for job, docs in self.parts for d in docs}


class JobManager:
    """Queues ingest jobs and runs them on a single writer thread, in turns shared round robin
    across jobs; pauses between turns while ``readers_busy()`` (see the module)."""

    def __init__(
        self,
        engine: Engine,
        *,
        keep: int = 1_000,
        on_document: Callable[[str], None] | None = None,
        readers_busy: Callable[[], bool] | None = None,
        share: float = 0.5,
        writer: ProcessWriter | None = None,
    ) -> None:
        if not 0.0 < share <= 1.0:
            raise ValueError(f"share={share!r} is invalid; allowed: 0 < share <= 1")
        self._engine = engine
        self.writer = writer
        self._scoped_ingest = _takes_scope(engine.ingest)
        self._keep = keep
        self._on_document = on_document
        self._readers_busy = readers_busy
        self._share = share
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._runnable: deque[Job] = deque()
        self._closing = False
        self._idle = threading.Event()
        self._idle.set()
        self.paused_s = 0.0
        """Seconds the writer thread has paused for readers (for benchmarks)."""
        self.turns = 0
        """Engine ingest calls made for turns (retries of single documents not counted)."""
        self._thread = threading.Thread(target=self._work, name="clew-ingest", daemon=True)
        self._thread.start()

    def submit(
        self,
        documents: Sequence[Document],
        submitted_by: str,
        *,
        scope: dict[str, Any] | None = None,
    ) -> Job:
        job = Job(uuid.uuid4().hex, list(documents), submitted_by, scope)
        job.status = {d.doc_id: "pending" for d in documents}
        ids = set(job.status)
        with self._lock:
            if self._closing:
                raise RuntimeError("the job manager is closed")
            job.after = [
                j for j in self._runnable if any(d.doc_id in ids for d in j.documents[j.next :])
            ]
            self._jobs[job.job_id] = job
            self._prune()
            self._idle.clear()
            self._runnable.append(job)
            self._wake.notify_all()
        return job

    def get(
        self, job_id: str, *, owner: Callable[[str], bool] | None = None
    ) -> dict[str, Any] | None:
        """The job's status, or None when there is none or ``owner(submitted_by)`` is false
        (a caller who may not read the job cannot tell it from a missing one)."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or (owner is not None and not owner(job.submitted_by)):
                return None
            return job.snapshot()

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
        """Finish the queued jobs (without pausing for readers), then stop the thread (and the
        writer process)."""
        with self._lock:
            self._closing = True
            self._wake.notify_all()
        self._thread.join(timeout=60)
        if self.writer is not None:
            if self._thread.is_alive():  # still mid-turn: the pipe is in use, stop it hard
                self.writer.kill()
            else:
                self.writer.close()

    def _prune(self) -> None:
        finished = [j for j in self._jobs.values() if j.finished]
        for job in finished[: max(0, len(finished) - self._keep)]:
            del self._jobs[job.job_id]

    def _next_turn(self) -> _Turn | None:
        """Called with the lock held: documents from each eligible job in queue order."""
        eligible = [j for j in self._runnable if all(e.finished for e in j.after)]
        if not eligible:
            return None
        turn = _Turn(eligible[0].scope)
        scope_key = json.dumps(turn.scope, sort_keys=True)
        taken, chars = 0, 0
        ids: set[str] = set()
        alone = len(eligible) == 1
        busy = self._readers_busy is not None and self._readers_busy()
        turn_docs, turn_chars = (BUSY_TURN, BUSY_TURN_CHARS) if busy else (TURN, TURN_CHARS)
        for job in eligible:
            if taken >= turn_docs or chars >= turn_chars:
                break
            if json.dumps(job.scope, sort_keys=True) != scope_key:
                continue  # entity resolution is per scope: another turn
            if any(d.doc_id in ids for d in job.documents[job.next : job.next + SHARE]):
                continue  # the same id twice in one ingest: the later job's next turn
            most = turn_docs - taken if alone else min(SHARE, turn_docs - taken)
            most_chars = turn_chars - chars if alone else min(SHARE_CHARS, turn_chars - chars)
            docs = job.take(most, max(most_chars, 1))
            if not docs:
                continue
            job.state = "running"
            turn.parts.append((job, docs))
            taken += len(docs)
            chars += sum(len(d.text) for d in docs)
            ids.update(d.doc_id for d in docs)
        served = [job for job, _ in turn.parts]
        for job in served:  # round robin: the jobs just served go to the back
            self._runnable.remove(job)
            if job.left:
                self._runnable.append(job)
        return turn

    def _work(self) -> None:
        while True:
            with self._lock:
                turn = None
                while not self._closing or self._runnable:
                    turn = self._next_turn() if self._runnable else None
                    if turn is not None:
                        break
                    self._wake.wait(0.5 if self._runnable else None)
                if turn is None:  # closing, and every queued job has finished
                    return
            started = time.monotonic()
            try:
                self._write(turn)
            except Exception as exc:  # never kill the writer thread
                log.exception("ingest turn failed")
                with self._lock:
                    for job, _ in turn.parts:
                        job.state, job.error = "failed", f"internal error: {type(exc).__name__}"
                        job.finished_at = time.time()
                        if job in self._runnable:
                            self._runnable.remove(job)
            # the release each job's key sees (its scope's, outside the lock: a snapshot read)
            seen = {id(job): self._seen(job) for job, _ in turn.parts}
            with self._lock:
                for job, _ in turn.parts:
                    if not job.finished and not job.left:
                        self._finish(job, seen[id(job)])
                if not self._runnable:
                    self._idle.set()
                self._wake.notify_all()
            self._pause(time.monotonic() - started)

    def _pause(self, took: float) -> None:
        """Yield the cores to readers: write at most ``share`` of the time while they are busy."""
        if self._share >= 1.0 or self._readers_busy is None or self._closing:
            return
        if not self._runnable or not self._readers_busy():
            return
        pause = min(MAX_PAUSE_S, took * (1.0 - self._share) / self._share)
        with self._lock:
            if not self._closing:
                self._wake.wait(pause)  # close() wakes it early
        self.paused_s += pause

    def _write(self, turn: _Turn) -> None:
        owners = turn.job_of()
        docs = turn.documents
        foreign = set(foreign_ids(self._engine, [d.doc_id for d in docs], turn.scope))
        for doc_id in sorted(foreign):
            self._fail(owners[doc_id], doc_id, FOREIGN_ID.format(doc_id=doc_id))
        docs = [d for d in docs if d.doc_id not in foreign]
        if not docs:
            return
        try:
            self.turns += 1
            self._ingest(owners, docs, turn.scope)
        except Exception:
            for doc in docs:  # isolate the bad document(s)
                try:
                    self._ingest(owners, [doc], turn.scope)
                except ClewError as exc:
                    self._fail(owners[doc.doc_id], doc.doc_id, str(exc))
                except Exception as exc:
                    log.exception("ingest of document %r failed", doc.doc_id)
                    self._fail(
                        owners[doc.doc_id], doc.doc_id, f"internal error: {type(exc).__name__}"
                    )

    def _seen(self, job: Job) -> int:
        """The release the submitting key sees: its scope's, so another tenant's writes do not
        show in its job (:meth:`clew.Engine.release`)."""
        try:
            return self._engine.release(job.scope)
        except Exception:  # a job's status must not fail on it
            log.exception("the release of job %s", job.job_id)
            return self._engine.store.release() if job.scope is None else 0

    def _finish(self, job: Job, release: int) -> None:
        """Called with the lock held, once every document of the job has been tried."""
        docs = job.documents
        job.release = release
        ok = any(s != "failed" for s in job.status.values())
        job.state = "done" if ok or not docs else "failed"
        if not ok and docs:
            job.error = "every document failed; see documents[].error"
        job.finished_at = time.time()

    def _ingest(self, owners: dict[str, Job], docs: list[Document], scope: Any) -> None:
        if self.writer is not None:
            try:
                report = self.writer.ingest(docs, scope)
            finally:
                self._engine.refresh()  # the server's snapshot catches up here, not in a reader
        elif self._scoped_ingest and scope is not None:
            # entity resolution within the writer's scope (where the engine supports it)
            report = self._engine.ingest(docs, scope=scope)
        else:
            report = self._engine.ingest(docs)
        counts: list[str] = []
        with self._lock:
            for name, ids in (
                ("added", report.added),
                ("updated", report.updated),
                ("unchanged", report.unchanged),
            ):
                for doc_id in ids:
                    job = owners.get(doc_id)
                    if job is not None:
                        job.status[doc_id] = name
                        job.errors.pop(doc_id, None)
                        counts.append(name)
        if self._on_document is not None:
            for name in counts:
                self._on_document(name)

    def _fail(self, job: Job, doc_id: str, message: str) -> None:
        with self._lock:
            job.status[doc_id] = "failed"
            job.errors[doc_id] = message
        if self._on_document is not None:
            self._on_document("failed")
