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
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from clew.config import ChunkConfig, IngestLimits
from clew.errors import ConfigError, LoadError
from clew.ingest.analyze import analyze, concept_key
from clew.ingest.chunk import Chunker, embedding_text
from clew.ingest.concepts import ConceptExtractor
from clew.links import CONCEPT_PREFIX, split_link
from clew.protocols import DocumentRecord, Encoder, Writer, encode_documents
from clew.types import Concept, Document, IngestReport, Mention, SkippedFile

IngestWriter = Writer
"""What an ingest needs of the store (:class:`clew.protocols.Writer`)."""


@dataclass(frozen=True, slots=True)
class IngestContext:
    chunker: Chunker
    encoder: Encoder
    extractor: ConceptExtractor
    fingerprint: str
    """Identifies every setting that changes what is written; part of each document's hash."""
    batch_chunks: int = 256


def document_hash(doc: Document, fingerprint: str) -> str:
    fields: list[object] = [
        doc.title,
        doc.text,
        doc.metadata,
        list(doc.links),
        doc.fmt,
        fingerprint,
    ]
    if doc.pages:  # a paged document's chunks record their pages (older hashes stay valid)
        fields.append(list(doc.pages))
    payload = json.dumps(
        fields,
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
        spans = [(d.doc_id, len(c)) for d, c in zip(docs, chunked, strict=True)]
        pending = pool.submit(ctx.extractor.extract, concept_texts, spans)  # budget per doc
        vectors = (
            encode_documents(ctx.encoder, texts) if texts else np.zeros((0, 1), dtype=np.float32)
        )
        mentions = pending.result()
    records: list[DocumentRecord] = []
    pos = 0
    for doc, chunks in zip(docs, chunked, strict=True):
        n = len(chunks)
        related = _related_concepts(doc)
        if related:
            for i in range(pos, pos + n):
                have = {m.concept.key for m in mentions[i]}
                mentions[i] = [*mentions[i], *(m for m in related if m.concept.key not in have)]
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
    docs: Iterable[Document],
    store: IngestWriter,
    ctx: IngestContext,
    *,
    progress: bool = False,
    skippable: frozenset[str] = frozenset(),
) -> IngestReport:
    """Write the documents that changed (batches of about ``ctx.batch_chunks`` chunks, one
    transaction each). ``skippable``: ids of documents (a directory's files) that are left out
    and listed in the report's ``skipped`` when they cannot be chunked (too many chunks),
    instead of stopping the ingest."""
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
    skipped: list[_Unchunkable] = []
    try:
        batch: list[Document] = []
        size = 0
        for d in todo:
            batch.append(d)
            size += 1 + len(d.text) // 1000
            if size >= ctx.batch_chunks:
                chunks_written += _flush(batch, store, ctx, bar, skippable, skipped)
                batch, size = [], 0
        if batch:
            chunks_written += _flush(batch, store, ctx, bar, skippable, skipped)
    finally:
        if bar is not None:
            bar.close()
    left_out = {s.doc_id for s in skipped}
    return IngestReport(
        tuple(d for d in added if d not in left_out),
        tuple(d for d in updated if d not in left_out),
        tuple(unchanged),
        chunks_written,
        store.release(),
        time.perf_counter() - started,
        skipped=tuple(SkippedFile(s.path, s.reason) for s in skipped),
    )


@dataclass(frozen=True, slots=True)
class _Unchunkable:
    doc_id: str
    path: str
    reason: str


def _flush(
    batch: list[Document],
    store: IngestWriter,
    ctx: IngestContext,
    bar: object,
    skippable: frozenset[str] = frozenset(),
    skipped: list[_Unchunkable] | None = None,
) -> int:
    try:
        built = build_records(batch, ctx)
    except LoadError:
        # which of the batch cannot be chunked: only those the caller may skip are left out
        bad: dict[str, str] = {}
        for d in batch:
            if d.doc_id in skippable:
                try:
                    ctx.chunker.chunk(d)
                except LoadError as exc:
                    bad[d.doc_id] = str(exc)
        if not bad or skipped is None:
            raise
        for d in batch:
            if d.doc_id in bad:
                skipped.append(_Unchunkable(d.doc_id, d.source, bad[d.doc_id]))
        batch = [d for d in batch if d.doc_id not in bad]
        if bar is not None:
            bar.update(len(bad))  # type: ignore[attr-defined]
        if not batch:
            return 0
        built = build_records(batch, ctx)
    records = resolve_entities(built, store.concept_kinds)
    store.write(records)
    n = sum(len(r.chunks) for r in records)
    if bar is not None:
        bar.update(len(batch))  # type: ignore[attr-defined]
        bar.set_postfix(chunks=n)  # type: ignore[attr-defined]
    return n


def _related_concepts(doc: Document) -> list[Mention]:
    """Concepts a document names in typed links (``related_to::concept:pgbouncer``): each of
    its chunks mentions them, so the graph leg and expansion reach it through them."""
    out: list[Mention] = []
    for raw in doc.links:
        relation, target = split_link(raw)
        if relation is None or not target.startswith(CONCEPT_PREFIX):
            continue
        label = target[len(CONCEPT_PREFIX) :].strip()
        key = concept_key(label)
        if key and all(m.concept.key != key for m in out):
            out.append(Mention(Concept(key, label, "entity"), 1))
    return out


