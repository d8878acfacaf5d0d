"""Documents posted to the API (``POST /documents``) as the engine ingests them.

A text that opens with YAML front matter (a ``---`` line) is read exactly as a markdown file is
(:func:`clew.ingest.load.load_markdown`): the front matter becomes metadata (bounded, plain JSON,
dates as ISO strings), its ``title`` the title, its ``links`` and the markdown links of the text
links, and the front matter is no part of the text (so of no chunk). The request's own fields win:
``title`` over the front matter's (and over the first heading), ``metadata`` keys over front
matter keys; ``links`` join those found.

The markdown loader reads files, and its front matter parser is private to it, so the text is
read from a private temporary file; a ``LoadError`` names the document instead of that file.
(A public ``parse_markdown(text, doc_id)`` in :mod:`clew.ingest.load` would remove the file.)
Texts without front matter are taken as they are, as before: title or id, no link parsing.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from clew.config import IngestLimits
from clew.errors import LoadError
from clew.ingest.load import load_markdown
from clew.types import API_SOURCE, Document

__all__ = ["API_SOURCE", "has_front_matter", "uploaded_document"]


_OPENING = re.compile(r"\A(?:\ufeff)?---[ \t]*\r?\n")
_STEM = "clew-upload-0c6f"
"""The temporary file's name: the markdown loader's last-resort title, recognized as none."""


def has_front_matter(text: str) -> bool:
    """Whether ``text`` opens with a front matter line (``---``)."""
    return _OPENING.match(text) is not None


def uploaded_document(
    doc_id: str,
    text: str,
    *,
    title: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    links: Sequence[str] = (),
) -> Document:
    """The :class:`Document` the API writes for one posted document (see the module); a
    :class:`LoadError` naming ``doc_id`` when its front matter is malformed or too big."""
    given = dict(metadata or {})
    if not has_front_matter(text):
        return Document(
            doc_id=doc_id,
            title=title or doc_id,
            text=text,
            source=API_SOURCE,
            metadata=given,
            links=tuple(links),
        )
    parsed = _read_markdown(doc_id, text)
    found_title = "" if parsed.title == _STEM else parsed.title
    return Document(
        doc_id=doc_id,
        title=title or found_title or doc_id,
        text=parsed.text,
        source=API_SOURCE,
        metadata={**parsed.metadata, **given},
        links=tuple(dict.fromkeys((*parsed.links, *links))),
        fmt=parsed.fmt,
    )


def _read_markdown(doc_id: str, text: str) -> Document:
    data = text.encode("utf-8", errors="surrogatepass")
    limits = IngestLimits(max_file_bytes=min(max(1024, len(data)), 1 << 40))
    with tempfile.TemporaryDirectory(prefix="clew-upload-") as folder:
        path = Path(folder) / f"{_STEM}.md"
        path.write_bytes(data)
        try:
            return load_markdown(path, doc_id, limits)
        except LoadError as exc:
            message = str(exc).replace(repr(str(path)), f"document {doc_id!r}")
            raise LoadError(message.replace(str(path), f"document {doc_id!r}")) from None
