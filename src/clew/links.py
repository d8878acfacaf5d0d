"""Typed links between documents (and from documents to concepts).

A document's ``links`` are raw targets: a markdown link (``runbook.md``), a document id, or a
typed relation written ``REL::TARGET``: ``caused_by::mem-1a2b``, ``follows::mem-77``,
``related_to::concept:pgbouncer``. Document targets become graph edges named after the relation
(``CAUSED_BY``); a ``concept:NAME`` target makes the document mention that concept.
"""

from __future__ import annotations

import re

__all__ = ["CONCEPT_PREFIX", "RELATION_RE", "relation_link", "split_link"]

RELATION_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
"""Relation names: lower case, digits and underscores (``caused_by``, ``related_to``)."""
CONCEPT_PREFIX = "concept:"
_TYPED = re.compile(r"^([a-z][a-z0-9_]{0,39})::(.+)$", re.DOTALL)


def relation_link(relation: str, target: str) -> str:
    return f"{relation}::{target}"


def split_link(raw: str) -> tuple[str | None, str]:
    """``caused_by::mem-1`` → ``("caused_by", "mem-1")``; an untyped link → ``(None, raw)``."""
    m = _TYPED.match(raw)
    if m is None:
        return None, raw
    return m.group(1), m.group(2)
