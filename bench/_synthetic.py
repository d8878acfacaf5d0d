"""A synthetic index of N chunks (default 100k) written straight into clew's SQLite store.

Texts are SciFact sentences recombined (4–10 per chunk) under SciFact titles; vectors are real
SciFact chunk vectors (read from the SciFact index when it exists, else encoded once) mixed as
``normalize(a·v_i + b·v_j + noise·g)`` so no two are duplicates; documents hold 1–4 chunks and
carry ``{"audience": public|internal|sre, "tenant": t0..t9}``; every chunk mentions 3–8
concepts drawn from a Zipf-like vocabulary of 20k keys (the most frequent SciFact words and word
pairs, so that queries link to them and the graph leg has work). The derived indexes (BM25,
HNSW, graph) are built by the engine on its first refresh and then cached in the same directory.

Cached at ``bench/.work/synthetic-100k`` (``synthetic-<N/1000>k``); ``bench.json`` in it
records how it was built, and a mismatch rebuilds it.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from _common import WORK_DIR, CorpusDoc, log, read_corpus

FORMAT = 1
AUDIENCES = ("public", "internal", "sre")
TENANTS = tuple(f"t{i}" for i in range(10))
DIM = 384
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9])")

Matrix = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class SyntheticSpec:
    chunks: int = 100_000
    concepts: int = 20_000
    zipf_s: float = 1.0
    noise: float = 0.1
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "chunks": self.chunks,
            "concepts": self.concepts,
            "zipf_s": self.zipf_s,
            "noise": self.noise,
            "seed": self.seed,
        }


def synthetic_dir(chunks: int) -> Path:
    return (
        WORK_DIR / f"synthetic-{chunks // 1000}k"
        if chunks % 1000 == 0
        else WORK_DIR / f"synthetic-{chunks}"
    )


def is_built(directory: Path, spec: SyntheticSpec) -> bool:
    marker = directory / "bench.json"
    if not marker.is_file():
        return False
    try:
        return bool(json.loads(marker.read_text(encoding="utf-8")) == spec.to_dict())
    except (OSError, json.JSONDecodeError):
        return False


def source_vectors(scifact_index: Path, docs: list[CorpusDoc], limit: int = 2000) -> Matrix:
    """Real SciFact chunk vectors: from the SciFact index when present, else encode ``limit``."""
    db = scifact_index / "clew.sqlite"
    if db.is_file():
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            blobs = [r[0] for r in conn.execute("SELECT vector FROM chunks ORDER BY ordinal")]
        finally:
            conn.close()
        if len(blobs) >= 500:
            log(f"  {len(blobs)} source vectors from {scifact_index.name}")
            return np.stack([np.frombuffer(b, dtype=np.float32) for b in blobs])
    from clew.models.embedder import load_encoder

    texts = [f"{d.title}\n{d.text}" for d in docs[:limit]]
    log(f"  encoding {len(texts)} SciFact texts for source vectors (no SciFact index yet)")
    return load_encoder().encode(texts)


def concept_vocabulary(docs: list[CorpusDoc], size: int) -> list[str]:
    """The ``size`` most frequent concept keys of SciFact words and word pairs, by frequency."""
    from clew.ingest.analyze import STOP_WORDS, concept_key, words

    counts: Counter[str] = Counter()
    for d in docs:
        ws = words(f"{d.title} {d.text}")
        ok = [w.isalpha() and len(w) >= 3 and w not in STOP_WORDS for w in ws]
        for i, w in enumerate(ws):
            if ok[i] and len(w) >= 4:
                counts[concept_key(w)] += 1
            if i + 1 < len(ws) and ok[i] and ok[i + 1]:
                counts[concept_key(f"{w} {ws[i + 1]}")] += 1
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [k for k, _ in ranked if k][:size]


def build(
    directory: Path,
    spec: SyntheticSpec,
    docs: list[CorpusDoc],
    vectors: Matrix,
    batch_docs: int = 1000,
) -> dict[str, float]:
    """Write the synthetic store; returns timings (seconds) of its phases."""
    from clew.backends.embedded.store import SQLiteStore
    from clew.ingest.analyze import ANALYZER_VERSION, analyze
    from clew.models.embedder import load_encoder
    from clew.protocols import DocumentRecord
    from clew.types import Chunk, Concept, Document, Mention

    timings: dict[str, float] = {}
    t = time.perf_counter()
    rng = np.random.default_rng(spec.seed)
    sentences: list[str] = []
    for d in docs:
        sentences += [s.strip() for s in _SENTENCE.split(d.text) if len(s.strip()) > 20]
    sent_tokens = [analyze(s) for s in sentences]
    titles = [d.title for d in docs if d.title]
    title_tokens = [analyze(x) for x in titles]
    vocab = concept_vocabulary(docs, spec.concepts)
    concepts = [Concept(key, key, "phrase") for key in vocab]
    zipf = 1.0 / np.arange(1, len(vocab) + 1) ** spec.zipf_s
    zipf /= zipf.sum()
    timings["prepare (sentences, analyzer, vocabulary)"] = time.perf_counter() - t
    log(
        f"  {len(sentences)} sentences, {len(titles)} titles, {len(vocab)} concept keys, "
        f"{len(vectors)} source vectors"
    )

    shutil.rmtree(directory, ignore_errors=True)
    store = SQLiteStore(directory, create=True)
    enc = load_encoder()
    n_total = spec.chunks
    per_doc = rng.integers(1, 5, size=n_total)  # 1..4 chunks per document
    n_sent = rng.integers(4, 11, size=n_total)
    n_concepts = rng.integers(3, 9, size=n_total)
    draws = rng.choice(len(vocab), size=(n_total, 8), p=zipf)
    src_i = rng.integers(len(vectors), size=n_total)
    src_j = rng.integers(len(vectors), size=n_total)
    a = rng.uniform(0.7, 1.0, size=(n_total, 1)).astype(np.float32)
    b = rng.uniform(0.0, 0.5, size=(n_total, 1)).astype(np.float32)
    noise = rng.standard_normal((n_total, vectors.shape[1]), dtype=np.float32)
    noise *= np.float32(spec.noise / np.sqrt(vectors.shape[1]))  # expected norm: spec.noise
    mixed = a * vectors[src_i] + b * vectors[src_j] + noise
    mixed /= np.linalg.norm(mixed, axis=1, keepdims=True)
    mixed = mixed.astype(np.float32)

    gen_s = 0.0
    write_s = 0.0
    records: list[DocumentRecord] = []
    made = 0
    doc_no = 0
    last_log = time.perf_counter()
    while made < n_total:
        t = time.perf_counter()
        n = int(min(per_doc[doc_no], n_total - made))
        ti = int(rng.integers(len(titles)))
        title = f"{titles[ti]} ({doc_no})"
        doc_id = f"syn-{doc_no:06d}"
        chunks: list[Chunk] = []
        tokens: list[tuple[str, ...]] = []
        mentions: list[tuple[Mention, ...]] = []
        for seq in range(n):
            c = made + seq
            idx = rng.integers(len(sentences), size=int(n_sent[c]))
            text = " ".join(sentences[i] for i in idx)
            toks = [*title_tokens[ti], str(doc_no)]
            for i in idx:
                toks += sent_tokens[i]
            chunk_id = f"{doc_id}#{seq}"
            chunks.append(
                Chunk(
                    chunk_id=chunk_id,
                    doc_id=doc_id,
                    seq=seq,
                    text=text,
                    content_hash=hashlib.sha1(text.encode()).hexdigest(),
                    token_count=len(toks),
                    start=0,
                    end=len(text),
                )
            )
            tokens.append(tuple(toks))
            picked = Counter(int(x) for x in draws[c, : int(n_concepts[c])])
            mentions.append(tuple(Mention(concepts[k], m) for k, m in picked.items()))
        metadata = {
            "audience": AUDIENCES[int(rng.integers(3))],
            "tenant": TENANTS[int(rng.integers(10))],
        }
        text = "\n\n".join(ch.text for ch in chunks)
        doc = Document(
            doc_id=doc_id, title=title, text=text, source="synthetic", metadata=metadata, fmt="txt"
        )
        records.append(
            DocumentRecord(
                document=doc,
                doc_hash=hashlib.sha256(text.encode()).hexdigest(),
                chunks=tuple(chunks),
                tokens=tuple(tokens),
                vectors=mixed[made : made + n],
                mentions=tuple(mentions),
            )
        )
        made += n
        doc_no += 1
        gen_s += time.perf_counter() - t
        if len(records) >= batch_docs or made >= n_total:
            t = time.perf_counter()
            store.write(records)
            write_s += time.perf_counter() - t
            records = []
            if time.perf_counter() - last_log > 10 or made >= n_total:
                log(f"  wrote {made}/{n_total} chunks ({doc_no} documents)")
                last_log = time.perf_counter()
    store.set_meta(
        {
            "embedder": enc.name,
            "embedder_version": enc.version,
            "dim": str(DIM),
            "analyzer": ANALYZER_VERSION,
            "concepts": "concepts/1",
            "chunk": "[256, 32]",
        }
    )
    store.close()
    timings["generate records"] = gen_s
    timings["SQLiteStore.write"] = write_s
    (directory / "bench.json").write_text(json.dumps(spec.to_dict()), encoding="utf-8")
    return timings


def ensure(
    spec: SyntheticSpec, docs: list[CorpusDoc], scifact_index: Path, *, rebuild: bool = False
) -> tuple[Path, dict[str, float]]:
    """The synthetic store for ``spec``, built if missing; timings are empty when cached."""
    directory = synthetic_dir(spec.chunks)
    if not rebuild and is_built(directory, spec):
        log(f"reusing synthetic index {directory}")
        return directory, {}
    log(f"building synthetic index of {spec.chunks} chunks at {directory}")
    vectors = source_vectors(scifact_index, docs)
    return directory, build(directory, spec, docs, vectors)


def corpus_docs(dataset: Path) -> list[CorpusDoc]:
    return read_corpus(dataset / "corpus.jsonl")
