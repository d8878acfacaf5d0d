"""clew as an MCP server over stdio: ``search``, ``ask``, ``remember`` and ``forget`` tools.

Run it as ``clew mcp --index DIR`` or ``python -m clew.serve.mcp --index DIR``. With
``--keys FILE`` the key (``--key`` or ``$CLEW_API_KEY``) must authenticate, and its principal's
scope is AND-ed into every search and answer inside every leg, so a scoped agent never sees, and
cannot widen its filter to, a document outside its scope. Without a keys file the caller is the
anonymous admin (a local process talking to its own index).

A scoped key (admin or not) writes only inside its scope, as over HTTP (:mod:`clew.serve.auth`):
its stamp goes on every memory (and into the memory's id, so two tenants never share one), the
memory must pass its scope, and *access fields* (the fields of its own scope, plus those of every
key in ``--keys FILE``) may be set only to the value its scope pins.

stdout carries the protocol; logs go to stderr. The key is never printed or logged.
Engine calls block, so each runs in a worker thread and the server keeps answering meanwhile.
Every clew error (a bad query, a malformed filter, an unknown id) comes back as a tool error
with its message, never as a crash of the server.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

try:
    import anyio.to_thread
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations
    from pydantic import Field
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        f"the MCP server needs the 'serve' extra ({exc.name or exc} is missing): "
        "pip install 'clew[serve]'"
    ) from exc

from clew.errors import ClewError, StoreError
from clew.filters import matches
from clew.links import CONCEPT_PREFIX, split_link
from clew.memory import MAX_MEMORY_CHARS, MEMORY_KIND, memory_document, memory_id
from clew.serve.auth import ANONYMOUS, KeyStore, Principal, WriteRefused, own_id, scope_fields

if TYPE_CHECKING:
    from clew.engine import Engine

__all__ = ["build_server", "main", "visible"]

log = logging.getLogger(__name__)

KEY_ENV = "CLEW_API_KEY"
MAX_K = 100
_T = TypeVar("_T")

INSTRUCTIONS = (
    "clew searches an indexed corpus (and long-term memories) with lexical, dense and "
    "knowledge-graph retrieval and explains every hit. Use `search` for ranked evidence, `ask` "
    "for a short answer with numbered citations (it abstains when nothing supports an answer), "
    "`remember` to store a fact for later and `forget` to delete a memory by id."
)

FILTER_HELP = (
    "Optional metadata filter (JSON object): {'audience': 'public'} equality, "
    "{'audience': ['public', 'internal']} membership, "
    "{'created_at': {'gte': '2026-01-01'}} range (numbers or ISO times), "
    "{'and': [...]}, {'or': [...]}, {'not': {...}}. It narrows what the key may see; "
    "it never widens it."
)


def visible(metadata: dict[str, Any], scope: Any) -> bool:
    """Whether a document with this metadata passes ``scope`` (None = everything), with the
    engine's own semantics (a scope field the document lacks matches nothing)."""
    return matches(metadata, scope)


def _own_target(engine: Engine, relation: Any, scope: Any, namespace: str) -> Any:
    """A relation with its document target as this caller names it (:func:`own_id`); anything
    else as given (:func:`clew.memory.memory_document` says what is wrong with it)."""
    if not isinstance(relation, dict) or not isinstance(relation.get("target"), str):
        return relation
    target = relation["target"]
    if target.startswith(CONCEPT_PREFIX):
        return relation
    return {**relation, "target": own_id(engine, target, scope, namespace)}


def _check_may_write(principal: Principal, verb: str) -> None:
    """Memory writes need admin rights or a scope whose stamp makes the key's memories its own
    (an unscoped read-only key may neither store nor forget memories)."""
    if not principal.admin and not principal.stamp():
        raise ToolError(
            f"key {principal.name!r} may not {verb} memories: it needs admin rights or a scope "
            "with equality fields (e.g. {'tenant': 'acme'}) that make its memories visible to it"
        )


def _no_such_memory(memory_id: str) -> ToolError:
    return ToolError(f"no such memory: {memory_id!r}")


async def _call(fn: Callable[[], _T]) -> _T:
    """Run a blocking engine call in a worker thread; clew errors become tool errors."""
    try:
        return await anyio.to_thread.run_sync(fn)
    except ClewError as exc:
        raise ToolError(str(exc)) from exc


