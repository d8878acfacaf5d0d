"""Loaders: markdown, plain text, logs, reStructuredText and source files, HTML, JSONL (BEIR
corpus layout), PDF, DOCX, PPTX, CSV/TSV (:mod:`clew.ingest.formats`), and directories of them.

Every loader returns :class:`~clew.types.Document` values or raises :class:`LoadError` naming the
file and the problem (unreadable, binary, invalid UTF-8, malformed line, no text layer, corrupt).
Nothing is written here: the pipeline loads everything first. A file named directly that cannot
be loaded stops the ingest before any write; in a directory walk that collects them
(``skipped``), every file that cannot be loaded, unsupported types included, is listed as a
:class:`~clew.types.SkippedFile` with its reason and the walk goes on.

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
import json
import logging
import math
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from clew.config import IngestLimits
from clew.errors import LoadError
from clew.ingest.chunk import HEADING, heading_text
from clew.ingest.formats import (
    OFFICE_SUFFIXES,
    TABLE_SUFFIXES,
    load_csv,
    load_docx,
    load_pdf,
    load_pptx,
    too_big,
)
from clew.types import Document, SkippedFile

logger = logging.getLogger(__name__)

MARKDOWN_SUFFIXES = (".md", ".markdown")
HTML_SUFFIXES = (".html", ".htm", ".xhtml")
LOG_SUFFIXES = (".log",)
RST_SUFFIXES = (".rst",)
SOURCE_SUFFIXES = (
    ".py", ".pyi", ".js", ".mjs", ".cjs", ".ts", ".tsx", ".jsx", ".go", ".rs", ".java", ".kt",
    ".kts", ".scala", ".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".cs", ".rb", ".php", ".swift",
    ".m", ".r", ".jl", ".lua", ".pl", ".sh", ".bash", ".zsh", ".ps1", ".sql", ".proto",
    ".graphql", ".css", ".scss", ".vue", ".svelte", ".tf", ".hcl", ".yaml", ".yml", ".toml",
    ".ini", ".cfg", ".conf", ".json", ".xml", ".adoc", ".tex", ".org",
)  # fmt: skip
"""Read as text, titled by the file's name (a first line of code is no title)."""
TEXT_NAMES = frozenset(
    {"readme", "license", "licence", "changelog", "notice", "authors", "contributing",
     "makefile", "dockerfile", "containerfile", "justfile", "procfile", "gemfile", "rakefile"}
)  # fmt: skip
"""Files without a suffix read as text (case-insensitive)."""
SUPPORTED_SUFFIXES = (
    *MARKDOWN_SUFFIXES,
    ".txt",
    ".text",
    *HTML_SUFFIXES,
    ".jsonl",
    *OFFICE_SUFFIXES,
    *TABLE_SUFFIXES,
    *LOG_SUFFIXES,
    *RST_SUFFIXES,
    *SOURCE_SUFFIXES,
)


def is_supported(path: Path) -> bool:
    """Whether :func:`load_file` reads this file (by its suffix, or its name for README-like
    files without one)."""
    suffix = path.suffix.lower()
    if suffix:
        return suffix in SUPPORTED_SUFFIXES
    return path.name.lower() in TEXT_NAMES


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


def read_bytes(path: Path, max_bytes: int | None = None) -> bytes:
    """A file's bytes, refusing one over ``max_bytes`` (default: the default limit) by its size
    before reading it, and reading at most ``max_bytes + 1`` bytes whatever the size says (a
    file that grows, or one whose size the system does not report, as under ``/proc``)."""
    limit = IngestLimits().max_file_bytes if max_bytes is None else max_bytes
    try:
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > limit:
                raise too_big(path, f"{size:,}", limit)
            data = f.read(limit + 1)
    except OSError as exc:
        raise LoadError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from exc
    if len(data) > limit:
        raise too_big(path, f"more than {limit:,}", limit)
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
    return parse_markdown(read_text(path, _max_bytes(limits)), doc_id, repr(str(path)), path.stem)


def parse_markdown(text: str, doc_id: str, label: str, fallback_title: str = "") -> Document:
    """Markdown text as a document: YAML front matter (an opening ``---`` block) becomes its
    metadata (plain JSON, bounded) and is no part of the text; its ``title`` is the title, else
    the first heading, else ``fallback_title``; markdown links and front matter ``links`` are its
    links. ``label`` names the text in errors (a quoted path, ``document 'id'``)."""
    text = text.removeprefix("\ufeff")
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    metadata: dict[str, Any] = {}
    match = _FRONT_MATTER.match(text)
    if match:
        metadata = _front_matter(match.group(1), label)
        text = text[match.end() :]
    title = _check_title(str(metadata.pop("title", "") or ""), label)
    if not title:
        title = _first_heading(text) or fallback_title
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


