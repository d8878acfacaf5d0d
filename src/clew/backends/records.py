"""Documents as :class:`DocumentRecord` from the rows either store reads (copy, re-index)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from clew.protocols import DocumentRecord
from clew.types import Chunk, Document, Mention


def assemble_records(
    docs: Sequence[tuple[Any, ...]],
    chunk_rows: Sequence[tuple[Any, ...]],
    links: Mapping[str, Sequence[str]],
    mentions: Mapping[int, Sequence[Mention]],
    vector: Callable[[Any], npt.NDArray[np.float32]],
    decode: Callable[[Any], Any],
) -> dict[str, DocumentRecord]:
    """Documents as records from rows read in one snapshot (both stores' reads share this).

    ``docs``: (doc_id, title, source, fmt, metadata, doc_hash, text); ``chunk_rows``: (ordinal,
    chunk_id, doc_id, seq, text, content_hash, token_count, heading_path, start, end, tokens,
    vector[, page]) in ordinal order; ``vector`` turns a stored vector into float32, ``decode``
    a stored JSON column (metadata, heading path) into Python."""
    chunks_of: dict[str, list[tuple[Any, ...]]] = {}
    for row in chunk_rows:
        chunks_of.setdefault(str(row[2]), []).append(row)
    out: dict[str, DocumentRecord] = {}
    for doc_id, title, source, fmt, metadata, doc_hash, text in docs:
        rows = chunks_of.get(str(doc_id), [])
        vectors = (
            np.stack([vector(r[11]) for r in rows]).astype(np.float32)
            if rows
            else np.zeros((0, 0), dtype=np.float32)
        )
        out[str(doc_id)] = DocumentRecord(
            document=Document(
                doc_id=str(doc_id),
                title=str(title),
                text=str(text),
                source=str(source),
                metadata=decode(metadata),
                links=tuple(links.get(str(doc_id), ())),
                fmt=str(fmt),
            ),
            doc_hash=str(doc_hash),
            chunks=tuple(
                Chunk(
                    chunk_id=str(r[1]),
                    doc_id=str(r[2]),
                    seq=int(r[3]),
                    text=str(r[4]),
                    content_hash=str(r[5]),
                    token_count=int(r[6]),
                    heading_path=tuple(decode(r[7])),
                    start=int(r[8]),
                    end=int(r[9]),
                    page=None if len(r) < 13 or r[12] is None else int(r[12]),
                )
                for r in rows
            ),
            tokens=tuple(tuple(str(r[10]).split()) for r in rows),
            vectors=vectors,
            mentions=tuple(tuple(mentions.get(int(r[0]), ())) for r in rows),
        )
    return out
