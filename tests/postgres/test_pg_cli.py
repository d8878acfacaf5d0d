"""`--store URL` on the CLI and `clew migrate` between a directory and PostgreSQL (real model)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from clew.cli import main

QUERIES = ["ERR-4413", "customer was billed twice", "what else broke after the pgbouncer migration"]


def search(capsys: pytest.CaptureFixture[str], *where: str, query: str) -> list[str]:
    capsys.readouterr()
    assert main(["search", query, *where, "--k", "10", "--json"]) == 0
    return [h["chunk_id"] for h in json.loads(capsys.readouterr().out)["hits"]]


def test_migrate_to_postgres_and_back(
    sample_index: Path, pg_server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = pg_server.url + "&schema=cli_sample"
    assert main(["migrate", "--from", str(sample_index), "--to", url, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["matches"] and report["documents"] > 10
    back = tmp_path / "back"
    assert main(["migrate", "--from", url, "--to", str(back)]) == 0
    assert "counts match: True" in capsys.readouterr().out
    listed = []
    for where in (("--index", str(sample_index)), ("--store", url), ("--index", str(back))):
        assert main(["docs", "list", *where, "--json"]) == 0
        docs = json.loads(capsys.readouterr().out)
        listed.append(  # the release that wrote each one differs
            [(d["id"], d["title"], d["source"], d["chunks"], d["metadata"]) for d in docs]
        )
    first, *others = listed
    assert len(first) == report["documents"] and all(other == first for other in others)
    for query in QUERIES:
        want = search(capsys, "--index", str(sample_index), query=query)
        assert search(capsys, "--store", url, query=query) == want, query
        assert search(capsys, "--index", str(back), query=query) == want, query
    # a second migrate skips what is already there
    assert main(["migrate", "--from", str(sample_index), "--to", url, "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["documents"] == 0 and again["skipped"] == report["documents"]


def test_store_url_errors_are_clear(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["search", "x", "--store", "mysql://db"])
    assert exc.value.code == 2
    assert "'mysql://db' is not a store URL" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["search", "x", "--store", "postgresql://a", "--index", str(tmp_path)])
    assert "not allowed with argument" in capsys.readouterr().err
    missing = f"postgresql://clew:secret@/nodb?host={tmp_path}/nosock"
    assert main(["search", "x", "--store", missing]) != 0
    err = capsys.readouterr().err
    assert "secret" not in err and "clew: error:" in err


def test_ray_ingest_into_postgres_matches_single_process(
    sample_index: Path, pg_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """`clew ingest --store URL --ray`: a local Ray cluster builds the records, the driver writes
    them to PostgreSQL; searches answer as on the single-process embedded index."""
    url = pg_server.url + "&schema=cli_ray"
    sample = Path(__file__).resolve().parents[2] / "data" / "sample"
    argv = ["ingest", str(sample), "--store", url, "--ray", "--workers", "1", "--json"]
    assert main([*argv, "--no-progress"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["added"]) > 10 and not report["failed"]
    for query in QUERIES:
        want = search(capsys, "--index", str(sample_index), query=query)
        assert search(capsys, "--store", url, query=query) == want, query
