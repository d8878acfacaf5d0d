"""Distributed ingest on Ray: the single-process pipeline's work spread over a Ray cluster.

Loading, chunking, concept extraction and embedding run as Ray Data stages; the driver writes
the resulting :class:`~clew.protocols.DocumentRecord` values to the store, one transaction per
batch, in the single-process order. The store ends up the same as after
:func:`clew.ingest.pipeline.ingest` of the same corpus: same documents, chunk ids, tokens,
concepts, mentions and ordinals, vectors equal up to floating-point noise (bit-identical with
the default ``batch_docs``).

How it runs:

1. **load** (Ray Data, tasks): ``from_items(files)`` → ``flat_map`` with the pipeline's own
   loaders, one task per file. A file that fails to load is reported in
   :attr:`RayIngestReport.failed` (and ``skipped``) and left out; the other files are
   ingested, as a single-process directory ingest skips them (``on_error="raise"`` instead
   stops the run at any bad file, before the first write).
2. **plan** (driver): documents in file order, a repeated id keeps its last version, unchanged
   documents (same hash as stored) are skipped, the rest is cut into write batches by the same
   rule as the single-process ingest (``IngestContext.batch_chunks``). The plan needs every
   document loaded, like the single-process ingest, which loads everything before it writes.
3. **build** (Ray Data, an actor pool of ``workers`` actors): each actor builds its
   :class:`~clew.ingest.pipeline.IngestContext` once (model, tokenizer, spaCy) from a picklable
   :class:`ContextSpec` and runs :func:`clew.ingest.pipeline.build_records` (chunk, analyze,
   extract, embed) on units of at most ``batch_docs`` documents of one write batch.
4. **write** (driver): results come back in order; once a write batch is complete the driver
   resolves entities against the batch and the store (:func:`~clew.ingest.pipeline.
   resolve_entities`, the same batch as single-process) and writes it in one transaction.

The store is only touched by the driver, through ``doc_hashes``, ``concept_kinds``, ``write``
and ``release`` (:class:`clew.protocols.Store`), so the SQLite and the PostgreSQL store both
work. Workers read the input files by path: on a multi-node cluster (``address=...``) the
files must be on a shared filesystem at the same path, and clew installed on every node.

Ray is optional: ``pip install "ray[data]==2.60.0"``.
"""

from __future__ import annotations

import json
import os
import pickle
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from clew.config import ChunkConfig, ConceptConfig, EmbedderConfig, IngestLimits
from clew.errors import ConfigError, LoadError
from clew.ingest.concepts import ConceptExtractor
from clew.ingest.fingerprint import record_meta
from clew.ingest.load import directory_files, load_file, load_path
from clew.ingest.pipeline import (
    IngestContext,
    IngestWriter,
    build_records,
    document_hash,
    ingest_context,
    resolve_entities,
)
from clew.protocols import DocumentRecord, Encoder
from clew.types import Document, IngestReport, JSONValue, SkippedFile


class IngestTarget(Protocol):
    """What a distributed ingest needs of an engine (:class:`clew.Engine` is one)."""

    store: Any
    config: Any
    encoder_injected: bool

    @property
    def encoder(self) -> Encoder: ...

    @property
    def extractor(self) -> ConceptExtractor: ...

    def fingerprint(self) -> dict[str, str]: ...

    def writing(self) -> AbstractContextManager[None]: ...

    def refresh(self) -> None: ...


RAY_EXTRA = "ray[data]==2.60.0"
OnError = Literal["report", "raise"]


# -- what the workers build their context from -------------------------------------------------


