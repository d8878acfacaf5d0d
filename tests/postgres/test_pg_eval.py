"""`clew eval --store URL`: the evaluation harness on a PostgreSQL store gives the embedded
store's figures (a small slice of SciFact, real model)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from clew.cli import main

SCIFACT = Path(__file__).resolve().parents[3] / "shared" / "data" / "scifact"


@pytest.fixture(scope="module")
def tiny_scifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 test queries, their relevant abstracts and 60 others, in BEIR layout."""
    if not SCIFACT.exists():
        pytest.skip("shared SciFact dataset not present")
    root = tmp_path_factory.mktemp("tiny-scifact")
    by_query: dict[str, list[str]] = {}
    for line in (SCIFACT / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, doc, _ = line.split("\t")
        by_query.setdefault(qid, []).append(doc)
    qids = sorted(by_query, key=int)[:12]
    relevant = {d for q in qids for d in by_query[q]}
    corpus = [json.loads(x) for x in (SCIFACT / "corpus.jsonl").read_text().splitlines()]
    chosen = [d for d in corpus if d["_id"] in relevant]
    chosen += [d for d in corpus if d["_id"] not in relevant][:60]
    (root / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in chosen) + "\n")
    queries = [json.loads(x) for x in (SCIFACT / "queries.jsonl").read_text().splitlines()]
    wanted = [q for q in queries if q["_id"] in set(qids)]
    (root / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in wanted) + "\n")
    (root / "qrels").mkdir()
    rows = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t1" for q in qids for d in by_query[q]]
    (root / "qrels" / "test.tsv").write_text("\n".join(rows) + "\n")
    return root


def evaluate(capsys: pytest.CaptureFixture[str], dataset: Path, *where: str) -> dict[str, Any]:
    capsys.readouterr()
    args = ["eval", "--dataset", str(dataset), *where, "--json", "--no-progress"]
    for preset in ("default", "lexical", "dense", "graph"):
        args += ["--preset", preset]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    return {run["name"]: run["slices"] for run in out["runs"]}


def test_eval_on_postgres_matches_embedded(
    tiny_scifact: Path, pg_server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    want = evaluate(capsys, tiny_scifact, "--index", str(tmp_path / "idx"))
    got = evaluate(capsys, tiny_scifact, "--store", pg_server.url + "&schema=eval_tiny")
    assert set(got) == {"default", "lexical", "dense", "graph"}
    for name, slices in want.items():
        assert slices["all"]["ndcg@10"] > 0, name
        assert set(got[name]) == set(slices), name
        for slice_, metrics in slices.items():
            assert got[name][slice_] == pytest.approx(metrics, abs=1e-9), (name, slice_)
