"""The whole evaluation harness on a small slice of SciFact (real model, real qrels)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clew.cli import main
from clew.retrieve.rerank import FEATURES

SCIFACT = Path(__file__).resolve().parents[3] / "shared" / "data" / "scifact"


@pytest.fixture(scope="module")
def mini_scifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40 test queries, their relevant abstracts and 200 other abstracts, in BEIR layout."""
    if not SCIFACT.exists():
        pytest.skip("shared SciFact dataset not present")
    root = tmp_path_factory.mktemp("mini-scifact")
    qrels_lines = (SCIFACT / "qrels" / "test.tsv").read_text().splitlines()[1:]
    by_query: dict[str, list[str]] = {}
    for line in qrels_lines:
        qid, doc, _ = line.split("\t")
        by_query.setdefault(qid, []).append(doc)
    qids = sorted(by_query, key=int)[:40]
    keep_docs = {d for q in qids for d in by_query[q]}
    corpus = [json.loads(x) for x in (SCIFACT / "corpus.jsonl").read_text().splitlines()]
    others = [d for d in corpus if d["_id"] not in keep_docs][:200]
    chosen = [d for d in corpus if d["_id"] in keep_docs] + others
    for i, d in enumerate(chosen):
        d["metadata"] = {"shard": "a" if i % 2 == 0 else "b"}
    (root / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in chosen) + "\n")
    queries = [json.loads(x) for x in (SCIFACT / "queries.jsonl").read_text().splitlines()]
    wanted = [q for q in queries if q["_id"] in set(qids)]
    for i, q in enumerate(wanted):
        q["slice"] = "even" if i % 2 == 0 else "odd"
    wanted[0]["filter"] = {"shard": "a"}  # a per-query access filter
    (root / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in wanted) + "\n")
    (root / "qrels").mkdir()
    rows = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t1" for q in qids for d in by_query[q]]
    (root / "qrels" / "test.tsv").write_text("\n".join(rows) + "\n")
    return root


@pytest.fixture(scope="module")
def mini_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mini-index") / "idx"


