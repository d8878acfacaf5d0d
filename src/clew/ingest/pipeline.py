"""Ingest: load → chunk → analyze → extract concepts → embed → write, in fixed order.

Everything is loaded and validated before the first write, so a bad file stops the run with
nothing written. Documents are then written in batches, each batch one transaction: a crash
leaves every earlier batch complete and nothing of the failed one. A document whose content and
ingest settings are unchanged is skipped (its hash is stored); a changed one replaces all of its
chunks, vectors, postings and mentions.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from clew.ingest.analyze import analyze
from clew.ingest.chunk import Chunker, embedding_text
from clew.ingest.concepts import ConceptExtractor
from clew.protocols import DocumentRecord, Encoder
from clew.types import Document, IngestReport


class _Writer(Protocol):
    def doc_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]: ...

    def write(self, records: Sequence[DocumentRecord]) -> int: ...

    def release(self) -> int: ...


@dataclass(frozen=True, slots=True)
class IngestContext:
    chunker: Chunker
    encoder: Encoder
    extractor: ConceptExtractor
    fingerprint: str
    """Identifies every setting that changes what is written; part of each document's hash."""
    batch_chunks: int = 256


def document_hash(doc: Document, fingerprint: str) -> str:
    payload = json.dumps(
        [doc.title, doc.text, doc.metadata, list(doc.links), doc.fmt, fingerprint],
        ensure_ascii=False,
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def build_records(docs: Sequence[Document], ctx: IngestContext) -> list[DocumentRecord]:
    """Chunk, analyze, extract and embed a batch of documents (no I/O)."""
    chunked = [ctx.chunker.chunk(d) for d in docs]
    texts: list[str] = []
    concept_texts: list[str] = []
    for doc, chunks in zip(docs, chunked, strict=True):
        for c in chunks:
            texts.append(embedding_text(doc.title, c.heading_path, c.text))
            concept_texts.append(f"{doc.title}\n{c.text}" if c.seq == 0 else c.text)
    # spaCy runs in a second thread while onnxruntime embeds: both release the GIL
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="clew-concepts") as pool:
        pending = pool.submit(ctx.extractor.extract, concept_texts)
        vectors = ctx.encoder.encode(texts) if texts else np.zeros((0, 1), dtype=np.float32)
        mentions = pending.result()
    records: list[DocumentRecord] = []
    pos = 0
    for doc, chunks in zip(docs, chunked, strict=True):
        n = len(chunks)
        records.append(
            DocumentRecord(
                document=doc,
                doc_hash=document_hash(doc, ctx.fingerprint),
                chunks=tuple(chunks),
                tokens=tuple(tuple(analyze(t)) for t in texts[pos : pos + n]),
                vectors=vectors[pos : pos + n],
                mentions=tuple(tuple(m) for m in mentions[pos : pos + n]),
            )
        )
        pos += n
    return records


def ingest(
    docs: Iterable[Document], store: _Writer, ctx: IngestContext, *, progress: bool = False
) -> IngestReport:
    started = time.perf_counter()
    latest: dict[str, Document] = {}
    for d in docs:  # loads (and validates) everything before the first write
        latest.pop(d.doc_id, None)
        latest[d.doc_id] = d
    all_docs = list(latest.values())
    stored = store.doc_hashes([d.doc_id for d in all_docs])
    todo: list[Document] = []
    unchanged: list[str] = []
    for d in all_docs:
        if stored.get(d.doc_id) == document_hash(d, ctx.fingerprint):
            unchanged.append(d.doc_id)
        else:
            todo.append(d)
    added = [d.doc_id for d in todo if d.doc_id not in stored]
    updated = [d.doc_id for d in todo if d.doc_id in stored]
    chunks_written = 0
    bar = None
    if progress and todo:
        from tqdm import tqdm

        bar = tqdm(total=len(todo), unit="doc", desc="ingest", dynamic_ncols=True)
    try:
        batch: list[Document] = []
        size = 0
        for d in todo:
            batch.append(d)
            size += 1 + len(d.text) // 1000
            if size >= ctx.batch_chunks:
                chunks_written += _flush(batch, store, ctx, bar)
                batch, size = [], 0
        if batch:
            chunks_written += _flush(batch, store, ctx, bar)
    finally:
        if bar is not None:
            bar.close()
    return IngestReport(
        tuple(added),
        tuple(updated),
        tuple(unchanged),
        chunks_written,
        store.release(),
        time.perf_counter() - started,
    )


def _flush(batch: list[Document], store: _Writer, ctx: IngestContext, bar: object) -> int:
    records = build_records(batch, ctx)
    store.write(records)
    n = sum(len(r.chunks) for r in records)
    if bar is not None:
        bar.update(len(batch))  # type: ignore[attr-defined]
        bar.set_postfix(chunks=n)  # type: ignore[attr-defined]
    return n
