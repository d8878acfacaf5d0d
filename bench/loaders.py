"""Document loaders: which library, by measurement; and what clew's PDF ingest costs per page.

PDF: a PDF made here with fpdf2, one SciFact abstract per page (``--pages``), so every page's true
text is known. Each library extracts the text layer of every page (median of ``--runs`` runs):

- pypdfium2 (PDFium, clew's choice), pypdf, pdfplumber: pages/s and fidelity, the token F1 of
  each page's extracted words against the words put on it (mean over pages);
- clew's ``load_pdf`` (pypdfium2 plus page offsets and clean-up) on the same file;
- clew's whole ingest of that PDF (load, chunk, spaCy, embed, write) into a fresh index with the
  default embedder, in pages/s: what a user waits for, next to the library's own parse rate.

HTML: ``--html`` generated pages (a SciFact abstract in a site's navigation, header, sidebar,
footer and a status table), extracted by clew's selectolax walker and by trafilatura: pages/s,
recall of the article's words, share of boilerplate words kept, and whether table cells ran
together (``PortoDegraded``).

Usage: ``python bench/loaders.py [--pages 200] [--html 200] [--runs 3]``
"""

from __future__ import annotations

import itertools
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from _common import log, median, parser, read_corpus, scifact_dir, table, write_result

_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def f1(got: str, want: str) -> float:
    from collections import Counter

    g, w = Counter(words(got)), Counter(words(want))
    overlap = sum((g & w).values())
    if not overlap:
        return 0.0
    p, r = overlap / sum(g.values()), overlap / sum(w.values())
    return 2 * p * r / (p + r)


def latin1(text: str) -> str:
    """fpdf2's core fonts hold latin-1 only: what cannot be drawn becomes '?' (in the truth too)."""
    return text.encode("latin-1", errors="replace").decode("latin-1")


def make_pdf(path: Path, texts: Sequence[str]) -> None:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_auto_page_break(auto=False)
    pdf.set_font("Helvetica", size=9)
    for text in texts:
        pdf.add_page()
        pdf.multi_cell(0, 4.5, text)
    pdf.output(str(path))


def pdfium_pages(path: Path) -> list[str]:
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(str(path))
    out = []
    for i in range(len(pdf)):
        page = pdf[i]
        tp = page.get_textpage()
        out.append(tp.get_text_range())
        tp.close()
        page.close()
    pdf.close()
    return out


def pypdf_pages(path: Path) -> list[str]:
    from pypdf import PdfReader

    return [p.extract_text() or "" for p in PdfReader(str(path)).pages]


def plumber_pages(path: Path) -> list[str]:
    import pdfplumber

    with pdfplumber.open(str(path)) as pdf:
        return [p.extract_text() or "" for p in pdf.pages]


def clew_pages(path: Path) -> list[str]:
    from clew.ingest.formats import load_pdf

    doc = load_pdf(path, path.name)
    bounds = [*doc.pages, len(doc.text) + 2]
    return [doc.text[a : b - 2] for a, b in itertools.pairwise(bounds)]


def timed(fn: Callable[[], list[str]], runs: int) -> tuple[float, list[str]]:
    """Median seconds of ``runs`` calls after one untimed warm-up call (imports, caches)."""
    out = fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return median(times), out


