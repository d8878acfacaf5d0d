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
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from clew.errors import QueryError
from clew.filters import parse_filter, parse_time, to_json
from clew.links import CONCEPT_PREFIX, RELATION_RE, relation_link, split_link
from clew.types import Document

if TYPE_CHECKING:
    pass

__all__ = [
    "MAX_MEMORY_CHARS",
    "MEMORY_KIND",
    "MEMORY_SOURCE",
    "RESERVED_KEYS",
    "check_targets",
    "epoch",
    "memory_document",
    "memory_id",
    "recall_window",
    "relation_targets",
    "said_on",
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
    namespace: str = "",
) -> Document:
    """Validate the arguments of :func:`remember` and build the memory's :class:`Document`.

    The id is a hash of the session, time and text, and of the writer's ``stamp``; a writer
    whose scope stamps nothing gives its id ``namespace`` (``Principal.namespace``) instead, so
    that writers in different scopes never share a memory id, stamp or not."""
    body = _text(text)
    links = tuple(relation_link(rel, target) for rel, target in _relations(relations))
    sess = _session(session)
    created_at = _timestamp(timestamp)
    user = _metadata(metadata, "metadata", reserved=True)
    stamped = _metadata(stamp, "stamp", reserved=False)
    identity = f"{sess or ''}|{created_at}|{body}"
    if stamped:  # the writer's scope is part of the identity: tenants never collide
        identity = json.dumps(stamped, sort_keys=True, ensure_ascii=False) + "|" + identity
    elif namespace:
        identity = f"{namespace}|{identity}"
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


def relation_targets(doc: Document) -> list[str]:
    """The memory and document ids a memory's relations point at (``concept:`` targets are
    names, not ids: they are left out). The writer checks each exists in its scope."""
    targets = []
    for raw in doc.links:
        _, target = split_link(raw)
        if not target.startswith(CONCEPT_PREFIX):
            targets.append(target)
    return targets


_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


def said_on(metadata: Mapping[str, Any]) -> str | None:
    """The day (``YYYY-MM-DD``, UTC) a memory was recorded, from a hit's or document's
    metadata; None for a document that is not a memory or a memory without a valid time."""
    if metadata.get("kind") != MEMORY_KIND:
        return None
    created = metadata.get("created_at")
    if not isinstance(created, str) or not _DAY.match(created):
        return None
    return created[:10]


def check_targets(doc: Document, known: Callable[[str], bool]) -> None:
    """A QueryError naming the first relation target of ``doc`` that ``known`` denies (a
    target outside the writer's scope reads as one that is not in the index)."""
    for target in relation_targets(doc):
        if not known(target):
            raise QueryError(
                f"relation target {target!r} is not in the index; allowed: the id of a memory "
                "or document, or concept:NAME"
            )


def memory_id(value: Any) -> str:
    """A memory id as given, or a QueryError naming it."""
    if not isinstance(value, str) or not value.strip():
        raise QueryError(f"memory id {value!r} is invalid; allowed: a non-empty string")
    return value


def epoch(value: Any, name: str) -> float | None:
    """A time argument as epoch seconds: ISO 8601 text, a datetime (naive = UTC) or a number."""
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        when = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
        return when.timestamp()
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    if isinstance(value, str):
        parsed = parse_time(value)
        if parsed is not None:
            return parsed
    raise QueryError(
        f"{name}={value!r} is not a time; allowed: ISO 8601 (e.g. 2026-03-01 or "
        "2026-03-01T12:00:00Z), a datetime or epoch seconds"
    )


def recall_window(
    session: str | None, since: Any, until: Any, as_of: Any, scope: Any
) -> tuple[dict[str, Any], Any, float | None]:
    """What a recall searches with: the scope AND-ed with the memory conditions (memories only,
    of one ``session``, created in ``[since, until)`` and not after ``as_of``), the scope its
    statistics are computed over (the caller's, without the memory conditions: a session or
    time window narrows what is found, not how words and concepts are weighted), and ``as_of``
    in epoch seconds."""
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
    node = parse_filter(scope)
    if node is not None:
        parts.insert(0, scope)
    stats_scope = to_json(node) if node is not None else None
    return {"and": parts}, stats_scope, parsed["as_of"]


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
