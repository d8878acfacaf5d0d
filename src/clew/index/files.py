"""Publishing derived index files consistently, and reading them back defensively.

Each save writes its data files under a fresh stamp (``lexical-<stamp>.npz`` …) inside
:func:`staged`, then :func:`publish` fsyncs them, records their sizes in a small JSON manifest
that names the stamp, writes that manifest to a temporary file, fsyncs it, atomically replaces
``<name>.json`` with it and fsyncs the directory; only then are files of older stamps removed.
A crash at any point (SIGKILL, power loss) leaves either the old manifest with its complete old
files or the new manifest with its complete new files; a save that fails (disk full) removes
what it wrote.

A reader opens the manifest first and then exactly the files it names, checking their sizes, so
it never mixes files of two saves. Any file that is missing, truncated or unparsable makes the
load return ``None`` and the index is rebuilt from the store: derived data is never the only copy.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

LOAD_ERRORS: tuple[type[Exception], ...] = (
    OSError,
    ValueError,
    KeyError,
    TypeError,
    IndexError,
    EOFError,
    RuntimeError,
    zipfile.BadZipFile,
)
"""What reading a torn, truncated or foreign derived file can raise (faiss: RuntimeError)."""


def new_stamp() -> str:
    return uuid.uuid4().hex[:16]


def data_path(directory: Path, name: str, stamp: str, suffix: str) -> Path:
    return directory / f"{name}-{stamp}{suffix}"


@contextlib.contextmanager
def staged(directory: Path, name: str) -> Iterator[str]:
    """A fresh stamp for one save; if the save fails, its files are removed and it re-raises."""
    stamp = new_stamp()
    try:
        yield stamp
    except BaseException:
        for path in directory.glob(f"{name}-{stamp}*"):
            with contextlib.suppress(OSError):
                path.unlink()
        for path in directory.glob(f"{name}.json.tmp*-{stamp}"):
            with contextlib.suppress(OSError):
                path.unlink()
        raise


def publish(directory: Path, name: str, stamp: str, meta: dict[str, Any]) -> None:
    """Point ``<name>.json`` at ``stamp`` and remove the files of other stamps."""
    sizes = {}
    for path in sorted(directory.glob(f"{name}-{stamp}*")):
        _fsync_file(path)
        sizes[path.name] = path.stat().st_size
    manifest = directory / f"{name}.json"
    tmp = directory / f"{name}.json.tmp{os.getpid()}-{stamp}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps({**meta, "stamp": stamp, "files": sizes}))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, manifest)
    _fsync_dir(directory)
    for old in directory.glob(f"{name}-*"):
        if stamp not in old.name:
            with contextlib.suppress(OSError):  # already gone, or in use on another platform
                old.unlink()
    for old in directory.glob(f"{name}.json.tmp*"):
        if not _writer_alive(old.name.removeprefix(f"{name}.json.tmp")):
            with contextlib.suppress(OSError):
                old.unlink()


def read_manifest(directory: Path, name: str, fmt: str) -> dict[str, Any] | None:
    """The manifest of ``name`` if it is readable, of format ``fmt``, and every data file it
    names is present with its recorded size; else None (the caller rebuilds)."""
    try:
        meta = json.loads((directory / f"{name}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("format") != fmt or "stamp" not in meta:
        return None
    files = meta.get("files", {})
    if not isinstance(files, dict):
        return None
    for file_name, size in files.items():
        try:
            if (directory / str(file_name)).stat().st_size != size:
                return None
        except OSError:
            return None
    return meta


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # a platform that cannot open directories (the rename is still atomic)
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def _writer_alive(suffix: str) -> bool:
    """Whether the process that wrote temp manifest ``<name>.json.tmp<pid>-<stamp>`` runs."""
    pid_text = suffix.split("-", 1)[0]
    if not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return True  # another engine of this process may be saving (a failed save cleans up)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True
