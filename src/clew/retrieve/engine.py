"""The engine: one index directory, fixed-order stages, consistent snapshots.

Query stages, in order: validate → filter (compile once to a mask) → link concepts → route →
legs (lexical, dense, graph; in parallel, each with the same mask, over-fetched) → fuse (RRF,
contributions kept) → dedup (content hash) → hits. Every search reads one snapshot of the derived
indexes, all at the same release, so results never mix releases.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from clew.config import EmbedderConfig, EngineConfig, preset_config
from clew.errors import ConfigError, QueryError, StoreError
from clew.filters import Mask, MetadataColumns, parse_filter, to_json
from clew.index.graph import GraphIndex
from clew.index.lexical import BM25Index
from clew.index.vector import VectorIndex
from clew.ingest.analyze import ANALYZER_VERSION, query_terms
from clew.ingest.chunk import Chunker
from clew.ingest.concepts import ConceptExtractor
from clew.ingest.load import load_path
from clew.ingest.pipeline import IngestContext, ingest
from clew.protocols import ChunkRow, Encoder
from clew.retrieve.fuse import Fused, dedup, rrf
from clew.retrieve.route import route
from clew.store.sqlite import SQLiteStore
from clew.types import Document, Hit, IngestReport, LegHit, SearchResult

log = logging.getLogger(__name__)

_INGEST_META = ("embedder", "embedder_version", "dim", "analyzer", "concepts", "chunk")


@dataclass(slots=True)
class _Snapshot:
    release: int
    lexical: BM25Index
    vector: VectorIndex
    graph: GraphIndex
    live: Mask
    store: SQLiteStore
    keys: dict[int, tuple[str, str]]
    """Ordinal → (chunk id, content hash) of every chunk, for fusion ties and dedup."""
    _columns: MetadataColumns | None = None
    _masks: OrderedDict[str, Mask] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def allowed(self, filter_json: str | None) -> Mask:
        if filter_json is None:
            return self.live
        with self._lock:
            cached = self._masks.get(filter_json)
            if cached is not None:
                self._masks.move_to_end(filter_json)
                return cached
            if self._columns is None:
                self._columns = MetadataColumns.build(len(self.live), self.store.metadata_rows())
            node = parse_filter(filter_json)
            assert node is not None
            mask = self._columns.mask(node) & self.live
            self._masks[filter_json] = mask
            if len(self._masks) > 64:
                self._masks.popitem(last=False)
            return mask


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
    ) -> None:
        self.directory = Path(directory)
        self.config = config or EngineConfig()
        self.store = SQLiteStore(self.directory, create=create)
        self._encoder = encoder
        self._injected_encoder = encoder is not None
        self._extractor = extractor
        self._snapshot: _Snapshot | None = None
        self._sync_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="clew-leg")
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
    ) -> Engine:
        return cls(directory, config, create=create, encoder=encoder, extractor=extractor)

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
            self._extractor = ConceptExtractor(self.config.concepts)
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
        self, sources: Iterable[str | Path] | Sequence[Document], *, progress: bool = False
    ) -> IngestReport:
        """Ingest files, directories or :class:`Document` values; then refresh the indexes."""
        items = list(sources)
        if all(isinstance(s, Document) for s in items):
            docs: Iterable[Document] = items  # type: ignore[assignment]
        else:
            docs = [d for s in items for d in load_path(s)]  # type: ignore[arg-type]
        meta = self._ingest_meta()
        stored = {k: self.store.get_meta(k) for k in _INGEST_META}
        if stored["embedder"] is not None and stored["dim"] != meta["dim"]:
            raise ConfigError(
                f"embedder dimension {meta['dim']} does not match the index ({stored['dim']})"
            )
        counter = getattr(self.encoder, "count_tokens", None)
        if counter is None:
            raise ConfigError("the encoder has no count_tokens(texts) method for chunk sizing")
        ctx = IngestContext(
            chunker=Chunker(self.config.chunk, counter),
            encoder=self.encoder,
            extractor=self.extractor,
            fingerprint=json.dumps(meta, sort_keys=True),
        )
        if any(stored[k] != meta[k] for k in _INGEST_META):
            self.store.set_meta(meta)  # before the first batch: it describes what is written
        try:
            report = ingest(docs, self.store, ctx, progress=progress)
        finally:
            self.refresh()
        return report

    def delete(self, doc_ids: str | Sequence[str]) -> int:
        """Remove documents from every leg. Unknown ids are an error, nothing is removed."""
        ids = [doc_ids] if isinstance(doc_ids, str) else list(doc_ids)
        missing = [d for d in ids if not self.store.has_document(d)]
        if missing:
            raise StoreError(f"no document with id {missing[0]!r} in the index")
        release = self.store.delete(ids)
        self.refresh()
        return release

    # -- derived indexes --------------------------------------------------------------------

    def refresh(self) -> None:
        """Bring the derived indexes up to the store's release (catch up or rebuild)."""
        with self._sync_lock:
            release = self.store.release()
            if self._snapshot is not None and self._snapshot.release == release:
                return
            self._snapshot = self._sync(release)

    def _snap(self) -> _Snapshot:
        release = self.store.release()
        snap = self._snapshot
        if snap is None or snap.release != release:
            self.refresh()
            snap = self._snapshot
        assert snap is not None
        return snap

    def _sync(self, release: int) -> _Snapshot:
        d = self.directory
        size = self.store.max_ordinal() + 1
        live_ords = self.store.live_ordinals()
        live = np.zeros(size, dtype=bool)
        live[live_ords] = True
        old = self._snapshot

        lexical = old.lexical if old else BM25Index.load(d)
        if (
            lexical is None
            or lexical.analyzer != ANALYZER_VERSION
            or lexical.last_ordinal >= size
            or len(live_ords) < 0.8 * lexical.n_docs
        ):
            lexical = self._rebuild_lexical()
        elif lexical.release != release:
            lexical.add(self.store.iter_tokens(lexical.last_ordinal))
            if lexical.needs_merge():
                lexical = self._rebuild_lexical()
        if lexical.release != release:
            lexical.release = release
            lexical.save(d)

        model = str(self.store.get_meta("embedder_version") or "")
        vector = old.vector if old else VectorIndex.load(d, self.config.dense)
        if vector is None or vector.model != model or vector.last_ordinal >= size:
            vector = VectorIndex(int(self.store.get_meta("dim") or 384), self.config.dense)
            vector.model = model
            vector.add(self.store.iter_vectors(0))
            vector.release = -1
        elif vector.release != release:
            vector.add(self.store.iter_vectors(vector.last_ordinal))
        if vector.release != release:
            vector.release = release
            vector.save(d)

        graph = old.graph if old else GraphIndex.load(d)
        if graph is None or graph.release != release:
            graph = GraphIndex.build(self.store.graph_rows(), size, release)
            graph.save(d)
        if old is not None:
            keys = dict(old.keys)
            keys.update(self.store.chunk_keys(after=max(old.keys, default=0)))
        else:
            keys = dict(self.store.chunk_keys(after=0))
        return _Snapshot(release, lexical, vector, graph, live, self.store, keys)

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
    ) -> SearchResult:
        """Hybrid search. Always returns a :class:`SearchResult`."""
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

        t = time.perf_counter()
        snap = self._snap()
        allowed = snap.allowed(filter_json)
        timings["filter"] = _ms(t)

        # the query embedding is the longest stage: start it now, link and route meanwhile
        embedding: Future[Any] | None = None
        if cfg.fusion.dense_weight > 0:
            embedding = self._pool.submit(self._embed_query, query, timings)

        t = time.perf_counter()
        linked = snap.graph.link(query, fuzzy=cfg.graph.fuzzy, word_weight=cfg.graph.word_weight)
        chosen = route(query, len(linked), cfg.fusion, cfg.router)
        timings["route"] = _ms(t)

        # lexical and graph run in workers; dense waits on the embedding already under way in a
        # worker, so it runs on the caller's thread instead of holding a worker while it waits
        pooled: dict[str, Callable[[], list[LegHit]]] = {}
        inline: dict[str, Callable[[], list[LegHit]]] = {}
        if "lexical" in chosen.legs:
            tokens = query_terms(query, cfg.lexical.part_weight)
            pooled["lexical"] = lambda: snap.lexical.search(
                tokens, allowed, cfg.lexical.depth, k1=cfg.lexical.k1, b=cfg.lexical.b
            )
        if "dense" in chosen.legs:

            def dense() -> list[LegHit]:
                assert embedding is not None
                return snap.vector.search(embedding.result(), allowed, cfg.dense.depth)

            inline["dense"] = dense
        if "graph" in chosen.legs:
            pooled["graph"] = lambda: snap.graph.search(
                query, allowed, cfg.graph.depth, cfg.graph, linked
            )
        lists = self._run_legs(pooled, inline, timings)

        t = time.perf_counter()
        keys = snap.keys
        fused = rrf(lists, chosen.legs, cfg.fusion.rrf_k, lambda o: keys[o][0])
        if cfg.fusion.dedup:
            fused = dedup(fused, lambda o: keys[o][1])
        top = fused[:k]
        timings["fuse"] = _ms(t)

        t = time.perf_counter()
        # full rows only for the hits returned; a chunk deleted by another process since this
        # snapshot was taken is dropped rather than shown from a newer release
        rows = snap.store.fetch([f.ordinal for f in top])
        hits = tuple(_hit(f, rows[f.ordinal], keys) for f in top if f.ordinal in rows)
        timings["fetch"] = _ms(t)
        timings["total"] = _ms(started)
        return SearchResult(
            query=query,
            route=chosen,
            hits=hits,
            release=snap.release,
            timings_ms=timings,
            filter=to_json(node),
            preset=preset or "default",
        )

    def _embed_query(self, query: str, timings: dict[str, float]) -> Any:
        t0 = time.perf_counter()
        vec = self.encoder.encode([query])[0]
        timings["embed"] = _ms(t0)
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
                timings[name] = _ms(t0)
                return out

            return run

        t = time.perf_counter()
        futures = {name: self._pool.submit(timed(name, fn)) for name, fn in pooled.items()}
        lists = {name: timed(name, fn)() for name, fn in inline.items()}
        lists.update({name: f.result() for name, f in futures.items()})
        timings["legs"] = _ms(t)
        return lists

    # -- inspection -------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        snap = self._snap()
        return {
            "release": snap.release,
            **self.store.counts(),
            "embedder": self.store.get_meta("embedder"),
            "analyzer": self.store.get_meta("analyzer"),
            "hnsw": snap.vector.hnsw is not None,
        }


def _hit(f: Fused, row: ChunkRow, keys: Mapping[int, tuple[str, str]]) -> Hit:
    return Hit(
        chunk_id=row.chunk_id,
        doc_id=row.doc_id,
        title=row.title,
        text=row.text,
        score=f.score,
        metadata=row.metadata,
        contributions=f.contributions,
        graph=f.trail,
        heading_path=row.heading_path,
        token_count=row.token_count,
        content_hash=row.content_hash,
        duplicates=tuple(keys[o][0] for o in f.duplicates),
    )


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000.0, 3)
