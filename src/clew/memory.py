"""Long-term agent memory: a memory is a small document in the same index as the corpus.

A memory is written like any other document (chunked, embedded, linked into the graph), so the
legs, filters and explanations that serve documents serve memories too. Its metadata says what
it is::

    {"kind": "memory", "session": "s-42" | None, "created_at": "2026-03-01T12:00:00Z", ...}

Its id is ``mem-`` plus the first 16 hex digits of ``sha256(session|created_at|text)``, so
remembering the same thing at the same time twice writes one document. A stamped write (a scoped
caller's) hashes its stamp too, so two tenants remembering the same words at the same time get
two memories and neither can overwrite, read or delete the other's. A caller's *stamp*
(:meth:`clew.serve.auth.Principal.stamp`, the equality fields of its scope) is written last and
wins over user metadata, so a scoped caller can always find what it wrote.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clew.errors import LoadError, QueryError
from clew.links import CONCEPT_PREFIX, RELATION_RE, relation_link, split_link
from clew.types import Document

if TYPE_CHECKING:
    from clew.config import IngestLimits
    from clew.engine import Engine

__all__ = [
    "MAX_MEMORY_CHARS",
    "MEMORY_KIND",
    "MEMORY_SOURCE",
    "RESERVED_KEYS",
    "forget",
    "memory_document",
    "remember",
]

MAX_MEMORY_CHARS = 100_000
"""The longest memory text accepted, in characters."""
MAX_TITLE_CHARS = 80
MEMORY_KIND = "memory"
MEMORY_SOURCE = "memory"
RESERVED_KEYS = ("kind", "session", "created_at")
"""Metadata keys a memory sets itself; user metadata may not use them."""


def memory_document(
    text: Any,
    *,
    session: Any = None,
    timestamp: Any = None,
    metadata: Any = None,
    stamp: Any = None,
    relations: Any = (),
) -> Document:
    """Validate the arguments of :func:`remember` and build the memory's :class:`Document`."""
    body = _text(text)
    links = tuple(relation_link(rel, target) for rel, target in _relations(relations))
    sess = _session(session)
    created_at = _timestamp(timestamp)
    user = _metadata(metadata, "metadata", reserved=True)
    stamped = _metadata(stamp, "stamp", reserved=False)
    identity = f"{sess or ''}|{created_at}|{body}"
    if stamped:  # the writer's scope is part of the identity: tenants never collide
        identity = json.dumps(stamped, sort_keys=True, ensure_ascii=False) + "|" + identity
    digest = hashlib.sha256(identity.encode()).hexdigest()
    first_line = body.strip().splitlines()[0].strip()
    return Document(
        doc_id=f"mem-{digest[:16]}",
        title=first_line[:MAX_TITLE_CHARS].rstrip(),
        text=body,
        source=MEMORY_SOURCE,
        metadata={
            "kind": MEMORY_KIND,
            "session": sess,
            "created_at": created_at,
            **user,
            **stamped,
        },
        links=links,
    )


def remember(
    engine: Engine,
    text: str,
    *,
    session: str | None = None,
    timestamp: str | dt.datetime | None = None,
    metadata: Mapping[str, Any] | None = None,
    stamp: Mapping[str, Any] | None = None,
    relations: Any = (),
    scope: Any = None,
) -> str:
    """Store ``text`` as a memory document and return its id.

    ``relations``: ``(relation, target)`` pairs (or ``{"type", "target"}`` objects) to other
    memories or documents by id, or to concepts as ``concept:NAME``: ``caused_by``,
    ``related_to``, ``follows`` or any lower-case name. They become typed graph edges
    (``CAUSED_BY``) that graph expansion walks and explanations show.

    ``timestamp``: ISO 8601 text or a datetime (naive = UTC); None = now. ``metadata``: extra
    JSON fields (not ``kind``, ``session`` or ``created_at``). ``stamp``: fields written last,
    over ``metadata`` (a principal's :meth:`~clew.serve.auth.Principal.stamp`). ``scope``: the
    writer's access filter: relation targets must be visible in it (a target outside it is
    "not in the index", as a missing one) and entity resolution sees only concepts inside it.
    Invalid arguments raise :class:`~clew.errors.QueryError` naming the value and what is allowed.
    """
    doc = memory_document(
        text,
        session=session,
        timestamp=timestamp,
        metadata=metadata,
        stamp=stamp,
        relations=relations,
    )
    if scope is None and stamp:
        scope = dict(stamp)
    for raw in doc.links:
        _, target = split_link(raw)
        if target.startswith(CONCEPT_PREFIX):
            continue
        known = (
            engine.store.has_document(target)
            if scope is None
            else engine.document(target, scope=scope) is not None
        )
        if not known:
            raise QueryError(
                f"relation target {target!r} is not in the index; allowed: the id of a memory "
                "or document, or concept:NAME"
            )
    engine.ingest([doc], scope=scope)
    return doc.doc_id


