"""A new user's folder (md, html, pdf, docx, pptx, csv, tsv, txt, log, rst, source, plus a
scanned PDF, a corrupt DOCX and a PNG) ingested with the real engine: every file accounted for,
and PDF hits and citations carry their page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clew import Engine
from clew.cli import main
from clew.testing.documents import MIXED_EXPECTED, MIXED_SKIPPED, mixed_folder


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = mixed_folder(tmp_path_factory.mktemp("mixed") / "folder")
    index = root.parent / "idx"
    return root, index


def test_a_mixed_folder_ingests_with_a_per_file_report(
    indexed: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root, index = indexed
    code = main(["ingest", str(root), "--index", str(index), "--no-progress", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert sorted(report["added"]) == sorted(MIXED_EXPECTED)
    reasons = {s["path"]: s["reason"] for s in report["skipped"]}
    assert sorted(reasons) == sorted(MIXED_SKIPPED)
    for path, part in MIXED_SKIPPED.items():
        assert part in reasons[path], (path, reasons[path])
    # the table a person reads: every skipped file, with its reason
    code = main(["ingest", str(root), "--index", str(index), "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0 and f"{len(MIXED_EXPECTED)} unchanged" in out
    assert "skipped 3 file(s):" in out
    rows = [line.split(None, 1) for line in out.splitlines() if line.startswith("  ")]
    assert {r[0] for r in rows} >= set(MIXED_SKIPPED)


def test_pdf_hits_and_citations_carry_the_page(
    indexed: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, index = indexed
    with Engine(index) as engine:
        hits = engine.search("ERR-7001 unseal vault node", k=3).hits
        top = hits[0]
        assert top.doc_id == "manual.pdf" and top.page == 2 and "ERR-7001" in top.text
        assert all(h.page is None for h in hits if h.doc_id != "manual.pdf")
        answer = engine.ask("What does a vault node report after a restart?")
    cited = [c for c in answer.citations if c.doc_id == "manual.pdf"]
    assert cited and cited[0].page == 2 and cited[0].where.endswith(", p. 2")
    assert answer.to_dict()["citations"][0]["page"] == cited[0].page  # type: ignore[index]
    code = main(["ask", "What does a vault node report after a restart?", "--index", str(index)])
    out = capsys.readouterr().out
    assert code == 0 and "Vault operations manual, p. 2" in out


def test_other_formats_are_searchable(indexed: tuple[Path, Path]) -> None:
    _, index = indexed
    with Engine(index) as engine:
        for query, doc_id in [
            ("Porto region state degraded", "status.html"),
            ("payout run on bank holidays", "ops.docx"),
            ("fraud scorer p99 latency", "deck.pptx"),
            ("Acme Pro plan paused", "billing.csv"),
            ("ERR-4012 upstream timeout", "app.log"),
            ("rollback job release manager", "guide.rst"),
        ]:
            top = engine.search(query, k=3).hits
            assert top and top[0].doc_id == doc_id, (query, [h.doc_id for h in top])
        nav = engine.search("Home Docs Copyright", k=10).hits
        assert all("Copyright" not in h.text and "Home |" not in h.text for h in nav)