def test_ablation_json_run_file_and_gates(
    mini_scifact: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = tmp_path / "idx"
    run_out = tmp_path / "run.txt"
    gates = tmp_path / "gates.yaml"
    gates.write_text("gates:\n  - dataset: mini-scifact0\n    min: {ndcg@10: 0.30}\n")
    code = main(
        [
            "eval",
            "--dataset",
            str(mini_scifact),
            "--index",
            str(index),
            "--ablate",
            "--json",
            "--run-out",
            str(run_out),
            "--gate",
            str(gates),
            "--no-progress",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    names = [r["name"] for r in data["runs"]]
    assert names == [
        "lexical",
        "dense",
        "graph",
        "hybrid",
        "rules",
        "default",
        "-graph",
        "-titles",
        "graph-walk",
        "+expand",
        "+rerank-blend",
        "+rerank-features",  # the shipped weights: no model given
        "oracle-route",
    ]
    router = data["router"]["all"]
    assert router["n"] == 40 and 0.0 <= router["accuracy"] <= 1.0
    assert router["oracle_gain"] >= router["gain"] and router["regret"] >= 0.0
    assert sum(router["oracle_routes"].values()) == 40 and sum(router["routes"].values()) == 40
    by = {r["name"]: r for r in data["runs"]}
    for run in data["runs"]:
        assert set(run["slices"]) == {"all", "even", "odd"}
        assert run["slices"]["all"]["n"] == 40
        assert 0.0 <= run["slices"]["all"]["ndcg@10"] <= 1.0
        oracle = run["oracle"]["all"]
        assert oracle["any_leg"] >= oracle["fused_top10"]
        assert len(run["per_query"]) == 40
    # on SciFact both text legs work; fusion is at least as good as the weaker leg
    lex = by["lexical"]["slices"]["all"]["ndcg@10"]
    dense = by["dense"]["slices"]["all"]["ndcg@10"]
    hybrid = by["hybrid"]["slices"]["all"]["ndcg@10"]
    assert lex > 0.4 and dense > 0.4
    assert hybrid >= min(lex, dense)
    assert by["lexical"]["legs_run"]["all"] == {"lexical": 40}
    assert "gate passed" in err
    runs = sorted(p.name for p in tmp_path.glob("run.*.txt"))
    assert runs == sorted(f"run.{n}.txt" for n in names)
    assert by["+expand"]["oracle"]["all"].get("graph_expansion", 0.0) > 0.0
    assert "graph" not in by["-graph"]["legs_run"]["all"]
    assert by["graph-walk"]["config"]["graph"]["method"] == "walk"
    assert by["-titles"]["config"]["graph"]["title_links"] == 0
    assert by["default"]["config"]["graph"]["method"] == "auto"
    assert "rerank" in by["+rerank-blend"]["latency_ms"]
    assert by["+rerank-blend"]["config"]["rerank"]["model"] == "blend"
    shipped = by["+rerank-features"]["config"]["rerank"]
    assert (shipped["kind"], shipped["model"]) == ("features", "")
    tokens = by["default"]["slices"]["all"]
    assert 0 < tokens["assembled_tokens"] <= tokens["undiversified_tokens"] <= 3200
    lines = [x.split() for x in (tmp_path / "run.default.txt").read_text().splitlines()]
    first = lines[0]
    assert len(first) == 6 and first[1] == "Q0" and first[3] == "1"
    corpus = [json.loads(x) for x in (mini_scifact / "corpus.jsonl").read_text().splitlines()]
    shard = {d["_id"]: d["metadata"]["shard"] for d in corpus}
    filtered_qid = json.loads((mini_scifact / "queries.jsonl").read_text().splitlines()[0])["_id"]
    docs = [row[2] for row in lines if row[0] == filtered_qid]
    assert docs and {shard[d] for d in docs} == {"a"}


def test_gate_failure_exits_non_zero_with_reasons(
    mini_scifact: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gates = tmp_path / "gates.yaml"
    gates.write_text(
        "gates:\n  - dataset: mini-scifact0\n    slice: '*'\n"
        "    min: {ndcg@10: 0.99, recall@100: 0.999}\n"
    )
    code = main(
        [
            "eval",
            "--dataset",
            str(mini_scifact),
            "--index",
            str(tmp_path / "idx"),
            "--preset",
            "lexical",
            "--limit",
            "10",
            "--gate",
            str(gates),
            "--no-progress",
        ]
    )
    _, err = capsys.readouterr()
    assert code == 1
    assert "gate FAILED" in err
    assert "mini-scifact0/all: ndcg@10" in err and "min 0.99" in err


def test_train_features_and_calibrate_then_evaluate(
    mini_scifact: Path, mini_index: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["--dataset", str(mini_scifact), "--split", "test", "--index", str(mini_index)]
    out_dir = tmp_path / "features"
    code = main(
        ["train-reranker", "--kind", "features", *common, "--out", str(out_dir), "--no-progress"]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    weights = json.loads((out_dir / "clew-features.json").read_text())
    assert weights["format"] == "clew-feature-reranker/1"
    assert weights["features"][0] == "cosine" and len(weights["weights"]) == len(FEATURES)
    assert weights["info"]["relevant"] > 0 and "feature weights written" in out

    cal = tmp_path / "abstain.json"
    code = main(["calibrate", *common, "--limit", "20", "--out", str(cal), "--no-progress"])
    out, err = capsys.readouterr()
    assert code == 0, err
    fitted = json.loads(cal.read_text())
    assert 0.0 < fitted["threshold"] < 1.0 and fitted["info"]["queries"] == 20
    code = main(["calibrate", *common, "--limit", "20", "--check", str(cal), "--no-progress"])
    out, err = capsys.readouterr()
    assert code == 0, err
    checked = json.loads(out)
    assert checked["answered_when_answerable"] >= 0.85  # the 90% rule, on its own data

    code = main(
        [
            "eval",
            "--dataset",
            str(mini_scifact),
            "--index",
            str(mini_index),
            "--preset",
            "default",
            "--preset",
            "+rerank-features",
            "--feature-model",
            str(out_dir),
            "--json",
            "--no-progress",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    runs = {r["name"]: r for r in json.loads(out)["runs"]}
    assert runs["+rerank-features"]["config"]["rerank"]["kind"] == "features"
    # fitted on these very queries: it must not do worse than the fused order
    assert (
        runs["+rerank-features"]["slices"]["all"]["ndcg@10"]
        >= runs["default"]["slices"]["all"]["ndcg@10"] - 0.01
    )


def test_extra_rows_need_their_model(
    mini_scifact: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["eval", "--dataset", str(mini_scifact), "--preset", "+rerank-ce", "--no-progress"])
    _, err = capsys.readouterr()
    assert code == 2 and "--rerank-model" in err


def test_train_router_writes_a_model_that_routes(
    mini_scifact: Path, mini_index: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from clew.retrieve.adaptive import load_router

    train = mini_scifact / "qrels" / "train.tsv"
    train.write_text((mini_scifact / "qrels" / "test.tsv").read_text())
    out = tmp_path / "router.json"
    examples = tmp_path / "examples.json"
    args = ["train-router", "--dataset", f"{mini_scifact}:train", "--out", str(out)]
    indexes = ["--indexes", str(tmp_path / "indexes"), "--examples", str(examples)]
    code = main([*args, *indexes, "--no-progress"])
    text, err = capsys.readouterr()
    assert code == 0, err
    model = load_router(str(out))
    assert model.version.startswith("router-") and model.info["examples"] == {"mini-scifact0": 40}
    assert "mini-scifact0" in text and "signal weights" in text
    rows = json.loads(examples.read_text())["examples"]
    assert len(rows) == 40 and all(len(r["gains"]) == 7 for r in rows)
    # the collected examples are reused: no index is opened the second time
    code = main([*args, "--indexes", "/nonexistent/x", "--examples", str(examples)])
    assert code == 0 and load_router(str(out)) == model
    capsys.readouterr()
    # the model routes a search; test splits are refused
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f"router: {{model: {str(out)!r}}}\n")
    code = main(
        [
            "search",
            "cancer",
            "--index",
            str(tmp_path / "indexes" / "mini-scifact0"),
            "--config",
            str(cfg),
            "--json",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["route"]["weighed_by"] == model.version
    code = main(["train-router", "--dataset", f"{mini_scifact}:test", "--out", str(out)])
    assert code == 2 and "never test" in capsys.readouterr().err
