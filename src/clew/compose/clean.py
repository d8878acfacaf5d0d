"""Chunk text as plain prose for answers: markdown and HTML markup out, the words kept.

- code spans keep their text verbatim (``\\`pool.max_size\\``` → ``pool.max_size``), nothing
  inside them is read as markup;
- links keep their text (``[CHG-1187](chg-1187.md)`` → ``CHG-1187``), images their alt text,
  autolinks their address;
- emphasis and strike-through marks are dropped (``**VX-220**`` → ``VX-220``); an underscore
  inside a word is not emphasis (``max_size`` stays);
- HTML tags are dropped and entities decoded; backslash escapes are undone;
- a backtick left unpaired (a span cut in two) is dropped;
- runs of whitespace become one space.

A table row becomes ``column: value`` pairs with its table's header
(:func:`table_row`). Pure functions, no state.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

__all__ = ["plain", "split_cells", "table_row"]

_CODE = re.compile(r"(`+)(.+?)\1", re.DOTALL)
_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]]+)\]\((?:[^()]|\([^)]*\))*\)")
_REF_LINK = re.compile(r"\[([^\]]+)\]\[[^\]]*\]")
_AUTOLINK = re.compile(r"<((?:https?|mailto|ftp):[^>\s]+)>")
_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9-]*(?:\s[^<>]*)?/?>")
_STRONG = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_EM_STAR = re.compile(r"(?<![\w*])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![\w*])")
_EM_UNDER = re.compile(r"(?<![\w_])_(?=[^\s_])(.+?)(?<=[^\s_])_(?![\w_])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|>~<])")
_SLOT = re.compile("\x00(\\d+)\x00")


def plain(text: str) -> str:
    """``text`` with inline markdown and HTML rendered to plain text (see the module)."""
    codes: list[str] = []

    def keep(m: re.Match[str]) -> str:
        codes.append(" ".join(m.group(2).split()))
        return f"\x00{len(codes) - 1}\x00"

    def escaped(m: re.Match[str]) -> str:
        codes.append(m.group(1))
        return f"\x00{len(codes) - 1}\x00"

    out = _CODE.sub(keep, text.replace("\x00", ""))
    out = _ESCAPE.sub(escaped, out)
    out = _IMAGE.sub(r"\1", out)
    out = _LINK.sub(r"\1", out)
    out = _REF_LINK.sub(r"\1", out)
    out = _AUTOLINK.sub(r"\1", out)
    out = _TAG.sub(" ", out)
    for pattern in (_STRONG, _STRIKE):
        out = pattern.sub(lambda m: m.group(m.lastindex or 0), out)
    out = _EM_STAR.sub(r"\1", out)
    out = _EM_UNDER.sub(r"\1", out)
    out = out.replace("`", "")
    out = html.unescape(out)
    out = _SLOT.sub(lambda m: codes[int(m.group(1))], out)
    return " ".join(out.split())


def split_cells(row: str) -> list[str]:
    """The cells of a markdown table row (outer pipes optional; ``\\|`` and pipes inside code
    spans do not split)."""
    body = row.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
    cells: list[str] = []
    cur: list[str] = []
    ticks = 0
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body) and body[i + 1] == "|":
            cur.append("|")
            i += 2
            continue
        if c == "`":
            ticks ^= 1
        if c == "|" and not ticks:
            cells.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    cells.append("".join(cur))
    return [c.strip() for c in cells]


def table_row(header: Sequence[str] | None, cells: Sequence[str]) -> str:
    """A row as ``column: value`` pairs, ``; ``-separated (``Code: ERR-4413; Retry?: After
    Retry-After``). Empty cells are left out; without a header (or beyond it) the plain values
    are joined."""
    parts: list[str] = []
    for i, cell in enumerate(cells):
        value = plain(cell)
        if not value:
            continue
        name = plain(header[i]) if header is not None and i < len(header) else ""
        parts.append(f"{name}: {value}" if name else value)
    return "; ".join(parts)
