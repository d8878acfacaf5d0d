"""Documents posted to the API (``POST /documents``) as the engine ingests them.

A text that opens with YAML front matter (a ``---`` line) is read exactly as a markdown file is
(:func:`clew.ingest.load.parse_markdown`): the front matter becomes metadata (bounded, plain JSON,
dates as ISO strings), its ``title`` the title, its ``links`` and the markdown links of the text
links, and the front matter is no part of the text (so of no chunk). The request's own fields win:
``title`` over the front matter's (and over the first heading), ``metadata`` keys over front
matter keys; ``links`` join those found.

A ``LoadError`` names the document (``document 'id'``). Texts without front matter are taken
as they are, as before: title or id, no link parsing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from clew.ingest.load import parse_markdown
from clew.types import API_SOURCE, Document

__all__ = ["API_SOURCE", "has_front_matter", "uploaded_document"]


_OPENING = re.compile(r"\A(?:\ufeff)?---[ \t]*\r?\n")


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
    parsed = parse_markdown(text, doc_id, f"document {doc_id!r}")
    return Document(
        doc_id=doc_id,
        title=title or parsed.title or doc_id,
        text=parsed.text,
        source=API_SOURCE,
        metadata={**parsed.metadata, **given},
        links=tuple(dict.fromkeys((*parsed.links, *links))),
        fmt=parsed.fmt,
    )