def _front_matter(raw: str, label: str) -> dict[str, Any]:
    import yaml

    if len(raw) > MAX_FRONT_MATTER_CHARS:
        raise LoadError(
            f"{label}: front matter has {len(raw)} characters; allowed: at most "
            f"{MAX_FRONT_MATTER_CHARS}"
        )
    try:
        front = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise LoadError(f"{label} has malformed front matter: {exc}") from exc
    except RecursionError:
        raise LoadError(
            f"{label}: front matter is nested too deeply; allowed: at most "
            f"{MAX_METADATA_DEPTH} levels"
        ) from None
    except ValueError as exc:  # e.g. an integer with more digits than Python converts
        raise LoadError(f"{label} has malformed front matter: {exc}") from exc
    if front is None:
        return {}
    if not isinstance(front, dict):
        raise LoadError(f"{label}: front matter must be a mapping of fields")
    plain = _plain(front, _Where(f"{label}: front matter"))
    assert isinstance(plain, dict)
    return plain


_LOG_LINE = re.compile(
    r"\s*(?:\[\s*)?(?:\d{4}[-/.]\d{2}[-/.]\d{2}|\d{1,2}:\d{2}:\d{2}|\d{10,13}\b"
    r"|(?:TRACE|DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|ERR|CRITICAL|FATAL|SEVERE)\b"
    r"|(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\s+\d{1,2}\s+\d{2}:)"
)
"""A line that opens like a log record: a timestamp, an epoch time or a level."""


def _first_line(text: str) -> str:
    first = _NON_BLANK.search(text)
    if first is None:
        return ""
    end = text.find("\n", first.start())
    return text[first.start() : end if end >= 0 else len(text)].strip()


def load_text(path: Path, doc_id: str, limits: IngestLimits | None = None) -> Document:
    """Plain text. Its title is its first line when that reads as one (at most 120
    characters, not a log record: a timestamp or level first), else the file's name."""
    text = read_text(path, _max_bytes(limits)).strip("\n")
    line = _first_line(text)
    title = line if 0 < len(line) <= 120 and _LOG_LINE.match(line) is None else path.stem
    return Document(doc_id=doc_id, title=title, text=text, source=str(doc_id), fmt="txt")


def load_plain(
    path: Path, doc_id: str, limits: IngestLimits | None = None, fmt: str = "text"
) -> Document:
    """A log or source file: the text as it is, titled by the file's name."""
    text = read_text(path, _max_bytes(limits)).strip("\n")
    return Document(doc_id=doc_id, title=path.name, text=text, source=str(doc_id), fmt=fmt)


_RST_ADORNMENT = re.compile(r"([=\-~^\"'`#*+:._!$%&,;/<>?@\\|])\1{2,}[ \t]*")


def rst_to_markdown(text: str) -> tuple[str, str]:
    """reStructuredText section titles (a line underlined, or over- and underlined, by a
    repeated punctuation character at least as long) → markdown headings, levels in the
    order their styles first appear, as docutils assigns them; (first title, text)."""
    lines = text.split("\n")
    out: list[str] = []
    styles: list[tuple[str, bool]] = []
    first = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        over = _RST_ADORNMENT.fullmatch(line)
        if (
            over
            and i + 2 < len(lines)
            and lines[i + 1].strip()
            and lines[i + 2].rstrip() == line.rstrip()
            and len(line.rstrip()) >= len(lines[i + 1].strip())
        ):
            title, style, step = lines[i + 1].strip(), (over.group(1), True), 3
        else:
            under = _RST_ADORNMENT.fullmatch(lines[i + 1]) if i + 1 < len(lines) else None
            if (
                under is not None
                and line.strip()
                and not line.startswith((" ", "\t"))
                and _RST_ADORNMENT.fullmatch(line) is None
                and len(lines[i + 1].rstrip()) >= len(line.strip())
            ):
                title, style, step = line.strip(), (under.group(1), False), 2
            else:
                out.append(line)
                i += 1
                continue
        if style not in styles:
            styles.append(style)
        level = min(6, styles.index(style) + 1)
        first = first or title
        if out and out[-1].strip():
            out.append("")
        out.extend(["#" * level + " " + title, ""])
        i += step
    return first, re.sub(r"\n{3,}", "\n\n", "\n".join(out))