def build_server(
    engine: Engine, principal: Principal, *, access_fields: Collection[str] = ()
) -> MCPServer[Any]:
    """An MCP server whose tools run on ``engine`` as ``principal`` (scope and rights).

    ``access_fields``: metadata fields that decide who sees what (the fields of every key's
    scope in the keys file); with the principal's own scope fields, a scoped principal may set
    them only to the values its scope pins."""
    server: MCPServer[Any] = MCPServer(name="clew", instructions=INSTRUCTIONS, log_level="WARNING")
    scope = principal.scope
    access = frozenset(access_fields) | scope_fields(scope)

    @server.tool(
        name="search",
        title="Hybrid search",
        description=(
            "Hybrid search (BM25, embeddings and knowledge graph, fused on rank). Returns the "
            "ranked hits with text, metadata and per-leg provenance (which leg found each hit, "
            "at which rank, with which score), the route taken and the index release."
        ),
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    async def search(
        query: Annotated[
            str, Field(min_length=1, description="What to look for: words, identifiers, a question")
        ],
        k: Annotated[int, Field(ge=1, le=MAX_K, description="How many hits to return")] = 10,
        filter: Annotated[dict[str, Any] | None, Field(description=FILTER_HELP)] = None,
    ) -> dict[str, Any]:
        result = await _call(
            lambda: engine.search(query, k=k, filter=filter, scope=scope, caller=principal.name)
        )
        return result.to_dict()

    @server.tool(
        name="ask",
        title="Answer with citations",
        description=(
            "Answer a question from the indexed evidence, with numbered citations and, for each, "
            "why it was chosen (matched terms, graph path, leg contributions). Abstains "
            "(abstained: true) when the evidence is too weak, listing the nearest hits instead."
        ),
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    async def ask(
        question: Annotated[str, Field(min_length=1, description="The question to answer")],
        k: Annotated[
            int | None,
            Field(ge=1, le=MAX_K, description="How many hits the answer may draw on (default 20)"),
        ] = None,
        filter: Annotated[dict[str, Any] | None, Field(description=FILTER_HELP)] = None,
    ) -> dict[str, Any]:
        answer = await _call(
            lambda: engine.ask(question, k=k, filter=filter, scope=scope, caller=principal.name)
        )
        return answer.to_dict()

    @server.tool(
        name="remember",
        title="Store a memory",
        description=(
            "Store a piece of text as a long-term memory; `search` and `ask` find it like any "
            "document (metadata kind: 'memory'). Returns its id, which `forget` takes. The same "
            "text, session and time give the same id (storing it twice changes nothing)."
        ),
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=True
        ),
    )
    async def remember(
        text: Annotated[
            str,
            Field(
                min_length=1,
                max_length=MAX_MEMORY_CHARS,
                description="The memory; its first line becomes the title",
            ),
        ],
        session: Annotated[
            str | None,
            Field(min_length=1, description="Conversation or session id to group memories by"),
        ] = None,
        time: Annotated[
            str | None,
            Field(
                description="When it happened, ISO 8601 (e.g. 2026-03-01T12:00:00Z); default now"
            ),
        ] = None,
        metadata: Annotated[
            dict[str, Any] | None,
            Field(
                description="Extra JSON fields to filter on later (not kind, session, created_at)"
            ),
        ] = None,
        relations: Annotated[
            list[dict[str, str]] | None,
            Field(
                description="Typed edges to other memories/documents by id or to concepts, e.g. "
                '[{"type": "caused_by", "target": "mem-1a2b"}, '
                '{"type": "related_to", "target": "concept:pgbouncer"}]',
                max_length=100,
            ),
        ] = None,
    ) -> dict[str, str]:
        _check_may_write(principal, "store")
        stamp = principal.stamp()
        namespace = principal.namespace()

        def write() -> str:
            targets = [_own_target(engine, r, scope, namespace) for r in relations or ()]
            given = {  # the name the caller used for each landed target, for errors
                t["target"]: r["target"]
                for t, r in zip(targets, relations or (), strict=True)
                if isinstance(t, dict) and isinstance(r, dict) and "target" in t
            }
            doc = memory_document(
                text,
                session=session,
                timestamp=time,
                metadata=metadata,
                stamp=stamp,
                relations=targets,
                namespace=namespace,
            )
            if scope is not None:  # a scoped writer (admin or not) writes inside its scope
                try:
                    principal.check_write(metadata or {}, access)
                    principal.check_visible(doc.metadata, "memory")
                except WriteRefused as exc:
                    raise ToolError(str(exc)) from None
                for raw in doc.links:  # relations only to what this key can see
                    _, target = split_link(raw)
                    if not target.startswith("concept:") and (
                        engine.document(target, scope=scope) is None
                    ):
                        name = given.get(target, target)
                        raise ToolError(f"relation target {name!r} is not in the index")
                found = engine.store.document(doc.doc_id)
                if found is not None and not visible(found[0]["metadata"], scope):
                    raise ToolError(f"memory id {doc.doc_id!r} cannot be written with this key")
            return engine.remember(
                text,
                session=session,
                timestamp=doc.metadata["created_at"],  # the checked id ("now" moves on)
                metadata=metadata,
                stamp=stamp,
                relations=targets,
                namespace=namespace,
            )

        return {"id": await _call(write)}

    @server.tool(
        name="recall",
        title="Search memories",
        description=(
            "Search stored memories only: optionally of one session, within a time window "
            "(since/until), or as of a past moment (later memories are invisible). Newer "
            "memories weigh more (a recency contribution shown per hit)."
        ),
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    async def recall(
        query: Annotated[str, Field(min_length=1, description="What to remember")],
        session: Annotated[str | None, Field(min_length=1, description="Only this session")] = (
            None
        ),
        since: Annotated[str | None, Field(description="Created at or after, ISO 8601")] = None,
        until: Annotated[str | None, Field(description="Created before, ISO 8601")] = None,
        as_of: Annotated[
            str | None, Field(description="Only what was known at this time, ISO 8601")
        ] = None,
        k: Annotated[int, Field(ge=1, le=MAX_K, description="How many memories")] = 10,
    ) -> dict[str, Any]:
        result = await _call(
            lambda: engine.recall(
                query,
                session=session,
                since=since,
                until=until,
                as_of=as_of,
                k=k,
                scope=scope,
                caller=principal.name,
            )
        )
        return result.to_dict()

    @server.tool(
        name="forget",
        title="Delete a memory",
        description="Delete a memory by the id `remember` returned; returns the new index release.",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=False
        ),
    )
    async def forget(
        id: Annotated[str, Field(min_length=1, description="The memory id (mem-...)")],
    ) -> dict[str, Any]:
        _check_may_write(principal, "forget")

        def delete() -> int:
            if scope is not None:
                # only memories this key can see; anything else reads exactly like an unknown
                # id, so the answer never reveals that a hidden document exists
                found = engine.store.document(id)
                meta = found[0].get("metadata") if found is not None else None
                if (
                    not isinstance(meta, dict)
                    or meta.get("kind") != MEMORY_KIND
                    or not visible(meta, scope)
                ):
                    raise _no_such_memory(id)
            try:
                engine.delete(memory_id(id))
                return engine.release(scope)  # the release the key's scope sees now
            except StoreError as exc:
                if not engine.store.has_document(id):
                    raise _no_such_memory(id) from exc
                raise

        release = await _call(delete)
        return {"forgotten": id, "release": release}

    return server


# -- command line --------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="clew mcp",
        description="Serve a clew index to MCP clients over stdio (stdout is the protocol).",
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--index", help="index directory")
    where.add_argument(
        "--store", dest="index", metavar="URL", help="PostgreSQL URL instead of a directory"
    )
    p.add_argument("--config", type=Path, help="engine config YAML (EngineConfig.from_yaml)")
    p.add_argument("--keys", type=Path, help="keys file; the key must authenticate against it")
    p.add_argument(
        "--key",
        help=f"API key (default: ${KEY_ENV}; prefer the variable, a flag shows in `ps`)",
    )
    p.add_argument(
        "--log-level",
        default="WARNING",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="stderr log level (default: WARNING)",
    )
    return p


def _principal(args: argparse.Namespace) -> tuple[Principal, frozenset[str]]:
    """The caller the server acts as (never logs or prints the key) and the access fields of
    the keys file."""
    if args.keys is None:
        if args.key:
            _fail(
                "--key needs --keys FILE to check it against; without a keys file the server "
                "runs unscoped as the anonymous admin"
            )
        if os.environ.get(KEY_ENV):
            log.warning("$%s is set but no --keys file was given: running unscoped", KEY_ENV)
        return ANONYMOUS, frozenset()
    key = args.key or os.environ.get(KEY_ENV)
    if not key:
        _fail(f"--keys {str(args.keys)!r} needs a key: pass --key or set ${KEY_ENV}")
    store = KeyStore.load(args.keys)  # a ClewError names the file and the problem
    principal = store.authenticate(key)
    if principal is None:
        _fail(f"the API key is not valid for keys file {str(args.keys)!r}")
    return principal, store.access_fields()


class _Refused(Exception):
    """The server cannot start (bad key, keys file, config or index); main exits 2."""


def _fail(message: str) -> NoReturn:
    raise _Refused(message)


def main(argv: Sequence[str] | None = None) -> int:
    """``clew mcp``: serve one index over stdio until the client closes the connection.

    Returns 0, or 2 with a message on stderr when it cannot start (an invalid key, a missing
    keys file, config or index)."""
    args = _parser().parse_args(argv)
    if not logging.getLogger().handlers:  # library code never does this; a program may
        logging.basicConfig(
            stream=sys.stderr,
            level=args.log_level,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
    from clew.config import EngineConfig
    from clew.engine import Engine, display_target

    try:
        principal, access_fields = _principal(args)
        config = EngineConfig.from_yaml(args.config) if args.config is not None else None
        engine = Engine(args.index, config)
    except (_Refused, ClewError) as exc:
        print(f"clew mcp: error: {exc}", file=sys.stderr)
        return 2
    log.info(
        "serving %s over stdio as %r (scope %s, admin %s)",
        display_target(args.index),
        principal.name,
        principal.scope,
        principal.admin,
    )
    try:
        build_server(engine, principal, access_fields=access_fields).run("stdio")
    except KeyboardInterrupt:
        pass
    finally:
        engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
