from __future__ import annotations

import hashlib
import json
from dataclasses import FrozenInstanceError
from pathlib import Path
from typing import Any

import pytest

from clew.errors import ClewError
from clew.eval.datasets import Dataset, EvalError, EvalQuery, load_dataset

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


def _write(
    root: Path,
    queries: list[dict[str, Any]] | None = None,
    qrels: dict[str, str] | None = None,
    corpus: str = '{"_id": "d1", "title": "T", "text": "x"}\n',
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "corpus.jsonl").write_text(corpus, encoding="utf-8")
    if queries is None:
        queries = [
            {"_id": "q2", "text": "second", "slice": "2hop", "filter": {"team": "a"}},
            {"_id": "q1", "text": "first", "slice": "3hop", "metadata": {"answer": "x"}},
            {"_id": "q3", "text": "unjudged"},
            {"_id": "q4", "text": "only non-relevant", "slice": "2hop"},
        ]
    (root / "queries.jsonl").write_text(
        "".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8"
    )
    if qrels is None:
        qrels = {
            "test": "query-id\tcorpus-id\tscore\n"
            "q1\td1\t1\nq1\td2\t2\nq2\td1\t1\nq4\td3\t0\nghost\td1\t1\nghost\td2\t1\n",
            "train": "q3\td1\t1\n",
        }
    (root / "qrels").mkdir(exist_ok=True)
    for split, text in qrels.items():
        (root / "qrels" / f"{split}.tsv").write_text(text, encoding="utf-8")
    return root


def test_load_keeps_judged_queries_in_file_order(tmp_path: Path) -> None:
    root = _write(tmp_path / "tiny")
    ds = load_dataset(root)
    assert ds.name == "tiny"
    assert ds.split == "test"
    assert [q.qid for q in ds.queries] == ["q2", "q1", "q4"]
    assert ds.queries[0] == EvalQuery("q2", "second", slice="2hop", filter={"team": "a"})
    assert ds.queries[1].metadata == {"answer": "x"}
    assert ds.queries[1].filter is None
    assert ds.qrels == {"q1": {"d1": 1, "d2": 2}, "q2": {"d1": 1}, "q4": {"d3": 0}}
    assert ds.skipped == 1
    assert ds.dangling_qrels == 1
    assert ds.slices == ("2hop", "3hop")
    assert ds.corpus_path == root / "corpus.jsonl"
    expected = hashlib.sha256((root / "corpus.jsonl").read_bytes()).hexdigest()
    assert ds.corpus_hash() == expected
    with pytest.raises(FrozenInstanceError):
        ds.split = "dev"  # type: ignore[misc]

    train = load_dataset(str(root), "train")
    assert [q.qid for q in train.queries] == ["q3"]
    assert train.skipped == 3
    assert train.slices == ()


def test_subset(tmp_path: Path) -> None:
    ds = load_dataset(_write(tmp_path / "tiny"))
    sub = ds.subset(2)
    assert isinstance(sub, Dataset)
    assert [q.qid for q in sub.queries] == ["q2", "q1"]
    assert sub.qrels == {"q2": {"d1": 1}, "q1": {"d1": 1, "d2": 2}}
    assert ds.subset(0).queries == ()
    assert len(ds.subset(10).queries) == 3
    with pytest.raises(EvalError, match=r"subset n=-1 is invalid; allowed: an integer >= 0"):
        ds.subset(-1)


def test_missing_header_and_blank_lines_tolerated(tmp_path: Path) -> None:
    root = _write(tmp_path / "nohdr", qrels={"test": "q1\td1\t1\n\nq2\td9\t3\n"})
    ds = load_dataset(root)
    assert ds.qrels == {"q2": {"d9": 3}, "q1": {"d1": 1}}


def test_corpus_hash_streams_large_file(tmp_path: Path) -> None:
    corpus = '{"_id": "d", "text": "' + "y" * (3 << 20) + '"}\n'
    root = _write(tmp_path / "big", corpus=corpus)
    ds = load_dataset(root)
    assert ds.corpus_hash() == hashlib.sha256(corpus.encode()).hexdigest()