def forget(engine: Engine, memory_id: str) -> int:
    """Delete a memory (any document, by id) from every leg; returns the new release.

    An unknown id is the engine's :class:`~clew.errors.StoreError`; nothing is removed."""
    if not isinstance(memory_id, str) or not memory_id.strip():
        raise QueryError(f"memory id {memory_id!r} is invalid; allowed: a non-empty string")
    return engine.delete(memory_id)


# -- validation -------------------------------------------------------------------------------


def _text(text: Any) -> str:
    if not isinstance(text, str):
        raise QueryError(f"memory text must be a string, got {type(text).__name__}: {text!r:.80}")
    if not text.strip():
        raise QueryError("memory text is empty; allowed: at least one non-blank character")
    if len(text) > MAX_MEMORY_CHARS:
        raise QueryError(
            f"memory text has {len(text)} characters; allowed: at most {MAX_MEMORY_CHARS}"
        )
    return text


def _relations(value: Any) -> list[tuple[str, str]]:
    if value is None:
        return []
    if isinstance(value, str | bytes | Mapping) or not hasattr(value, "__iter__"):
        raise QueryError(
            f"relations={value!r:.80} is invalid; allowed: a list of (relation, target) pairs or "
            '{"type": ..., "target": ...} objects'
        )
    out: list[tuple[str, str]] = []
    for i, item in enumerate(value):
        if isinstance(item, Mapping):
            rel, target = item.get("type"), item.get("target")
        elif isinstance(item, list | tuple) and len(item) == 2:
            rel, target = item
        else:
            raise QueryError(
                f"relations[{i}]={item!r:.80} is invalid; allowed: (relation, target) or "
                '{"type": ..., "target": ...}'
            )
        if not isinstance(rel, str) or RELATION_RE.fullmatch(rel) is None:
            raise QueryError(
                f"relations[{i}] type {rel!r} is invalid; allowed: a lower-case name of letters, "
                "digits and underscores such as caused_by, related_to, follows"
            )
        if not isinstance(target, str) or not target.strip() or "\n" in target:
            raise QueryError(
                f"relations[{i}] target {target!r} is invalid; allowed: a memory or document id, "
                "or concept:NAME"
            )
        if target.startswith(CONCEPT_PREFIX) and not target[len(CONCEPT_PREFIX) :].strip():
            raise QueryError(f"relations[{i}] target {target!r} names no concept")
        out.append((rel, target.strip()))
    return out


def _session(session: Any) -> str | None:
    if session is None:
        return None
    if not isinstance(session, str) or not session.strip():
        raise QueryError(f"session={session!r} is invalid; allowed: a non-empty string or null")
    return session


def _timestamp(value: Any) -> str:
    """ISO 8601 UTC with a ``Z``: seconds, plus microseconds when there are any."""
    if value is None:
        when = dt.datetime.now(dt.UTC)
    elif isinstance(value, dt.datetime):
        when = value
    elif isinstance(value, str):
        try:
            when = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise QueryError(
                f"timestamp {value!r} is not an ISO 8601 time; allowed: e.g. "
                "'2026-03-01', '2026-03-01T12:00:00Z' or '2026-03-01T13:00:00+01:00'"
            ) from None
    else:
        raise QueryError(
            f"timestamp={value!r} is invalid; allowed: an ISO 8601 string, a datetime or null"
        )
    when = when.replace(tzinfo=dt.UTC) if when.tzinfo is None else when.astimezone(dt.UTC)
    return when.replace(tzinfo=None).isoformat() + "Z"


def _metadata(value: Any, name: str, *, reserved: bool) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise QueryError(
            f"{name} must be an object of JSON values, got {type(value).__name__}: {value!r:.80}"
        )
    out: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key.strip():
            raise QueryError(f"{name} key {key!r} is invalid; allowed: a non-empty string")
        if reserved and key in RESERVED_KEYS:
            raise QueryError(
                f"{name} key {key!r} is reserved for memories; allowed: any key except "
                f"{', '.join(RESERVED_KEYS)}"
            )
        _check_json(item, f"{name}.{key}")
        out[key] = item
    return out


def _check_json(value: Any, where: str) -> None:
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QueryError(f"{where}={value!r} is not allowed; allowed: finite numbers")
        return
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_json(item, f"{where}[{i}]")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise QueryError(f"{where} has key {key!r}; allowed: string keys")
            _check_json(item, f"{where}.{key}")
        return
    raise QueryError(
        f"{where}={value!r:.80} ({type(value).__name__}) is not a JSON value; allowed: string, "
        "number, boolean, null, list or object"
    )