@dataclass(frozen=True, slots=True)
class ContextSpec:
    """A picklable recipe for the :class:`IngestContext` each Ray actor builds once.

    ``encoder`` is a zero-argument callable returning the encoder (a class, a module-level
    function or a :func:`functools.partial` of one; it is pickled to the workers), e.g.
    ``partial(load_encoder, EmbedderConfig())`` or ``FakeHashEncoder``. ``fingerprint`` must be
    the one the single-process ingest would use (see :func:`engine_spec`): it is part of every
    document's hash."""

    encoder: Callable[[], Encoder]
    chunk: ChunkConfig
    concepts: ConceptConfig
    fingerprint: str
    batch_chunks: int = 256
    limits: IngestLimits = field(default_factory=IngestLimits)

    def build(self) -> IngestContext:
        encoder = self.encoder()
        # a worker resolves the model from its own packages ('minilm' is fp32 or int8): its
        # vectors must be the driver's, never a mix of two models in one index
        try:
            meta = json.loads(self.fingerprint)
        except ValueError:
            meta = None
        wanted = str(meta.get("embedder_version") or "") if isinstance(meta, dict) else ""
        have = str(getattr(encoder, "version", "") or "")
        if wanted and have and have != wanted:
            raise ConfigError(
                f"this Ray worker's embedder is version {have}, the driver's {wanted}: install "
                "the same clew extras on every node ('minilm' is fp32 with clew[torch], int8 "
                "without) or pin the model (minilm-fp32 / minilm-int8)"
            )
        return ingest_context(
            self.chunk,
            self.limits,
            encoder,
            ConceptExtractor(self.concepts, self.limits),
            self.fingerprint,
            self.batch_chunks,
        )


def _same(value: Any) -> Any:
    return value


def _load_encoder(config: EmbedderConfig) -> Encoder:
    from clew.models.embedder import load_encoder

    return load_encoder(config)


def engine_spec(
    engine: IngestTarget,
    *,
    encoder_factory: Callable[[], Encoder] | None = None,
    threads: int | None = None,
) -> ContextSpec:
    """The :class:`ContextSpec` that reproduces ``engine.ingest``'s context on the workers.

    The engine's configured model is loaded on each worker with ``threads`` onnxruntime
    threads (default: the engine's setting). An injected encoder is sent to the workers as is
    when it pickles (the fake encoder does); otherwise pass ``encoder_factory``. The engine's
    concept extractor is rebuilt from its :class:`ConceptConfig` (a subclass is not carried)."""
    meta = engine.fingerprint()  # what Engine.ingest puts in the fingerprint
    if encoder_factory is None:
        if engine.encoder_injected:
            enc = engine.encoder
            try:
                pickle.dumps(enc)
            except Exception as exc:
                raise ConfigError(
                    f"the engine's encoder {type(enc).__name__} cannot be sent to Ray workers "
                    f"({exc}); pass encoder_factory, a picklable callable that builds it"
                ) from exc
            encoder_factory = partial(_same, enc)
        else:
            cfg = engine.config.embedder
            if threads is not None:
                cfg = EmbedderConfig(cfg.model, cfg.batch_size, threads)
            encoder_factory = partial(_load_encoder, cfg)
    return ContextSpec(
        encoder=encoder_factory,
        chunk=engine.config.chunk,
        concepts=engine.extractor.config,
        fingerprint=json.dumps(meta, sort_keys=True),
        limits=engine.config.ingest,
    )


# -- the report ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoadFailure:
    """A file that could not be loaded; none of its documents were ingested."""

    source: str
    """The file, relative to the ingest root it was found under (the path as given for a file)."""
    doc_id: str | None
    """The document id it would have had (None for a JSONL file: it holds many)."""
    error: str


@dataclass(frozen=True, slots=True)
class RayIngestReport(IngestReport):
    """An :class:`IngestReport` plus the files that failed to load."""

    failed: tuple[LoadFailure, ...] = field(default=())

    def to_dict(self) -> dict[str, JSONValue]:
        out = IngestReport.to_dict(self)
        out["failed"] = [
            {"source": f.source, "doc_id": f.doc_id, "error": f.error} for f in self.failed
        ]
        return out


# -- Ray stage functions (module level: pickled by reference, imported on the workers) ----------


