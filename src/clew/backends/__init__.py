"""Storage backends behind one seam (:class:`clew.protocols.Backend`): which kind a target is,
and how it is named in messages."""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["backend_kind", "display_target"]


def backend_kind(target: str | Path) -> str:
    """``postgresql`` for a ``postgresql://`` or ``postgres://`` URL, ``file`` otherwise."""
    url = isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))
    return "postgresql" if url else "file"


def display_target(target: str | Path) -> str:
    """An index directory or store URL fit for logs and messages (no password)."""
    return re.sub(r"://([^:@/]*):[^@]*@", r"://\1:***@", str(target))
