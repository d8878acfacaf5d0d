"""Small real documents of every format clew loads, written on the spot for tests and benchmarks.

PDFs are made with fpdf2 (in the ``dev`` extra), DOCX with python-docx and PPTX with python-pptx
(both core dependencies): real files that the real parsers read, not mocks. :func:`mixed_folder`
writes the folder a new user might point clew at: one of each format, plus a scanned PDF (an
image, no text layer), a corrupt DOCX and a file of a type clew does not read.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "MIXED_EXPECTED",
    "MIXED_SKIPPED",
    "PDF_PAGES",
    "mixed_folder",
    "write_docx",
    "write_pdf",
    "write_pptx",
    "write_scanned_pdf",
]

PDF_PAGES = (
    "Vault operations manual\n\nThis manual covers the vault cluster run by the platform team.",
    "Unsealing\n\nAfter a restart every vault node reports ERR-7001 until three key holders "
    "unseal it. Unsealing takes about four minutes per node.",
    "Rotation\n\nThe root token is rotated every quarter by the security on-call engineer.",
)
"""The pages of ``manual.pdf`` in :func:`mixed_folder` (ERR-7001 is on page 2)."""


def write_pdf(
    path: Path,
    pages: Sequence[str],
    *,
    title: str | None = None,
    password: str | None = None,
    outline: bool = False,
) -> Path:
    """A PDF with a text layer: one page per item (paragraphs split on blank lines). With
    ``outline``, a paragraph written ``# Title`` (or ``## Title``) is drawn as ``Title`` and
    bookmarked at that level, as word processors export headings."""
    from fpdf import FPDF

    pdf = FPDF()
    if title:
        pdf.set_title(title)
    if password is not None:
        pdf.set_encryption(owner_password=password + "-owner", user_password=password)
    pdf.set_font("Helvetica", size=11)
    for text in pages:
        pdf.add_page()
        for para in text.split("\n\n"):
            marks = len(para) - len(para.lstrip("#"))
            if outline and marks:
                para = para[marks:].strip()
                pdf.start_section(para, level=marks - 1)
            pdf.multi_cell(0, 6, para)
            pdf.ln(4)
    pdf.output(str(path))
    return path


def write_scanned_pdf(path: Path, pages: int = 2) -> Path:
    """A PDF of page images only (as a scanner makes): text a reader sees, none a parser can."""
    from fpdf import FPDF
    from PIL import Image, ImageDraw

    pdf = FPDF()
    for n in range(pages):
        image = Image.new("RGB", (800, 1000), "white")
        draw = ImageDraw.Draw(image)
        draw.text((60, 60 + 40 * n), f"Scanned invoice page {n + 1}: total 42.00 EUR", fill="black")
        pdf.add_page()
        pdf.image(image, x=10, y=10, w=180)
    pdf.output(str(path))
    return path


def write_docx(path: Path, blocks: Sequence[tuple[str, str | list[list[str]]]]) -> Path:
    """A Word file from ``(kind, content)`` blocks: kind ``title``, ``h1``..``h3``, ``p``,
    ``li`` (a list item) or ``table`` (content: rows of cells, the first the header)."""
    import docx

    document = docx.Document()
    for kind, content in blocks:
        if kind == "table":
            assert isinstance(content, list)
            table = document.add_table(rows=len(content), cols=len(content[0]))
            for r, row in enumerate(content):
                for c, value in enumerate(row):
                    table.cell(r, c).text = value
        elif kind == "title":
            document.add_heading(str(content), level=0)
        elif kind in ("h1", "h2", "h3"):
            document.add_heading(str(content), level=int(kind[1]))
        elif kind == "li":
            document.add_paragraph(str(content), style="List Bullet")
        else:
            document.add_paragraph(str(content))
    document.save(str(path))
    return path


def write_pptx(path: Path, slides: Sequence[tuple[str, Sequence[str], str]]) -> Path:
    """A deck from ``(title, bullet lines, speaker notes)`` slides."""
    from pptx import Presentation

    deck = Presentation()
    layout = deck.slide_layouts[1]  # title and content
    for title, bullets, notes in slides:
        slide = deck.slides.add_slide(layout)
        slide.shapes.title.text = title
        body = slide.placeholders[1].text_frame
        for i, line in enumerate(bullets):
            para = body.paragraphs[0] if i == 0 else body.add_paragraph()
            para.text = line
        if notes:
            slide.notes_slide.notes_text_frame.text = notes
    deck.save(str(path))
    return path


MIXED_EXPECTED = (
    "app.log",
    "billing.csv",
    "deck.pptx",
    "guide.rst",
    "manual.pdf",
    "notes/shift.txt",
    "ops.docx",
    "readme.md",
    "regions.tsv",
    "status.html",
    "tools/rotate.py",
)
"""The documents :func:`mixed_folder` holds that clew loads (ids: paths in the folder)."""
MIXED_SKIPPED = {
    "broken.docx": "not a readable DOCX file (corrupt?)",
    "photo.png": "unsupported file type '.png'",
    "scans/invoice.pdf": "no text layer",
}
"""The files it holds that clew skips, with (part of) the reason."""


def mixed_folder(root: Path) -> Path:
    """A folder of md, html, pdf, docx, pptx, csv, tsv, txt, log, rst and source files, plus a
    scanned PDF, a corrupt DOCX and a PNG (see :data:`MIXED_EXPECTED`, :data:`MIXED_SKIPPED`)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "notes").mkdir(exist_ok=True)
    (root / "scans").mkdir(exist_ok=True)
    (root / "tools").mkdir(exist_ok=True)
    (root / "readme.md").write_text(
        "# Platform notes\n\nThe platform team runs the vault cluster and the payout service.\n"
    )
    (root / "status.html").write_text(
        "<html><head><title>Region status</title></head><body>"
        "<nav><a href='/'>Home</a> | <a href='docs.html'>Docs</a></nav>"
        "<main><h1>Region status</h1><p>Current state of each region.</p>"
        "<table><tr><th>Region</th><th>State</th></tr>"
        "<tr><td>Porto</td><td>Degraded</td></tr><tr><td>Lisbon</td><td>Operational</td></tr>"
        "</table></main><footer>Copyright 2026 Larkspur</footer></body></html>"
    )
    write_pdf(root / "manual.pdf", PDF_PAGES, title="Vault operations manual")
    write_scanned_pdf(root / "scans" / "invoice.pdf")
    write_docx(
        root / "ops.docx",
        [
            ("title", "Payout operations"),
            ("h1", "Schedules"),
            ("p", "Payouts settle at 06:00 UTC on business days."),
            ("h2", "Holidays"),
            ("p", "On bank holidays the payout run moves to the next business day."),
            ("li", "Check the holiday calendar every December."),
            ("table", [["Currency", "Cutoff"], ["EUR", "05:30"], ["GBP", "05:00"]]),
        ],
    )
    write_pptx(
        root / "deck.pptx",
        [
            ("Quarterly review", ["Uptime 99.97%", "Two incidents"], "Thank the on-call team."),
            ("Fraud scorer latency", ["p99 went from 80 ms to 450 ms", "Fixed in 2.4.1"], ""),
        ],
    )
    with (root / "billing.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["customer", "plan", "status"])
        w.writerow(["Acme", "Pro", "paused"])
        w.writerow(["Globex", "Enterprise", "active"])
    (root / "regions.tsv").write_text("region\towner\nporto\tana\nlisbon\trui\n")
    (root / "notes" / "shift.txt").write_text(
        "2026-02-12 09:14:03 INFO shift started by ana\n"
        "2026-02-12 09:20:11 WARN ledger-writer lag 40 s\n"
    )
    (root / "app.log").write_text(
        "2026-02-12T14:19:02Z ERROR payments-gateway ERR-4012 upstream timeout\n"
        "2026-02-12T14:40:55Z INFO pool size raised to 400\n"
    )
    (root / "guide.rst").write_text(
        "Deploy guide\n============\n\nHow to deploy the gateway.\n\n"
        "Rollback\n--------\n\nRun the rollback job, then page the release manager.\n"
    )
    (root / "tools" / "rotate.py").write_text(
        '"""Rotate the vault root token."""\n\n\ndef rotate() -> None:\n    print("rotated")\n'
    )
    (root / "broken.docx").write_bytes(b"PK\x03\x04 this is not really a zip archive")
    (root / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
    return root
