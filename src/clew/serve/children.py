"""Child processes of the service commands (``clew ui`` starts ``clew serve`` and Streamlit):
stopping them, and stopping them when the parent is told to stop.

A process that gets SIGTERM with Python's default action dies at once, and its children live
on (an orphan API still answering). :func:`stop_on_signals` turns the signal into an exception
in the main thread instead, so ``finally`` blocks stop and reap the children first."""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

__all__ = ["STOP_SIGNALS", "Stopped", "stop_child", "stop_on_signals"]

STOP_SIGNALS: tuple[int, ...] = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)
"""What :func:`stop_on_signals` handles by default (SIGINT is Python's KeyboardInterrupt)."""


class Stopped(SystemExit):
    """Raised in the main thread by a stop signal (SIGTERM, SIGHUP): cleanup (``finally``)
    runs, then the process exits with status 128 + the signal's number."""


@contextmanager
def stop_on_signals(signals: Sequence[int] = STOP_SIGNALS) -> Iterator[None]:
    """While inside: the first of ``signals`` raises :class:`Stopped` in the main thread (the
    default action would end the process at once, leaving its children running); later ones
    are ignored while the cleanup runs. The previous handlers come back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield  # handlers can be installed from the main thread only
        return
    fired: list[int] = []

    def handler(signum: int, frame: object) -> None:
        if not fired:
            fired.append(signum)
            raise Stopped(128 + signum)

    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, signal.SIG_DFL if old is None else old)


def stop_child(proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    """Stop a child process: SIGTERM, wait up to ``timeout`` seconds, then SIGKILL; reaped
    either way (no zombie left behind)."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
