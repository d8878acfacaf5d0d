"""Loaders: ``.md``, ``.txt``, ``.html``/``.htm``, ``.jsonl`` (BEIR corpus layout), directories.

Every loader returns :class:`~clew.types.Document` values or raises :class:`LoadError` naming the
file and the problem (unreadable, binary, invalid UTF-8, malformed line). Nothing is written here:
the pipeline loads everything first, so a bad file stops the ingest before any write.

Loaders take untrusted files: every pattern here runs in linear time on any input, metadata
(front matter, JSONL ``metadata``) must be plain JSON values of bounded depth and size, a file
over :attr:`~clew.config.IngestLimits.max_file_bytes` is refused before it is read (never more
than that many bytes are read), and memory stays a small multiple of the file's size.

A directory walk never leaves its root through a symlink unless asked to (``follow_symlinks``):
a link whose target lies outside is skipped with a warning naming it; links inside the root are
followed, every real file is loaded once (under its own path when the walk also reaches it
directly), and a directory already walked is never walked again, so a symlink loop ends.
"""

from __future__ import annotations

import datetime as dt
import heapq
import html
import json
import logging
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from clew.config import IngestLimits
from clew.errors import LoadError
from clew.ingest.chunk import HEADING, heading_text
from clew.types import Document

logger = logging.getLogger(__name__)

SUPPORTED_SUFFIXES = (".md", ".markdown", ".txt", ".html", ".htm", ".jsonl")

MAX_METADATA_DEPTH = 32
"""Deepest nesting of lists and mappings allowed in a document's metadata."""
MAX_METADATA_VALUES = 100_000
"""Most values (counted with every list item and mapping entry) in a document's metadata."""
MAX_FRONT_MATTER_CHARS = 1_000_000
MAX_TITLE_CHARS = 1_000
"""Longest title: every chunk is embedded with its document's title, so a huge one would be
repeated in every chunk. A longer explicit title is an error; a longer heading is no title."""

_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*\r?\n", re.DOTALL)
# link text may not hold brackets and a target may not hold brackets or parentheses: every
# failed attempt then stops at the next bracket, which keeps matching linear on any input
_MD_LINK = re.compile(
    r"(?<!!)\[[^\[\]]*\]\([ \t\n]*<?([^()\[\]\s<>]+)>?(?:[ \t\n]+\"[^\"\n]*\")?[ \t\n]*\)"
)
_NON_BLANK = re.compile(r"\S")


def _too_big(path: Path, size: str, max_bytes: int) -> LoadError:
    return LoadError(
        f"{str(path)!r} is {size} bytes; allowed: at most {max_bytes:,} bytes "
        "(ingest.max_file_bytes)"
    )


def read_bytes(path: Path, max_bytes: int | None = None) -> bytes:
    """A file's bytes, refusing one over ``max_bytes`` (default: the default limit) by its size
    before reading it, and reading at most ``max_bytes + 1`` bytes whatever the size says (a
    file that grows, or one whose size the system does not report, as under ``/proc``)."""
    limit = IngestLimits().max_file_bytes if max_bytes is None else max_bytes
    try:
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > limit:
                raise _too_big(path, f"{size:,}", limit)
            data = f.read(limit + 1)
    except OSError as exc:
        raise LoadError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from exc
    if len(data) > limit:
        raise _too_big(path, f"more than {limit:,}", limit)
    return data


