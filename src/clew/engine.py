"""The engine: one index directory, fixed-order stages, consistent snapshots.

Query stages, in order: validate → filter (compile once to a mask) → link concepts → route →
legs (lexical, dense, graph; in parallel, each with the same mask, over-fetched) → fuse (RRF,
contributions kept) → dedup (content hash) → hits. Every search reads one snapshot of the derived
indexes, all at the same release, so results never mix releases.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from clew.backends.embedded.lexical import BM25Index
from clew.backends.embedded.store import SQLiteStore
from clew.backends.embedded.vector import VectorIndex
from clew.backends.postgres.snapshot import ChunkKeys, SqlLegs
from clew.config import EmbedderConfig, EngineConfig, preset_config
from clew.errors import ConfigError, QueryError, StoreError
from clew.filters import Mask, matches, parse_filter, parse_time, to_json
from clew.index.graph import GraphIndex, LinkedConcept
from clew.ingest.analyze import ANALYZER_VERSION, analyze, query_terms
from clew.ingest.chunk import Chunker
from clew.ingest.concepts import ConceptExtractor
from clew.ingest.load import load_path
from clew.ingest.pipeline import IngestContext, IngestWriter, ingest
from clew.protocols import (
    ChunkRow,
    Encoder,
    RerankCandidate,
    Reranker,
)
from clew.retrieve.expand import expand
from clew.retrieve.fuse import Fused, dedup, rrf
from clew.retrieve.recency import apply_recency, epoch, without_memory_recency
from clew.retrieve.rerank import build_reranker, leg_features, recency, rerank
from clew.retrieve.route import route
from clew.retrieve.run import Answered, BrokenReranker, Replay, Run, elapsed_ms, to_hit
from clew.retrieve.scoped_writer import ScopedWriter
from clew.retrieve.snapshot import (
    MEMORY_KIND,
    SAME_SCOPE,
    ReadWriteLock,
    ScopeStats,
    Snapshot,
)
from clew.types import (
    Document,
    Hit,
    IngestReport,
    LegHit,
    SearchResult,
    Similar,
    StoredChunk,
    StoredDocument,
)

if TYPE_CHECKING:
    from clew.backends.postgres.store import PostgresStore
    from clew.compose.answer import Answer, Calibration
    from clew.trace import TraceStore

log = logging.getLogger(__name__)

_ASK_K = 20
"""Hits an answer considers before assembly (the token budget decides how many are kept)."""
_ANSWER_CHUNKS = 4
"""Kept chunks whose sentences compete for the extractive answer (the best-ranked ones)."""

_INGEST_META = ("embedder", "embedder_version", "dim", "analyzer", "concepts", "chunk")


def _is_url(target: str | Path) -> bool:
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))


def display_target(target: str | Path) -> str:
    """An index directory or store URL fit for logs and messages (no password)."""
    import re

    return re.sub(r"://([^:@/]*):[^@]*@", r"://\1:***@", str(target))


def _state_dir(url: str) -> Path:
    """A local folder for what a PostgreSQL-backed engine keeps beside the database (traces,
    derived-index caches, the local write lock), keyed by the URL without its password."""
    import hashlib
    import re

    from clew.models.embedder import cache_dir

    safe = re.sub(r"://([^:@/]*):[^@]*@", r"://\1@", url)
    return Path(cache_dir()) / "postgres" / hashlib.sha256(safe.encode()).hexdigest()[:16]


class Engine:
    """Embedded clew: ingest, delete and search one index directory."""

    def __init__(
        self,
        directory: str | Path,
        config: EngineConfig | None = None,
        *,
        create: bool = False,
        encoder: Encoder | None = None,
        extractor: ConceptExtractor | None = None,
        read_only: bool = False,
        write_timeout: float = 5.0,
    ) -> None:
        """Open (or with ``create``, create) the index in ``directory``.

        ``read_only``: never write (an index whose directory this process cannot write opens
        read-only by itself: ``engine.store.read_only``). ``write_timeout``: seconds an ingest or
        delete waits for another writer (thread or process) to finish before it fails with a
        :class:`StoreError` naming that writer; see :mod:`clew.backends.embedded.lock`."""
        from clew.backends.embedded.lock import WriteLock

        self.config = config or EngineConfig()
        self.url: str | None = None
        """The PostgreSQL URL when the index lives in PostgreSQL (``directory`` is then a
        local folder for traces and caches)."""
        self.store: SQLiteStore | PostgresStore
        if _is_url(directory):
            from clew.backends.postgres.store import PostgresStore

            self.url = str(directory)
            self.store = PostgresStore(self.url, create=create, read_only=read_only, pool_size=8)
            self.directory = _state_dir(self.url) / self.store.schema
            self.directory.mkdir(parents=True, exist_ok=True)
        else:
            self.directory = Path(directory)
            self.store = SQLiteStore(self.directory, create=create, read_only=read_only)
        self._write_lock = WriteLock(self.directory, write_timeout)
        if self.store.read_only and self.config.trace.enabled:
            # a trace is a file in the index directory: none can be written here
            self.config = replace(self.config, trace=replace(self.config.trace, enabled=False))
        self._encoder = encoder
        self._injected_encoder = encoder is not None
        self._extractor = extractor
        self._snapshot: Snapshot | None = None
        self._pg: tuple[Any, ChunkKeys] | None = None
        """PostgreSQL: the graph leg and the chunk keys, shared by every snapshot."""
        self._sync_lock = threading.Lock()
        """Guards the model, calibration and trace caches (never held while waiting on _rw)."""
        self._refresh_lock = threading.Lock()
        self._rw = ReadWriteLock()
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="clew-leg")
        self._rerankers: dict[tuple[Any, ...], Reranker] = {}
        self._calibrations: dict[str, Calibration] = {}
        self._traces: TraceStore | None = None
        self._cache: OrderedDict[str, Any] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._check_ingest_meta()

    @classmethod
    def open(
        cls,
        directory: str | Path,
        config: EngineConfig | None = None,
        *,
        create: bool = False,
        encoder: Encoder | None = None,
        extractor: ConceptExtractor | None = None,
        read_only: bool = False,
        write_timeout: float = 5.0,
    ) -> Engine:
        return cls(
            directory,
            config,
            create=create,
            encoder=encoder,
            extractor=extractor,
            read_only=read_only,
            write_timeout=write_timeout,
        )

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.store.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- models -----------------------------------------------------------------------------

    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            from clew.models.embedder import load_encoder

            self._encoder = load_encoder(self.config.embedder)
        return self._encoder

    @property
    def extractor(self) -> ConceptExtractor:
        if self._extractor is None:
            self._extractor = ConceptExtractor(self.config.concepts, self.config.ingest)
        return self._extractor

    def _encoder_name(self) -> str:
        """What the index records as its embedder: the model spec, or an injected encoder's name."""
        if self._injected_encoder:
            return str(getattr(self._encoder, "name", None) or type(self._encoder).__name__)
        return self.config.embedder.model

    def _ingest_meta(self) -> dict[str, str]:
        enc = self.encoder
        return {
            "embedder": self._encoder_name(),
            "embedder_version": str(getattr(enc, "version", "")),
            "dim": str(getattr(enc, "dim", "")),
            "analyzer": ANALYZER_VERSION,
            "concepts": self.extractor.version,
            "chunk": json.dumps([self.config.chunk.max_tokens, self.config.chunk.overlap_tokens]),
        }

    def _check_ingest_meta(self) -> None:
        """Queries must be embedded by the model the index was built with."""
        stored = self.store.get_meta("embedder")
        if stored is None:
            return
        stored_version = self.store.get_meta("embedder_version") or ""
        if self._injected_encoder:
            version = str(getattr(self._encoder, "version", "") or "")
            same = (
                (version == stored_version)
                if version and stored_version
                else (self._encoder_name() == stored)
            )
            if not same:
                raise ConfigError(
                    f"index at {str(self.directory)!r} was built with embedder {stored!r} "
                    f"(version {stored_version or '?'}); the given encoder is "
                    f"{self._encoder_name()!r} (version {version or '?'}). Re-ingest into a new "
                    "index to change models"
                )
            return
        wanted = self.config.embedder.model
        if wanted == EmbedderConfig().model and stored != wanted:
            # default config on an index built with another model: query with that model
            self.config = replace(self.config, embedder=replace(self.config.embedder, model=stored))
        elif stored != wanted:
            raise ConfigError(
                f"index at {str(self.directory)!r} was built with embedder {stored!r}; "
                f"got {wanted!r}. Re-ingest into a new index to change models"
            )

    # -- writes -----------------------------------------------------------------------------

    def ingest(
        self,
        sources: Iterable[str | Path] | Sequence[Document],
        *,
        progress: bool = False,
        scope: Any = None,
    ) -> IngestReport:
        """Ingest files, directories or :class:`Document` values; then refresh the indexes.

        ``scope``: the writer's access filter (a service key's scope). Entity resolution then
        resolves names against concepts its scope can see only, so what a write links to never
        depends on (or reveals) documents outside the scope.

        One writer at a time: the write lock (:mod:`clew.backends.embedded.lock`) is held from the
        first
        store read to the last derived-index save; waiting longer than ``write_timeout`` for
        another writer is a :class:`StoreError`, and so is a read-only index or a failed write
        (disk full): each store batch is one transaction, so a failure leaves earlier batches
        complete and nothing of its own."""
        self.store.check_writable()
        items = list(sources)
        if all(isinstance(s, Document) for s in items):
            docs: Iterable[Document] = items  # type: ignore[assignment]
        else:
            limits = self.config.ingest
            docs = [d for s in items for d in load_path(s, limits=limits)]  # type: ignore[arg-type]
        meta = self._ingest_meta()
        counter = getattr(self.encoder, "count_tokens", None)
        if counter is None:
            raise ConfigError("the encoder has no count_tokens(texts) method for chunk sizing")
        ctx = IngestContext(
            chunker=Chunker(self.config.chunk, counter, self.config.ingest),
            encoder=self.encoder,
            extractor=self.extractor,
            fingerprint=json.dumps(meta, sort_keys=True),
        )
        with self._write_lock.hold():
            stored = {k: self.store.get_meta(k) for k in _INGEST_META}
            if stored["embedder"] is not None and stored["dim"] != meta["dim"]:
                raise ConfigError(
                    f"embedder dimension {meta['dim']} does not match the index ({stored['dim']})"
                )
            if any(stored[k] != meta[k] for k in _INGEST_META):
                self.store.set_meta(meta)  # before the first batch: it describes what is written
            writer: IngestWriter = self.store
            if parse_filter(scope) is not None:
                writer = ScopedWriter(self.store, self._snap(), scope)
            try:
                report = ingest(docs, writer, ctx, progress=progress)
            finally:
                self.refresh()
        return report

    def delete(self, doc_ids: str | Sequence[str]) -> int:
        """Remove documents from every leg. Unknown ids are an error, nothing is removed.

        Holds the write lock like :meth:`ingest`; the removal is one transaction."""
        self.store.check_writable()
        ids = [doc_ids] if isinstance(doc_ids, str) else list(doc_ids)
        with self._write_lock.hold():
            missing = [d for d in ids if not self.store.has_document(d)]
            if missing:
                raise StoreError(f"no document with id {missing[0]!r} in the index")
            try:
                return self.store.delete(ids)
            finally:
                self.refresh()

    # -- derived indexes --------------------------------------------------------------------

    def refresh(self) -> None:
        """Bring the derived indexes up to the store's release (catch up or rebuild).

        Catching up updates the lexical and vector indexes in place, so it waits until no
        request is reading the current snapshot (:meth:`_reading`), and requests wait for it."""
        if getattr(self._local, "snap", None) is not None:
            return  # a request pinned to its snapshot never refreshes in the middle
        with self._refresh_lock:
            release = self.store.release()
            if self._snapshot is not None and self._snapshot.release == release:
                return
            with self._rw.writing():
                self._snapshot = self._sync(release)

    def snapshot(self) -> AbstractContextManager[Snapshot]:
        """Pin one release for a block: every search, ask and lookup inside it reads the same
        snapshot of the index, however many writes land meanwhile (re-entrant per thread)::

            with engine.snapshot() as snap:
                layout = snap.graph.layout()
                result = engine.search("...")   # the same release as ``snap``
        """
        return self._reading()

    def retrieve(
        self,
        query: str,
        *,
        k: int | None = None,
        filter: Any = None,
        preset: str | None = None,
        config: EngineConfig | None = None,
        scope: Any = None,
        exclude_docs: Sequence[str] = (),
        as_of: float | None = None,
    ) -> Run:
        """Every retrieval stage, uncached and untraced, with the intermediate lists kept: the
        route, each leg's list, the fused, expanded and reranked pools, the feature values and
        the hits (``run.result()`` is what :meth:`search` returns). ``exclude_docs`` hides whole
        documents as a filter would (calibration uses it to make queries whose evidence is
        absent). For evaluation, training and benchmarks; applications call :meth:`search`."""
        with self._reading():
            return self._retrieve(
                query,
                k=k,
                filter=filter,
                preset=preset,
                config=config,
                exclude_docs=exclude_docs,
                scope=scope,
                as_of=as_of,
            )

    def answer(
        self,
        question: str,
        *,
        k: int | None = None,
        filter: Any = None,
        preset: str | None = None,
        config: EngineConfig | None = None,
        scope: Any = None,
        exclude_docs: Sequence[str] = (),
        as_of: float | None = None,
    ) -> Answered:
        """:meth:`ask` uncached and untraced, with its retrieval run and what its trace adds
        (``exclude_docs`` as in :meth:`retrieve`)."""
        with self._reading():
            answer, run, extra = self._ask(
                question,
                k=k,
                filter=filter,
                preset=preset,
                config=config,
                exclude_docs=exclude_docs,
                scope=scope,
                as_of=as_of,
            )
        return Answered(answer, run, extra)

    @contextmanager
    def _reading(self) -> Iterator[Snapshot]:
        """Pin one snapshot for a whole request: every stage of a search or ask (and its trace)
        reads the same release, however many writes land meanwhile. Re-entrant per thread."""
        pinned: Snapshot | None = getattr(self._local, "snap", None)
        if pinned is not None:
            yield pinned
            return
        self._snap()  # catch up first, outside the read side
        with self._rw.reading():
            snap = self._snapshot
            assert snap is not None
            self._local.snap = snap
            try:
                yield snap
            finally:
                self._local.snap = None

    def _snap(self) -> Snapshot:
        pinned: Snapshot | None = getattr(self._local, "snap", None)
        if pinned is not None:
            return pinned
        release = self.store.release()
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

    def _sync(self, release: int) -> Snapshot:
        """A snapshot at the store's current release (``release`` or a newer one).

        Every store read happens in one read transaction, so the snapshot holds exactly one
        committed release even while other connections or processes commit. Derived files are
        saved afterwards, best effort: they are a cache of the store, so a failed save (disk
        full, read-only directory) is logged and the next open catches up or rebuilds."""
        if self.url is not None:
            return self._sync_sql()
        d = self.directory
        store = self.store
        assert isinstance(store, SQLiteStore)
        saves: list[tuple[str, Callable[..., None]]] = []
        with self.store.reading():
            release = self.store.release()
            origin = store.origin(release)  # what the saved files will say they reflect
            size = self.store.max_ordinal() + 1
            live_ords = self.store.live_ordinals()
            live = np.zeros(size, dtype=bool)
            live[live_ords] = True
            old = self._snapshot

            lexical = old.lexical if old else BM25Index.load(d, source=store)
            if (
                lexical is None
                or lexical.analyzer != ANALYZER_VERSION
                or lexical.last_ordinal >= size
                or lexical.release > release
                or len(live_ords) < 0.8 * lexical.n_docs
            ):
                lexical = self._rebuild_lexical()
            elif lexical.release != release:
                lexical.add(self.store.iter_tokens(lexical.last_ordinal))
                if lexical.needs_merge():
                    lexical = self._rebuild_lexical()
            if lexical.release != release:
                lexical.release = release
                saves.append(("lexical", lexical.save))

            model = str(self.store.get_meta("embedder_version") or "")
            vector = old.vector if old else VectorIndex.load(d, self.config.dense, source=store)
            if (
                vector is None
                or vector.model != model
                or vector.last_ordinal >= size
                or vector.release > release
            ):
                vector = VectorIndex(int(self.store.get_meta("dim") or 384), self.config.dense)
                vector.model = model
                vector.add(self.store.iter_vectors(0))
                vector.release = -1
            elif vector.release != release:
                vector.add(self.store.iter_vectors(vector.last_ordinal))
            if vector.release != release:
                vector.release = release
                saves.append(("vector", vector.save))

            graph = old.graph if old else GraphIndex.load(d, source=store)
            if graph is None or graph.release != release:
                graph = GraphIndex.build(self.store.graph_rows(), size, release)
                if old is not None:
                    graph.adopt_fuzzy(old.graph)
                saves.append(("graph", graph.save))
            if old is not None:
                keys = dict(old.keys)
                keys.update(self.store.chunk_keys(after=max(old.keys, default=0)))
            else:
                keys = dict(self.store.chunk_keys(after=0))
        if not self.store.read_only:
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
        return Snapshot(release, lexical, vector, graph, live, self.store, keys)

    def _sync_sql(self) -> Snapshot:
        """A snapshot of a PostgreSQL store: the release and its live chunks. The legs run in
        the database; no derived index is copied into memory (the graph is loaded by the graph
        leg when a query first needs it, see :mod:`clew.backends.postgres.snapshot`)."""
        from clew.backends.postgres.graph import PgGraph
        from clew.backends.postgres.store import PostgresStore

        store = self.store
        assert isinstance(store, PostgresStore)
        if self._pg is None:
            self._pg = (PgGraph(store.connection), ChunkKeys(store))
        graph, keys = self._pg
        with store.reading():
            release = store.release()
            size = store.max_ordinal() + 1
            live = np.zeros(size, dtype=bool)
            live[store.live_ordinals()] = True
        snap = Snapshot(release, None, None, None, live, store, keys, _build=self._build_index)
        snap.sql = SqlLegs(store, release, self.config.dense, graph)
        return snap

    def _build_index(self, name: str) -> Any:
        """An in-memory copy of a derived index from the store, for a path that has no SQL
        form (none of search, ask, similar or the reranker needs one)."""
        log.warning("building the in-memory %s index from %s", name, display_target(self.url or ""))
        if name == "lexical":
            return self._rebuild_lexical()
        if name != "vector":  # the graph comes from the graph leg (Snapshot.graph)
            raise ValueError(f"no in-memory {name!r} index is built here")
        vector = VectorIndex(int(self.store.get_meta("dim") or 384), self.config.dense)
        vector.add(self.store.iter_vectors(0))
        return vector

    def _rebuild_lexical(self) -> BM25Index:
        idx = BM25Index()
        idx.analyzer = ANALYZER_VERSION
        idx.add(self.store.iter_tokens(0))
        idx.release = -1
        return idx

    # -- search -----------------------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        k: int | None = None,
        filter: Any = None,
        preset: str | None = None,
        config: EngineConfig | None = None,
        scope: Any = None,
        caller: str | None = None,
        as_of: float | None = None,
    ) -> SearchResult:
        """Hybrid search. Always returns a :class:`SearchResult`.

        ``scope`` is the caller's access filter (a service key's scope): AND-ed with ``filter``
        in every leg and graph expansion, so a request can narrow what it sees, never widen it.
        ``caller`` names the principal in the trace. ``as_of`` (epoch seconds) is the
        reference time of recency weighting (default: now). Memories in the index are found as
        documents are, on relevance alone: recency weighting of memories is :meth:`recall`'s."""
        cfg = without_memory_recency(config or (preset_config(preset) if preset else self.config))
        return self._search(query, k, filter, preset, cfg, scope, caller, as_of, SAME_SCOPE)

    def _search(
        self,
        query: str,
        k: int | None,
        filter: Any,
        preset: str | None,
        cfg: EngineConfig,
        scope: Any,
        caller: str | None,
        as_of: float | None,
        stats_scope: Any,
    ) -> SearchResult:
        with self._reading() as snap:
            key = self._cache_key("search", query, k, filter, scope, preset, cfg, as_of, caller)
            if key is not None and stats_scope is not SAME_SCOPE:
                key += "\x00" + json.dumps(stats_scope, sort_keys=True, default=str)
            cached = self._cache_get(key, snap)
            if cached is not None:
                return replace(cached, cached=True)  # type: ignore[no-any-return]
            run = self._retrieve(
                query,
                k=k,
                filter=filter,
                preset=preset,
                config=cfg,
                scope=scope,
                as_of=as_of,
                stats_scope=stats_scope,
            )
            run.caller = caller
            result = run.result()
            if run.cfg.trace.enabled and not self.store.read_only:
                result = replace(result, trace_id=self._write_trace(run, "search"))
            self._cache_put(key, snap, result)
        return result

    # -- result cache -----------------------------------------------------------------------

    def _cache_key(
        self,
        kind: str,
        query: Any,
        k: int | None,
        filter: Any,
        scope: Any,
        preset: str | None,
        cfg: EngineConfig,
        as_of: float | None,
        caller: str | None,
    ) -> str | None:
        """Everything a result depends on, or None when results of this config are not cached:
        the normalized query, k, the config (and so the route), filter, scope and caller, the
        time constraint, and (added per snapshot) the release, analyzer and model versions."""
        if cfg.cache.size == 0 or self.config.cache.size == 0 or not isinstance(query, str):
            return None
        if cfg.rerank.kind == "llm" or (kind == "ask" and cfg.answer.mode == "generative"):
            return None  # an external model answers: not a function of the index alone
        node, scope_node = parse_filter(filter), parse_filter(scope)
        recency = cfg.recency.weight > 0 and (cfg.recency.documents or cfg.recency.memories)
        moment = as_of if as_of is not None else (int(time.time() // 60) if recency else None)
        return json.dumps(
            [
                kind,
                " ".join(query.split()),
                k,
                to_json(node),
                to_json(scope_node),
                caller,
                preset,
                cfg.to_dict(),
                moment,
            ],
            sort_keys=True,
            default=str,
        )

    def _cache_get(self, key: str | None, snap: Snapshot) -> Any:
        if key is None:
            return None
        full = self._versioned(key, snap)
        with self._cache_lock:
            found = self._cache.get(full)
            if found is not None:
                self._cache.move_to_end(full)
            return found

    def _cache_put(self, key: str | None, snap: Snapshot, value: Any) -> None:
        rerank = getattr(value, "rerank", None)
        if key is None or (rerank is not None and not rerank.ran):
            return  # a reranker that fell back may work next time
        full = self._versioned(key, snap)
        with self._cache_lock:
            self._cache[full] = value
            while len(self._cache) > self.config.cache.size:
                self._cache.popitem(last=False)

    def _versioned(self, key: str, snap: Snapshot) -> str:
        versions = (self.store.get_meta("embedder_version"), self.store.get_meta("concepts"))
        return f"{snap.release}|{ANALYZER_VERSION}|{versions[0]}|{versions[1]}|{key}"

    def clear_cache(self) -> None:
        """Drop every cached result (a new release makes them unreachable anyway)."""
        with self._cache_lock:
            self._cache.clear()

    def _retrieve(
        self,
        query: str,
        *,
        k: int | None,
        filter: Any,
        preset: str | None,
        config: EngineConfig | None,
        exclude_docs: Sequence[str] = (),
        scope: Any = None,
        as_of: float | None = None,
        stats_scope: Any = SAME_SCOPE,
    ) -> Run:
        """Every stage up to the final hits, with the intermediate lists kept for the trace.

        ``exclude_docs`` hides whole documents as a filter would (calibration uses it to make
        queries whose evidence is absent). Statistics (BM25, concept idf, hub cuts, PageRank,
        answer idf) are computed over ``stats_scope`` (default: ``scope``; None = the whole
        index), so a scoped caller's numbers depend on nothing outside its scope."""
        started = time.perf_counter()
        timings: dict[str, float] = {}
        cfg = config or (preset_config(preset) if preset else self.config)
        if not isinstance(query, str) or not query.strip():
            raise QueryError("query is empty; give at least one word")
        if len(query) > cfg.search.max_query_chars:
            raise QueryError(
                f"query has {len(query)} characters; allowed: at most {cfg.search.max_query_chars}"
            )
        k = cfg.search.k if k is None else k
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= 1000:
            raise QueryError(f"k={k!r} is invalid; allowed: 1..1000")
        node = parse_filter(filter)
        filter_json = None if node is None else json.dumps(to_json(node), sort_keys=True)
        scope_node = parse_filter(scope)
        scope_json = None if scope_node is None else json.dumps(to_json(scope_node), sort_keys=True)

        t = time.perf_counter()
        snap = self._snap()
        sql_legs = snap.sql
        filtered = node is not None or scope_node is not None or bool(exclude_docs)
        stats_node = scope_node if stats_scope is SAME_SCOPE else parse_filter(stats_scope)
        stats_json = None if stats_node is None else json.dumps(to_json(stats_node), sort_keys=True)
        scoped = snap.scope_stats(stats_json)
        population = None if scoped is None else scoped.population
        graph_stats = None if scoped is None else scoped.graph

        # names the request's SQL predicate in the per-release caches of SqlLegs
        where_key = json.dumps([filter_json, scope_json, sorted(exclude_docs)])

        def mask() -> Mask:
            """The live chunks this request may see, as a mask over ordinals."""
            if sql_legs is not None:  # the database evaluates the predicate
                return sql_legs.mask(where_key, where, snap.live)
            allowed = snap.allowed(filter_json, scope_json)
            if exclude_docs:
                allowed = allowed.copy()
                chunks = snap.graph.layout().doc_chunks
                hidden = [o for doc in exclude_docs for o in chunks.get(doc, ())]
                allowed[[o for o in hidden if o < len(allowed)]] = False
            return allowed

        where: Any = None
        allowed: Mask | None = None
        if sql_legs is not None:
            # the filter runs in the database; a mask is built only if expansion needs one
            sql_legs.check_fields(node, scope_node)
            where = sql_legs.where(node, scope_node, exclude_docs)
        else:
            allowed = mask()
        timings["filter"] = elapsed_ms(t)

        # the query embedding is the longest stage: start it now, link and route meanwhile
        embedding: Future[Any] | None = None
        if cfg.fusion.dense_weight > 0 or cfg.rerank.kind == "features":
            embedding = self._pool.submit(self._embed_query, query, timings)

        t = time.perf_counter()
        if sql_legs is not None and scoped is not None:
            # a scoped caller's graph numbers come from the in-memory graph over its scope
            allowed = mask()
            linked = snap.graph.link(
                query, fuzzy=cfg.graph.fuzzy, word_weight=cfg.graph.word_weight, stats=graph_stats
            )
            linked = snap.graph.within(linked, allowed)
        elif sql_legs is not None:
            linked = sql_legs.graph.link(
                query, fuzzy=cfg.graph.fuzzy, word_weight=cfg.graph.word_weight
            )
            if filtered:
                linked = sql_legs.graph.within(linked, where)
        else:
            assert allowed is not None
            linked = snap.graph.link(
                query, fuzzy=cfg.graph.fuzzy, word_weight=cfg.graph.word_weight, stats=graph_stats
            )
            if allowed is not snap.live:
                linked = snap.graph.within(linked, allowed)
        chosen = route(query, len(linked), cfg.fusion, cfg.router)
        timings["route"] = elapsed_ms(t)

        # lexical and graph run in workers; dense waits on the embedding already under way in a
        # worker, so it runs on the caller's thread instead of holding a worker while it waits
        tokens = query_terms(query, cfg.lexical.part_weight)
        pooled: dict[str, Callable[[], list[LegHit]]] = {}
        inline: dict[str, Callable[[], list[LegHit]]] = {}
        if sql_legs is not None:
            live = snap.live

            def in_release(hits: list[LegHit]) -> list[LegHit]:
                return [h for h in hits if h.ordinal < len(live) and live[h.ordinal]]

            sl = sql_legs
            if "lexical" in chosen.legs:
                pooled["lexical"] = lambda: in_release(
                    sl.lexical.search(
                        tokens,
                        where,
                        cfg.lexical.depth,
                        k1=cfg.lexical.k1,
                        b=cfg.lexical.b,
                        stats=sl.stats if scoped is None else scoped.sql[1],
                        allowed_share=sl.share(where_key, where) if filtered else None,
                        within=None if scoped is None else scoped.sql[0],
                    )
                )
            if "dense" in chosen.legs:

                def sql_dense() -> list[LegHit]:
                    assert embedding is not None
                    return in_release(sl.vector.search(embedding.result(), where, cfg.dense.depth))

                inline["dense"] = sql_dense
            if "graph" in chosen.legs and scoped is not None and allowed is not None:
                in_scope = allowed
                pooled["graph"] = lambda: in_release(
                    snap.graph.search(
                        query, in_scope, cfg.graph.depth, cfg.graph, linked, stats=graph_stats
                    )
                )
            elif "graph" in chosen.legs:
                pooled["graph"] = lambda: in_release(
                    sl.graph.search(
                        query,
                        where,
                        cfg.graph.depth,
                        cfg.graph,
                        linked,
                        allowed=sl.ordinals(where_key, where) if filtered else None,
                    )
                )
        else:
            assert allowed is not None
            mask_ = allowed
            if "lexical" in chosen.legs:
                pooled["lexical"] = lambda: snap.lexical.search(
                    tokens,
                    mask_,
                    cfg.lexical.depth,
                    k1=cfg.lexical.k1,
                    b=cfg.lexical.b,
                    population=population,
                )
            if "dense" in chosen.legs:

                def dense() -> list[LegHit]:
                    assert embedding is not None
                    return snap.vector.search(embedding.result(), mask_, cfg.dense.depth)

                inline["dense"] = dense
            if "graph" in chosen.legs:
                pooled["graph"] = lambda: snap.graph.search(
                    query, mask_, cfg.graph.depth, cfg.graph, linked, stats=graph_stats
                )
        lists = self._run_legs(pooled, inline, timings)

        t = time.perf_counter()
        keys = snap.keys
        snap.load_keys(h.ordinal for hits in lists.values() for h in hits)

        def chunk_id(o: int) -> str:
            return keys[o][0]

        def content_hash(o: int) -> str:
            return keys[o][1]

        fused = rrf(lists, chosen.legs, cfg.fusion.rrf_k, chunk_id)
        if cfg.fusion.dedup:
            fused = dedup(fused, content_hash)
        timings["fuse"] = elapsed_ms(t)
        reference = time.time() if as_of is None else as_of
        rc = cfg.recency
        if fused and rc.weight > 0 and (rc.documents or (rc.memories and snap.has_memories())):
            t = time.perf_counter()
            fused = apply_recency(fused, snap, rc, reference, cfg.fusion.rrf_k)
            timings["recency"] = elapsed_ms(t)
        run = Run(cfg, query, k, to_json(node), preset or "default", snap, chosen, lists, fused)
        run.scope = to_json(scope_node)
        if stats_scope is not SAME_SCOPE:
            run.stats_scope = None if stats_node is None else to_json(stats_node)
        run.scoped = scoped
        run.reference = reference

        pool = fused
        if (cfg.expand.enabled or chosen.expand) and fused:
            t = time.perf_counter()
            if allowed is None:
                allowed = mask() if filtered else snap.live
            pool, run.expand_stats = expand(
                fused, snap.graph, allowed, cfg.expand, chunk_id, cfg.graph, snap.load_keys
            )
            if cfg.fusion.dedup:
                pool = dedup(pool, content_hash)
            run.expanded = pool
            timings["expand"] = elapsed_ms(t)

        rows: dict[int, ChunkRow] = {}
        if cfg.rerank.kind != "none" and pool:
            t = time.perf_counter()
            head = pool[: cfg.rerank.pool]
            rows = snap.store.fetch([f.ordinal for f in head])
            head = [f for f in head if f.ordinal in rows]
            pool = head + pool[cfg.rerank.pool :]
            features: list[dict[str, float]] = [{} for _ in head]
            if cfg.rerank.kind == "features":
                assert embedding is not None
                features = self._features(
                    snap, head, rows, embedding.result(), tokens, linked, cfg, scoped
                )
                run.features = {f.ordinal: x for f, x in zip(head, features, strict=True)}
            candidates = [
                RerankCandidate(
                    rows[f.ordinal].chunk_id, rows[f.ordinal].title, rows[f.ordinal].text, feats
                )
                for f, feats in zip(head, features, strict=True)
            ]
            try:
                reranker = self._reranker(cfg)
            except Exception as exc:  # a model that cannot load: fall back, say why
                reranker = BrokenReranker(cfg.rerank.kind, exc)
            reranked = rerank(query, pool, candidates, reranker, cfg.rerank.keep)
            pool = reranked.pool
            run.rerank_status, run.rerank_notes = reranked.status, reranked.notes
            run.reranked = pool[: len(head)]
            run.reranker_version = str(getattr(reranker, "version", ""))
            timings["rerank"] = elapsed_ms(t)

        t = time.perf_counter()
        top = pool[:k]
        # full rows only for the hits returned; a chunk deleted by another process since this
        # snapshot was taken is dropped rather than shown from a newer release
        missing = [f.ordinal for f in top if f.ordinal not in rows]
        if missing:
            rows.update(snap.store.fetch(missing))
        run.hits = tuple(
            to_hit(f, rows[f.ordinal], keys, run.rerank_notes.get(f.ordinal))
            for f in top
            if f.ordinal in rows
        )
        run.embedding = embedding
        timings["fetch"] = elapsed_ms(t)
        timings["total"] = elapsed_ms(started)
        run.timings = timings
        return run

    def _features(
        self,
        snap: Snapshot,
        head: Sequence[Fused],
        rows: Mapping[int, ChunkRow],
        vector: Any,
        tokens: Mapping[str, float],
        linked: Sequence[LinkedConcept],
        cfg: EngineConfig,
        scoped: ScopeStats | None = None,
    ) -> list[dict[str, float]]:
        """The feature reranker's signals for each candidate (see :data:`rerank.FEATURES`)."""
        ords = np.array([f.ordinal for f in head], dtype=np.int64)
        query = np.asarray(vector, dtype=np.float32)
        cos = np.zeros(len(ords))
        bm25 = np.zeros(len(ords))
        sql_legs = snap.sql
        if sql_legs is not None:  # the candidates' vectors and BM25 from the database
            vectors = sql_legs.vector.vectors_of(ords.tolist())
            for i, o in enumerate(ords.tolist()):
                if o in vectors:
                    cos[i] = float(vectors[o] @ query)
            scores = sql_legs.bm25_of(
                tokens,
                ords.tolist(),
                cfg.lexical.k1,
                cfg.lexical.b,
                None if scoped is None else scoped.sql,
            )
            # rounded to float32, as the embedded index keeps its scores
            bm25 = np.asarray([scores.get(o, 0.0) for o in ords.tolist()], dtype=np.float32)
            bm25 = bm25.astype(np.float64)
        else:
            matrix = snap.vector.matrix
            inside = ords < len(matrix)
            cos[inside] = matrix[ords[inside]] @ query
            full = snap.lexical.scores(
                tokens,
                int(ords.max()) + 1,
                k1=cfg.lexical.k1,
                b=cfg.lexical.b,
                population=None if scoped is None else scoped.population,
            )
            if full is not None:
                bm25 = full[ords].astype(np.float64)
        top = float(bm25.max()) if len(bm25) else 0.0
        bm25 = bm25 / top if top > 0 else bm25
        g = snap.graph
        weights = {g.key_to_row[c.key]: c.weight for c in linked}
        total = sum(weights.values())
        pr = g.pagerank_chunk if scoped is None else scoped.graph.pagerank_chunk
        times = [parse_time(str(rows[o].metadata.get("created_at", ""))) for o in ords.tolist()]
        fresh = recency(times)
        out = []
        for i, f in enumerate(head):
            o = f.ordinal
            overlap = 0.0
            if total > 0 and o < g.mentions_csc.shape[1]:
                here = g.mentions_csc.indices[
                    g.mentions_csc.indptr[o] : g.mentions_csc.indptr[o + 1]
                ]
                overlap = sum(weights.get(int(r), 0.0) for r in here) / total
            out.append(
                {
                    "cosine": float(cos[i]),
                    "bm25": float(bm25[i]),
                    "concept_overlap": overlap,
                    "pagerank": float(pr[o]) if o < len(pr) else 0.0,
                    "recency": fresh[i],
                    **leg_features(f),
                }
            )
        return out

    def _reranker(self, cfg: EngineConfig) -> Reranker:
        rc = cfg.rerank
        key = (rc.kind, rc.model, rc.max_length, rc.batch_size, rc.base_url, rc.timeout_s)
        with self._sync_lock:
            cached = self._rerankers.get(key)
            if cached is not None:
                return cached
            reranker = build_reranker(rc)
            self._rerankers[key] = reranker
            return reranker

    # -- answers -----------------------------------------------------------------------------

    def ask(
        self,
        question: str,
        *,
        k: int | None = None,
        filter: Any = None,
        preset: str | None = None,
        config: EngineConfig | None = None,
        scope: Any = None,
        caller: str | None = None,
    ) -> Answer:
        """Search, assemble a budgeted context, and answer with citations (or abstain).

        ``scope`` and ``caller`` as in :meth:`search`."""
        cfg = without_memory_recency(config or (preset_config(preset) if preset else self.config))
        with self._reading() as snap:
            key = self._cache_key("ask", question, k, filter, scope, preset, cfg, None, caller)
            cached = self._cache_get(key, snap)
            if cached is not None:
                return cached  # type: ignore[no-any-return]
            answer, run, extra = self._ask(
                question, k=k, filter=filter, preset=preset, config=cfg, scope=scope
            )
            run.caller = caller
            if run.cfg.trace.enabled and not self.store.read_only:
                answer = replace(answer, trace_id=self._write_trace(run, "ask", extra))
            self._cache_put(key, snap, answer)
        return answer

    def _ask(
        self,
        question: str,
        *,
        k: int | None,
        filter: Any,
        preset: str | None,
        config: EngineConfig | None,
        exclude_docs: Sequence[str] = (),
        scope: Any = None,
        as_of: float | None = None,
        stats_scope: Any = SAME_SCOPE,
    ) -> tuple[Answer, Run, dict[str, Any]]:
        from clew.compose.answer import (
            NOT_FOUND,
            Answer,
            Citation,
            coverage,
            evidence_features,
            url_of,
            why,
        )
        from clew.compose.assemble import assemble
        from clew.compose.extract import answer_text, select_sentences

        cfg = config or (preset_config(preset) if preset else self.config)
        run = self._retrieve(
            question,
            k=k or _ASK_K,
            filter=filter,
            preset=preset,
            config=cfg,
            exclude_docs=exclude_docs,
            scope=scope,
            as_of=as_of,
            stats_scope=stats_scope,
        )
        timings = run.timings
        t = time.perf_counter()
        ctx = assemble(run.hits, cfg.assemble)
        timings["assemble"] = elapsed_ms(t)

        t = time.perf_counter()
        snap = run.snap
        asked = list(query_terms(question))
        if snap.sql is not None:
            idf = snap.sql.idf(asked, None if run.scoped is None else run.scoped.sql)
        else:
            population = None if run.scoped is None else run.scoped.population
            idf = {term: snap.lexical.idf(term, population) for term in asked}
        encoder = self.encoder if cfg.fusion.dense_weight > 0 else None
        selected = select_sentences(
            question,
            ctx.kept[:_ANSWER_CHUNKS],
            encoder=encoder,
            idf=idf,
            max_sentences=cfg.answer.max_sentences,
        )
        coverages = [coverage(idf, set(analyze(f"{h.title} {h.text}"))) for h in run.hits[:3]]
        keys = snap.keys
        evidence = evidence_features(
            leg_scores={leg: [h.score for h in hits] for leg, hits in run.lists.items()},
            leg_top={
                leg: [keys[h.ordinal][0] for h in hits[:10]] for leg, hits in run.lists.items()
            },
            hits=run.hits,
            leg_weights=run.route.legs,
            rrf_k=cfg.fusion.rrf_k,
            coverages=coverages,
            sentence_overlap=float(selected[0].parts.get("term_overlap", 0.0)) if selected else 0.0,
        )
        confidence, threshold, calibration_info = 1.0, 0.0, {}
        if cfg.answer.abstain:
            calibration = self._calibration(cfg.answer.calibration)
            confidence = calibration.probability(evidence)
            threshold, calibration_info = calibration.threshold, calibration.info
        abstained = cfg.answer.abstain and (confidence < threshold or not selected or not ctx.kept)
        timings["answer"] = elapsed_ms(t)

        citations: list[Citation] = []
        text = NOT_FOUND
        mode = cfg.answer.mode
        fallback = ""
        if not abstained and mode == "generative":
            t = time.perf_counter()
            try:
                text, used = self._generate(question, ctx.kept, cfg)
                if used is None:
                    abstained = True
                    text = NOT_FOUND
                else:
                    for n in used:
                        h = ctx.kept[n - 1]
                        citations.append(
                            Citation(n, h.doc_id, h.chunk_id, h.title, url_of(h), why(h, (), n))
                        )
            except Exception as exc:  # endpoint failure: the extractive answer, with the reason
                fallback = f"{type(exc).__name__}: {exc}"
                mode = "extractive"
            timings["generate"] = elapsed_ms(t)
        if not abstained and mode == "extractive":
            number: dict[int, int] = {}
            terms: dict[int, list[str]] = {}
            for sel in selected:
                i = sel.sentence.hit_index
                number.setdefault(i, len(number) + 1)
                terms.setdefault(i, [])
                terms[i] += [x for x in sel.matched_terms if x not in terms[i]]
            text = answer_text(selected, number)
            for i, n in sorted(number.items(), key=lambda p: p[1]):
                h = ctx.kept[i]
                citations.append(
                    Citation(n, h.doc_id, h.chunk_id, h.title, url_of(h), why(h, terms[i], i + 1))
                )
        after = ("assemble", "answer", "generate")  # the stages after retrieval, in sequence
        timings["total"] = round(timings["total"] + sum(timings.get(x, 0.0) for x in after), 3)
        answer = Answer(
            question=question,
            answer=text,
            abstained=abstained,
            mode=mode,
            citations=tuple(citations),
            hits=run.hits,
            context=ctx,
            confidence=confidence,
            threshold=threshold,
            evidence=evidence,
            nearest=run.hits[:3] if abstained else (),
            fallback=fallback,
            timings_ms=timings,
            release=run.snap.release,
            rerank=run.rerank_status,
        )
        out = answer.to_dict()
        extra = {
            "answer": {
                key: out[key]
                for key in out
                if key not in ("hits", "timings_ms", "trace_id", "release")
            },
            "calibration": calibration_info,
        }
        return answer, run, extra

    def _generate(
        self, question: str, kept: Sequence[Hit], cfg: EngineConfig
    ) -> tuple[str, tuple[int, ...] | None]:
        """A generative answer over the kept chunks; None citations = the model found none."""
        from clew.errors import LLMError
        from clew.models.llm import ChatClient, answer_messages, parse_cited, settings_for

        a = cfg.answer
        settings = settings_for(a.base_url, a.model, a.timeout_s)
        passages = [(i + 1, h.title, h.text) for i, h in enumerate(kept)]
        with ChatClient(settings) as client:
            text = client.complete(answer_messages(question, passages)).strip()
        if text.strip().rstrip(".") == "NOT_FOUND":
            return text, None
        cited, invalid = parse_cited(text, range(1, len(kept) + 1))
        if not cited:
            extra = f" (it cited {list(invalid)}, allowed 1..{len(kept)})" if invalid else ""
            raise LLMError(f"the generated answer cites no source{extra}")
        return text, cited

    def _calibration(self, path: str) -> Calibration:
        from clew.compose.answer import load_calibration

        with self._sync_lock:
            cal = self._calibrations.get(path)
            if cal is None:
                cal = self._calibrations[path] = load_calibration(path)
            return cal

    def replay(self, trace_id: str) -> Replay:
        """Re-run a traced search or ask with its config; list every difference."""
        from clew.trace import TraceStore, diff_traces

        old = TraceStore(self.directory).read(trace_id)
        cfg = EngineConfig.from_dict(old["config"])
        kind = old.get("kind", "search")
        args = {
            "k": old["k"],
            "filter": old["filter"],
            "preset": old["preset"],
            "config": cfg,
            "scope": old.get("scope"),
            "as_of": old.get("reference_time"),
            "stats_scope": old.get("stats_scope", SAME_SCOPE),
        }
        with self._reading():
            if kind == "ask":
                _, run, extra = self._ask(old["query"], **args)
                run.caller = old.get("caller")
                new = run.trace("ask")
                new.update(extra)
            else:
                run = self._retrieve(old["query"], **args)
                run.caller = old.get("caller")
                new = run.trace("search")
        then, now = int(old["release"]), int(new["release"])
        diffs = [str(d) for d in diff_traces(old, new) if d.path != "release"]
        if then != now:  # first: it explains the rest
            diffs.insert(0, f"release: {then} -> {now} (the index changed since the trace)")
        return Replay(trace_id, then, now, tuple(diffs))

    # -- traces ------------------------------------------------------------------------------

    def _write_trace(self, run: Run, kind: str, extra: Mapping[str, Any] | None = None) -> str:
        from clew.trace import TraceStore

        trace = run.trace(kind)
        if extra:
            trace.update(extra)
        with self._sync_lock:
            store = self._traces
            if store is None or store.keep != run.cfg.trace.keep:
                store = self._traces = TraceStore(self.directory, keep=run.cfg.trace.keep)
        return store.write(trace)

    def _embed_query(self, query: str, timings: dict[str, float]) -> Any:
        t0 = time.perf_counter()
        vec = self.encoder.encode([query])[0]
        timings["embed"] = elapsed_ms(t0)
        return vec

    def _run_legs(
        self,
        pooled: Mapping[str, Callable[[], list[LegHit]]],
        inline: Mapping[str, Callable[[], list[LegHit]]],
        timings: dict[str, float],
    ) -> dict[str, list[LegHit]]:
        """Run ``pooled`` legs in the worker pool and ``inline`` ones on this thread."""

        def timed(name: str, fn: Callable[[], list[LegHit]]) -> Callable[[], list[LegHit]]:
            def run() -> list[LegHit]:
                t0 = time.perf_counter()
                out = fn()
                timings[name] = elapsed_ms(t0)
                return out

            return run

        t = time.perf_counter()
        futures = {name: self._pool.submit(timed(name, fn)) for name, fn in pooled.items()}
        lists = {name: timed(name, fn)() for name, fn in inline.items()}
        lists.update({name: f.result() for name, f in futures.items()})
        timings["legs"] = elapsed_ms(t)
        return lists

    # -- inspection -------------------------------------------------------------------------

    def document(self, doc_id: str, *, scope: Any = None) -> StoredDocument | None:
        """The stored document, or None when there is none or ``scope`` hides it (a caller
        outside the scope cannot tell the two apart: a missing id runs the scope check too, on
        a stand-in, so both take about as long)."""
        found = self.store.document(doc_id)
        if found is None:
            self._visible([0], {}, scope)
            return None
        doc, chunks = found
        if not self._visible([c[0] for c in chunks], doc["metadata"], scope):
            return None
        return StoredDocument(
            doc_id=doc["doc_id"],
            title=doc["title"],
            source=doc["source"],
            metadata=doc["metadata"],
            text=doc["text"],
            chunks=tuple(StoredChunk(c[1], c[2], c[3]) for c in chunks),
            release=doc["release"],
        )

    def concepts(self, *, merged_only: bool = False) -> list[dict[str, Any]]:
        """Every concept with its surface forms (entity resolution): ``{key, label, kind,
        aliases, chunks}``; ``merged_only``: those written more than one way."""
        rows = self.store.concept_aliases()
        return [
            {"key": key, "label": label, "kind": kind, "aliases": aliases, "chunks": n}
            for key, label, kind, aliases, n in rows
            if not merged_only or len(aliases) > 1
        ]

    # -- agent memory -----------------------------------------------------------------------

    def remember(
        self,
        text: str,
        *,
        session: str | None = None,
        timestamp: Any = None,
        metadata: Mapping[str, Any] | None = None,
        relations: Any = (),
        stamp: Mapping[str, Any] | None = None,
        scope: Any = None,
    ) -> str:
        """Store a memory (a small document with ``kind: memory``, a session and a time) and
        return its id. ``relations``: ``(relation, target)`` pairs to other memories or
        documents, or ``concept:NAME``; they become typed graph edges. ``stamp`` and ``scope``:
        a scoped writer's (see :func:`clew.memory.remember`). See :mod:`clew.memory`."""
        from clew.memory import remember

        return remember(
            self,
            text,
            session=session,
            timestamp=timestamp,
            metadata=metadata,
            relations=relations,
            stamp=stamp,
            scope=scope,
        )

    def recall(
        self,
        query: str,
        *,
        session: str | None = None,
        since: Any = None,
        until: Any = None,
        as_of: Any = None,
        k: int | None = None,
        filter: Any = None,
        scope: Any = None,
        caller: str | None = None,
        config: EngineConfig | None = None,
    ) -> SearchResult:
        """Search memories only: of one ``session``, created in ``[since, until)``, and, with
        ``as_of``, only what was known at that time (later memories are invisible and recency is
        measured from it). Times are ISO 8601 strings, datetimes or epoch seconds. Recency
        weighting (``recency.memories``, on by default) shows as its own contribution."""
        bounds: dict[str, float] = {}
        times = {"since": since, "until": until, "as_of": as_of}
        parsed = {name: epoch(value, name) for name, value in times.items()}
        if parsed["since"] is not None:
            bounds["gte"] = parsed["since"]
        if parsed["until"] is not None:
            bounds["lt"] = parsed["until"]
        if parsed["as_of"] is not None:
            bounds["lte"] = parsed["as_of"]
        if (
            "gte" in bounds
            and min(bounds.get("lt", math.inf), bounds.get("lte", math.inf)) < (bounds["gte"])
        ):
            raise QueryError(f"since={since!r} is after until/as_of; the window is empty")
        if session is not None and (not isinstance(session, str) or not session.strip()):
            raise QueryError(f"session={session!r} is invalid; allowed: a non-empty string")
        # memory conditions join the scope (not strict: an index without memories is empty)
        parts: list[Any] = [{"kind": MEMORY_KIND}]
        if session is not None:
            parts.append({"session": session})
        if bounds:
            parts.append({"created_at": bounds})
        if parse_filter(scope) is not None:
            parts.insert(0, scope)
        # statistics over the caller's scope, not the memory conditions: a session or time
        # window narrows what is found, not how words and concepts are weighted
        return self._search(
            query,
            k,
            filter,
            None,
            config or self.config,
            {"and": parts},
            caller,
            parsed["as_of"],
            to_json(parse_filter(scope)) if parse_filter(scope) is not None else None,
        )

    def forget(self, memory_id: str) -> int:
        """Delete a memory from every leg, graph edge, cache and trace replay; returns the new
        release. Only memories: a corpus document is removed with :meth:`delete`."""
        from clew.memory import forget

        found = self.store.document(memory_id) if isinstance(memory_id, str) else None
        if found is None:
            raise StoreError(f"no memory with id {memory_id!r} in the index")
        if found[0]["metadata"].get("kind") != MEMORY_KIND:
            raise QueryError(
                f"{memory_id!r} is a document, not a memory; remove documents with delete"
            )
        return forget(self, memory_id)

    def _visible(self, ordinals: Sequence[int], metadata: Mapping[str, Any], scope: Any) -> bool:
        node = parse_filter(scope)
        if node is None:
            return True
        if not ordinals:  # an empty document has no chunk to mask: judge its metadata alone
            return matches(metadata, to_json(node))
        with self._reading() as snap:
            if snap.sql is not None:
                return snap.sql.visible(ordinals, node)
            allowed = snap.allowed(None, json.dumps(to_json(node), sort_keys=True))
            return all(o < len(allowed) and bool(allowed[o]) for o in ordinals)

    def similar(
        self, doc_id: str, *, k: int = 5, filter: Any = None, scope: Any = None
    ) -> list[Similar]:
        """ "More like this": documents whose chunks lie nearest (dense cosine) to any chunk of
        ``doc_id``, best chunk pair per document, the document itself excluded. ``filter`` and
        ``scope`` apply as in :meth:`search`; a document the scope hides is a StoreError, the
        same as one that does not exist."""
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= 100:
            raise QueryError(f"k={k!r} is invalid; allowed: 1..100")
        node = parse_filter(filter)
        scope_node = parse_filter(scope)
        with self._reading() as snap:
            found = self.store.document(doc_id)
            if found is None or not self._visible(
                [c[0] for c in found[1]], found[0]["metadata"], scope
            ):
                raise StoreError(f"no document with id {doc_id!r} in the index")
            own = [int(c[0]) for c in found[1]]
            searches: list[Callable[[], list[LegHit]]] = []
            if snap.sql is not None:
                sl = snap.sql
                sl.check_fields(node, scope_node)
                where = sl.where(node, scope_node, [doc_id])
                vectors = sl.vector.vectors_of(own[:16])
                for o in own[:16]:  # a long document: its first chunks stand for it
                    if o in vectors:
                        searches.append(partial(sl.vector.search, vectors[o], where, 10 * k))
            else:
                matrix = snap.vector.matrix
                own = [o for o in own if o < len(matrix)]
                allowed = snap.allowed(
                    None if node is None else json.dumps(to_json(node), sort_keys=True),
                    None if scope_node is None else json.dumps(to_json(scope_node), sort_keys=True),
                ).copy()
                allowed[[o for o in own if o < len(allowed)]] = False
                for o in own[:16]:
                    searches.append(partial(snap.vector.search, matrix[o], allowed, 10 * k))
            if not searches:
                return []
            best: dict[int, tuple[float, int]] = {}
            for search in searches:
                for hit in search():
                    if hit.ordinal >= len(snap.live) or not snap.live[hit.ordinal]:
                        continue  # written after this snapshot
                    prev = best.get(hit.ordinal)
                    if prev is None or hit.score > prev[0]:
                        best[hit.ordinal] = (hit.score, hit.ordinal)
            rows = snap.store.fetch(sorted(best))
            by_doc: dict[str, Similar] = {}
            for ordinal, (score, _) in sorted(best.items(), key=lambda kv: (-kv[1][0], kv[0])):
                row = rows.get(ordinal)
                if row is None or row.doc_id in by_doc:
                    continue
                by_doc[row.doc_id] = Similar(row.doc_id, row.title, float(score), row.chunk_id)
                if len(by_doc) == k:
                    break
            return list(by_doc.values())

    def stats(self) -> dict[str, Any]:
        snap = self._snap()
        return {
            "release": snap.release,
            **self.store.counts(),
            "embedder": self.store.get_meta("embedder"),
            "analyzer": self.store.get_meta("analyzer"),
            "hnsw": (
                snap.live.sum() >= self.config.dense.hnsw_min_chunks
                if snap.sql is not None
                else snap.vector.hnsw is not None
            ),
        }