# -- conversation transcripts -------------------------------------------------------------------

TURN_TEXT_KEYS = ("text", "content", "message")
TURN_TIME_KEYS = ("time", "timestamp", "created_at")


def is_transcript(path: str | Path, *, max_bytes: int | None = None) -> bool:
    """A ``.jsonl`` file whose first record is a conversation turn (``speaker`` or ``role``
    with ``text``/``content``) rather than a corpus document (``_id``). A file over
    ``max_bytes`` (default: :class:`~clew.config.IngestLimits`' limit), or whose first record
    is not plain JSON (nested too deeply, say), is not: the corpus loader refuses it clearly."""
    from clew.config import IngestLimits

    p = Path(path)
    if p.suffix.lower() != ".jsonl" or not p.is_file():
        return False
    limit = IngestLimits().max_file_bytes if max_bytes is None else max_bytes
    try:
        if p.stat().st_size > limit:
            return False
        with p.open(encoding="utf-8") as f:
            while True:
                line = f.readline(limit + 1)
                if not line:
                    return False
                if line.strip():
                    break
        first = json.loads(line)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return False  # ValueError: malformed JSON, or an integer of too many digits
    return (
        isinstance(first, dict)
        and "_id" not in first
        and ("speaker" in first or "role" in first)
        and any(k in first for k in TURN_TEXT_KEYS)
    )


def load_transcript(
    path: str | Path, *, session: str | None = None, limits: IngestLimits | None = None
) -> list[Document]:
    """One memory per turn of a JSONL chat transcript: ``{"speaker": "ana", "text": "...",
    "time": "2026-03-01T12:00:00Z", "session": "s1"}`` (``role``/``content``/``timestamp``
    also accepted). The session is the turn's own, else ``session``, else the file name. Each
    turn records its speaker and position and ``follows`` the previous turn of its session.
    A bad line is a :class:`~clew.errors.LoadError` naming the file, line and field; so is a
    file over ``limits.max_file_bytes`` (an :class:`~clew.config.IngestLimits`; None = the
    defaults) and a turn nested deeper than the metadata depth limit (never a traceback)."""
    from clew.config import IngestLimits
    from clew.ingest.load import MAX_METADATA_DEPTH, check_json_depth, read_bytes

    bounds = limits or IngestLimits()
    depth = MAX_METADATA_DEPTH + 1  # the turn, then its fields as deep as document metadata
    p = Path(path)
    default = session or p.stem
    docs: list[Document] = []
    previous: dict[str, str] = {}
    try:
        lines = read_bytes(p, bounds.max_file_bytes).decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise LoadError(f"{p.name}: cannot read transcript: {exc}") from exc
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{p.name}:{n}"
        try:
            turn = json.loads(line)
        except json.JSONDecodeError as exc:
            raise LoadError(f"{where}: not JSON ({exc.msg})") from None
        except RecursionError:
            raise LoadError(
                f"{where}: JSON is nested too deeply; allowed: at most {depth} levels"
            ) from None
        except ValueError as exc:  # an integer with more digits than Python converts
            raise LoadError(f"{where}: not JSON ({exc})") from None
        check_json_depth(turn, where, depth)
        if not isinstance(turn, dict):
            raise LoadError(f"{where}: a turn must be a JSON object, got {type(turn).__name__}")
        speaker = turn.get("speaker", turn.get("role"))
        text = next((turn[k] for k in TURN_TEXT_KEYS if k in turn), None)
        when = next((turn[k] for k in TURN_TIME_KEYS if k in turn), None)
        if not isinstance(speaker, str) or not speaker.strip():
            raise LoadError(f"{where}: speaker={speaker!r} is invalid; allowed: a non-empty string")
        if not isinstance(text, str) or not text.strip():
            continue  # an empty turn carries nothing to remember
        sess = turn.get("session", default)
        extra = {
            k: v
            for k, v in turn.items()
            if k not in ("speaker", "role", "session", *TURN_TEXT_KEYS, *TURN_TIME_KEYS)
        }
        prev = previous.get(str(sess))
        try:
            doc = memory_document(
                text,
                session=sess,
                timestamp=when,
                metadata={**extra, "speaker": speaker.strip(), "turn": n},
                relations=[("follows", prev)] if prev else (),
            )
        except QueryError as exc:
            raise LoadError(f"{where}: {exc}") from None
        docs.append(replace(doc, title=f"{speaker.strip()}: {doc.title}"[:MAX_TITLE_CHARS]))
        previous[str(sess)] = doc.doc_id
    return docs