_NAME_KINDS = frozenset({"identifier"})
"""Kinds that count as names here: identifiers (``PgBouncer``, ``ERR-4012``, ``ledger-writer``).
Named entities are left out: the tagger also calls common words entities (``Pool``)."""


def resolve_entities(
    records: Sequence[DocumentRecord],
    stored_kinds: Callable[[Sequence[str]], dict[str, str]],
) -> list[DocumentRecord]:
    """Entity resolution across documents and sessions.

    Case, determiners and plurals already fold into one key (``PgBouncer``, ``pgbouncer``,
    ``the pgbouncers`` → ``pgbouncer``). Here a phrase whose modifier is a known name also
    mentions that name: ``the pgbouncer migration`` mentions ``pgbouncer`` when ``pgbouncer``
    is an identifier or named entity in this batch or already in the store, and the phrase is
    recorded as one of its surface forms. Identifiers are only ever matched whole, so
    ``ERR-4412`` and ``ERR-4413`` never merge."""
    names: dict[str, Concept] = {}
    modifiers: set[str] = set()
    for rec in records:
        for mentions in rec.mentions:
            for m in mentions:
                if m.concept.kind in _NAME_KINDS:
                    names.setdefault(m.concept.key, m.concept)
                elif m.concept.kind == "phrase" and " " in m.concept.key:
                    modifiers.update(m.concept.key.split()[:-1])
    unknown = sorted(modifiers - set(names))
    for key, kind in (stored_kinds(unknown) if unknown else {}).items():
        if kind in _NAME_KINDS:
            names[key] = Concept(key, key, kind)  # type: ignore[arg-type]
    if not any(w in names for w in modifiers):
        return list(records)
    out: list[DocumentRecord] = []
    for rec in records:
        chunks: list[tuple[Mention, ...]] = []
        for mentions in rec.mentions:
            have = {m.concept.key for m in mentions}
            extra: list[Mention] = []
            for m in mentions:
                if m.concept.kind != "phrase" or " " not in m.concept.key:
                    continue
                for word in m.concept.key.split()[:-1]:
                    name = names.get(word)
                    if name is not None and word not in have:
                        have.add(word)
                        aliases = (*m.concept.aliases, m.concept.label)
                        extra.append(
                            Mention(Concept(word, name.label, name.kind, aliases), m.count)
                        )
            chunks.append((*mentions, *extra))
        out.append(replace(rec, mentions=tuple(chunks)))
    return out


@dataclass(frozen=True, slots=True)
class Loaded:
    """What :func:`load_sources` read: the documents, the directories' files it skipped (with
    their reasons), and whether every source was a directory (what ``prune`` mirrors)."""

    documents: list[Document]
    skipped: tuple[SkippedFile, ...] = ()
    directories_only: bool = False
    from_directories: frozenset[str] = frozenset()
    """Ids of the documents read from a directory (skipped, not fatal, if they cannot be
    chunked)."""


def load_sources(
    sources: Iterable[str | Path | Document] | Sequence[Document], limits: IngestLimits
) -> Loaded:
    """Documents as given, or loaded from files and directories (within ``limits``): a
    directory's files that cannot be loaded are skipped and listed; a file named directly that
    cannot be loaded raises (nothing is written)."""
    from clew.ingest.load import load_path

    items = list(sources)
    docs: list[Document] = []
    skipped: list[SkippedFile] = []
    in_dirs: set[str] = set()
    directories = bool(items)
    for item in items:
        if isinstance(item, Document):
            docs.append(item)
            directories = False
            continue
        path = Path(item)
        if path.is_dir():
            found: list[SkippedFile] = []
            walked = list(load_path(path, limits=limits, skipped=found))
            docs.extend(walked)
            skipped.extend(found)
            in_dirs.update(d.doc_id for d in walked)
        else:
            directories = False
            docs.extend(load_path(path, limits=limits))
    return Loaded(docs, tuple(skipped), directories, frozenset(in_dirs))


def ingest_context(
    chunk: ChunkConfig,
    limits: IngestLimits,
    encoder: Encoder,
    extractor: ConceptExtractor,
    fingerprint: str,
    batch_chunks: int = 256,
) -> IngestContext:
    """How an ingest chunks (``chunk`` sizes in the encoder's tokens, within ``limits``), embeds
    and extracts, and the ``fingerprint`` hashed into every document (the JSON of
    :func:`clew.ingest.fingerprint.ingest_meta`)."""
    counter = getattr(encoder, "count_tokens", None)
    if counter is None:
        raise ConfigError("the encoder has no count_tokens(texts) method for chunk sizing")
    return IngestContext(
        chunker=Chunker(chunk, counter, limits),
        encoder=encoder,
        extractor=extractor,
        fingerprint=fingerprint,
        batch_chunks=batch_chunks,
    )