def _load_rows(row: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """flat_map: one file → one row per document, or one error row."""
    try:
        docs = list(load_file(Path(row["path"]), row["doc_id"]))
    except LoadError as exc:
        yield {"file": row["file"], "pos": -1, "doc": b"", "error": str(exc)}
        return
    for pos, doc in enumerate(docs):
        yield {"file": row["file"], "pos": pos, "doc": pickle.dumps(doc), "error": ""}


class _Builder:
    """map_batches actor: builds its context (model, spaCy) once, then records per unit."""

    def __init__(self, spec: ContextSpec) -> None:
        self.ctx = spec.build()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        units = [int(u) for u in batch["unit"]]
        payloads: list[bytes] = []
        for raw in batch["docs"]:
            docs: list[Document] = pickle.loads(raw)
            records = build_records(docs, self.ctx)
            payloads.append(pickle.dumps(records, protocol=pickle.HIGHEST_PROTOCOL))
        out = np.empty(len(payloads), dtype=object)
        out[:] = payloads
        return {"unit": np.asarray(units, dtype=np.int64), "records": out}


# -- driver ---------------------------------------------------------------------------------------


def _import_ray() -> Any:
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise ConfigError(
            f"distributed ingest needs Ray: pip install {RAY_EXTRA!r} ({exc})"
        ) from exc
    return ray


@dataclass(frozen=True, slots=True)
class _File:
    path: str
    doc_id: str
    source: str


def _expand(paths: Iterable[str | Path]) -> tuple[list[_File], list[LoadFailure]]:
    """The files :func:`clew.ingest.load.load_path` would read, in its order, with its ids;
    and the paths that are neither a file nor a directory (with the loader's own error)."""
    out: list[_File] = []
    failed: list[LoadFailure] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            for f in directory_files(p):
                rel = f.relative_to(p).as_posix()
                out.append(_File(str(f), rel, rel))
        elif p.is_file():
            out.append(_File(str(p), p.name, str(raw)))
        else:
            try:
                for _ in load_path(p):  # raises the loader's error (missing, not a file)
                    pass
            except LoadError as exc:
                failed.append(LoadFailure(str(raw), None, str(exc)))
    return out, failed


def _write_batches(todo: Sequence[Document], batch_chunks: int) -> list[list[Document]]:
    """The single-process ingest's write batches (same rule as ``pipeline.ingest``)."""
    batches: list[list[Document]] = []
    batch: list[Document] = []
    size = 0
    for d in todo:
        batch.append(d)
        size += 1 + len(d.text) // 1000
        if size >= batch_chunks:
            batches.append(batch)
            batch, size = [], 0
    if batch:
        batches.append(batch)
    return batches


class _Cluster:
    """Joins (``address``), reuses (already initialized) or starts a local Ray cluster; only
    what it started or joined is shut down."""

    def __init__(self, ray: Any, address: str | None) -> None:
        self.ray = ray
        self.owned = False
        if address is not None:
            if ray.is_initialized():
                raise ConfigError("Ray is already initialized in this process; pass address=None")
            ray.init(address=address, log_to_driver=False)
            self.owned = True
        elif not ray.is_initialized():
            ray.init(include_dashboard=False, log_to_driver=False)
            self.owned = True

    def cpus(self) -> float:
        return float(self.ray.cluster_resources().get("CPU", 0.0))

    def close(self) -> None:
        if self.owned:
            self.ray.shutdown()


def ingest_ray(
    paths: Iterable[str | Path],
    store: IngestWriter,
    spec: ContextSpec,
    *,
    address: str | None = None,
    workers: int = 2,
    batch_docs: int | None = None,
    cpus_per_worker: float | None = None,
    on_error: OnError = "report",
    progress: bool = False,
) -> RayIngestReport:
    """Ingest files and directories on Ray; write to ``store`` from this process.

    ``address``: join that cluster (``"auto"``, ``"ray://host:10001"``); otherwise the Ray
    already initialized in this process is used, or a local one is started (and stopped).
    ``workers``: actors in the build pool, each holding one model and spaCy pipeline, each
    reserving ``cpus_per_worker`` CPUs (default: the cluster's CPUs shared evenly).
    ``batch_docs``: most documents per build unit; ``None`` builds each write batch whole, as
    the single-process ingest does, which makes the vectors bit-identical (a smaller unit gives
    more parallelism on small batches; vectors then differ by float noise only). Write batches,
    and so transactions, entity resolution and releases, are always the single-process ones.
    ``on_error``: ``"report"`` leaves out files that fail to load and lists them in the
    report's ``failed``; ``"raise"`` raises the first one's :class:`LoadError` before any write.
    """
    if workers < 1:
        raise ConfigError(f"workers must be at least 1, got {workers}")
    if batch_docs is not None and batch_docs < 1:
        raise ConfigError(f"batch_docs must be at least 1 or None, got {batch_docs}")
    if on_error not in ("report", "raise"):
        raise ConfigError(f"on_error must be 'report' or 'raise', got {on_error!r}")
    ray = _import_ray()
    started = time.perf_counter()
    files, failed = _expand(paths)
    if failed and on_error == "raise":
        raise LoadError(failed[0].error)
    cluster = _Cluster(ray, address)
    try:
        cpus = cpus_per_worker or max(cluster.cpus() / workers, 0.0)
        if cpus <= 0 or workers * cpus > cluster.cpus() + 1e-9:
            raise ConfigError(
                f"{workers} workers x {cpus:g} CPUs do not fit the cluster's "
                f"{cluster.cpus():g} CPUs"
            )
        docs, load_failed = _load(ray, files, progress)
        if load_failed and on_error == "raise":
            raise LoadError(load_failed[0].error)
        failed.extend(load_failed)
        return _build_and_write(
            ray, docs, store, spec, workers, cpus, batch_docs, progress, started, failed
        )
    finally:
        cluster.close()


@contextmanager
def _data_context(ray: Any, progress: bool) -> Iterator[None]:
    """Order-preserving execution for the datasets made and run inside; restored after.

    Set in place (``DataContext.copy()`` re-sets every field), and Ray's own deprecation
    warnings are muted here: Ray 2.60's ``DataContext()`` warns about fields it sets itself."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"ray\.")
        ctx = ray.data.DataContext.get_current()
        saved = (ctx.execution_options.preserve_order, ctx.enable_progress_bars)
        ctx.execution_options.preserve_order = True
        ctx.enable_progress_bars = progress
        try:
            yield
        finally:
            ctx.execution_options.preserve_order, ctx.enable_progress_bars = saved


def _load(
    ray: Any, files: Sequence[_File], progress: bool
) -> tuple[list[Document], list[LoadFailure]]:
    """Stage 1: every file's documents in ``load_path`` order, and the files that failed."""
    if not files:
        return [], []
    with _data_context(ray, progress):
        ds = ray.data.from_items(
            [{"file": i, "path": f.path, "doc_id": f.doc_id} for i, f in enumerate(files)],
            override_num_blocks=len(files),
        ).flat_map(_load_rows)
        rows = [(int(r["file"]), int(r["pos"]), r["doc"], r["error"]) for r in ds.iter_rows()]
    rows.sort(key=lambda r: (r[0], r[1]))
    docs: list[Document] = []
    failed: list[LoadFailure] = []
    for i, _pos, raw, error in rows:
        if error:
            f = files[i]
            single = Path(f.path).suffix.lower() != ".jsonl"
            failed.append(LoadFailure(f.source, f.doc_id if single else None, str(error)))
        else:
            docs.append(pickle.loads(raw))
    return docs, failed


def _build_and_write(
    ray: Any,
    loaded: Sequence[Document],
    store: IngestWriter,
    spec: ContextSpec,
    workers: int,
    cpus: float,
    batch_docs: int | None,
    progress: bool,
    started: float,
    failed: list[LoadFailure],
) -> RayIngestReport:
    # stages 2-4; the plan is pipeline.ingest's, step by step
    latest: dict[str, Document] = {}
    for d in loaded:
        latest.pop(d.doc_id, None)
        latest[d.doc_id] = d
    all_docs = list(latest.values())
    stored = store.doc_hashes([d.doc_id for d in all_docs])
    todo: list[Document] = []
    unchanged: list[str] = []
    for d in all_docs:
        if stored.get(d.doc_id) == document_hash(d, spec.fingerprint):
            unchanged.append(d.doc_id)
        else:
            todo.append(d)
    added = [d.doc_id for d in todo if d.doc_id not in stored]
    updated = [d.doc_id for d in todo if d.doc_id in stored]

    batches = _write_batches(todo, spec.batch_chunks)
    units: list[tuple[int, list[Document]]] = []  # (write batch, its documents)
    for b, batch in enumerate(batches):
        step = batch_docs or len(batch)
        units.extend((b, batch[i : i + step]) for i in range(0, len(batch), step))
    chunks_written = 0
    if units:
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=len(todo), unit="doc", desc="ingest (ray)", dynamic_ncols=True)
        try:
            chunks_written = _run_units(
                ray, units, len(batches), store, spec, workers, cpus, progress, bar
            )
        finally:
            if bar is not None:
                bar.close()
    return RayIngestReport(
        tuple(added),
        tuple(updated),
        tuple(unchanged),
        chunks_written,
        store.release(),
        time.perf_counter() - started,
        skipped=tuple(SkippedFile(f.source, f.error) for f in failed),
        failed=tuple(failed),
    )


