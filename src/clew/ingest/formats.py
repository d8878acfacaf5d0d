"""Loaders for the binary and tabular formats people keep documents in: PDF, DOCX, PPTX, CSV/TSV.

Each reads one file within :class:`~clew.config.IngestLimits` and returns a
:class:`~clew.types.Document` whose text is markdown-like, so the chunker's heading paths work
for every format, or raises :class:`LoadError` with a reason a person can act on (no text layer,
corrupt, encrypted, too big). Libraries, chosen by measurement (``bench/loaders.py``; figures in
``bench/results/loaders.md``):

- **PDF: pypdfium2** (PDFium, the PDF engine of Chromium): the fastest text layer of the
  three measured, at the same token F1; a self-contained wheel. Every page's text starts at an
  offset recorded in :attr:`Document.pages`, so each chunk knows its page (citations say
  ``p. 4``); the outline (bookmarks) marks its titles' lines as headings (the heading path). A
  PDF whose pages carry no text (a scan) is refused with that reason: clew does no OCR.
- **DOCX: python-docx**: paragraphs and tables in body order; ``Heading N`` and ``Title``
  styles become markdown headings (the heading path), list paragraphs ``-`` items.
- **PPTX: python-pptx**: one section per slide (``## Slide N: title``), then its text frames,
  tables and speaker notes.
- **CSV/TSV: the standard library**: one paragraph per row, each field as ``header: value``.

Office files are zip archives: before one is parsed its members' declared sizes are checked
(total and ratio), so a zip bomb is refused instead of inflated. PDFium is not thread-safe:
every call into it holds one lock.
"""

from __future__ import annotations

import bisect
import csv
import io
import logging
import re
import threading
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from clew.config import IngestLimits
from clew.errors import LoadError
from clew.types import Document

__all__ = [
    "OFFICE_SUFFIXES",
    "TABLE_SUFFIXES",
    "load_csv",
    "load_docx",
    "load_pdf",
    "load_pptx",
    "table_rows",
    "too_big",
]

log = logging.getLogger(__name__)

OFFICE_SUFFIXES = (".pdf", ".docx", ".pptx")
TABLE_SUFFIXES = (".csv", ".tsv")

MAX_TITLE = 120
"""Longest line taken as a title when a file names none."""
MAX_INFLATE_RATIO = 200
"""An archive member that inflates more than this many times its packed size is a zip bomb."""
INFLATE_FACTOR = 8
"""An office file may hold at most this many times ``max_file_bytes`` uncompressed."""

_PDFIUM = threading.Lock()
"""PDFium is not thread-safe: one call into it at a time, process-wide."""


def _limits(limits: IngestLimits | None) -> IngestLimits:
    return limits or IngestLimits()


def _check_size(path: Path, limits: IngestLimits) -> None:
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise LoadError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    if size > limits.max_file_bytes:
        raise too_big(path, f"{size:,}", limits.max_file_bytes)


def too_big(path: Path, size: str, max_bytes: int) -> LoadError:
    """The error for a file over ``ingest.max_file_bytes`` (``size`` as it is known)."""
    return LoadError(
        f"{str(path)!r} is {size} bytes; allowed: at most {max_bytes:,} bytes "
        "(ingest.max_file_bytes)"
    )


def _title(given: str | None, lines: Iterable[str], fallback: str) -> str:
    """The file's own title if it has a sane one, else its first short line, else ``fallback``."""
    title = " ".join((given or "").split())
    if 0 < len(title) <= MAX_TITLE:
        return title
    for line in lines:
        line = " ".join(line.split()).lstrip("#").strip()
        if line:
            return line if len(line) <= MAX_TITLE else fallback
    return fallback


# -- PDF ------------------------------------------------------------------------------------------

_SOFT_HYPHEN_BREAK = re.compile(r"(\w)[\u00ad\u2010-]\n(?=[a-z])")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _page_text(raw: str) -> str:
    """One page's text layer as paragraphs: CRLF → LF, words broken by a hyphen at a line end
    joined, control characters dropped, blank lines collapsed."""
    text = raw.replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROL.sub("", text)
    text = _SOFT_HYPHEN_BREAK.sub(r"\1", text)
    lines = [line.rstrip() for line in text.split("\n")]
    out = "\n".join(lines).strip()
    return re.sub(r"\n{3,}", "\n\n", out)


