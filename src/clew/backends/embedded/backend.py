"""The embedded backend: one index directory (SQLite store + derived index files)."""

from __future__ import annotations

from pathlib import Path

from clew.backends.embedded.snapshot import EmbeddedSnapshot
from clew.backends.embedded.store import SQLiteStore
from clew.backends.embedded.sync import sync
from clew.config import EngineConfig
from clew.protocols import Snapshot

__all__ = ["EmbeddedBackend"]


class EmbeddedBackend:
    """An index directory: the SQLite system of record and the derived files beside it."""

    name = "file"

    def __init__(self, target: str | Path, *, create: bool, read_only: bool) -> None:
        self.url: str | None = None
        self.directory = Path(target)
        self.store = SQLiteStore(self.directory, create=create, read_only=read_only)

    def snapshot(self, current: Snapshot | None, config: EngineConfig) -> EmbeddedSnapshot:
        old = current if isinstance(current, EmbeddedSnapshot) else None
        return sync(self.store, self.directory, old, config.dense)

    def close(self) -> None:
        self.store.close()