def bench_pdf(texts: list[str], runs: int, work: Path) -> tuple[str, list[str]]:
    path = work / "scifact.pdf"
    make_pdf(path, texts)
    rows = []
    notes = []
    libs = [
        ("pypdfium2 5.15.2 (PDFium)", pdfium_pages),
        ("pypdf 7.1.0", pypdf_pages),
        ("pdfplumber 0.11.10", plumber_pages),
        ("clew load_pdf (pypdfium2 + page offsets)", clew_pages),
    ]
    base = None
    for name, fn in libs:
        seconds, pages = timed(lambda fn=fn: fn(path), runs)  # type: ignore[misc]
        assert len(pages) == len(texts), (name, len(pages))
        fidelity = sum(f1(p, t) for p, t in zip(pages, texts, strict=True)) / len(texts)
        rate = len(texts) / seconds
        base = base or rate
        damaged = recovered(fn, path, work) if fn is not clew_pages else "as pypdfium2"
        rows.append((name, rate, f"{rate / base:.2f}x", round(fidelity, 4), damaged))
        log(f"{name}: {rate:.0f} pages/s, F1 {fidelity:.4f}, damaged: {damaged}")
    # the whole ingest of that PDF, as a user runs it
    from clew import Engine

    index = work / "idx"
    shutil.rmtree(index, ignore_errors=True)
    t = time.perf_counter()
    with Engine(index, create=True) as engine:
        engine.warm() if hasattr(engine, "warm") else None
        start = time.perf_counter()
        report = engine.ingest([path])
        ingest_s = time.perf_counter() - start
    total_s = time.perf_counter() - t
    rate = len(texts) / ingest_s
    rows.append(
        ("clew ingest (load, chunk, spaCy, embed, write)", rate, f"{rate / base:.3f}x", "–", "–")
    )
    notes.append(
        f"clew ingest: {report.chunks_written} chunks from {len(texts)} pages in {ingest_s:.1f} s "
        f"({total_s:.1f} s with opening the engine and loading the models)"
    )
    body = table(
        ["PDF text layer", "pages/s", "vs pypdfium2", "token F1", "damaged files read"], rows
    )
    return body, notes


def recovered(fn: Callable[[Path], list[str]], path: Path, work: Path) -> str:
    """Of damaged copies of the PDF (cut at 50/75/90/99% of its bytes; 64 bytes overwritten at
    10 places), how many the library reads text from at all (rather than raising)."""
    data = path.read_bytes()
    copies = [data[: int(len(data) * f)] for f in (0.5, 0.75, 0.9, 0.99)]
    for seed in range(4):
        buf = bytearray(data)
        for k in range(10):
            at = (seed * 7919 + k * 104729) % (len(buf) - 64)
            buf[at : at + 64] = bytes((at + i) % 251 for i in range(64))
        copies.append(bytes(buf))
    ok = 0
    for i, blob in enumerate(copies):
        f = work / f"damaged-{i}.pdf"
        f.write_bytes(blob)
        try:
            pages = fn(f)
        except Exception:
            continue
        ok += any(p.strip() for p in pages)
    return f"{ok}/{len(copies)}"


BOILER = (
    "<header><a href='/'>Acme Research</a> <a href='/login'>Sign in</a></header>"
    "<nav><ul><li><a href='/'>Home</a></li><li><a href='/docs'>Docs</a></li>"
    "<li><a href='/blog'>Blog</a></li><li><a href='/pricing'>Pricing</a></li></ul></nav>"
)
SIDE = "<aside><h3>Related</h3><p>Subscribe to our newsletter for weekly updates.</p></aside>"
FOOT = "<footer><p>Copyright 2026 Acme Research. Privacy policy. Terms of service.</p></footer>"
TABLE = (
    "<table><tr><th>Region</th><th>State</th></tr><tr><td>Porto</td><td>Degraded</td></tr>"
    "<tr><td>Lisbon</td><td>Operational</td></tr></table>"
)


def make_page(title: str, text: str) -> str:
    paras = "".join(f"<p>{p}</p>" for p in re.split(r"(?<=\.) (?=[A-Z])", text) if p)
    return (
        f"<html><head><title>{title}</title><script>var a = 1;</script></head><body>"
        f"{BOILER}<main><article><h1>{title}</h1>{paras}{TABLE}</article></main>{SIDE}{FOOT}"
        "</body></html>"
    )