def read_text(path: Path, max_bytes: int | None = None) -> str:
    """Read a file as UTF-8 text, refusing binary files, invalid UTF-8 and a file over
    ``max_bytes`` (:func:`read_bytes`) with a clear error."""
    data = read_bytes(path, max_bytes)
    if b"\x00" in data[:8192]:
        raise LoadError(f"{str(path)!r} is a binary file (NUL bytes); expected UTF-8 text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.start + 1]
        raise LoadError(f"{str(path)!r} is not valid UTF-8 (byte {exc.start}: {bad!r})") from exc
    del data
    text = text.removeprefix("\ufeff")
    return text.replace("\r\n", "\n") if "\r" in text else text


def _links_from(metadata: dict[str, Any]) -> tuple[str, ...]:
    raw = metadata.get("links", [])
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        return ()
    return tuple(str(x) for x in raw if isinstance(x, str | int) and str(x).strip())


def _first_heading(text: str) -> str:
    for m in HEADING.finditer(text):
        title = heading_text(m.group(2))
        if title:
            return title if len(title) <= MAX_TITLE_CHARS else ""
    return ""


def _check_title(title: str, where: str) -> str:
    if len(title) > MAX_TITLE_CHARS:
        raise LoadError(
            f"{where}: title has {len(title)} characters; allowed: at most {MAX_TITLE_CHARS}"
        )
    return title


def load_markdown(path: Path, doc_id: str, limits: IngestLimits | None = None) -> Document:
    text = read_text(path, _max_bytes(limits))
    metadata: dict[str, Any] = {}
    match = _FRONT_MATTER.match(text)
    if match:
        metadata = _front_matter(match.group(1), str(path))
        text = text[match.end() :]
    title = _check_title(str(metadata.pop("title", "") or ""), repr(str(path)))
    if not title:
        title = _first_heading(text) or path.stem
    found = dict.fromkeys(  # deduplicated as found: a link repeated on every line stays one
        m.group(1) for m in _MD_LINK.finditer(text) if not _is_external(m.group(1))
    )
    links = (*found, *_links_from(metadata))
    return Document(
        doc_id=doc_id,
        title=title,
        text=text.strip("\n"),
        source=str(doc_id),
        metadata=metadata,
        links=_dedup(links),
        fmt="md",
    )


def _front_matter(raw: str, where: str) -> dict[str, Any]:
    import yaml

    if len(raw) > MAX_FRONT_MATTER_CHARS:
        raise LoadError(
            f"{where!r}: front matter has {len(raw)} characters; allowed: at most "
            f"{MAX_FRONT_MATTER_CHARS}"
        )
    try:
        front = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise LoadError(f"{where!r} has malformed front matter: {exc}") from exc
    except RecursionError:
        raise LoadError(
            f"{where!r}: front matter is nested too deeply; allowed: at most "
            f"{MAX_METADATA_DEPTH} levels"
        ) from None
    except ValueError as exc:  # e.g. an integer with more digits than Python converts
        raise LoadError(f"{where!r} has malformed front matter: {exc}") from exc
    if front is None:
        return {}
    if not isinstance(front, dict):
        raise LoadError(f"{where!r}: front matter must be a mapping of fields")
    plain = _plain(front, _Where(f"{where!r}: front matter"))
    assert isinstance(plain, dict)
    return plain


def load_text(path: Path, doc_id: str, limits: IngestLimits | None = None) -> Document:
    text = read_text(path, _max_bytes(limits)).strip("\n")
    first = _NON_BLANK.search(text)
    line = ""
    if first is not None:
        end = text.find("\n", first.start())
        line = text[first.start() : end if end >= 0 else len(text)].strip()
    title = line if 0 < len(line) <= 120 else path.stem
    return Document(doc_id=doc_id, title=title, text=text, source=str(doc_id), fmt="txt")


# -- HTML -----------------------------------------------------------------------------------------

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
_HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
_SKIP = frozenset({"script", "style", "noscript", "template", "head"})
_RAW_TEXT = ("script", "style")
"""Elements whose content is not markup: it runs to the matching end tag."""
# One token per match: a comment (an unclosed one runs to the end), a start or end tag (its
# attributes may not hold '<', so a failed attempt stops at the next '<'), a declaration or a
# processing instruction. Linear on any input, unlike html.parser on Python < 3.13.4, which is
# quadratic on inputs such as "<a" repeated (CVE-2025-6069).
_HTML_TOKEN = re.compile(
    r"<!--.*?(?:-->|\Z)"
    r"|<(?P<close>/?)(?P<name>[A-Za-z][A-Za-z0-9:_-]*)"
    r"(?P<attrs>(?:[^<>\"']|\"[^<\"]*\"|'[^<']*')*)>"
    r"|<[!?][^<>]*>",
    re.DOTALL,
)
_RAW_END = {tag: re.compile(rf"</{tag}[^<>]*>", re.IGNORECASE) for tag in _RAW_TEXT}
_HREF = re.compile(
    r"""(?:^|[\s/])href[ \t\n]*=[ \t\n]*(?:"([^"]*)"|'([^']*)'|([^\s"'=<>`]+))""", re.IGNORECASE
)
_SPACES = re.compile(r"\s+")


def _html_text(source: str) -> tuple[str, str, list[str]]:
    """HTML → (title, markdown-like text, local link targets): headings become ``#`` lines,
    blocks become paragraphs, scripts, styles and the head (but its title) are dropped."""
    parts: list[str] = []
    title: list[str] = []
    links: list[str] = []
    skip = 0
    in_title = False
    pos = 0
    while True:
        m = _HTML_TOKEN.search(source, pos)
        data = source[pos : m.start() if m else len(source)]
        if data:
            text = html.unescape(data)
            if in_title:
                title.append(text)
            elif not skip:
                parts.append(_SPACES.sub(" ", text))
        if m is None:
            break
        pos = m.end()
        name = m.group("name")
        if name is None:
            continue  # comment, declaration, processing instruction
        tag = name.lower()
        if not m.group("close"):
            if tag in _RAW_TEXT:
                end = _RAW_END[tag].search(source, pos)
                pos = end.end() if end else len(source)
                continue
            if tag in _SKIP:
                skip += 1
            if tag == "title":
                in_title = True
            elif tag in _HEADINGS:
                parts.append("\n\n" + "#" * int(tag[1]) + " ")
            elif tag in _BLOCKS:
                parts.append("\n\n")
            elif tag == "a":
                href = _HREF.search(m.group("attrs"))
                target = (
                    html.unescape(next(g for g in href.groups() if g is not None)) if href else ""
                )
                if target and not _is_external(target) and not target.startswith("#"):
                    links.append(target)
        else:
            if tag in _SKIP and skip:
                skip -= 1
            if tag == "title":
                in_title = False
            elif tag in _HEADINGS or tag in _BLOCKS:
                parts.append("\n\n")
    return "".join(title), "".join(parts), links


def load_html(path: Path, doc_id: str, limits: IngestLimits | None = None) -> Document:
    raw_title, text, links = _html_text(read_text(path, _max_bytes(limits)))
    # blanks around line breaks go, line by line: the regex [ \t]*\n[ \t]* is quadratic on a
    # long run of blanks without a line break (" <b>" repeated)
    body = "\n".join(line.strip(" \t") for line in text.split("\n"))
    body = re.sub(r"\n{3,}", "\n\n", body).strip()
    title = raw_title.strip()
    if not title or len(title) > MAX_TITLE_CHARS:
        title = _first_heading(body) or path.stem
    return Document(
        doc_id=doc_id,
        title=title,
        text=body,
        source=str(doc_id),
        links=_dedup(tuple(links)),
        fmt="html",
    )


# -- JSONL ----------------------------------------------------------------------------------------


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """(1-based number, line) of every line that is not blank, split at ``\n`` only as JSON
    Lines are (``str.splitlines`` also splits at U+2028, U+0085 and others, which JSON strings
    may hold raw). Blank lines are skipped by a regex search, not one Python step each."""
    pos = 0
    lineno = 1
    while True:
        m = _NON_BLANK.search(text, pos)
        if m is None:
            return
        start = text.rfind("\n", pos, m.start()) + 1 or pos
        lineno += text.count("\n", pos, start)
        end = text.find("\n", m.start())
        end = len(text) if end < 0 else end
        yield lineno, text[start:end]
        pos = end + 1
        lineno += 1


def load_jsonl(path: Path, limits: IngestLimits | None = None) -> Iterator[Document]:
    """BEIR corpus layout: one object per line with ``_id``, ``title``, ``text``, ``metadata``."""
    text = read_text(path, _max_bytes(limits))
    for lineno, line in _lines(text):
        where = f"{str(path)!r} line {lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise LoadError(f"{where}: invalid JSON ({exc.msg})") from exc
        except RecursionError:
            raise LoadError(
                f"{where}: JSON is nested too deeply; allowed: at most {MAX_METADATA_DEPTH} "
                "levels of metadata"
            ) from None
        except ValueError as exc:  # an integer with more digits than Python converts
            raise LoadError(f"{where}: invalid JSON ({exc})") from exc
        if not isinstance(obj, dict):
            raise LoadError(f"{where}: expected an object with _id, title, text")
        doc_id = obj.get("_id")
        if isinstance(doc_id, bool) or not isinstance(doc_id, str | int) or not str(doc_id).strip():
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
        _check_title(title, where)
        for name, value in (("_id", str(doc_id)), ("title", title), ("text", body)):
            _check_unicode(value, f"{where}: '{name}'")
        metadata = _plain(metadata, _Where(f"{where}: 'metadata'"))
        yield Document(
            doc_id=str(doc_id),
            title=title,
            text=body,
            source=f"{path.name}:{lineno}",
            metadata=metadata,
            links=_links_from(metadata),
            fmt="jsonl",
        )


# -- metadata values ------------------------------------------------------------------------------

_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_unicode(text: str, where: str) -> None:
    """JSON escapes can spell unpaired surrogates (``"\\ud800"``), which no UTF-8 store or
    encoder accepts: refuse them here with the position instead of failing mid-ingest."""
    bad = _SURROGATE.search(text)
    if bad is not None:
        raise LoadError(
            f"{where} holds an unpaired surrogate {bad.group(0)!r} at character {bad.start()}; "
            "allowed: valid Unicode text"
        )


class _Where:
    """Where a metadata value sits (formatted only for an error) and how many values were seen."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.path: list[str | int] = []
        self.values = 0

    def __str__(self) -> str:
        return self.base + "".join(
            f"[{p}]" if isinstance(p, int) else f".{_short(p)}" for p in self.path
        )


def _plain(value: Any, where: _Where) -> Any:
    """``value`` as plain JSON data (dates become ISO strings), or a LoadError naming the field.

    Bounded: at most MAX_METADATA_DEPTH levels and MAX_METADATA_VALUES values counted as
    expanded, so a YAML alias bomb ("billion laughs") stops early instead of filling memory."""
    where.values += 1
    if where.values > MAX_METADATA_VALUES:
        raise LoadError(
            f"{where.base} has more than {MAX_METADATA_VALUES} values; allowed: at most that"
        )
    if len(where.path) > MAX_METADATA_DEPTH:
        raise LoadError(
            f"{where} is nested deeper than {MAX_METADATA_DEPTH} levels; allowed: at most that"
        )
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, str):
        _check_unicode(value, str(where))
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise LoadError(f"{where}: {value!r} is not allowed; allowed: finite numbers")
        return value
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if isinstance(k, dt.datetime | dt.date):
                k = k.isoformat().replace("+00:00", "Z")
            elif not isinstance(k, str | int | float | bool) and k is not None:
                raise LoadError(
                    f"{where}: key {_short(k)} is not allowed; allowed: strings, numbers, dates"
                )
            key = str(k)
            _check_unicode(key, f"{where}: key")
            where.path.append(key)
            out[key] = _plain(v, where)
            where.path.pop()
        return out
    if isinstance(value, list | tuple):
        items = []
        for i, v in enumerate(value):
            where.path.append(i)
            items.append(_plain(v, where))
            where.path.pop()
        return items
    raise LoadError(
        f"{where}: a {type(value).__name__} value is not allowed; allowed: strings, numbers, "
        "booleans, null, dates, lists and mappings"
    )


def check_json_depth(value: Any, where: str, limit: int = MAX_METADATA_DEPTH) -> None:
    """A LoadError naming ``where`` when a parsed JSON value nests lists and objects deeper
    than ``limit`` levels (walked without recursion, so any depth is refused, not a crash)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            raise LoadError(
                f"{where}: JSON is nested deeper than {limit} levels; allowed: at most that"
            )
        stack.extend((child, depth + 1) for child in children)


def _short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- files and directories ------------------------------------------------------------------------


def directory_files(directory: Path, *, follow_symlinks: bool = False) -> list[Path]:
    """The files :func:`load_path` reads from a directory: recursively, supported suffixes
    only, no dot-files or dot-directories, sorted (a document's id is its relative path).

    Symlinks inside the root are followed; one whose target lies outside it is skipped with a
    warning unless ``follow_symlinks``. Every real file is listed once: under its own path when
    the walk reaches it without a link, else under the first link that reaches it (links are
    taken in sorted order, after every directory reached without one). A directory is walked
    once, so a symlink loop (a link to an ancestor) ends with a warning."""
    root = Path(directory)
    root_real = Path(os.path.realpath(root))
    walked: set[Path] = {root_real}
    chosen: dict[Path, Path] = {}  # real file -> the path it is listed under
    links: list[tuple[Path, Path]] = []  # (link, the real directory above it), walked last
    real_dirs: list[tuple[Path, Path]] = [(root, root_real)]
    while real_dirs or links:
        if not real_dirs:  # every directory reached without a link is done: now the links
            link, parent = heapq.heappop(links)
            target = _link_target(link, parent, root, root_real, walked, follow_symlinks)
            if target is None:
                continue
            if target.is_dir():
                walked.add(target)
                real_dirs.append((link, target))
            elif target.is_file() and link.suffix.lower() in SUPPORTED_SUFFIXES:
                chosen.setdefault(target, link)
            continue
        where, real = real_dirs.pop()
        try:
            with os.scandir(where) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            logger.warning("skipping directory %r: %s", str(where), exc.strerror or exc)
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            path = Path(entry.path)
            try:
                if entry.is_symlink():
                    heapq.heappush(links, (path, real))
                elif entry.is_dir(follow_symlinks=False):
                    walked.add(real / entry.name)
                    real_dirs.append((path, real / entry.name))
                elif (
                    entry.is_file(follow_symlinks=False)
                    and path.suffix.lower() in SUPPORTED_SUFFIXES
                ):
                    chosen.setdefault(real / entry.name, path)
            except OSError as exc:
                logger.warning("skipping %r: %s", str(path), exc.strerror or exc)
    return sorted(chosen.values())


def _link_target(
    link: Path, parent: Path, root: Path, root_real: Path, walked: set[Path], follow: bool
) -> Path | None:
    """Where a symlink met in the walk leads, or None (with a log line) when it is skipped."""
    try:
        target = Path(os.path.realpath(parent / link.name, strict=True))
    except FileNotFoundError:
        logger.warning("skipping %r: a broken symlink", str(link))
        return None
    except OSError as exc:  # ELOOP: links that lead to each other
        logger.warning("skipping %r: %s", str(link), exc.strerror or exc)
        return None
    if not follow and not target.is_relative_to(root_real):
        logger.warning(
            "skipping %r: a symlink to %r, outside %r (allowed with --follow-symlinks)",
            str(link),
            str(target),
            str(root),
        )
        return None
    if target.is_dir() and target in walked:
        if (parent / link.name).is_relative_to(target):
            logger.warning(
                "skipping %r: a symlink loop (it leads back to %r)", str(link), str(target)
            )
        else:
            logger.info("skipping %r: its directory %r is already walked", str(link), str(target))
        return None
    return target


def load_path(
    path: str | Path,
    *,
    limits: IngestLimits | None = None,
    follow_symlinks: bool = False,
) -> Iterator[Document]:
    """Load a file or a directory (recursively, supported suffixes only, sorted, no dot-files,
    symlinks out of the directory skipped unless ``follow_symlinks``: :func:`directory_files`).

    A file given directly is read even when it is a symlink: naming it is the caller's choice."""
    p = Path(path)
    if not p.exists():
        raise LoadError(f"no such file or directory: {str(p)!r}")
    if p.is_dir():
        for f in directory_files(p, follow_symlinks=follow_symlinks):
            yield from load_file(f, f.relative_to(p).as_posix(), limits)
    elif not p.is_file():
        raise LoadError(
            f"{str(p)!r} is not a regular file (a device, socket or pipe); allowed: files and "
            "directories"
        )
    else:
        yield from load_file(p, p.name, limits)


def load_file(path: Path, doc_id: str, limits: IngestLimits | None = None) -> Iterator[Document]:
    suffix = path.suffix.lower()
    if suffix in (".md", ".markdown"):
        yield load_markdown(path, doc_id, limits)
    elif suffix == ".txt":
        yield load_text(path, doc_id, limits)
    elif suffix in (".html", ".htm"):
        yield load_html(path, doc_id, limits)
    elif suffix == ".jsonl":
        yield from load_jsonl(path, limits)
    else:
        raise LoadError(
            f"unsupported file type {suffix or '(none)'!r} for {str(path)!r}; "
            f"allowed: {', '.join(SUPPORTED_SUFFIXES)}"
        )


def _max_bytes(limits: IngestLimits | None) -> int:
    return (limits or IngestLimits()).max_file_bytes


_EXTERNAL = re.compile(r"[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def _is_external(target: str) -> bool:
    return _EXTERNAL.match(target) is not None


def _dedup(items: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))
