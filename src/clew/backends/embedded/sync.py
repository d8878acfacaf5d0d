"""Catching up: the derived indexes of an embedded index brought to the store's release.

Every store read happens in one read transaction, so a snapshot holds exactly one committed
release even while other connections or processes commit. The lexical and vector indexes catch
up in place from the change log (or rebuild when too much changed); the graph is rebuilt per
release. Derived files are saved afterwards, best effort: they are a cache of the store, so a
failed save (disk full, read-only directory) is logged and the next open catches up or
rebuilds."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

from clew.backends.embedded.graph import load_graph, save_graph
from clew.backends.embedded.lexical import BM25Index
from clew.backends.embedded.snapshot import EmbeddedSnapshot
from clew.backends.embedded.store import SQLiteStore
from clew.backends.embedded.vector import VectorIndex
from clew.config import DenseConfig
from clew.index.graph import GraphIndex
from clew.ingest.analyze import ANALYZER_VERSION

log = logging.getLogger(__name__)

__all__ = ["rebuild_lexical", "sync"]


def rebuild_lexical(store: SQLiteStore) -> BM25Index:
    """A BM25 index of every live chunk, built from the store's tokens."""
    idx = BM25Index()
    idx.analyzer = ANALYZER_VERSION
    idx.add(store.iter_tokens(0))
    idx.release = -1
    return idx


def sync(
    store: SQLiteStore, directory: Path, old: EmbeddedSnapshot | None, dense: DenseConfig
) -> EmbeddedSnapshot:
    """A snapshot at the store's current release, catching up from ``old`` where it can."""
    d = directory
    saves: list[tuple[str, Callable[..., None]]] = []
    with store.reading():
        release = store.release()
        origin = store.origin(release)  # what the saved files will say they reflect
        size = store.max_ordinal() + 1
        live_ords = store.live_ordinals()
        live = np.zeros(size, dtype=bool)
        live[live_ords] = True

        lexical = old.lexical_index if old else BM25Index.load(d, source=store)
        if (
            lexical is None
            or lexical.analyzer != ANALYZER_VERSION
            or lexical.last_ordinal >= size
            or lexical.release > release
            or len(live_ords) < 0.8 * lexical.n_docs
        ):
            lexical = rebuild_lexical(store)
        elif lexical.release != release:
            lexical.add(store.iter_tokens(lexical.last_ordinal))
            if lexical.needs_merge():
                lexical = rebuild_lexical(store)
        if lexical.release != release:
            lexical.release = release
            saves.append(("lexical", lexical.save))

        model = str(store.get_meta("embedder_version") or "")
        vector = old.vector_index if old else VectorIndex.load(d, dense, source=store)
        if (
            vector is None
            or vector.model != model
            or vector.last_ordinal >= size
            or vector.release > release
        ):
            vector = VectorIndex(int(store.get_meta("dim") or 384), dense)
            vector.model = model
            vector.add(store.iter_vectors(0))
            vector.release = -1
        elif vector.release != release:
            vector.add(store.iter_vectors(vector.last_ordinal))
        if vector.release != release:
            vector.release = release
            saves.append(("vector", vector.save))

        graph = old.graph_index if old else load_graph(d, store)
        if graph is None or graph.release != release:
            graph = GraphIndex.build(store.graph_rows(), size, release)
            if old is not None:
                graph.adopt_fuzzy(old.graph_index)
            saves.append(("graph", partial(save_graph, graph)))
        if old is not None:
            keys = dict(old.keys)
            keys.update(store.chunk_keys(after=max(old.keys, default=0)))
        else:
            keys = dict(store.chunk_keys(after=0))
    if not store.read_only:
        for name, save in saves:
            try:
                save(d, origin)
            except (OSError, RuntimeError) as exc:  # faiss reports I/O as RuntimeError
                log.warning(
                    "could not save the %s index in %s (%s); it is served from memory and "
                    "rebuilt from the store on the next open",
                    name,
                    d,
                    exc,
                )
    return EmbeddedSnapshot(release, lexical, vector, graph, live, store, keys)
