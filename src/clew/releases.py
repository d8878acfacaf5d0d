"""Which release a request reads: the current snapshot, catching up, and pinning.

Catching up updates the embedded lexical and vector indexes in place, so it waits until no
request is reading the current snapshot, and requests wait for it (a read-write lock whose
waiting writer holds back new readers). A request pins one snapshot for all its stages
(:meth:`Releases.reading`); a reader never waits on another thread's catching up: it answers
from the release it has."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from clew.config import EngineConfig
from clew.protocols import Backend, Snapshot

__all__ = ["ReadWriteLock", "Releases"]


class ReadWriteLock:
    """Many readers or one writer; a waiting writer holds back new readers (no starvation)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writing = False
        self._waiting = 0

    @contextmanager
    def reading(self) -> Iterator[None]:
        with self._cond:
            while self._writing or self._waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def writing(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            try:
                while self._writing or self._readers:
                    self._cond.wait()
            finally:
                self._waiting -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()


class Releases:
    """The snapshots of one backend: the current one, brought up to the store's release."""

    def __init__(self, backend: Backend, config: Callable[[], EngineConfig]) -> None:
        self._backend = backend
        self._config = config
        """The engine's config as it is now (its dense settings shape a rebuilt vector index)."""
        self._snapshot: Snapshot | None = None
        self._refresh_lock = threading.Lock()
        self._rw = ReadWriteLock()
        self._local = threading.local()

    @property
    def latest(self) -> Snapshot | None:
        """The newest snapshot built so far, without catching up (None before the first)."""
        return self._snapshot

    @property
    def pinned(self) -> Snapshot | None:
        """The snapshot this thread's request reads, if one is pinned."""
        return getattr(self._local, "snap", None)

    def refresh(self) -> None:
        """Bring the snapshot up to the store's release (catch up or rebuild)."""
        if self.pinned is not None:
            return  # a request pinned to its snapshot never refreshes in the middle
        with self._refresh_lock:
            release = self._backend.store.release()
            if self._snapshot is not None and self._snapshot.release == release:
                return
            with self._rw.writing():
                self._snapshot = self._backend.snapshot(self._snapshot, self._config())

    @contextmanager
    def reading(self) -> Iterator[Snapshot]:
        """Pin one snapshot for a whole request: every stage of a search or ask (and its trace)
        reads the same release, however many writes land meanwhile. Re-entrant per thread."""
        pinned = self.pinned
        if pinned is not None:
            yield pinned
            return
        self.current()  # catch up first, outside the read side
        with self._rw.reading():
            snap = self._snapshot
            assert snap is not None
            self._local.snap = snap
            try:
                yield snap
            finally:
                self._local.snap = None

    def current(self) -> Snapshot:
        """The pinned snapshot, or the latest (catching up unless another thread already is)."""
        pinned = self.pinned
        if pinned is not None:
            return pinned
        release = self._backend.store.release()
        snap = self._snapshot
        if snap is None or snap.release != release:
            if snap is not None and not self._refresh_lock.acquire(blocking=False):
                return snap  # another thread is catching up: answer from the current release
            if snap is not None:
                self._refresh_lock.release()
            self.refresh()
            snap = self._snapshot
        assert snap is not None
        return snap
