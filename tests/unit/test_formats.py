"""One test per format clew loads, on small real files made here (clew.testing.documents)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from clew.config import ChunkConfig, IngestLimits
from clew.errors import LoadError
from clew.ingest.chunk import Chunker
from clew.ingest.formats import table_rows
from clew.ingest.load import directory_files, load_path, rst_to_markdown
from clew.testing.documents import (
    PDF_PAGES,
    write_docx,
    write_pdf,
    write_pptx,
    write_scanned_pdf,
)
from clew.types import SkippedFile


def chunker() -> Chunker:
    return Chunker(ChunkConfig(), lambda texts: [len(t.split()) for t in texts], IngestLimits())


def test_pdf_keeps_pages_and_each_chunk_knows_its_page(tmp_path: Path) -> None:
    (doc,) = load_path(write_pdf(tmp_path / "m.pdf", PDF_PAGES, title="Vault manual"))
    assert doc.title == "Vault manual" and doc.fmt == "pdf"
    assert doc.metadata == {"page_count": 3}
    assert len(doc.pages) == 3 and doc.pages[0] == 0
    for n, start in enumerate(doc.pages):
        assert doc.text[start:].startswith(PDF_PAGES[n].split("\n")[0]), n
    chunks = chunker().chunk(doc)
    assert [c.page for c in chunks] == [1, 2, 3], "a chunk keeps to one page"
    (on_two,) = [c for c in chunks if "ERR-7001" in c.text]
    assert on_two.page == 2


def test_a_pdf_outline_gives_its_chunks_heading_paths(tmp_path: Path) -> None:
    pages = [
        "# Introduction\n\nWhy vaults.\n\n## Background\n\nKey holders unseal nodes.",
        "# Methods\n\nWe restarted every node. Background\n\nnot a heading line.",
    ]
    (doc,) = load_path(write_pdf(tmp_path / "paper.pdf", pages, outline=True))
    assert "# Introduction" in doc.text and "## Background" in doc.text
    assert doc.text.count("Background") == 2, "only the outline's own line is marked"
    by_text = {c.text.split("\n")[-1]: (c.heading_path, c.page) for c in chunker().chunk(doc)}
    assert by_text["Key holders unseal nodes."] == (("Introduction", "Background"), 1)
    assert by_text["not a heading line."] == (("Methods",), 2)
    drawn = [p.replace("## ", "").replace("# ", "") for p in pages]
    (plain,) = load_path(write_pdf(tmp_path / "plain.pdf", drawn))
    assert "#" not in plain.text, "no outline, no headings"
    assert {c.heading_path for c in chunker().chunk(plain)} == {()}


def test_pdf_title_falls_back_to_its_first_line(tmp_path: Path) -> None:
    (doc,) = load_path(write_pdf(tmp_path / "notitle.pdf", ["Quarterly summary\n\nBody."]))
    assert doc.title == "Quarterly summary"


def test_scanned_encrypted_and_corrupt_pdfs_say_why(tmp_path: Path) -> None:
    with pytest.raises(LoadError, match=r"no text layer \(2 page\(s\) of images: a scan\?\)"):
        list(load_path(write_scanned_pdf(tmp_path / "scan.pdf")))
    locked = write_pdf(tmp_path / "locked.pdf", ["secret"], password="pw")
    with pytest.raises(LoadError, match="encrypted PDF"):
        list(load_path(locked))
    good = write_pdf(tmp_path / "cut.pdf", PDF_PAGES).read_bytes()
    (tmp_path / "cut.pdf").write_bytes(good[: len(good) // 3])
    with pytest.raises(LoadError, match=r"cut\.pdf.*(corrupt|no text layer)"):
        list(load_path(tmp_path / "cut.pdf"))


def test_docx_headings_become_the_heading_path(tmp_path: Path) -> None:
    path = write_docx(
        tmp_path / "ops.docx",
        [
            ("title", "Payout operations"),
            ("h1", "Schedules"),
            ("p", "Payouts settle at 06:00 UTC."),
            ("h2", "Holidays"),
            ("p", "On bank holidays the run moves."),
            ("li", "Check the calendar."),
            ("table", [["Currency", "Cutoff"], ["EUR", "05:30"]]),
        ],
    )
    (doc,) = load_path(path)
    assert doc.title == "Payout operations" and doc.fmt == "docx"
    assert "- Check the calendar." in doc.text and "Currency: EUR; Cutoff: 05:30" in doc.text
    paths = {c.heading_path for c in chunker().chunk(doc) if "bank holidays" in c.text}
    assert paths == {("Payout operations", "Schedules", "Holidays")}


def test_pptx_is_one_section_per_slide_with_notes(tmp_path: Path) -> None:
    path = write_pptx(
        tmp_path / "deck.pptx",
        [("Review", ["Uptime 99.97%"], "Thank on-call."), ("Latency", ["p99 450 ms"], "")],
    )
    (doc,) = load_path(path)
    assert doc.title == "Review" and doc.fmt == "pptx"
    assert "Notes: Thank on-call." in doc.text
    by_path = {c.heading_path: c.text for c in chunker().chunk(doc)}
    assert set(by_path) == {("Slide 1: Review",), ("Slide 2: Latency",)}
    assert "p99 450 ms" in by_path[("Slide 2: Latency",)]


def test_csv_and_tsv_rows_are_records_with_the_header(tmp_path: Path) -> None:
    (tmp_path / "b.csv").write_text('customer,plan,note\nAcme,Pro,"paused, billing"\nGlobex,,\n')
    (doc,) = load_path(tmp_path / "b.csv")
    assert doc.text == "customer: Acme; plan: Pro; note: paused, billing\n\ncustomer: Globex"
    assert doc.title == "b" and doc.metadata == {"rows": 2}
    (tmp_path / "r.tsv").write_text("region\towner\nporto\tana\n")
    (tsv,) = load_path(tmp_path / "r.tsv")
    assert tsv.text == "region: porto; owner: ana" and tsv.fmt == "tsv"
    assert table_rows([["a", "b"], ["1", "2", "3"]]) == ["a: 1; b: 2; column 3: 3"]


def test_log_source_and_rst_files_are_text(tmp_path: Path) -> None:
    (tmp_path / "app.log").write_text("2026-02-12T14:19:02Z ERROR ERR-4012 timeout\n")
    (tmp_path / "rotate.py").write_text('def rotate() -> None:\n    print("x")\n')
    (tmp_path / "shift.txt").write_text("2026-02-12 09:14:03 INFO shift started\nmore\n")
    (tmp_path / "notes.txt").write_text("Shift handover\n\nAll quiet.\n")
    (tmp_path / "Makefile").write_text("all:\n\techo hi\n")
    docs = {d.doc_id: d for d in load_path(tmp_path)}
    assert docs["app.log"].title == "app.log" and docs["app.log"].fmt == "log"
    assert docs["rotate.py"].title == "rotate.py" and "def rotate" in docs["rotate.py"].text
    assert docs["shift.txt"].title == "shift", "a log line is no title"
    assert docs["notes.txt"].title == "Shift handover"
    assert docs["Makefile"].fmt == "text"
    title, text = rst_to_markdown("Guide\n=====\n\nIntro.\n\nPart\n----\n\nBody.\n\nNext\n====\n")
    assert title == "Guide"
    assert text.splitlines() == [
        "# Guide",
        "",
        "Intro.",
        "",
        "## Part",
        "",
        "Body.",
        "",
        "# Next",
        "",
    ]


def test_html_main_content_without_nav_footer_and_tables_as_rows(tmp_path: Path) -> None:
    (tmp_path / "s.html").write_text(
        "<html><head><title>Status</title></head><body><header>Acme Docs</header>"
        "<nav>Home | Docs</nav><div role='navigation'>Menu</div><main><h1>Regions</h1>"
        "<p>See <a href='porto.html'>Porto</a> and <a href='https://x.example'>x</a>.</p>"
        "<table><tr><th>Region</th><th>State</th></tr><tr><td>Porto</td><td>Degraded</td></tr>"
        "</table><ul><li>one</li><li>two</li></ul></main><aside>Ads</aside>"
        "<footer>Copyright</footer></body></html>"
    )
    (doc,) = load_path(tmp_path / "s.html")
    assert doc.title == "Status"
    assert (
        doc.text
        == "# Regions\n\nSee Porto and x.\n\nRegion: Porto; State: Degraded\n\n- one\n- two"
    )
    assert doc.links == ("porto.html",)


def test_office_zip_bombs_are_refused(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.docx"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("word/document.xml", b"\x00" * (20 * 1024 * 1024))
    with pytest.raises(LoadError, match="zip bomb"):
        list(load_path(bomb))
    with pytest.raises(LoadError, match="inflates to"):
        list(load_path(bomb, limits=IngestLimits(max_file_bytes=1024 * 1024)))


def test_a_directory_walk_lists_every_skipped_file_with_its_reason(tmp_path: Path) -> None:
    (tmp_path / "ok.md").write_text("# OK\n\nfine")
    write_scanned_pdf(tmp_path / "scan.pdf", pages=1)
    (tmp_path / "bad.pptx").write_bytes(b"nope")
    (tmp_path / "img.png").write_bytes(b"\x89PNG")
    (tmp_path / "big.txt").write_text("x" * 50_000)
    (tmp_path / ".hidden.md").write_text("# hidden")
    skipped: list[SkippedFile] = []
    docs = list(load_path(tmp_path, limits=IngestLimits(max_file_bytes=20_000), skipped=skipped))
    assert [d.doc_id for d in docs] == ["ok.md"]
    reasons = {s.path: s.reason for s in skipped}
    assert sorted(reasons) == ["bad.pptx", "big.txt", "img.png", "scan.pdf"], "dot-files: silent"
    assert reasons["scan.pdf"].startswith("has no text layer")
    assert reasons["bad.pptx"].startswith("is not a readable PPTX file (corrupt?)")
    assert reasons["img.png"] == "unsupported file type '.png'"
    assert "ingest.max_file_bytes" in reasons["big.txt"]
    assert all(str(tmp_path) not in r for r in reasons.values()), "the report names the file"
    with pytest.raises(LoadError, match="no text layer"):
        list(load_path(tmp_path / "scan.pdf")), "a file named directly raises"
    assert [p.name for p in directory_files(tmp_path)] == [
        "bad.pptx",
        "big.txt",
        "ok.md",
        "scan.pdf",
    ]
