"""The engine: the facade over one index (open/close, ingest, delete, search, ask, recall,
replay) and the one place that picks a backend, from the target (:data:`BACKENDS`).

A query runs the fixed-order stages of :mod:`clew.retrieve.pipeline` over one
:class:`~clew.protocols.Snapshot` (one release of the index, pinned for the whole request:
:mod:`clew.releases`); an answer is composed from that run by :mod:`clew.compose.respond`.
Results are cached per release (:mod:`clew.cache`) and traced (:mod:`clew.trace`)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clew.backends import backend_kind, display_target
from clew.cache import ResultCache
from clew.config import EngineConfig, preset_config
from clew.errors import ConfigError, QueryError, StoreError
from clew.filters import filter_key, matches, parse_filter, to_json
from clew.ingest.analyze import ANALYZER_VERSION
from clew.ingest.concepts import ConceptExtractor
from clew.ingest.fingerprint import check_built_with, encoder_name, ingest_meta, record_meta
from clew.memory import MEMORY_KIND, MEMORY_SOURCE, check_targets, memory_document, recall_window
from clew.protocols import Backend, Encoder, Reranker, Snapshot, encode_queries
from clew.releases import Releases
from clew.retrieve.pipeline import Services, retrieve
from clew.retrieve.recency import without_memory_recency
from clew.retrieve.run import SAME_SCOPE, Answered, Replay, Run, replay_args, replayed
from clew.retrieve.similar import similar
from clew.types import (
    API_SOURCE,
    Document,
    DocumentSummary,
    IngestReport,
    SearchResult,
    Similar,
    SkippedFile,
    StoredDocument,
)

if TYPE_CHECKING:
    from clew.compose.answer import Answer, Calibration

__all__ = ["BACKENDS", "Engine", "backend_kind", "display_target"]


def _embedded(target: str | Path, *, create: bool, read_only: bool) -> Backend:
    from clew.backends.embedded.backend import EmbeddedBackend

    return EmbeddedBackend(target, create=create, read_only=read_only)


def _postgres(target: str | Path, *, create: bool, read_only: bool) -> Backend:
    from clew.backends.postgres.backend import PostgresBackend  # needs clew[postgres]

    return PostgresBackend(target, create=create, read_only=read_only)


BACKENDS: dict[str, Callable[..., Backend]] = {"file": _embedded, "postgresql": _postgres}
"""Each kind of target and how to open it: an index directory, or a PostgreSQL URL."""


log = logging.getLogger(__name__)

CALIBRATION_FILE = "calibration.json"
"""An index's own abstention calibration, in its directory (``clew calibrate --self``), for
unscoped callers; a scope's own is :func:`calibration_file` of that scope."""


SELF_CALIBRATE_CHANGE = 0.5
"""An automatic calibration is measured again once its scope's chunk count has changed by this
share (``answer.self_calibrate``)."""


def calibration_file(scope: Any = None) -> str:
    """The file name of an index's own calibration for callers of ``scope`` (a scope filter or
    its canonical JSON; None: unscoped callers): ``calibration.json``, or for a scope
    ``calibration-scope-`` + the first 12 hex digits of the SHA-256 of its canonical JSON. A
    scope's threshold is measured on what the scope holds, so a scoped caller's abstention
    never depends on documents outside its scope."""
    key = filter_key(parse_filter(scope))
    if key is None:
        return CALIBRATION_FILE
    return f"calibration-scope-{hashlib.sha256(key.encode()).hexdigest()[:12]}.json"