def _run_units(
    ray: Any,
    units: Sequence[tuple[int, list[Document]]],
    n_batches: int,
    store: IngestWriter,
    spec: ContextSpec,
    workers: int,
    cpus: float,
    progress: bool,
    bar: Any,
) -> int:
    """Build the units on the actor pool; write each write batch once all of its units are in,
    in batch order (results are reordered here whatever order Ray yields them in)."""
    unit_batch = [b for b, _ in units]
    per_batch = [0] * n_batches
    for b in unit_batch:
        per_batch[b] += 1
    with _data_context(ray, progress):
        ds = ray.data.from_items(
            [{"unit": u, "docs": pickle.dumps(docs)} for u, (_, docs) in enumerate(units)],
            override_num_blocks=len(units),
        ).map_batches(
            _Builder,
            fn_constructor_args=(spec,),
            batch_size=1,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=min(workers, len(units))),
            num_cpus=cpus,
        )
        pending: dict[int, list[DocumentRecord]] = {}
        next_unit = 0
        next_batch = 0
        current: list[DocumentRecord] = []
        got = 0
        written = 0
        for row in ds.iter_rows():
            pending[int(row["unit"])] = pickle.loads(row["records"])
            while next_unit in pending:
                current.extend(pending.pop(next_unit))
                got += 1
                next_unit += 1
                if got == per_batch[next_batch]:
                    records = resolve_entities(current, store.concept_kinds)
                    store.write(records)
                    n = sum(len(r.chunks) for r in records)
                    written += n
                    if bar is not None:
                        bar.update(len(records))
                        bar.set_postfix(chunks=n)
                    current, got = [], 0
                    next_batch += 1
    if next_batch != n_batches:
        raise RuntimeError(f"Ray returned {next_unit} of {len(units)} build units")
    return written


