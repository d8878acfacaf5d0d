"""Loaders: ``.md``, ``.txt``, ``.html``/``.htm``, ``.jsonl`` (BEIR corpus layout), directories.

Every loader returns :class:`~clew.types.Document` values or raises :class:`LoadError` naming the
file and the problem (unreadable, binary, invalid UTF-8, malformed line). Nothing is written here:
the pipeline loads everything first, so a bad file stops the ingest before any write.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from clew.errors import LoadError
from clew.types import Document

SUPPORTED_SUFFIXES = (".md", ".markdown", ".txt", ".html", ".htm", ".jsonl")

_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*\r?\n", re.DOTALL)
_MD_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_MD_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.MULTILINE)


def read_text(path: Path) -> str:
    """Read a file as UTF-8 text, refusing binary files and invalid UTF-8 with a clear error."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LoadError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from exc
    if b"\x00" in data[:8192]:
        raise LoadError(f"{str(path)!r} is a binary file (NUL bytes); expected UTF-8 text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.start + 1]
        raise LoadError(f"{str(path)!r} is not valid UTF-8 (byte {exc.start}: {bad!r})") from exc
    return text.removeprefix("\ufeff").replace("\r\n", "\n")


def _links_from(metadata: dict[str, Any]) -> tuple[str, ...]:
    raw = metadata.get("links", [])
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        return ()
    return tuple(str(x) for x in raw if isinstance(x, str | int) and str(x).strip())


def load_markdown(path: Path, doc_id: str) -> Document:
    text = read_text(path)
    metadata: dict[str, Any] = {}
    match = _FRONT_MATTER.match(text)
    if match:
        import yaml

        try:
            front = yaml.safe_load(match.group(1))
        except yaml.YAMLError as exc:
            raise LoadError(f"{str(path)!r} has malformed front matter: {exc}") from exc
        if front is not None and not isinstance(front, dict):
            raise LoadError(f"{str(path)!r}: front matter must be a mapping of fields")
        metadata = {str(k): _jsonable(v) for k, v in (front or {}).items()}
        text = text[match.end() :]
    title = str(metadata.pop("title", "") or "")
    if not title:
        heading = _MD_HEADING.search(text)
        title = heading.group(2).strip() if heading else path.stem
    links = tuple(m.group(1) for m in _MD_LINK.finditer(text) if not _is_external(m.group(1)))
    links = links + _links_from(metadata)
    return Document(
        doc_id=doc_id,
        title=title,
        text=text.strip("\n"),
        source=str(doc_id),
        metadata=metadata,
        links=_dedup(links),
        fmt="md",
    )


def load_text(path: Path, doc_id: str) -> Document:
    text = read_text(path).strip("\n")
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    title = first if 0 < len(first) <= 120 else path.stem
    return Document(doc_id=doc_id, title=title, text=text, source=str(doc_id), fmt="txt")


class _HTMLText(HTMLParser):
    """HTML → markdown-like text: headings become ``#`` lines, blocks become paragraphs."""

    _BLOCKS = frozenset(
        {
            "p",
            "div",
            "li",
            "ul",
            "ol",
            "br",
            "tr",
            "table",
            "section",
            "article",
            "pre",
            "blockquote",
            "header",
            "footer",
            "dd",
            "dt",
        }
    )
    _SKIP = frozenset({"script", "style", "noscript", "template", "head"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title = ""
        self.links: list[str] = []
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._SKIP:
            self._skip += 1
        if tag == "title":
            self._in_title = True
        elif tag in {"h1", "h2", "h3", "h4", "h5", "h6"}:
            self.parts.append("\n\n" + "#" * int(tag[1]) + " ")
        elif tag in self._BLOCKS:
            self.parts.append("\n\n")
        elif tag == "a":
            href = dict(attrs).get("href")
            if href and not _is_external(href) and not href.startswith("#"):
                self.links.append(href)

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP and self._skip:
            self._skip -= 1
        if tag == "title":
            self._in_title = False
        elif tag in {"h1", "h2", "h3", "h4", "h5", "h6"} or tag in self._BLOCKS:
            self.parts.append("\n\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skip:
            self.parts.append(re.sub(r"\s+", " ", data))


def load_html(path: Path, doc_id: str) -> Document:
    parser = _HTMLText()
    parser.feed(read_text(path))
    parser.close()
    body = re.sub(r"[ \t]*\n[ \t]*", "\n", "".join(parser.parts))
    body = re.sub(r"\n{3,}", "\n\n", body).strip()
    title = parser.title.strip()
    if not title:
        heading = _MD_HEADING.search(body)
        title = heading.group(2).strip() if heading else path.stem
    return Document(
        doc_id=doc_id,
        title=title,
        text=body,
        source=str(doc_id),
        links=_dedup(tuple(parser.links)),
        fmt="html",
    )


def load_jsonl(path: Path) -> Iterator[Document]:
    """BEIR corpus layout: one object per line with ``_id``, ``title``, ``text``, ``metadata``."""
    text = read_text(path)
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{str(path)!r} line {lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise LoadError(f"{where}: invalid JSON ({exc.msg})") from exc
        if not isinstance(obj, dict):
            raise LoadError(f"{where}: expected an object with _id, title, text")
        doc_id = obj.get("_id")
        if not isinstance(doc_id, str | int) or not str(doc_id).strip():
            raise LoadError(f"{where}: missing or empty '_id' (a string)")
        body = obj.get("text", "")
        title = obj.get("title", "") or ""
        if not isinstance(body, str) or not isinstance(title, str):
            raise LoadError(f"{where}: 'title' and 'text' must be strings")
        metadata = obj.get("metadata", {}) or {}
        if not isinstance(metadata, dict):
            raise LoadError(f"{where}: 'metadata' must be an object, got {type(metadata).__name__}")
        if not body.strip() and not title.strip():
            raise LoadError(f"{where}: document {doc_id!r} has neither title nor text")
        yield Document(
            doc_id=str(doc_id),
            title=title,
            text=body,
            source=f"{path.name}:{lineno}",
            metadata=metadata,
            links=_links_from(metadata),
            fmt="jsonl",
        )


def load_path(path: str | Path) -> Iterator[Document]:
    """Load a file or a directory (recursively, supported suffixes only, sorted, no dot-files)."""
    p = Path(path)
    if not p.exists():
        raise LoadError(f"no such file or directory: {str(p)!r}")
    if p.is_dir():
        files = sorted(
            f
            for f in p.rglob("*")
            if f.is_file()
            and f.suffix.lower() in SUPPORTED_SUFFIXES
            and not any(part.startswith(".") for part in f.relative_to(p).parts)
        )
        for f in files:
            yield from _load_file(f, f.relative_to(p).as_posix())
    else:
        yield from _load_file(p, p.name)


def _load_file(path: Path, doc_id: str) -> Iterator[Document]:
    suffix = path.suffix.lower()
    if suffix in (".md", ".markdown"):
        yield load_markdown(path, doc_id)
    elif suffix == ".txt":
        yield load_text(path, doc_id)
    elif suffix in (".html", ".htm"):
        yield load_html(path, doc_id)
    elif suffix == ".jsonl":
        yield from load_jsonl(path)
    else:
        raise LoadError(
            f"unsupported file type {suffix or '(none)'!r} for {str(path)!r}; "
            f"allowed: {', '.join(SUPPORTED_SUFFIXES)}"
        )


def _is_external(target: str) -> bool:
    return bool(re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE))


def _dedup(items: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def _jsonable(value: Any) -> Any:
    """Front matter values as JSON-compatible data (dates become ISO strings)."""
    import datetime as dt

    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value