MAX_OUTLINE = 10_000
"""Most outline (bookmark) entries read from one PDF."""


def _outline(pdf: Any, n_pages: int) -> list[tuple[int, str, int]]:
    """The PDF's outline (bookmarks) as (level, title, page index), at most
    :data:`MAX_OUTLINE` entries, six levels deep; entries without a page left out."""
    out: list[tuple[int, str, int]] = []
    for item in pdf.get_toc(max_depth=6):
        if len(out) >= MAX_OUTLINE:
            break
        dest = item.get_dest()
        index = dest.get_index() if dest is not None else None
        title = " ".join((item.get_title() or "").split())
        if index is not None and 0 <= index < n_pages and 0 < len(title) <= MAX_TITLE:
            out.append((int(item.level), title, int(index)))
    return out


def _mark_headings(pages: list[str], outline: Sequence[tuple[int, str, int]]) -> list[str]:
    """Each outline entry's title line on its page becomes a markdown heading of its level,
    so a PDF's sections give its chunks heading paths as a markdown file's do. Nothing is
    added to the text but the ``#`` marks: a title the page does not show as a line of its
    own is left alone."""
    by_page: dict[int, list[tuple[int, str]]] = {}
    for level, title, index in outline:
        by_page.setdefault(index, []).append((level, title))
    out = list(pages)
    for index, entries in by_page.items():
        lines = out[index].split("\n")
        where: dict[str, list[int]] = {}  # a line's text -> the lines that hold it, in order
        for i, line in enumerate(lines):
            where.setdefault(" ".join(line.split()).casefold(), []).append(i)
        at = 0
        marked = False
        for level, title in entries:  # in outline order: each is looked for after the last
            found = where.get(title.casefold(), [])
            k = bisect.bisect_left(found, at)
            if k < len(found):
                i = found[k]
                lines[i] = f"\n{'#' * min(6, level + 1)} {lines[i].strip()}\n"
                at = i + 1
                marked = True
        if marked:
            out[index] = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    return out


def load_pdf(path: Path, doc_id: str, limits: IngestLimits | None = None) -> Document:
    """A PDF's text layer, page by page (``Document.pages`` holds where each page starts)."""
    lim = _limits(limits)
    _check_size(path, lim)
    import pypdfium2 as pdfium

    with _PDFIUM:
        try:
            pdf = pdfium.PdfDocument(str(path))
        except pdfium.PdfiumError as exc:
            reason = str(exc)
            if "password" in reason.lower():
                raise LoadError(
                    f"{str(path)!r} is an encrypted PDF (a password is needed)"
                ) from None
            raise LoadError(f"{str(path)!r} is not a readable PDF (corrupt?): {reason}") from None
        try:
            pages: list[str] = []
            for i in range(len(pdf)):
                page = pdf[i]
                try:
                    textpage = page.get_textpage()
                    try:
                        pages.append(_page_text(textpage.get_text_range()))
                    finally:
                        textpage.close()
                finally:
                    page.close()
            meta = pdf.get_metadata_dict(skip_empty=True)
            outline = _outline(pdf, len(pages))
        except pdfium.PdfiumError as exc:
            raise LoadError(f"{str(path)!r}: cannot read its pages (corrupt?): {exc}") from None
        finally:
            pdf.close()
    if not pages:
        raise LoadError(f"{str(path)!r} is a PDF with no pages")
    if not any(pages):
        raise LoadError(
            f"{str(path)!r} has no text layer ({len(pages)} page(s) of images: a scan?); clew "
            "does no OCR: run one first (e.g. ocrmypdf) and ingest its output"
        )
    pages = _mark_headings(pages, outline)
    empty = sum(1 for p in pages if not p)
    if empty:
        log.info("%s: %d of %d pages have no text layer", path, empty, len(pages))
    starts: list[int] = []
    parts: list[str] = []
    at = 0
    for text in pages:
        starts.append(at)
        parts.append(text)
        at += len(text) + 2  # the "\n\n" that joins pages
    first_lines = (line for p in pages for line in p.split("\n")[:3])
    title = _title(meta.get("Title"), first_lines, path.stem)
    metadata: dict[str, Any] = {"page_count": len(pages)}
    if meta.get("Author"):
        metadata["author"] = " ".join(str(meta["Author"]).split())[:MAX_TITLE]
    return Document(
        doc_id=doc_id,
        title=title,
        text="\n\n".join(parts),
        source=doc_id,
        metadata=metadata,
        fmt="pdf",
        pages=tuple(starts),
    )


