"""Conversation transcripts as memories: one memory per turn of a JSONL chat log."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from clew.errors import LoadError, QueryError
from clew.memory import MAX_TITLE_CHARS, memory_document
from clew.types import Document

if TYPE_CHECKING:
    from clew.config import IngestLimits

__all__ = ["is_transcript", "load_transcript"]

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