class Engine:
    """clew over one index: ingest, delete, search, ask, recall and replay."""

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
        """Open (or with ``create``, create) the index in ``directory`` (or at a PostgreSQL
        URL, whose local folder for traces and caches is then ``self.directory``).

        ``read_only``: never write (an index whose directory this process cannot write opens
        read-only by itself: ``engine.store.read_only``). ``write_timeout``: seconds an ingest or
        delete waits for another writer (thread or process) to finish before it fails with a
        :class:`StoreError` naming that writer; see :mod:`clew.backends.embedded.lock`."""
        from clew.backends.embedded.lock import WriteLock

        self.config = config or EngineConfig()
        self.backend = BACKENDS[backend_kind(directory)](
            directory, create=create, read_only=read_only
        )
        self.store = self.backend.store
        self.directory: Path = self.backend.directory
        self.url: str | None = self.backend.url
        """The PostgreSQL URL when the index lives in PostgreSQL."""
        self._write_lock = WriteLock(self.directory, write_timeout)
        if self.store.read_only and self.config.trace.enabled:
            # a trace is a file in the index directory: none can be written here
            self.config = replace(self.config, trace=replace(self.config.trace, enabled=False))
        self._encoder = encoder
        self.encoder_injected = encoder is not None
        """Whether the encoder was given (not loaded from ``config.embedder``)."""
        self._extractor = extractor
        self._models_lock = threading.Lock()
        """Guards the model, calibration and trace caches (never held while waiting on a read)."""
        self._releases = Releases(self.backend, lambda: self.config)
        self._pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="clew-leg")
        self._services = Services(self._embed_query, self._pool, self._reranker)
        self._models: dict[tuple[Any, ...], Any] = {}
        self._cache = ResultCache(self.config.cache.size, self.config.cache.scopes)
        self.config = check_built_with(
            self.store.get_meta, self.config, encoder, self.encoder_injected, str(self.directory)
        )

    @classmethod
    def open(cls, directory: str | Path, config: EngineConfig | None = None, **kw: Any) -> Engine:
        """As the constructor."""
        return cls(directory, config, **kw)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.backend.close()

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

    def _embed_query(self, query: str) -> Any:
        return encode_queries(self.encoder, [query])[0]

    @property
    def embedder_name(self) -> str:
        """The embedder this engine encodes with, as an index records it (the model spec, or an
        injected encoder's name)."""
        return encoder_name(self._encoder, self.encoder_injected, self.config.embedder.model)

    def fingerprint(self) -> dict[str, str]:
        """What an ingest with this engine records in the index (and hashes into documents)."""
        enc = self.encoder
        return ingest_meta(enc, self.embedder_name, self.extractor.version, self.config.chunk)

    def _model(self, key: tuple[Any, ...], build: Callable[[], Any]) -> Any:
        """A reranker or calibration, loaded once per setting."""
        with self._models_lock:
            if key not in self._models:
                self._models[key] = build()
            return self._models[key]

    def _reranker(self, cfg: EngineConfig) -> Reranker:
        from clew.retrieve.rerank import build_reranker

        rc = cfg.rerank
        key = (rc.kind, rc.model, rc.max_length, rc.batch_size, rc.base_url, rc.timeout_s)
        return self._model(key, lambda: build_reranker(rc))  # type: ignore[no-any-return]

    def _calibration(self, path: str, scope: Any = None) -> Calibration:
        """The calibration file ``path``; for "" the index's own for the caller's ``scope``
        (:func:`calibration_file` in its directory, as ``clew calibrate --self --index DIR
        [--scope JSON]`` writes it) or else the shipped one. A scoped caller never reads the
        unscoped (whole-index) calibration: its threshold was set by documents the caller
        cannot see."""
        from clew.compose.answer import load_calibration

        own = self.directory / calibration_file(scope)
        if not path and own.is_file():
            path = str(own)
        found: Calibration = self._model(("calibration", path), lambda: load_calibration(path))
        return found.for_embedder(self.embedder_name)

    # -- writes -----------------------------------------------------------------------------

    def writing(self) -> AbstractContextManager[None]:
        """Hold the write lock: one writer (thread or process) at a time, waiting at most
        ``write_timeout`` seconds for another (:mod:`clew.backends.embedded.lock`)."""
        return self._write_lock.hold()

    def ingest(
        self,
        sources: Iterable[str | Path] | Sequence[Document],
        *,
        progress: bool = False,
        scope: Any = None,
        prune: bool = False,
    ) -> IngestReport:
        """Ingest files, directories or :class:`Document` values; then refresh the indexes.

        A directory's files that cannot be loaded (unsupported type, no text layer, corrupt,
        too big) are skipped and listed in :attr:`IngestReport.skipped` with their reasons; a
        file named directly that cannot be loaded is an error and nothing is written.

        ``prune``: the index mirrors the given directories: every document the caller's scope
        can see whose id is not among their files (loaded or skipped) is removed, in the same
        write (:attr:`IngestReport.removed`). Only for directory sources.

        ``scope``: the writer's access filter (a service key's scope). Entity resolution then
        resolves names against concepts its scope can see only, so what a write links to never
        depends on (or reveals) documents outside the scope.

        One writer at a time (:meth:`writing`), held from the first store read to the last
        derived-index save; a read-only index or a failed write (disk full) is a
        :class:`StoreError`: each store batch is one transaction, so a failure leaves earlier
        batches complete and nothing of its own."""
        from clew.ingest.pipeline import IngestWriter, ingest, ingest_context, load_sources
        from clew.retrieve.scoped_writer import ScopedWriter

        self.store.check_writable()
        loaded = load_sources(sources, self.config.ingest)
        if prune and not loaded.directories_only:
            raise ConfigError(
                "prune mirrors directories: every source must be a directory (files, documents "
                "and transcripts cannot say which documents are gone)"
            )
        docs = loaded.documents
        meta = self.fingerprint()
        fingerprint = json.dumps(meta, sort_keys=True)
        ctx = ingest_context(
            self.config.chunk, self.config.ingest, self.encoder, self.extractor, fingerprint
        )
        with self.writing():
            record_meta(self.store, meta)  # before the first batch: it describes what is written
            writer: IngestWriter = self.store
            if parse_filter(scope) is not None:
                writer = ScopedWriter(self.store, self.snapshot(), scope)
            try:
                report = ingest(
                    docs, writer, ctx, progress=progress, skippable=loaded.from_directories
                )
                removed: tuple[str, ...] = ()
                if prune:
                    gone = self._pruned(loaded.documents, loaded.skipped, scope)
                    if gone:
                        self.store.delete(gone)
                    removed = tuple(gone)
                skipped = tuple(sorted((*loaded.skipped, *report.skipped), key=lambda f: f.path))
                report = replace(report, skipped=skipped, removed=removed)
            finally:
                self.refresh()
        calibrated = self.self_calibrate(scope)
        return replace(report, release=self.release(scope), calibrated=calibrated)

    def self_calibrate(self, scope: Any = None) -> float | None:
        """``answer.self_calibrate``, as every ingest runs it: the abstention threshold of
        ``scope`` (None: the whole index) measured as ``clew calibrate --self`` does and written
        where its callers read it (:func:`calibration_file`), when the scope holds enough chunks
        and has no calibration yet or has grown or shrunk by half since the last one this wrote;
        the threshold, or None when it measured none. A calibration a user wrote (not marked
        ``auto``) is kept; a read-only index measures none. Costs one answer per off-topic
        question (40)."""
        cfg = self.config.answer
        if cfg.self_calibrate <= 0 or not cfg.abstain or cfg.calibration or self.store.read_only:
            return None
        from clew.compose.answer import load_calibration
        from clew.compose.offtopic import OFF_TOPIC, evidence_config, self_calibrated

        node = parse_filter(scope)
        path = self.directory / calibration_file(scope)
        with self.reading() as snap:
            chunks = int(snap.mask(snap.where(None, node, ())).sum())
        if chunks < cfg.self_calibrate:
            return None
        if path.is_file():
            try:
                info = json.loads(path.read_text(encoding="utf-8")).get("info", {})
            except (OSError, ValueError, AttributeError):
                info = {}  # unreadable: measured again
            if not info.get("auto"):
                return None
            before = int(info.get("chunks", 0))
            if before > 0 and abs(chunks - before) < SELF_CALIBRATE_CHANGE * before:
                return None
        asked = to_json(node)
        quiet = evidence_config(self.config)
        far = [
            self.answer(q, filter=None, config=quiet, scope=asked).answer.evidence
            for q in OFF_TOPIC
        ]
        base = load_calibration("").for_embedder(self.embedder_name)
        cal = self_calibrated(base, far, scope=asked, info={"auto": True, "chunks": chunks})
        # a name of its own: two ingests that end together each write whole, the last one wins
        tmp = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
        try:
            tmp.write_text(json.dumps(cal.to_json(), indent=2) + "\n", encoding="utf-8")
            tmp.replace(path)
        except OSError as exc:  # the ingest is committed: say so, keep what was there
            tmp.unlink(missing_ok=True)
            log.warning(
                "could not write the abstention calibration %s (%s); answers keep the one "
                "they had, and the next ingest measures it again",
                path,
                exc,
            )
            return None
        with self._models_lock:
            self._models.pop(("calibration", str(path)), None)
        return cal.threshold

    def _pruned(
        self, loaded: Sequence[Document], skipped: Sequence[SkippedFile], scope: Any
    ) -> list[str]:
        """The documents a ``prune`` removes: those the writer's scope can see that came from
        a file (not the API, not memories) and whose file was neither loaded nor skipped now.
        A skipped JSONL file keeps the documents it held (their ids are in the file)."""
        keep = {d.doc_id for d in loaded} | {s.path for s in skipped}
        held = tuple(f"{Path(s.path).name}:" for s in skipped if s.path.endswith(".jsonl"))
        return [
            d.doc_id
            for d in self.documents(scope=scope)
            if d.doc_id not in keep
            and d.source not in (API_SOURCE, MEMORY_SOURCE)
            and not (held and d.source.startswith(held))
        ]

    def delete(self, doc_ids: str | Sequence[str]) -> int:
        """Remove documents from every leg. Unknown ids are an error, nothing is removed.

        Holds the write lock like :meth:`ingest`; the removal is one transaction."""
        self.store.check_writable()
        ids = [doc_ids] if isinstance(doc_ids, str) else list(doc_ids)
        with self.writing():
            missing = [d for d in ids if not self.store.has_document(d)]
            if missing:
                raise StoreError(f"no document with id {missing[0]!r} in the index")
            try:
                return int(self.store.delete(ids))
            finally:
                self.refresh()

    def refresh(self) -> None:
        """Bring the derived indexes up to the store's release (catch up or rebuild)."""
        self._releases.refresh()

    def release(self, scope: Any = None) -> int:
        """The release a caller with ``scope`` sees: the index's when unscoped; for a scope, the
        last release that wrote a chunk the scope lets through or removed a document it let
        through (0: it never held one). Another tenant's writes do not move it: it is the
        release a scoped search, ask or ingest reports, and the result cache is keyed on it."""
        key = filter_key(parse_filter(scope))
        with self.reading() as snap:
            return snap.view(key)

    # -- reads ------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The index at the store's current release (caught up first, unless another thread
        is already catching up: then the release before). Inside :meth:`reading`, the pinned
        one."""
        return self._releases.current()

    def reading(self) -> AbstractContextManager[Snapshot]:
        """Pin one release for a block: every search, ask and lookup inside it reads the same
        snapshot, however many writes land meanwhile (re-entrant per thread)::

            with engine.reading() as snap:
                layout = snap.graph_index.layout()
                result = engine.search("...")   # the same release as ``snap``
        """
        return self._releases.reading()

    def _config(self, config: EngineConfig | None, preset: str | None) -> EngineConfig:
        return config or (preset_config(preset) if preset else self.config)

    def retrieve(
        self, query: str, *, k: int | None = None, preset: str | None = None, **kw: Any
    ) -> Run:
        """Every retrieval stage, uncached and untraced, with the intermediate lists kept: the
        route, each leg's list, the fused, expanded and reranked pools, the feature values and
        the hits (``run.result()`` is what :meth:`search` returns). Keywords: ``filter``,
        ``config``, ``scope``, ``as_of`` as in :meth:`search`; ``exclude_docs`` hides whole
        documents as a filter would (calibration uses it to make queries whose evidence is
        absent); ``stats_scope``: what statistics are computed over (default: the scope).
        For evaluation, training and benchmarks; applications call :meth:`search`."""
        cfg = self._config(kw.pop("config", None), preset)
        kw.setdefault("filter", None)
        with self.reading() as snap:
            return retrieve(snap, self._services, query, cfg, k=k, preset=preset, **kw)

    def answer(self, question: str, *, k: int | None = None, **kw: Any) -> Answered:
        """:meth:`ask` uncached and untraced, with its retrieval run and what its trace adds
        (keywords as in :meth:`retrieve`)."""
        from clew.compose.respond import ASK_K, respond

        with self.reading():
            run = self.retrieve(question, k=k or ASK_K, **kw)
            encoder = self.encoder if run.cfg.fusion.dense_weight > 0 else None
            answer, extra = respond(run, encoder, self._calibration)
        return Answered(answer, run, extra)

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
        cfg = without_memory_recency(self._config(config, preset))
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
        key = self._cache.key("search", query, k, filter, scope, preset, cfg, as_of, caller)
        if key is not None and stats_scope is not SAME_SCOPE:
            key += "\x00" + json.dumps(stats_scope, sort_keys=True, default=str)
        args = {"filter": filter, "scope": scope, "as_of": as_of, "stats_scope": stats_scope}
        compute = partial(self.retrieve, query, k=k, preset=preset, config=cfg, **args)
        seen = scope if stats_scope is SAME_SCOPE else stats_scope
        return self._served("search", key, compute, caller, seen)  # type: ignore[no-any-return]

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
        cfg = without_memory_recency(self._config(config, preset))
        key = self._cache.key("ask", question, k, filter, scope, preset, cfg, None, caller)
        args = {"filter": filter, "preset": preset, "config": cfg, "scope": scope}
        compute = partial(self.answer, question, k=k, **args)
        return self._served("ask", key, compute, caller, scope)  # type: ignore[no-any-return]

    def _served(
        self,
        kind: str,
        key: str | None,
        compute: Callable[[], Run | Answered],
        caller: Any,
        scope: Any,
    ) -> Any:
        """The cached result of ``key`` at the release ``scope`` sees (:meth:`release`) in the
        pinned snapshot, or a new one, traced and cached."""
        with self.reading() as snap:
            version = "" if key is None else self._version(snap, scope)  # no read when uncached
            partition = "" if key is None else self._cache.partition(scope)
            cached = self._cache.get(key, version, partition)
            if cached is not None:
                return replace(cached, cached=True) if kind == "search" else cached
            done = compute()
            run = done.run if isinstance(done, Answered) else done
            run.caller = caller
            value = done.answer if isinstance(done, Answered) else run.result()
            if run.cfg.trace.enabled and not self.store.read_only:
                extra = done.trace if isinstance(done, Answered) else None
                value = replace(value, trace_id=self._write_trace(run, kind, extra))
            self._cache.put(key, version, value, partition)
        return value

    def _version(self, snap: Snapshot, scope: Any) -> str:
        versions = (self.store.get_meta("embedder_version"), self.store.get_meta("concepts"))
        seen = snap.view(filter_key(parse_filter(scope)))
        return f"{seen}|{ANALYZER_VERSION}|{versions[0]}|{versions[1]}"

    def clear_cache(self) -> None:
        """Drop every cached result (a new release makes them unreachable anyway)."""
        self._cache.clear()

    # -- traces -----------------------------------------------------------------------------

    def replay(self, trace_id: str) -> Replay:
        """Re-run a traced search or ask with its config; list every difference."""
        from clew.trace import TraceStore

        old = TraceStore(self.directory).read(trace_id)
        with self.reading():
            if old.get("kind", "search") == "ask":
                done = self.answer(old["query"], **replay_args(old))
                done.run.caller = old.get("caller")
                new = {**done.run.trace("ask"), **done.trace}
            else:
                run = self.retrieve(old["query"], **replay_args(old))
                run.caller = old.get("caller")
                new = run.trace("search")
        return replayed(trace_id, old, new)

    def _write_trace(self, run: Run, kind: str, extra: Mapping[str, Any] | None = None) -> str:
        from clew.trace import TraceStore

        keep = run.cfg.trace.keep
        store = self._model(("traces", keep), lambda: TraceStore(self.directory, keep=keep))
        return str(store.write({**run.trace(kind), **(extra or {})}))

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
        visible = self._visible([c[0] for c in chunks], doc["metadata"], scope)
        return StoredDocument.from_store(doc, chunks) if visible else None

    def documents(
        self, *, scope: Any = None, after: str | None = None, limit: int | None = None
    ) -> list[DocumentSummary]:
        """The index's documents (no text), in id order (bytewise): those ``scope`` (a caller's
        access filter) lets through only, so a scoped caller learns nothing of the others, not
        even how many there are. ``after``: start after this id (exclusive; it need not
        exist); ``limit``: at most this many (1..100000; default all)."""
        if limit is not None and (
            not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 100_000
        ):
            raise QueryError(f"limit={limit!r} is invalid; allowed: 1..100000")
        if after is not None and not isinstance(after, str):
            raise QueryError(f"after={after!r} is invalid; allowed: a document id (a string)")
        docs: list[DocumentSummary] = self.store.documents(
            parse_filter(scope), after=after, limit=limit
        )
        return docs

    def _visible(self, ordinals: Sequence[int], metadata: Mapping[str, Any], scope: Any) -> bool:
        node = parse_filter(scope)
        if node is None:
            return True
        if not ordinals:  # an empty document has no chunk to mask: judge its metadata alone
            return matches(metadata, to_json(node))
        with self.reading() as snap:
            return snap.visible(ordinals, node)

    def concepts(self, *, merged_only: bool = False) -> list[dict[str, Any]]:
        """Every concept with its surface forms (entity resolution): ``{key, label, kind,
        aliases, chunks}``; ``merged_only``: those written more than one way."""
        return [
            {"key": key, "label": label, "kind": kind, "aliases": aliases, "chunks": n}
            for key, label, kind, aliases, n in self.store.concept_aliases()
            if not merged_only or len(aliases) > 1
        ]

    def similar(
        self, doc_id: str, *, k: int = 5, filter: Any = None, scope: Any = None
    ) -> list[Similar]:
        """ "More like this": documents whose chunks lie nearest (dense cosine) to any chunk of
        ``doc_id``, best chunk pair per document, the document itself excluded. ``filter`` and
        ``scope`` apply as in :meth:`search`; a document the scope hides is a StoreError, the
        same as one that does not exist."""
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= 100:
            raise QueryError(f"k={k!r} is invalid; allowed: 1..100")
        node, scope_node = parse_filter(filter), parse_filter(scope)
        with self.reading() as snap:
            found = self.store.document(doc_id)
            own = [] if found is None else [int(c[0]) for c in found[1]]
            if found is None or not self._visible(own, found[0]["metadata"], scope):
                raise StoreError(f"no document with id {doc_id!r} in the index")
            return similar(snap, doc_id, own, k, node, scope_node)

    def stats(self) -> dict[str, Any]:
        snap = self.snapshot()
        return {
            "release": snap.release,
            **self.store.counts(),
            "embedder": self.store.get_meta("embedder"),
            "analyzer": self.store.get_meta("analyzer"),
            "hnsw": snap.uses_hnsw(self.config.dense),
        }

    # -- agent memory -----------------------------------------------------------------------

    def remember(self, text: str, *, scope: Any = None, **kw: Any) -> str:
        """Store a memory (a small document with ``kind: memory``, a session and a time) and
        return its id. Keywords: ``session``, ``timestamp``, ``metadata``, ``stamp``,
        ``relations`` and ``namespace`` as :func:`clew.memory.memory_document` takes them;
        ``relations`` become typed graph edges. ``scope``: the writer's access filter: relation
        targets must be visible in it (a target outside it is "not in the index", as a missing
        one) and entity resolution sees only concepts inside it (default: the ``stamp``)."""
        doc = memory_document(text, **kw)
        stamp = kw.get("stamp")
        if scope is None and stamp:
            scope = dict(stamp)
        check_targets(
            doc,
            self.store.has_document
            if scope is None
            else lambda target: self.document(target, scope=scope) is not None,
        )
        self.ingest([doc], scope=scope)
        return doc.doc_id

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
        window, stats_scope, moment = recall_window(session, since, until, as_of, scope)
        cfg = config or self.config
        return self._search(query, k, filter, None, cfg, window, caller, moment, stats_scope)

    def forget(self, memory_id: str) -> int:
        """Delete a memory from every leg, graph edge, cache and trace replay; returns the new
        release. Only memories: a corpus document is removed with :meth:`delete`."""
        found = self.store.document(memory_id) if isinstance(memory_id, str) else None
        if found is None:
            raise StoreError(f"no memory with id {memory_id!r} in the index")
        if found[0]["metadata"].get("kind") != MEMORY_KIND:
            raise QueryError(
                f"{memory_id!r} is a document, not a memory; remove documents with delete"
            )
        return self.delete(memory_id)