def load_rst(path: Path, doc_id: str, limits: IngestLimits | None = None) -> Document:
    """reStructuredText: section titles become headings (:func:`rst_to_markdown`); the title is
    the first section title, else the file's name."""
    title, text = rst_to_markdown(read_text(path, _max_bytes(limits)).strip("\n"))
    if not title or len(title) > MAX_TITLE_CHARS:
        title = path.stem
    return Document(doc_id=doc_id, title=title, text=text, source=str(doc_id), fmt="rst")


# -- HTML -----------------------------------------------------------------------------------------


def load_html(path: Path, doc_id: str, limits: IngestLimits | None = None) -> Document:
    """A web page's main content (:mod:`clew.ingest.webpage`): navigation, header, footer and
    sidebars dropped, tables as ``header: value`` rows."""
    from clew.ingest.webpage import parse_page

    page = parse_page(read_text(path, _max_bytes(limits)))
    title = page.title
    if not title or len(title) > MAX_TITLE_CHARS:
        title = _first_heading(page.text) or path.stem
    return Document(
        doc_id=doc_id,
        title=title,
        text=page.text,
        source=str(doc_id),
        links=_dedup(page.links),
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


def directory_files(
    directory: Path, *, follow_symlinks: bool = False, skipped: list[SkippedFile] | None = None
) -> list[Path]:
    """The files :func:`load_path` reads from a directory: recursively, supported types only
    (:func:`is_supported`), no dot-files or dot-directories, sorted (a document's id is its
    relative path). With ``skipped``, every other file met (an unsupported type, a symlink out
    of the directory, a broken one) is appended to it with the reason.

    Symlinks inside the root are followed; one whose target lies outside it is skipped with a
    warning unless ``follow_symlinks``. Every real file is listed once: under its own path when
    the walk reaches it without a link, else under the first link that reaches it (links are
    taken in sorted order, after every directory reached without one). A directory is walked
    once, so a symlink loop ends with a warning."""
    root = Path(directory)
    root_real = Path(os.path.realpath(root))
    walked: set[Path] = {root_real}
    chosen: dict[Path, Path] = {}  # real file -> the path it is listed under
    links: list[tuple[Path, Path]] = []  # (link, the real directory above it), walked last
    real_dirs: list[tuple[Path, Path]] = [(root, root_real)]

    def skip(path: Path, reason: str) -> None:
        if skipped is not None:
            skipped.append(SkippedFile(path.relative_to(root).as_posix(), reason))

    while real_dirs or links:
        if not real_dirs:  # every directory reached without a link is done: now the links
            link, parent = heapq.heappop(links)
            target = _link_target(link, parent, root, root_real, walked, follow_symlinks, skip)
            if target is None:
                continue
            if target.is_dir():
                walked.add(target)
                real_dirs.append((link, target))
            elif target.is_file():
                if is_supported(link):
                    chosen.setdefault(target, link)
                else:
                    skip(link, _unsupported(link))
            continue
        where, real = real_dirs.pop()
        try:
            with os.scandir(where) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            logger.warning("skipping directory %r: %s", str(where), exc.strerror or exc)
            if where != root:
                skip(where, f"cannot read the directory: {exc.strerror or exc}")
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
                elif entry.is_file(follow_symlinks=False):
                    if is_supported(path):
                        chosen.setdefault(real / entry.name, path)
                    else:
                        skip(path, _unsupported(path))
                else:
                    skip(path, "not a regular file (a device, socket or pipe)")
            except OSError as exc:
                logger.warning("skipping %r: %s", str(path), exc.strerror or exc)
                skip(path, f"cannot read it: {exc.strerror or exc}")
    if skipped is not None:
        skipped.sort(key=lambda s: s.path)
    return sorted(chosen.values())


def _unsupported(path: Path) -> str:
    suffix = path.suffix.lower()
    return f"unsupported file type {suffix!r}" if suffix else "unsupported file type (no suffix)"


def _link_target(
    link: Path,
    parent: Path,
    root: Path,
    root_real: Path,
    walked: set[Path],
    follow: bool,
    skip: Callable[[Path, str], None],
) -> Path | None:
    """Where a symlink met in the walk leads, or None (with a log line, and ``skip`` told why)
    when it is skipped."""
    try:
        target = Path(os.path.realpath(parent / link.name, strict=True))
    except FileNotFoundError:
        logger.warning("skipping %r: a broken symlink", str(link))
        skip(link, "a broken symlink")
        return None
    except OSError as exc:  # ELOOP: links that lead to each other
        logger.warning("skipping %r: %s", str(link), exc.strerror or exc)
        skip(link, f"a symlink that cannot be followed: {exc.strerror or exc}")
        return None
    if not follow and not target.is_relative_to(root_real):
        logger.warning(
            "skipping %r: a symlink to %r, outside %r (allowed with --follow-symlinks)",
            str(link),
            str(target),
            str(root),
        )
        skip(link, "a symlink to outside the directory (allowed with --follow-symlinks)")
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
    skipped: list[SkippedFile] | None = None,
) -> Iterator[Document]:
    """Load a file or a directory (recursively, supported types only, sorted, no dot-files,
    symlinks out of the directory skipped unless ``follow_symlinks``: :func:`directory_files`).

    ``skipped``: when given, a directory's files that cannot be loaded (an unsupported type, no
    text layer, corrupt, too big, not UTF-8 ...) are appended to it, each with its reason, and
    the walk goes on; without it the first such file raises its :class:`LoadError` (files of an
    unsupported type are passed over either way). A file given directly always raises, and is
    read even when it is a symlink: naming it is the caller's choice."""
    p = Path(path)
    if not p.exists():
        raise LoadError(f"no such file or directory: {str(p)!r}")
    if p.is_dir():
        for f in directory_files(p, follow_symlinks=follow_symlinks, skipped=skipped):
            doc_id = f.relative_to(p).as_posix()
            if skipped is None:
                yield from load_file(f, doc_id, limits)
                continue
            try:
                docs = list(load_file(f, doc_id, limits))
            except LoadError as exc:
                reason = skip_reason(exc, f)
                skipped.append(SkippedFile(doc_id, reason))
                logger.warning("skipping %r: %s", str(f), reason)
                continue
            yield from docs
        if skipped is not None:
            skipped.sort(key=lambda s: s.path)
    elif not p.is_file():
        raise LoadError(
            f"{str(p)!r} is not a regular file (a device, socket or pipe); allowed: files and "
            "directories"
        )
    else:
        yield from load_file(p, p.name, limits)