def bench_html(pages: list[tuple[str, str]], runs: int) -> tuple[str, list[str]]:
    from clew.ingest.webpage import parse_page

    htmls = [make_page(t, x) for t, x in pages]
    boiler_words = set(words(BOILER + SIDE + FOOT)) - set(words(" ".join(x for _, x in pages)))

    def clew_fn() -> list[str]:
        return [parse_page(h).text for h in htmls]

    def traf_fn() -> list[str]:
        import trafilatura

        return [
            trafilatura.extract(h, include_tables=True, include_comments=False) or "" for h in htmls
        ]

    rows = []
    base = None
    for name, fn in (
        ("clew parse_page (selectolax 1.0.2, lexbor)", clew_fn),
        ("trafilatura 2.3.1", traf_fn),
    ):
        seconds, out = timed(fn, runs)
        rate = len(htmls) / seconds
        base = base or rate
        recall = sum(
            len(set(words(o)) & set(words(x))) / max(1, len(set(words(x))))
            for o, (_, x) in zip(out, pages, strict=True)
        ) / len(pages)
        leaked = sum(
            len(set(words(o)) & boiler_words) / max(1, len(boiler_words)) for o in out
        ) / len(out)
        joined = sum("portodegraded" in o.lower().replace(" ", "") and "Porto:" not in o and
                     "Region: Porto" not in o for o in out) / len(out)  # fmt: skip
        rows_kept = sum(
            any("Porto" in line and "Degraded" in line for line in o.splitlines()) for o in out
        ) / len(out)
        rows.append(
            (
                name,
                rate,
                f"{rate / base:.2f}x",
                round(recall, 4),
                round(leaked, 4),
                rows_kept,
                joined,
            )
        )
        log(f"{name}: {rate:.0f} pages/s recall {recall:.4f} boilerplate {leaked:.4f}")
    body = table(
        [
            "HTML main content",
            "pages/s",
            "vs clew",
            "article word recall",
            "boilerplate words kept",
            "table rows kept as records",
            "cells run together",
        ],
        rows,
    )
    return body, []


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--pages", type=int, default=200)
    p.add_argument("--html", type=int, default=200)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    docs = read_corpus(scifact_dir(args.data) / "corpus.jsonl", max(args.pages, args.html))
    texts = [latin1(f"{d.title}\n{d.text}")[:3000] for d in docs[: args.pages]]
    with tempfile.TemporaryDirectory(prefix="clew-bench-loaders-") as tmp:
        pdf_body, pdf_notes = bench_pdf(texts, args.runs, Path(tmp))
    html_body, html_notes = bench_html([(d.title, d.text) for d in docs[: args.html]], args.runs)
    body = "\n\n".join(
        [
            f"## PDF: {args.pages} pages, one SciFact abstract each (made with fpdf2)",
            pdf_body,
            f"## HTML: {args.html} pages, a SciFact abstract inside site boilerplate and a table",
            html_body,
        ]
    )
    notes = [
        *pdf_notes,
        *html_notes,
        "token F1: of each page's extracted words against the words drawn on it (lowercased "
        "alphanumeric runs), mean over pages; 1.0 is every word and nothing else",
        "pages/s: median of the runs (whole document, one process) after one untimed warm-up "
        "run (imports, caches)",
        "damaged files read: of 8 damaged copies of the PDF (4 cut short, 4 with bytes "
        "overwritten), how many the library still read any text from instead of raising; clew "
        "skips the others with the reason 'not a readable PDF (corrupt?)'",
        "table rows kept as records: a row's cells (Porto, Degraded) on one line of the output",
        "why these libraries: pypdfium2 reads the text layer fastest at the same token F1 on "
        "these pages (pdfplumber recovers more of a damaged file, at a hundredth of the speed); "
        "selectolax (lexbor) parses HTML5 in C, linear on any input, lets clew drop site "
        "boilerplate by element and write each table row as header: value pairs; trafilatura's "
        "heuristics extract the same words on these pages, about 10x slower",
        "the PDFs here are simple (one column, a core font): they measure speed, not the harder "
        "layouts (columns, ligatures, rotated text) that no offline corpus here holds",
    ]
    write_result(
        "loaders", "Document loaders: PDF and HTML libraries, clew PDF ingest", body, notes=notes
    )


if __name__ == "__main__":
    main()
