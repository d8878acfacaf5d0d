"""Evaluation datasets in the BEIR layout.

A dataset is a directory holding ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``::

    scifact/
      corpus.jsonl            {"_id", "title", "text", optional "metadata"}
      queries.jsonl           {"_id", "text", optional "slice", "filter", "metadata"}
      qrels/test.tsv          query-id <TAB> corpus-id <TAB> score   (header optional)

Only queries judged in the chosen split are kept; the others are counted in
:attr:`Dataset.skipped`. Judgements for query ids absent from ``queries.jsonl`` are dropped and
counted in :attr:`Dataset.dangling_qrels`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clew.errors import ClewError

__all__ = ["Dataset", "EvalError", "EvalQuery", "load_dataset"]

_BLOCK = 1 << 20
_QUERY_KEYS = ("_id", "text", "slice", "filter", "metadata")


class EvalError(ClewError):
    """An evaluation dataset, gate file or metric name is invalid."""


@dataclass(frozen=True, slots=True)
class EvalQuery:
    qid: str
    text: str
    slice: str | None = None
    """Named subset the query belongs to (e.g. ``"2hop"``); ``None`` when the dataset has none."""
    filter: dict[str, Any] | None = None
    """Access filter to search with, as written in ``queries.jsonl``."""
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Dataset:
    name: str
    """Directory name of the dataset."""
    root: Path
    split: str
    queries: tuple[EvalQuery, ...]
    """Queries judged in ``split``, in ``queries.jsonl`` order."""
    qrels: dict[str, dict[str, int]]
    """Query id -> document id -> grade (grade 0 = judged non-relevant), for ``queries`` only."""
    skipped: int
    """Queries in ``queries.jsonl`` with no judgement in ``split`` (not in ``queries``)."""
    dangling_qrels: int = 0
    """Distinct query ids judged in ``split`` but absent from ``queries.jsonl`` (ignored)."""

    @property
    def corpus_path(self) -> Path:
        return self.root / "corpus.jsonl"

    def corpus_hash(self) -> str:
        """SHA-256 (hex) of the corpus file bytes, read in 1 MiB blocks."""
        digest = hashlib.sha256()
        try:
            with self.corpus_path.open("rb") as handle:
                while block := handle.read(_BLOCK):
                    digest.update(block)
        except OSError as exc:
            raise EvalError(
                f"cannot read corpus {str(self.corpus_path)!r}: {exc.strerror or exc}; "
                "allowed: a readable corpus.jsonl"
            ) from exc
        return digest.hexdigest()

    @property
    def slices(self) -> tuple[str, ...]:
        """Sorted distinct slice names of the queries (``()`` when none has a slice)."""
        return tuple(sorted({q.slice for q in self.queries if q.slice is not None}))

    def subset(self, n: int) -> Dataset:
        """The first ``n`` queries (file order) with their qrels; counters are kept as is."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise EvalError(f"subset n={n!r} is invalid; allowed: an integer >= 0")
        queries = self.queries[:n]
        return Dataset(
            name=self.name,
            root=self.root,
            split=self.split,
            queries=queries,
            qrels={q.qid: dict(self.qrels[q.qid]) for q in queries},
            skipped=self.skipped,
            dangling_qrels=self.dangling_qrels,
        )


def _where(path: Path, lineno: int) -> str:
    return f"{path}:{lineno}"


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise EvalError(f"{path} is not valid UTF-8 ({exc.reason}); allowed: UTF-8 text") from exc
    except OSError as exc:
        raise EvalError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _parse_query(path: Path, lineno: int, line: str) -> EvalQuery:
    where = _where(path, lineno)
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise EvalError(
            f"{where}: malformed JSON ({exc.msg}); allowed: one JSON object per line"
        ) from None
    if not isinstance(obj, dict):
        raise EvalError(f"{where}: got a JSON {type(obj).__name__}; allowed: a JSON object")
    qid = obj.get("_id")
    if isinstance(qid, int) and not isinstance(qid, bool):
        qid = str(qid)
    if not isinstance(qid, str) or not qid:
        raise EvalError(f"{where}: _id={qid!r} is invalid; allowed: a non-empty string")
    text = obj.get("text")
    if not isinstance(text, str):
        raise EvalError(f"{where}: query {qid!r} text={text!r} is invalid; allowed: a string")
    slice_name = obj.get("slice")
    if slice_name is not None and (not isinstance(slice_name, str) or not slice_name):
        raise EvalError(
            f"{where}: query {qid!r} slice={slice_name!r} is invalid; "
            "allowed: a non-empty string or absent"
        )
    filt = obj.get("filter")
    if filt is not None and not isinstance(filt, dict):
        raise EvalError(
            f"{where}: query {qid!r} filter={filt!r} is invalid; allowed: a JSON object or absent"
        )
    metadata = obj.get("metadata")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise EvalError(
            f"{where}: query {qid!r} metadata={metadata!r} is invalid; "
            "allowed: a JSON object or absent"
        )
    return EvalQuery(qid=qid, text=text, slice=slice_name, filter=filt, metadata=metadata)