# -- office archives ------------------------------------------------------------------------------


def _check_archive(path: Path, limits: IngestLimits, kind: str) -> None:
    """Refuse a file that is no zip archive (corrupt), or that would inflate past the limits."""
    _check_size(path, limits)
    try:
        with zipfile.ZipFile(path) as z:
            infos = z.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise LoadError(f"{str(path)!r} is not a readable {kind} file (corrupt?): {exc}") from None
    total = sum(i.file_size for i in infos)
    cap = INFLATE_FACTOR * limits.max_file_bytes
    if total > cap:
        raise LoadError(
            f"{str(path)!r} inflates to {total} bytes, over {INFLATE_FACTOR} x "
            f"ingest.max_file_bytes={limits.max_file_bytes}"
        )
    for info in infos:
        if info.file_size > 1 << 20 and info.file_size > MAX_INFLATE_RATIO * max(
            1, info.compress_size
        ):
            raise LoadError(
                f"{str(path)!r}: member {info.filename!r} inflates {info.file_size} bytes from "
                f"{info.compress_size} (a zip bomb?); refused"
            )


def _cell(text: str) -> str:
    return " ".join(text.split())


def table_rows(rows: Sequence[Sequence[str]]) -> list[str]:
    """Table rows as records: the first row is the header; every later row becomes one line of
    ``header: value`` pairs joined by ``; `` (empty values left out). A table of one row (or
    one whose header is blank) has its cells joined by `` | ``."""
    cleaned = [[_cell(c) for c in row] for row in rows]
    cleaned = [row for row in cleaned if any(row)]
    if not cleaned:
        return []
    header = cleaned[0]
    if len(cleaned) == 1 or not any(header):
        return [" | ".join(c for c in row if c) for row in cleaned]
    out = []
    names = [h or f"column {i + 1}" for i, h in enumerate(header)]
    for row in cleaned[1:]:
        pairs = []
        for i, value in enumerate(row):
            if value:
                name = names[i] if i < len(names) else f"column {i + 1}"
                pairs.append(f"{name}: {value}")
        if pairs:
            out.append("; ".join(pairs))
    return out


_HEADING_STYLE = re.compile(r"^heading\s*([1-9])$", re.IGNORECASE)


def load_docx(path: Path, doc_id: str, limits: IngestLimits | None = None) -> Document:
    """A Word document: headings (``Heading N``/``Title`` styles) → markdown headings, list
    paragraphs → ``-`` items, tables → ``header: value`` rows, in body order."""
    lim = _limits(limits)
    _check_archive(path, lim, "DOCX")
    import docx
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    try:
        document = docx.Document(str(path))
        blocks: list[str] = []
        first_title = ""
        for item in document.iter_inner_content():
            if isinstance(item, Paragraph):
                text = _cell(item.text)
                if not text:
                    continue
                style = (item.style.name if item.style is not None else "") or ""
                m = _HEADING_STYLE.match(style.strip())
                if style.strip().lower() == "title":
                    first_title = first_title or text
                    blocks.append(f"# {text}")
                elif m:
                    blocks.append(f"{'#' * min(6, int(m.group(1)) + 1)} {text}")
                elif "list" in style.lower():
                    blocks.append(f"- {text}")
                else:
                    blocks.append(text)
            elif isinstance(item, Table):
                rows = [[cell.text for cell in row.cells] for row in item.rows]
                blocks.append("\n".join(table_rows(_dedup_merged(rows))))
        core_title = document.core_properties.title
    except LoadError:
        raise
    except Exception as exc:  # python-docx raises KeyError, ValueError, lxml errors ...
        raise LoadError(
            f"{str(path)!r} is not a readable DOCX file (corrupt?): {type(exc).__name__}: {exc}"
        ) from None
    text = "\n\n".join(b for b in blocks if b)
    if not text.strip():
        raise LoadError(f"{str(path)!r} holds no text")
    title = _title(core_title or first_title, (b for b in blocks if b), path.stem)
    return Document(doc_id=doc_id, title=title, text=text, source=doc_id, fmt="docx")


