"""The writer lock: one writer per index directory at a time, across threads and processes.

Every write (:meth:`clew.Engine.ingest`, :meth:`clew.Engine.delete`) holds two locks for its
whole length, store commit and derived-index save included:

- a process-wide re-entrant thread lock per index directory (by real path), so two threads, or
  two :class:`~clew.Engine` objects of one process, take turns;
- an exclusive ``flock`` on ``<index>/write.lock``, so two processes take turns. The kernel drops
  it when its holder exits, however it exits (SIGKILL included): there is no stale lock to clean
  up. The holder writes its pid into the file so that a rejected writer can name it.

A writer that cannot get both within ``timeout`` seconds gets a :class:`StoreError` naming the
index and the holder, and has written nothing. Readers never take the lock: SQLite (WAL) gives
them a consistent snapshot while a write is under way.
"""

from __future__ import annotations

import errno
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from clew.errors import ConfigError, StoreError

LOCK_NAME = "write.lock"


@dataclass(slots=True)
class _DirState:
    """The in-process side of one directory's lock."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    depth: int = 0
    """Nested holds by the owning thread (only the owner reads or writes it)."""
    fd: int = -1


_STATES: dict[str, _DirState] = {}
_STATES_GUARD = threading.Lock()


def _state(directory: Path) -> _DirState:
    key = os.path.realpath(directory)
    with _STATES_GUARD:
        state = _STATES.get(key)
        if state is None:
            state = _STATES[key] = _DirState()
        return state


class WriteLock:
    """Serializes writers of one index directory; see the module docstring."""

    def __init__(self, directory: str | Path, timeout: float = 5.0) -> None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0:
            raise ConfigError(f"write_timeout={timeout!r} is invalid; allowed: seconds >= 0")
        self.directory = Path(directory)
        self.timeout = float(timeout)

    @property
    def path(self) -> Path:
        return self.directory / LOCK_NAME

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Hold the lock for the body; re-entrant within one thread."""
        deadline = time.monotonic() + self.timeout
        state = _state(self.directory)
        if not state.lock.acquire(timeout=self.timeout):
            raise StoreError(
                f"index at {str(self.directory)!r} is being written by another thread of this "
                f"process (pid {os.getpid()}); waited {self.timeout:g}s; try again later"
            )
        try:
            if state.depth == 0:
                state.fd = self._lock_file(deadline)
            state.depth += 1
            try:
                yield
            finally:
                state.depth -= 1
                if state.depth == 0:
                    _unlock_file(state.fd)
                    state.fd = -1
        finally:
            state.lock.release()

    def _lock_file(self, deadline: float) -> int:
        if sys.platform == "win32":  # no flock: threads of one process are still serialized
            return -1
        import fcntl

        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StoreError(
                f"cannot write to the index at {str(self.directory)!r}: cannot open its lock "
                f"file {LOCK_NAME!r} ({exc.strerror or exc})"
            ) from exc
        pause = 0.005
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise StoreError(
                        f"cannot lock the index at {str(self.directory)!r} for writing: {exc}"
                    ) from exc
            left = deadline - time.monotonic()
            if left <= 0:
                holder = _holder(fd)
                os.close(fd)
                raise StoreError(
                    f"index at {str(self.directory)!r} is being written by another process "
                    f"(pid {holder}); waited {self.timeout:g}s; try again later"
                )
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.1)
        with suppress(OSError):  # the pid is a courtesy for the error message (disk may be full)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return fd


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return "unknown"
    return text if text.isdigit() else "unknown"


def _unlock_file(fd: int) -> None:
    if fd < 0:
        return
    with suppress(OSError):
        os.ftruncate(fd, 0)
    os.close(fd)  # closing the only descriptor releases the flock