def skip_reason(exc: LoadError, path: Path) -> str:
    """A loader's error as the reason a file was skipped: without the path (the report names
    the file)."""
    message = str(exc)
    quoted = repr(str(path))
    for prefix in (f"{quoted}: ", f"{quoted} "):
        if message.startswith(prefix):
            return message[len(prefix) :]
    return message.replace(quoted, "the file")


def load_file(path: Path, doc_id: str, limits: IngestLimits | None = None) -> Iterator[Document]:
    """One file's documents, by its type (:data:`SUPPORTED_SUFFIXES`); a :class:`LoadError`
    for an unsupported one."""
    suffix = path.suffix.lower()
    if suffix in MARKDOWN_SUFFIXES:
        yield load_markdown(path, doc_id, limits)
    elif suffix in (".txt", ".text"):
        yield load_text(path, doc_id, limits)
    elif suffix in HTML_SUFFIXES:
        yield load_html(path, doc_id, limits)
    elif suffix == ".jsonl":
        yield from load_jsonl(path, limits)
    elif suffix == ".pdf":
        yield load_pdf(path, doc_id, limits)
    elif suffix == ".docx":
        yield load_docx(path, doc_id, limits)
    elif suffix == ".pptx":
        yield load_pptx(path, doc_id, limits)
    elif suffix in TABLE_SUFFIXES:
        yield load_csv(path, doc_id, read_text(path, _max_bytes(limits)), limits)
    elif suffix in LOG_SUFFIXES:
        yield load_plain(path, doc_id, limits, fmt="log")
    elif suffix in RST_SUFFIXES:
        yield load_rst(path, doc_id, limits)
    elif suffix in SOURCE_SUFFIXES or (not suffix and path.name.lower() in TEXT_NAMES):
        yield load_plain(path, doc_id, limits, fmt="code" if suffix else "text")
    else:
        raise LoadError(
            f"unsupported file type {suffix or '(none)'!r} for {str(path)!r}; allowed: "
            f"{', '.join(s for s in SUPPORTED_SUFFIXES if s not in SOURCE_SUFFIXES)}, source "
            "and config files (.py, .js, .go, .yaml ...) and README-like files"
        )


def _max_bytes(limits: IngestLimits | None) -> int:
    return (limits or IngestLimits()).max_file_bytes


_EXTERNAL = re.compile(r"[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def _is_external(target: str) -> bool:
    return _EXTERNAL.match(target) is not None


def _dedup(items: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))