def test_missing_pieces(tmp_path: Path) -> None:
    with pytest.raises(EvalError, match=r"dataset directory .*nowhere' does not exist"):
        load_dataset(tmp_path / "nowhere")
    root = _write(tmp_path / "ds")
    (root / "corpus.jsonl").unlink()
    with pytest.raises(EvalError, match=r"has no corpus\.jsonl"):
        load_dataset(root)
    root = _write(tmp_path / "ds2")
    (root / "queries.jsonl").unlink()
    with pytest.raises(EvalError, match=r"has no queries\.jsonl"):
        load_dataset(root)
    root = _write(tmp_path / "ds3")
    with pytest.raises(EvalError, match=r"has no split 'dev' .*; allowed: test, train"):
        load_dataset(root, "dev")
    (root / "qrels" / "test.tsv").unlink()
    (root / "qrels" / "train.tsv").unlink()
    with pytest.raises(EvalError, match=r"allowed: none"):
        load_dataset(root)


def test_malformed_lines_name_file_and_line(tmp_path: Path) -> None:
    root = _write(tmp_path / "badq")
    with (root / "queries.jsonl").open("a", encoding="utf-8") as f:
        f.write("{not json\n")
    with pytest.raises(EvalError, match=r"queries\.jsonl:5: malformed JSON") as info:
        load_dataset(root)
    assert isinstance(info.value, ClewError)

    bad_queries: list[tuple[dict[str, Any], str]] = [
        ({"text": "no id"}, r"queries\.jsonl:1: _id=None is invalid"),
        ({"_id": "q1"}, r"queries\.jsonl:1: query 'q1' text=None is invalid"),
        ({"_id": "q1", "text": "t", "slice": 3}, r"slice=3 is invalid"),
        ({"_id": "q1", "text": "t", "filter": [1]}, r"filter=\[1\] is invalid"),
        ({"_id": "q1", "text": "t", "metadata": "m"}, r"metadata='m' is invalid"),
    ]
    for i, (query, pattern) in enumerate(bad_queries):
        root = _write(tmp_path / f"bq{i}", queries=[query])
        with pytest.raises(EvalError, match=pattern):
            load_dataset(root)
    root = _write(tmp_path / "dup", queries=[{"_id": "a", "text": "x"}, {"_id": "a", "text": "y"}])
    with pytest.raises(EvalError, match=r"queries\.jsonl:2: duplicate query _id 'a'"):
        load_dataset(root)
    root = _write(tmp_path / "intid", queries=[{"_id": 7, "text": "x"}], qrels={"test": "7\td\t1"})
    assert load_dataset(root).queries[0].qid == "7"


def test_bad_qrels(tmp_path: Path) -> None:
    cases = {
        "grade": ("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\thigh\n", r"test\.tsv:3: grade"),
        "float": ("q1\td1\t1.5\n", r"test\.tsv:1: grade '1\.5' is not an integer"),
        "fields": ("q1 d1 1\n", r"test\.tsv:1: 1 tab-separated fields .*allowed: 3"),
        "conflict": ("q1\td1\t1\nq1\td1\t2\n", r"test\.tsv:2: query 'q1' document 'd1' graded 2"),
    }
    for name, (text, pattern) in cases.items():
        root = _write(tmp_path / name, qrels={"test": text})
        with pytest.raises(EvalError, match=pattern):
            load_dataset(root)


@pytest.mark.skipif(not (SHARED / "scifact").is_dir(), reason="shared scifact data absent")
def test_real_scifact() -> None:
    test = load_dataset(SHARED / "scifact")
    assert test.name == "scifact"
    assert len(test.queries) == 300
    assert test.skipped == 1109 - 300
    assert test.dangling_qrels == 0
    assert test.slices == ()
    train = load_dataset(SHARED / "scifact", "train")
    assert len(train.queries) == 809


@pytest.mark.skipif(not (SHARED / "nfcorpus").is_dir(), reason="shared nfcorpus data absent")
def test_real_nfcorpus_keeps_only_judged_queries() -> None:
    ds = load_dataset(SHARED / "nfcorpus")
    assert len(ds.queries) == 323
    assert ds.skipped == 3237 - 323
    assert set(ds.qrels) == {q.qid for q in ds.queries}
    assert {g for judged in ds.qrels.values() for g in judged.values()} <= {0, 1, 2}
