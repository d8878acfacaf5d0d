"""The HTTP API: ``create_app(settings)`` returns a FastAPI app over one embedded engine.

Every request runs as a principal (an API key's name, scope and admin flag). The scope is an
access filter the engine AND-s with the request's own filter inside every leg and graph
expansion, so a caller can narrow what it sees and never widen it; a document outside the scope
is a 404, exactly like one that does not exist. A scoped key also writes only inside its scope
(stamp, access fields, ids it may not overwrite: see :mod:`clew.serve.auth`). Engine calls are
blocking, so they run in worker threads under a request timeout: a slow reranker or LLM never
blocks the event loop. Writes go through one background job thread, fair across jobs, which
yields to readers while searches are being served (:mod:`clew.serve.jobs`); readers keep
answering from a pinned snapshot meanwhile.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Annotated, Any, TypeVar

import anyio
import anyio.to_thread
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from clew import __version__
from clew.config import EngineConfig
from clew.engine import Engine
from clew.errors import (
    ClewError,
    LoadError,
    QueryError,
    StoreError,
)
from clew.eval.gate import check_gates, load_gates
from clew.memory import RESERVED_KEYS
from clew.serve.auth import ANONYMOUS, KeyStore, Principal, WriteRefused, own_id
from clew.serve.body import BodyLimit
from clew.serve.docs import install_docs
from clew.serve.dto import (
    MAX_PAGE,
    AskRequest,
    DeleteResponse,
    DocumentList,
    DocumentsRequest,
    Forgotten,
    GateResponse,
    HealthResponse,
    JobAccepted,
    JobStatus,
    MemoryCreated,
    MemoryIn,
    RecallRequest,
    SearchRequest,
    SimilarResponse,
)
from clew.serve.errors import install_errors, invalid, located, refused
from clew.serve.jobs import FOREIGN_ID, JobManager, ProcessWriter, foreign_ids
from clew.serve.metrics import CONTENT_TYPE, Metrics
from clew.serve.settings import ServeSettings
from clew.serve.upload import uploaded_document
from clew.types import Document

__all__ = ["ServiceState", "create_app"]

log = logging.getLogger("clew.serve")
T = TypeVar("T")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class ReadTracker:
    """Engine reads in flight (updated on the event loop, read by the job thread): the job
    thread pauses between groups while readers are busy (:mod:`clew.serve.jobs`)."""

    LINGER_S = 0.25
    """Readers count as busy this long after the last read ended (clients' think time)."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.last_end = 0.0

    def busy(self) -> bool:
        return self.in_flight > 0 or time.monotonic() - self.last_end < self.LINGER_S


class FirstReadAlone:
    """The first retrieval after the index release moves runs alone; the others wait for it.

    A new release (every ingest turn, memory or delete) gets a new snapshot whose per-release
    caches are built by the first search that needs them, on the request path, holding the
    GIL: on SciFact the graph leg's fuzzy-match index alone takes about 3 s. Without this
    gate all concurrent searches build the same caches at once (8 clients: about 8 × 3 s of
    CPU, with nothing answered meanwhile); with it one request builds them and the rest then
    run on the warm snapshot. Results do not depend on it (same snapshot, same answers). The
    others wait at most :attr:`MAX_WAIT_S` (the first request may be a slow one, an LLM
    reranker's). A stopgap until the engine builds those caches during its refresh, off the
    request path."""

    MAX_WAIT_S = 5.0

    def __init__(self, release: Callable[[], int]) -> None:
        self._release = release
        self._seen: int | None = None
        self._lock = threading.Lock()

    def run(self, fn: Callable[[], T]) -> T:
        release = self._release()
        if release != self._seen and self._lock.acquire(timeout=self.MAX_WAIT_S):
            try:
                if release != self._seen:
                    result = fn()
                    self._seen = release
                    return result
            finally:
                self._lock.release()
        return fn()


@dataclass
class ServiceState:
    """What the handlers share: settings, the engine, keys, jobs, metrics, the thread limiter."""

    settings: ServeSettings
    engine: Engine
    config: EngineConfig
    keys: KeyStore | None
    jobs: JobManager
    metrics: Metrics
    limiter: anyio.CapacityLimiter
    owns_engine: bool
    keys_version: tuple[int, int, int] = (0, 0, 0)
    """The keys file as last read: (mtime in ns, inode, size). `clew keys` replaces the file,
    so a new inode shows a change even within one tick of a coarse mtime clock."""
    readers: ReadTracker | None = None
    first_read: FirstReadAlone | None = None

    def access_fields(self) -> frozenset[str]:
        """Metadata fields named in any configured key's scope (see :mod:`clew.serve.auth`)."""
        return frozenset() if self.keys is None else self.keys.access_fields()

    def authenticate(self, key: str | None) -> Principal | None:
        """The key's principal. The keys file is re-read when it changes, so keys added or
        revoked with `clew keys` take effect without a restart."""
        path = self.settings.keys
        if path is not None:
            try:
                version = _file_version(path)
            except OSError:
                version = self.keys_version
            if version != self.keys_version:
                try:
                    self.keys = KeyStore.load(path)
                    self.keys_version = version
                except ClewError:
                    log.exception("keys file changed but cannot be read; keeping the old keys")
        return None if self.keys is None else self.keys.authenticate(key)

    def close(self) -> None:
        self.jobs.close()
        if self.owns_engine:
            self.engine.close()

    async def call(self, fn: Callable[[], T], *, read: bool = True, retrieval: bool = False) -> T:
        """Run a blocking engine call in a worker thread, bounded by the request timeout.
        ``read``: a reader the job thread yields to (see :class:`ReadTracker`); ``retrieval``:
        a search over the snapshot (see :class:`FirstReadAlone`)."""
        seconds = self.settings.request_timeout_s
        readers = self.readers if read else None
        gate = self.first_read if retrieval else None
        work = fn if gate is None else partial(gate.run, fn)
        if readers is not None:
            readers.in_flight += 1
        try:
            with anyio.fail_after(seconds):
                return await anyio.to_thread.run_sync(
                    work, limiter=self.limiter, abandon_on_cancel=True
                )
        except TimeoutError:
            raise HTTPException(
                504, f"the request took longer than {seconds:g} s (request_timeout_s)"
            ) from None
        finally:
            if readers is not None:
                readers.in_flight -= 1
                readers.last_end = time.monotonic()


def _file_version(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return (st.st_mtime_ns, st.st_ino, st.st_size)


def create_app(settings: ServeSettings, engine: Engine | None = None) -> FastAPI:
    """The API over ``engine`` (or the engine at ``settings.index``, opened here and closed on
    shutdown). State is built eagerly, so in-process clients need no lifespan events."""
    config = EngineConfig.from_yaml(settings.config) if settings.config else EngineConfig()
    owns = engine is None
    if engine is None:
        # jobs are the one writer here; another process writing the index may hold it a while
        engine = Engine(settings.index, config, write_timeout=settings.request_timeout_s)
    # the version first: a change while the file is being read is seen by the next request
    keys_version = _file_version(settings.keys) if settings.keys else (0, 0, 0)
    keys = None if settings.no_auth or settings.keys is None else KeyStore.load(settings.keys)
    metrics = Metrics()
    readers = ReadTracker()
    state = ServiceState(
        settings=settings,
        engine=engine,
        config=config,
        keys=keys,
        jobs=JobManager(
            engine,
            keep=settings.jobs_kept,
            on_document=lambda status: metrics.documents.labels(status).inc(),
            readers_busy=readers.busy,
            share=settings.ingest_share,
            writer=(
                ProcessWriter(
                    settings.index,
                    settings.config,
                    write_timeout=settings.request_timeout_s,
                    nice=settings.ingest_nice,
                )
                if owns and settings.ingest_process
                else None
            ),
        ),
        metrics=metrics,
        limiter=anyio.CapacityLimiter(settings.threads),
        owns_engine=owns,
        keys_version=keys_version,
        readers=readers,
        first_read=FirstReadAlone(engine.store.release),
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        yield
        state.close()

    app = FastAPI(
        title="clew",
        version=__version__,
        description="Explainable hybrid retrieval: search, answers with citations, documents, "
        "traces and evaluation gates. Authenticate with `Authorization: Bearer <key>`.",
        lifespan=lifespan,
        docs_url=None,  # served from the installed Swagger UI files: clew.serve.docs
        redoc_url=None,  # ReDoc would load from a CDN, and there is no local copy of it
    )
    app.state.clew = state
    install_docs(app)
    _install_middleware(app, state)
    install_errors(app)
    _install_routes(app, state)
    return app


def _install_middleware(app: FastAPI, state: ServiceState) -> None:
    @app.middleware("http")
    async def count(request: Request, call_next: Any) -> Response:
        started = time.perf_counter()
        status = 500
        try:
            response: Response = await call_next(request)
            status = response.status_code
            return response
        finally:
            route = request.scope.get("route")
            endpoint = getattr(route, "path", None) or "unmatched"
            state.metrics.observe_request(
                request.method, endpoint, status, time.perf_counter() - started
            )

    app.add_middleware(BodyLimit, limit=state.settings.max_body_bytes)


def _optional_principal(request: Request) -> Principal | None:
    """The caller, from ``Authorization: Bearer <key>`` or ``X-API-Key``; None without a
    valid key."""
    state: ServiceState = request.app.state.clew
    if state.keys is None:
        return ANONYMOUS
    key = request.headers.get("x-api-key")
    auth = request.headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        key = auth[7:].strip()
    return state.authenticate(key)


def _principal(request: Request) -> Principal:
    """The caller, from ``Authorization: Bearer <key>`` or ``X-API-Key``; 401 otherwise."""
    found = _optional_principal(request)
    if found is None:
        raise HTTPException(
            401,
            "missing or invalid API key; send `Authorization: Bearer <key>`",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return found


def _admin(caller: Annotated[Principal, Depends(_principal)]) -> Principal:
    if not caller.admin:
        raise HTTPException(403, f"key {caller.name!r} may not write; writes need an admin key")
    return caller


def _may_write_memories(caller: Principal) -> dict[str, Any]:
    """Memory writes: admin keys, or keys whose scope has equality fields to stamp on what they
    write (so they find it again); returns that stamp. A scoped admin stamps too: its memories
    are its scope's, and their ids are its own (the stamp is part of a memory's id)."""
    stamp = caller.stamp()
    if not caller.admin and not stamp:
        raise HTTPException(
            403,
            f"key {caller.name!r} may not write memories: it needs admin rights or a scope with "
            'equality fields (e.g. {"tenant": "acme"}) that make its memories its own',
        )
    return stamp


def _metrics_reader(caller: Annotated[Principal, Depends(_principal)]) -> Principal:
    if not caller.may_read_metrics:
        raise HTTPException(
            403,
            f"key {caller.name!r} may not read service metrics; they need a key with "
            "`metrics: true` in the keys file, or an unscoped admin key",
        )
    return caller


Caller = Annotated[Principal, Depends(_principal)]
Admin = Annotated[Principal, Depends(_admin)]
MaybeCaller = Annotated[Principal | None, Depends(_optional_principal)]
MetricsReader = Annotated[Principal, Depends(_metrics_reader)]


def _install_routes(app: FastAPI, state: ServiceState) -> None:
    settings, engine = state.settings, state.engine

    def config_for(body: SearchRequest | AskRequest) -> EngineConfig:
        over: dict[str, dict[str, Any]] = {}
        if body.expand is not None:
            over["expand"] = {"enabled": body.expand}
        if body.rerank is not None:
            over["rerank"] = {"kind": body.rerank}
        if isinstance(body, AskRequest) and body.mode is not None:
            over["answer"] = {"mode": body.mode}
        base = state.config
        if body.preset is not None:
            from clew.config import preset_config

            base = preset_config(body.preset)
        return base.with_overrides(**over) if over else base

    def check_limits(text: str, field: str, k: int | None) -> None:
        if len(text) > settings.max_query_chars:
            raise RequestValidationError(
                [
                    {
                        "loc": ("body", field),
                        "msg": f"{field} has {len(text)} characters; allowed: at most "
                        f"{settings.max_query_chars}",
                        "type": "string_too_long",
                    }
                ]
            )
        if k is not None and k > settings.max_k:
            raise RequestValidationError(
                [
                    {
                        "loc": ("body", "k"),
                        "msg": f"k={k} is too large; allowed: 1..{settings.max_k}",
                        "type": "less_than_equal",
                    }
                ]
            )

    async def retrieve(body: SearchRequest | AskRequest, caller: Principal) -> dict[str, Any]:
        """Run a search or an ask as ``caller``; its stage timings go to the metrics."""
        text, kind = (
            (body.query, "search")
            if isinstance(body, SearchRequest)
            else (
                body.question,
                "ask",
            )
        )
        check_limits(text, "query" if kind == "search" else "question", body.k)
        run = engine.search if kind == "search" else engine.ask
        cfg = config_for(body)
        result: dict[str, Any] = await state.call(
            lambda: run(
                text,
                k=body.k,
                filter=body.filter,
                config=cfg,
                scope=caller.scope,
                caller=caller.name,
            ).to_dict(),
            retrieval=True,
        )
        state.metrics.observe_result(kind, result)
        return result

    @app.post("/search", tags=["retrieval"], summary="Hybrid search with per-hit provenance")
    async def search(body: SearchRequest, caller: Caller) -> dict[str, Any]:
        return await retrieve(body, caller)

    @app.post("/ask", tags=["retrieval"], summary="Answer with citations, or abstain")
    async def ask(body: AskRequest, caller: Caller) -> dict[str, Any]:
        return await retrieve(body, caller)

    @app.post(
        "/documents",
        tags=["documents"],
        status_code=202,
        response_model=JobAccepted | JobStatus,
        summary="Ingest a batch of documents as a background job",
    )
    async def add_documents(
        body: DocumentsRequest,
        request: Request,
        caller: Admin,
        wait: Annotated[
            bool, Query(description="wait for the job to finish (up to the request timeout)")
        ] = False,
    ) -> Any:
        if len(body.documents) > settings.max_batch:
            raise RequestValidationError(
                [
                    {
                        "loc": ("body", "documents"),
                        "msg": f"{len(body.documents)} documents in one batch; allowed: at most "
                        f"{settings.max_batch}",
                        "type": "too_long",
                    }
                ]
            )
        for i, d in enumerate(body.documents):
            if len(d.text) > settings.max_document_chars:
                raise RequestValidationError(
                    [
                        {
                            "loc": ("body", "documents", i, "text"),
                            "msg": f"text has {len(d.text)} characters; allowed: at most "
                            f"{settings.max_document_chars}",
                            "type": "string_too_long",
                        }
                    ]
                )
        stamp = caller.stamp()
        access = state.access_fields()
        namespace = caller.namespace()

        def build() -> list[Document]:
            """The documents to write (front matter read), checked against the caller's rights,
            each under the id it lands on (:func:`own_id`: a scoped key's new documents live in
            its namespace)."""
            out = []
            landed: dict[str, int] = {}
            for i, d in enumerate(body.documents):
                try:
                    doc = uploaded_document(
                        d.id, d.text, title=d.title, metadata=d.metadata, links=d.links
                    )
                except LoadError as exc:
                    raise invalid(("body", "documents", i, "text"), str(exc)) from None
                reserved = sorted(set(doc.metadata) & set(RESERVED_KEYS))
                if reserved:
                    key = reserved[0]
                    in_request = key in d.metadata
                    raise invalid(
                        ("body", "documents", i, *(("metadata", key) if in_request else ("text",))),
                        f"metadata key {key!r}{'' if in_request else ' (front matter)'} is "
                        f"reserved for memories; allowed: any key except "
                        f"{', '.join(RESERVED_KEYS)} (store a memory with POST /memories)",
                    )
                user = dict(doc.metadata)  # the request's and the front matter's fields
                doc = replace(doc, metadata={**user, **stamp})
                try:
                    caller.check_write(user, access)
                    caller.check_visible(doc.metadata)
                except WriteRefused as exc:
                    raise HTTPException(403, f"document {d.id!r}: {exc}") from None
                doc = replace(doc, doc_id=own_id(engine, d.id, caller.scope, namespace))
                if doc.doc_id in landed:
                    raise invalid(
                        ("body", "documents", i, "id"),
                        f"id {d.id!r} names the same document as documents[{landed[doc.doc_id]}] "
                        f"({doc.doc_id!r}); allowed: one entry per document in a batch",
                    )
                landed[doc.doc_id] = i
                out.append(doc)
            return out

        docs = await state.call(build, read=False)
        scope = caller.scope
        if scope is not None:
            foreign = await state.call(
                lambda: foreign_ids(engine, [d.doc_id for d in docs], scope), read=False
            )
            if foreign:
                raise HTTPException(409, FOREIGN_ID.format(doc_id=foreign[0]))
        job = state.jobs.submit(docs, caller.name, scope=scope)
        log.info("job %s: %d documents from %s", job.job_id, len(docs), caller.name)
        if wait:
            snap = await anyio.to_thread.run_sync(
                lambda: state.jobs.wait(job.job_id, settings.request_timeout_s),
                abandon_on_cancel=True,
            )
            if snap is not None and snap["state"] in ("done", "failed"):
                return JSONResponse(snap, status_code=200)
        return JobAccepted(
            job_id=job.job_id,
            status_url=str(request.url_for("job", job_id=job.job_id)),
            total=len(docs),
        )

    @app.post(
        "/memories",
        tags=["memory"],
        status_code=201,
        response_model=MemoryCreated,
        summary="Remember: store a memory (session, time, metadata, typed relations)",
    )
    async def remember(body: MemoryIn, caller: Caller) -> Any:
        stamp = _may_write_memories(caller)
        scope = caller.scope
        access = state.access_fields()
        namespace = caller.namespace()

        def mine(target: str) -> str:
            return own_id(engine, target, scope, namespace)

        def write() -> str:
            from clew.memory import memory_document

            relations = [
                (r.type, r.target if r.target.startswith("concept:") else mine(r.target))
                for r in body.relations
            ]
            try:
                doc = memory_document(
                    body.text,
                    session=body.session,
                    timestamp=body.time,
                    metadata=body.metadata,
                    stamp=stamp,
                    relations=relations,
                    namespace=namespace,
                )
            except QueryError as exc:
                raise located(exc) from None
            if scope is not None:  # a scoped writer (admin or not) writes inside its scope
                try:
                    caller.check_write(body.metadata or {}, access)
                    caller.check_visible(doc.metadata, "memory")
                except WriteRefused as exc:
                    raise refused(exc) from None
                for (_, target), given in zip(relations, body.relations, strict=True):
                    if (
                        not target.startswith("concept:")
                        and engine.document(target, scope=scope) is None
                    ):
                        raise HTTPException(404, f"no document {given.target!r}")
                if foreign_ids(engine, [doc.doc_id], scope):
                    raise HTTPException(409, FOREIGN_ID.format(doc_id=doc.doc_id))
            try:
                return engine.remember(
                    body.text,
                    session=body.session,
                    timestamp=doc.metadata["created_at"],  # the checked id ("now" moves on)
                    metadata=body.metadata,
                    relations=relations,
                    stamp=stamp,
                    namespace=namespace,
                )
            except QueryError as exc:
                raise located(exc) from None

        memory_id = await state.call(write, read=False)
        log.info("memory %s stored by %s", memory_id, caller.name)
        return {"id": memory_id}

    @app.post("/recall", tags=["memory"], summary="Search memories (session, window, as of)")
    async def recall(body: RecallRequest, caller: Caller) -> dict[str, Any]:
        check_limits(body.query, "query", body.k)

        def run() -> dict[str, Any]:
            try:
                return engine.recall(
                    body.query,
                    session=body.session,
                    since=body.since,
                    until=body.until,
                    as_of=body.as_of,
                    k=body.k,
                    filter=body.filter,
                    scope=caller.scope,
                    caller=caller.name,
                ).to_dict()
            except QueryError as exc:
                raise located(exc) from None

        result: dict[str, Any] = await state.call(run, retrieval=True)
        state.metrics.observe_result("recall", result)
        return result

    @app.delete("/memories/{memory_id:path}", tags=["memory"], response_model=Forgotten)
    async def forget(memory_id: str, caller: Caller) -> Any:
        _may_write_memories(caller)

        def delete() -> int:
            doc = engine.document(memory_id, scope=caller.scope)
            if doc is None or doc.metadata.get("kind") != "memory":
                raise HTTPException(404, f"no memory {memory_id!r}")
            engine.forget(memory_id)
            return engine.release(caller.scope)  # the release the caller's scope sees now

        release = await state.call(delete, read=False)
        log.info("memory %s forgotten by %s", memory_id, caller.name)
        return {"forgotten": memory_id, "release": release}

    @app.get("/jobs/{job_id}", name="job", tags=["documents"], response_model=JobStatus)
    async def job(job_id: str, caller: Admin) -> Any:
        snap = state.jobs.get(job_id, owner=caller.owns)
        if snap is None:
            raise HTTPException(404, f"no job {job_id!r} (finished jobs are kept for a while)")
        return snap

    @app.get(
        "/documents",
        tags=["documents"],
        response_model=DocumentList,
        summary="List the documents the key can see (id order, paged)",
    )
    async def list_documents(
        caller: Caller,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="documents per page")] = 100,
        after: Annotated[
            str | None,
            Query(max_length=512, description="the `next` of the previous page (exclusive)"),
        ] = None,
    ) -> Any:
        found = await state.call(
            lambda: engine.documents(scope=caller.scope, after=after, limit=limit + 1)
        )
        page = found[:limit]
        more = len(found) > limit
        return {
            "documents": [d.to_dict() for d in page],
            "next": page[-1].doc_id if more else None,
        }

    @app.get(
        "/documents/{doc_id:path}/similar",
        tags=["documents"],
        response_model=SimilarResponse,
        summary='"More like this": dense neighbours of a document',
    )
    async def similar(
        doc_id: str, caller: Caller, k: Annotated[int, Query(ge=1, le=100)] = 5
    ) -> Any:
        def run() -> list[Any]:
            target = own_id(engine, doc_id, caller.scope, caller.namespace())
            return engine.similar(target, k=k, scope=caller.scope)

        try:
            found = await state.call(run, retrieval=True)
        except StoreError:
            raise HTTPException(404, f"no document {doc_id!r}") from None
        return {"doc_id": doc_id, "similar": [s.to_dict() for s in found]}

    @app.get("/documents/{doc_id:path}", tags=["documents"])
    async def get_document(doc_id: str, caller: Caller) -> dict[str, Any]:
        def read() -> dict[str, Any] | None:
            target = own_id(engine, doc_id, caller.scope, caller.namespace())
            doc = engine.document(target, scope=caller.scope)
            return None if doc is None else doc.to_dict()

        found = await state.call(read)
        if found is None:
            raise HTTPException(404, f"no document {doc_id!r}")
        return found

    @app.delete("/documents/{doc_id:path}", tags=["documents"], response_model=DeleteResponse)
    async def delete_document(doc_id: str, caller: Admin) -> Any:
        def found() -> str | None:
            target = own_id(engine, doc_id, caller.scope, caller.namespace())
            return target if engine.document(target, scope=caller.scope) is not None else None

        target = await state.call(found)
        if target is None:
            raise HTTPException(404, f"no document {doc_id!r}")

        def delete() -> int:
            engine.delete(target)
            return engine.release(caller.scope)  # the release the caller's scope sees now

        release = await state.call(delete, read=False)
        log.info("deleted %r (release %d) by %s", target, release, caller.name)
        return {"deleted": target, "release": release}

    @app.get("/traces/{trace_id}", tags=["traces"])
    async def trace(trace_id: str, caller: Caller) -> dict[str, Any]:
        from clew.trace import TraceStore

        try:
            found = await state.call(lambda: TraceStore(engine.directory).read(trace_id))
        except QueryError:
            found = None
        if found is None or not caller.owns(found.get("caller")):
            raise HTTPException(404, f"no trace {trace_id!r}")
        return found

    @app.get(
        "/eval/gate",
        tags=["evaluation"],
        response_model=GateResponse,
        responses={422: {"model": GateResponse, "description": "a gate failed"}},
        summary="200 when every quality gate passes, 422 with the reasons otherwise",
    )
    async def gate(caller: Caller) -> Any:
        passed, datasets, reasons = await state.call(lambda: _check_gate(settings))
        body = {"passed": passed, "datasets": datasets, "reasons": reasons}
        return JSONResponse(body, status_code=200 if passed else 422)

    @app.get("/eval/table", tags=["evaluation"], summary="The last ablation table per dataset")
    async def table(caller: Caller) -> dict[str, Any]:
        tables = await state.call(lambda: _eval_tables(settings.eval_dir))
        return {"datasets": {name: t for name, (t, _) in tables.items()}}

    @app.get(
        "/health",
        tags=["service"],
        response_model=HealthResponse,
        response_model_exclude_none=True,
        summary="Liveness for anyone; release and corpus counts for a key with metrics rights",
    )
    async def health(caller: MaybeCaller) -> Any:
        if caller is None or not caller.may_read_metrics:
            return {"status": "ok"}  # no key needed, and nothing about the corpus
        stats = await state.call(engine.stats)
        return {
            "status": "ok",
            "release": stats["release"],
            "documents": stats["documents"],
            "chunks": stats["chunks"],
        }

    @app.get(
        "/metrics",
        tags=["service"],
        response_class=Response,
        summary="Prometheus metrics (a key with `metrics: true`, or an unscoped admin key)",
    )
    async def metrics(caller: MetricsReader) -> Response:
        state.metrics.release.set(engine.store.release())  # the index's, not a scope's
        return Response(state.metrics.render(), media_type=CONTENT_TYPE)


# -- evaluation gate --------------------------------------------------------------------------


def _eval_tables(folder: Path) -> dict[str, tuple[dict[str, Any], str]]:
    """The newest ``clew eval --json`` result per dataset in ``folder``: (table, config under
    test). The table is config → slice → metric → value."""
    out: dict[str, tuple[float, dict[str, Any], str]] = {}
    if not folder.is_dir():
        return {}
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            name = str(data["dataset"])
            runs = {str(r["name"]): r["slices"] for r in data["runs"]}
        except (OSError, ValueError, KeyError, TypeError):
            log.warning("skipping %s: not a `clew eval --json` result", path.name)
            continue
        if not runs:
            continue
        primary = "default" if "default" in runs else next(iter(runs))
        mtime = path.stat().st_mtime
        if name not in out or mtime >= out[name][0]:
            out[name] = (mtime, runs, primary)
    return {name: (runs, primary) for name, (_, runs, primary) in sorted(out.items())}


def _check_gate(settings: ServeSettings) -> tuple[bool, list[str], list[str]]:
    folder = settings.eval_dir
    gates_file = settings.gates or folder / "gates.yaml"
    if not gates_file.is_file():
        return False, [], [f"no gates file: set gates (or put gates.yaml in {folder.name}/)"]
    try:
        gates = load_gates(gates_file)
    except ClewError as exc:
        return False, [], [f"gates file is invalid: {exc}"]
    tables = _eval_tables(folder)
    reasons: list[str] = []
    for name in sorted({g.dataset for g in gates}):
        if name not in tables:
            reasons.append(
                f"{name}: no eval results (write them with `clew eval --dataset DIR --ablate "
                f"--json > {folder.name}/{name}.json`)"
            )
            continue
        table, primary = tables[name]
        reasons.extend(check_gates(gates, name, table, config=primary))
    return not reasons, sorted(tables), reasons