def _load_queries(path: Path) -> list[EvalQuery]:
    queries: list[EvalQuery] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(_read_lines(path), start=1):
        if not line.strip():
            continue
        query = _parse_query(path, lineno, line)
        if query.qid in seen:
            raise EvalError(
                f"{_where(path, lineno)}: duplicate query _id {query.qid!r} "
                f"(first on line {seen[query.qid]}); allowed: unique ids"
            )
        seen[query.qid] = lineno
        queries.append(query)
    return queries


def _is_header(fields: list[str]) -> bool:
    first = fields[0].strip().lower()
    last = fields[-1].strip().lower()
    return first in {"query-id", "query_id", "qid"} or last in {"score", "relevance", "grade"}


def _load_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    first = True
    for lineno, line in enumerate(_read_lines(path), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if first:
            first = False
            if _is_header(fields):
                continue
        where = _where(path, lineno)
        if len(fields) != 3:
            raise EvalError(
                f"{where}: {len(fields)} tab-separated fields in {line!r}; "
                "allowed: 3 (query-id, corpus-id, score)"
            )
        qid, doc_id, raw = (f.strip() for f in fields)
        if not qid or not doc_id:
            raise EvalError(f"{where}: empty query-id or corpus-id in {line!r}")
        try:
            grade = int(raw)
        except ValueError:
            raise EvalError(
                f"{where}: grade {raw!r} is not an integer; allowed: an integer relevance grade"
            ) from None
        judged = qrels.setdefault(qid, {})
        if judged.get(doc_id, grade) != grade:
            raise EvalError(
                f"{where}: query {qid!r} document {doc_id!r} graded {grade} after "
                f"{judged[doc_id]}; allowed: one grade per (query-id, corpus-id)"
            )
        judged[doc_id] = grade
    return qrels


def load_dataset(path: str | Path, split: str = "test") -> Dataset:
    """Load a BEIR-layout dataset; only queries judged in ``split`` are kept.

    Raises :class:`EvalError` for a missing directory or file (naming the splits that exist when
    the split is missing), a malformed line (file and line number) or a non-integer grade.
    """
    root = Path(path)
    layout = "a BEIR directory with corpus.jsonl, queries.jsonl and qrels/<split>.tsv"
    if not root.is_dir():
        raise EvalError(f"dataset directory {str(root)!r} does not exist; expected {layout}")
    for required in ("corpus.jsonl", "queries.jsonl"):
        if not (root / required).is_file():
            raise EvalError(f"dataset {str(root)!r} has no {required}; expected {layout}")
    qrels_path = root / "qrels" / f"{split}.tsv"
    if not split or not qrels_path.is_file():
        qrels_dir = root / "qrels"
        splits = sorted(p.stem for p in qrels_dir.glob("*.tsv")) if qrels_dir.is_dir() else []
        raise EvalError(
            f"dataset {str(root)!r} has no split {split!r} ({qrels_path} not found); "
            f"allowed: {', '.join(splits) if splits else 'none (no qrels/*.tsv files)'}"
        )
    all_queries = _load_queries(root / "queries.jsonl")
    judged = _load_qrels(qrels_path)
    known = {q.qid for q in all_queries}
    queries = tuple(q for q in all_queries if q.qid in judged)
    return Dataset(
        name=root.resolve().name,
        root=root,
        split=split,
        queries=queries,
        qrels={q.qid: judged[q.qid] for q in queries},
        skipped=len(all_queries) - len(queries),
        dangling_qrels=sum(1 for qid in judged if qid not in known),
    )


def unanswerable_queries(dataset: Dataset) -> list[EvalQuery]:
    """The questions of the dataset's ``queries.jsonl`` marked ``metadata.answerable: false``:
    they have no qrels, so :func:`load_dataset` leaves them out; answer evaluation and
    calibration ask them to see abstention hold (none when the file is absent)."""
    path = dataset.root / "queries.jsonl"
    if not path.is_file():
        return []
    return [q for q in _load_queries(path) if (q.metadata or {}).get("answerable", True) is False]
