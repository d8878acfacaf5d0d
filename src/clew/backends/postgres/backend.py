"""The PostgreSQL backend: one schema of a PostgreSQL database, reached by URL."""

from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path
from typing import Any

import numpy as np

from clew.backends.postgres.snapshot import ChunkKeys, PgSnapshot, SqlLegs
from clew.backends.postgres.store import PostgresStore
from clew.config import DenseConfig, EngineConfig
from clew.protocols import Snapshot

log = logging.getLogger(__name__)

__all__ = ["PostgresBackend", "state_dir"]


def state_dir(url: str) -> Path:
    """A local folder for what a PostgreSQL-backed engine keeps beside the database (traces,
    derived-index caches, the local write lock), keyed by the URL without its password."""
    from clew.models.embedder import cache_dir

    safe = re.sub(r"://([^:@/]*):[^@]*@", r"://\1@", url)
    return Path(cache_dir()) / "postgres" / hashlib.sha256(safe.encode()).hexdigest()[:16]


class PostgresBackend:
    """A PostgreSQL store; the legs run in the database (:class:`PgSnapshot`)."""

    name = "postgresql"

    def __init__(self, target: str | Path, *, create: bool, read_only: bool) -> None:
        self.url: str | None = str(target)
        self.store = PostgresStore(str(target), create=create, read_only=read_only, pool_size=8)
        self.directory = state_dir(str(target)) / self.store.schema
        self.directory.mkdir(parents=True, exist_ok=True)
        self._shared: tuple[Any, ChunkKeys] | None = None
        """The graph leg and the chunk keys, shared by every snapshot."""

    def snapshot(self, current: Snapshot | None, config: EngineConfig) -> PgSnapshot:
        """The release and its live chunks; nothing derived is copied into memory."""
        from clew.backends.postgres.graph import PgGraph

        store = self.store
        if self._shared is None:
            self._shared = (PgGraph(store.connection), ChunkKeys(store))
        graph, keys = self._shared
        with store.reading():
            release = store.release()
            size = store.max_ordinal() + 1
            live = np.zeros(size, dtype=bool)
            live[store.live_ordinals()] = True
        dense = config.dense
        sql = SqlLegs(store, release, dense, graph)
        return PgSnapshot(release, live, store, keys, sql, lambda name: self._build(name, dense))

    def _build(self, name: str, dense: DenseConfig) -> Any:
        """An in-memory copy of a derived index from the store, for a path that has no SQL
        form (none of search, ask, similar or the reranker needs one)."""
        from clew.backends.embedded.lexical import BM25Index
        from clew.backends.embedded.vector import VectorIndex
        from clew.ingest.analyze import ANALYZER_VERSION

        log.warning("building the in-memory %s index from the PostgreSQL store", name)
        if name == "lexical":
            idx = BM25Index()
            idx.analyzer = ANALYZER_VERSION
            idx.add(self.store.iter_tokens(0))
            idx.release = -1
            return idx
        if name != "vector":  # the graph comes from the graph leg (PgSnapshot.graph_index)
            raise ValueError(f"no in-memory {name!r} index is built here")
        vector = VectorIndex(int(self.store.get_meta("dim") or 384), dense)
        vector.add(self.store.iter_vectors(0))
        return vector

    def close(self) -> None:
        self.store.close()