def _dedup_merged(rows: list[list[str]]) -> list[list[str]]:
    """python-docx repeats a merged cell's text in every grid cell it spans: keep it once."""
    out = []
    for row in rows:
        kept: list[str] = []
        for cell in row:
            kept.append("" if kept and cell == kept[-1] and cell else cell)
        out.append(kept)
    return out


def load_pptx(path: Path, doc_id: str, limits: IngestLimits | None = None) -> Document:
    """A PowerPoint deck: one section per slide (``## Slide N: title``), with its text frames,
    tables (as rows) and speaker notes."""
    lim = _limits(limits)
    _check_archive(path, lim, "PPTX")
    from pptx import Presentation

    try:
        deck = Presentation(str(path))
        sections: list[str] = []
        slide_titles: list[str] = []
        for n, slide in enumerate(deck.slides, start=1):
            title_shape = slide.shapes.title
            title = _cell(title_shape.text_frame.text) if title_shape is not None else ""
            slide_titles.append(title)
            body = [
                text
                for shape in slide.shapes
                if title_shape is None or shape.shape_id != title_shape.shape_id
                for text in _shape_texts(shape)
            ]
            if slide.has_notes_slide:
                notes = slide.notes_slide.notes_text_frame
                if notes is not None and notes.text.strip():
                    body.append("Notes: " + _cell(notes.text))
            if not title and not body:
                continue
            heading = f"## Slide {n}: {title}" if title else f"## Slide {n}"
            sections.append("\n\n".join([heading, *body]))
        core_title = deck.core_properties.title
    except LoadError:
        raise
    except Exception as exc:
        raise LoadError(
            f"{str(path)!r} is not a readable PPTX file (corrupt?): {type(exc).__name__}: {exc}"
        ) from None
    if not sections:
        raise LoadError(f"{str(path)!r} holds no text")
    title = _title(core_title, (t for t in slide_titles if t), path.stem)
    return Document(
        doc_id=doc_id, title=title, text="\n\n".join(sections), source=doc_id, fmt="pptx"
    )


def _shape_texts(shape: Any, depth: int = 0) -> Iterator[str]:
    """The text of a shape: its paragraphs, a table's rows, a group's shapes (nesting bounded)."""
    if depth > 32:
        return
    if getattr(shape, "has_table", False) and shape.has_table:
        rows = [[cell.text for cell in row.cells] for row in shape.table.rows]
        lines = table_rows(rows)
        if lines:
            yield "\n".join(lines)
        return
    sub = getattr(shape, "shapes", None)
    if sub is not None:  # a group
        for child in sub:
            yield from _shape_texts(child, depth + 1)
        return
    if getattr(shape, "has_text_frame", False) and shape.has_text_frame:
        paragraphs = [_cell(p.text) for p in shape.text_frame.paragraphs]
        text = "\n".join(p for p in paragraphs if p)
        if text:
            yield text


# -- CSV / TSV ------------------------------------------------------------------------------------


def load_csv(path: Path, doc_id: str, text: str, limits: IngestLimits | None = None) -> Document:
    """A CSV (``,``) or TSV (tab) file already read as ``text``: one paragraph per row, every
    field as ``header: value`` (the first row is the header)."""
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    lim = _limits(limits)
    old = csv.field_size_limit()
    try:
        csv.field_size_limit(max(old, lim.max_file_bytes))
        rows = list(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=False))
    except csv.Error as exc:
        raise LoadError(f"{str(path)!r} is not valid CSV: {exc}") from None
    finally:
        csv.field_size_limit(old)
    records = table_rows(rows)
    if not records:
        raise LoadError(f"{str(path)!r} holds no rows")
    body = "\n\n".join(records)
    return Document(
        doc_id=doc_id,
        title=path.stem,
        text=body,
        source=doc_id,
        metadata={"rows": len(records)},
        fmt=path.suffix.lower().lstrip("."),
    )