# -- the engine's ingest, on Ray ------------------------------------------------------------------


def engine_ingest_ray(
    engine: IngestTarget,
    paths: Iterable[str | Path],
    *,
    encoder_factory: Callable[[], Encoder] | None = None,
    threads: int | None = None,
    address: str | None = None,
    workers: int = 2,
    batch_docs: int | None = None,
    cpus_per_worker: float | None = None,
    on_error: OnError = "report",
    progress: bool = False,
) -> RayIngestReport:
    """``engine.ingest(paths)`` with the work on Ray: the same checks (writable store, embedder
    dimension), the same index metadata, the engine's write lock held throughout, the derived
    indexes refreshed afterwards. ``threads``: onnxruntime threads per worker (default: the
    CPUs each worker reserves). Other arguments as :func:`ingest_ray`."""
    if threads is None and encoder_factory is None and not engine.encoder_injected:
        # as many onnxruntime threads as CPUs each worker reserves (ingest_ray's default share)
        share = cpus_per_worker
        if share is None:
            ray = _import_ray()
            if ray.is_initialized():
                share = float(ray.cluster_resources().get("CPU", 1.0)) / max(workers, 1)
            elif address is None:  # ingest_ray starts a local cluster of every core
                share = float(os.cpu_count() or 1) / max(workers, 1)
        threads = max(1, int(share)) if share else None
    engine.store.check_writable()
    spec = engine_spec(engine, encoder_factory=encoder_factory, threads=threads)
    meta = json.loads(spec.fingerprint)
    with engine.writing():
        record_meta(engine.store, meta)
        try:
            return ingest_ray(
                paths,
                engine.store,
                spec,
                address=address,
                workers=workers,
                batch_docs=batch_docs,
                cpus_per_worker=cpus_per_worker,
                on_error=on_error,
                progress=progress,
            )
        finally:
            engine.refresh()
