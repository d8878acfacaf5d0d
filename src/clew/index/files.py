"""Publishing derived index files consistently.

Each save writes its data files under a fresh stamp (``lexical-<stamp>.npz`` …), then atomically
replaces the small JSON manifest that names the stamp, then removes files of older stamps. A
reader opens the manifest first and then exactly the files it names, so it never mixes files of
two saves; if a concurrent save removed them in between, the load fails and the index is rebuilt
from the store (derived data is never the only copy).
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from pathlib import Path
from typing import Any


def new_stamp() -> str:
    return uuid.uuid4().hex[:16]


def data_path(directory: Path, name: str, stamp: str, suffix: str) -> Path:
    return directory / f"{name}-{stamp}{suffix}"


def publish(directory: Path, name: str, stamp: str, meta: dict[str, Any]) -> None:
    """Point ``<name>.json`` at ``stamp`` and remove the data files of other stamps."""
    manifest = directory / f"{name}.json"
    tmp = directory / f"{name}.json.tmp{os.getpid()}"
    tmp.write_text(json.dumps({**meta, "stamp": stamp}), encoding="utf-8")
    os.replace(tmp, manifest)
    for old in directory.glob(f"{name}-*"):
        if stamp not in old.name:
            with contextlib.suppress(OSError):  # already gone, or in use on another platform
                old.unlink()


def read_manifest(directory: Path, name: str, fmt: str) -> dict[str, Any] | None:
    try:
        meta = json.loads((directory / f"{name}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("format") != fmt or "stamp" not in meta:
        return None
    return meta
