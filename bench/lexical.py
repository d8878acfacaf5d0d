"""BM25 at 100k chunks: clew's BM25Index against tantivy (the baseline) and SQLite FTS5.

All three index the same analyzer tokens (the token lists of the synthetic index, read from its
store; see ``bench/_synthetic.py``) and run the same queries (clew's analyzer tokens of SciFact
queries, every token a SHOULD clause / OR term):

- clew: ``BM25Index.add`` + ``search(tokens, allowed_mask, k)``, at clew's defaults
  (k1=0.9, b=0.4) and at k1=1.2, b=0.75 (the parameters tantivy and FTS5 use);
- tantivy: the ``whitespace`` tokenizer over the space-joined tokens, a boolean query of
  ``Query.term_query`` clauses, ordinals from a fast field;
- FTS5: a contentless table, ``unicode61`` with ``-_./:`` as token characters (so analyzer
  tokens stay whole), ``ORDER BY bm25(fts)``.

Reported: build time, query latency p50/p95 (top ``--k``, default 50 like the lexical leg),
and top-10 overlap between the engines, without a filter and with ``tenant = t3`` (~10% of
the chunks: clew's mask, tantivy's MUST clause, FTS5's column filter).

Usage: ``python bench/lexical.py [--chunks 100000] [--queries 200] [--k 50]``
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import _synthetic
from _common import (
    WORK_DIR,
    Background,
    Stats,
    loadavg,
    log,
    parser,
    ratio,
    scifact_dir,
    scifact_index_dir,
    table,
    test_queries,
    wait_quiet,
    write_result,
)
from clew.backends.embedded.lexical import BM25Index
from clew.ingest.analyze import analyze

Search = Callable[[Sequence[str], str | None], list[int]]
BASELINE = "tantivy"


def parse_args() -> argparse.Namespace:
    p = parser(__doc__, quiet_wait=30.0)
    p.add_argument("--chunks", type=int, default=100_000, help="synthetic index size")
    p.add_argument("--queries", type=int, default=200, help="SciFact queries")
    p.add_argument("--k", type=int, default=50, help="hits per query (the lexical leg's depth)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--rebuild-synthetic", action="store_true")
    return p.parse_args()


def read_rows(directory: Path) -> tuple[list[tuple[int, str]], dict[int, str]]:
    """(ordinal, space-joined tokens) per chunk and each chunk's tenant, from the store."""
    conn = sqlite3.connect(f"file:{directory / 'clew.sqlite'}?mode=ro", uri=True)
    try:
        rows = [
            (int(o), str(t))
            for o, t in conn.execute("SELECT ordinal, tokens FROM chunks ORDER BY ordinal")
        ]
        tenants = {
            int(o): str(json.loads(m).get("tenant", ""))
            for o, m in conn.execute(
                "SELECT c.ordinal, d.metadata FROM chunks c JOIN documents d USING (doc_id)"
            )
        }
    finally:
        conn.close()
    return rows, tenants


# -- the three engines --------------------------------------------------------------------------


def build_clew(
    rows: list[tuple[int, str]], tenants: dict[int, str], k: int
) -> tuple[dict[str, Search], float]:
    t = time.perf_counter()
    idx = BM25Index()
    idx.add((o, s.split()) for o, s in rows)
    build_s = time.perf_counter() - t
    size = idx.last_ordinal + 1
    masks: dict[str | None, np.ndarray[Any, np.dtype[np.bool_]]] = {None: np.ones(size, dtype=bool)}
    t3 = np.zeros(size, dtype=bool)
    t3[[o for o, ten in tenants.items() if ten == "t3"]] = True
    masks["t3"] = t3

    def make(k1: float, b: float) -> Search:
        def search(tokens: Sequence[str], tenant: str | None) -> list[int]:
            return [h.ordinal for h in idx.search(tokens, masks[tenant], k, k1=k1, b=b)]

        return search

    return {
        "clew (k1=0.9, b=0.4)": make(0.9, 0.4),
        "clew (k1=1.2, b=0.75)": make(1.2, 0.75),
    }, build_s


def build_tantivy(
    rows: list[tuple[int, str]], tenants: dict[int, str], directory: Path, k: int
) -> tuple[Search, float]:
    import tantivy

    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("body", tokenizer_name="whitespace", index_option="freq")
    builder.add_text_field("tenant", tokenizer_name="raw", index_option="basic")
    builder.add_unsigned_field("ord", fast=True)
    schema = builder.build()
    t = time.perf_counter()
    index = tantivy.Index(schema, path=str(directory), reuse=False)
    writer = index.writer(256 * 1024 * 1024, 2)
    for o, s in rows:
        doc = tantivy.Document()
        doc.add_unsigned("ord", o)
        doc.add_text("body", s)
        doc.add_text("tenant", tenants.get(o, ""))
        writer.add_document(doc)
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    build_s = time.perf_counter() - t
    searcher = index.searcher()
    q_ = tantivy.Query
    should, must = tantivy.Occur.Should, tantivy.Occur.Must

    def search(tokens: Sequence[str], tenant: str | None) -> list[int]:
        clauses = [
            (should, q_.term_query(schema, "body", tok, index_option="freq")) for tok in tokens
        ]
        if tenant is None:
            query = q_.boolean_query(clauses)
        else:
            clauses.append((must, q_.term_query(schema, "tenant", tenant, index_option="basic")))
            query = q_.boolean_query(clauses, minimum_number_should_match=1)
        hits = searcher.search(query, limit=k, count=False).hits
        if not hits:
            return []
        ords = searcher.fast_field_values("ord", [addr for _, addr in hits])
        return [int(o) for o in ords if o is not None]

    return search, build_s


def build_fts5(
    rows: list[tuple[int, str]], tenants: dict[int, str], path: Path, k: int
) -> tuple[Search, float]:
    path.unlink(missing_ok=True)
    conn = sqlite3.connect(path, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=OFF")
    conn.execute("PRAGMA synchronous=OFF")
    t = time.perf_counter()
    conn.execute(
        "CREATE VIRTUAL TABLE fts USING fts5(body, tenant, content='', "
        "tokenize=\"unicode61 remove_diacritics 0 tokenchars '-_./:'\")"
    )
    with conn:
        conn.executemany(
            "INSERT INTO fts(rowid, body, tenant) VALUES (?, ?, ?)",
            ((o, s, tenants.get(o, "")) for o, s in rows),
        )
    conn.execute("INSERT INTO fts(fts) VALUES ('optimize')")
    build_s = time.perf_counter() - t
    sql = "SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY bm25(fts) LIMIT ?"

    def search(tokens: Sequence[str], tenant: str | None) -> list[int]:
        terms = " OR ".join('"' + tok.replace('"', '""') + '"' for tok in tokens)
        match = f"body : ({terms})"
        if tenant is not None:
            match += f' AND tenant : "{tenant}"'
        return [int(r[0]) for r in conn.execute(sql, (match, k))]

    return search, build_s


# -- measuring ----------------------------------------------------------------------------------


def measure(
    engines: dict[str, Search],
    queries: list[list[str]],
    tenant: str | None,
    warmup: int,
    quiet_wait: float,
) -> tuple[dict[str, Stats], dict[str, list[list[int]]], dict[str, float]]:
    stats: dict[str, Stats] = {}
    results: dict[str, list[list[int]]] = {}
    background: dict[str, float] = {}
    for name, search in engines.items():
        for q in queries[:warmup]:
            search(q, tenant)
        wait_quiet(quiet_wait)
        bg = Background()
        lat: list[float] = []
        res: list[list[int]] = []
        for q in queries:
            t = time.perf_counter()
            res.append(search(q, tenant))
            lat.append((time.perf_counter() - t) * 1000.0)
        background[name] = bg.cores()
        stats[name], results[name] = Stats.of(lat), res
        log(
            f"  {name} ({'no filter' if tenant is None else 'tenant ' + tenant}): "
            f"p50 {stats[name].p50:.2f} ms p95 {stats[name].p95:.2f} ms"
        )
    return stats, results, background


def overlap(a: list[list[int]], b: list[list[int]]) -> float:
    vals = [
        len(set(x[:10]) & set(y[:10])) / max(min(len(x[:10]), len(y[:10])), 1)
        for x, y in zip(a, b, strict=True)
        if x or y
    ]
    return float(np.mean(vals)) if vals else float("nan")


def section(
    title: str,
    stats: dict[str, Stats],
    results: dict[str, list[list[int]]],
    background: dict[str, float],
    build: dict[str, float],
) -> str:
    base = stats[BASELINE]
    rows = [
        [
            name,
            build[name],
            st.p50,
            st.p95,
            st.mean,
            ratio(st.p50, base.p50),
            ratio(st.p95, base.p95),
            f"{background[name]:.2f}",
        ]
        for name, st in stats.items()
    ]
    names = list(stats)
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
    ov = [[a, b, f"{overlap(results[a], results[b]):.3f}"] for a, b in pairs]
    return "\n".join(
        [
            f"### {title}",
            "",
            table(
                [
                    "engine",
                    "build s",
                    "p50 ms",
                    "p95 ms",
                    "mean ms",
                    f"p50 vs {BASELINE}",
                    f"p95 vs {BASELINE}",
                    "other procs (cores)",
                ],
                rows,
            ),
            "",
            "Top-10 overlap (|A ∩ B| / 10, mean over queries):",
            "",
            table(["A", "B", "overlap@10"], ov),
            "",
        ]
    )


def main() -> None:
    args = parse_args()
    dataset = scifact_dir(args.data)
    load_start = loadavg()
    spec = _synthetic.SyntheticSpec(chunks=args.chunks)
    docs = _synthetic.corpus_docs(dataset)
    directory, _ = _synthetic.ensure(
        spec, docs, scifact_index_dir(len(docs), len(docs)), rebuild=args.rebuild_synthetic
    )
    rows, tenants = read_rows(directory)
    n_tokens = sum(s.count(" ") + 1 for _, s in rows)
    log(f"{len(rows)} chunks, {n_tokens / len(rows):.0f} tokens per chunk")
    queries = [analyze(q) for _, q in test_queries(dataset)]
    queries = [q for q in queries if q][: args.queries]

    work = WORK_DIR / "lexical"
    work.mkdir(parents=True, exist_ok=True)
    build: dict[str, float] = {}
    log("building clew BM25Index")
    engines, build_s = build_clew(rows, tenants, args.k)
    for name in engines:
        build[name] = build_s
    log(f"  {build_s:.1f} s; building tantivy")
    engines["tantivy"], build["tantivy"] = build_tantivy(rows, tenants, work / "tantivy", args.k)
    log(f"  {build['tantivy']:.1f} s; building FTS5")
    engines["SQLite FTS5"], build["SQLite FTS5"] = build_fts5(
        rows, tenants, work / "fts5.sqlite", args.k
    )
    log(f"  {build['SQLite FTS5']:.1f} s")

    sections = []
    for tenant, title in ((None, "No filter"), ("t3", "Filter tenant = t3 (~10% of chunks)")):
        stats, results, bg = measure(engines, queries, tenant, args.warmup, args.quiet_wait)
        sections.append(section(title, stats, results, bg, build))
        log("\n" + sections[-1])
    q_len = np.mean([len(q) for q in queries])
    body = "\n".join(
        [
            f"{len(rows):,} synthetic chunks (SciFact sentences, "
            f"{n_tokens / len(rows):.0f} analyzer tokens per chunk), {len(queries)} SciFact "
            f"queries ({q_len:.1f} tokens each, OR-ed), top {args.k} per query, {args.warmup} "
            "warm-up queries per engine. Baseline: tantivy. clew at k1=1.2, b=0.75 uses the "
            "same BM25 parameters as tantivy and FTS5, so its overlap with them measures "
            "agreement of the implementations; FTS5's idf (ln((N−n+0.5)/(n+0.5)), floored) "
            "differs from the Lucene-style idf clew and tantivy use (ln(1+(N−n+0.5)/(n+0.5))), "
            "and tantivy stores document lengths quantized to one byte.",
            "",
            *sections,
        ]
    )
    write_result(
        "lexical",
        "Lexical leg: clew BM25Index vs tantivy vs SQLite FTS5",
        body,
        notes=[
            f"load average at start: {load_start}",
            "latency is one search call from Python, including building the "
            "query (tantivy: term-query objects; FTS5: the MATCH string) and "
            "mapping hits to ordinals; the clew build time is `BM25Index.add` "
            "from token strings already in memory",
            "tantivy writer: 2 threads, 256 MB heap; FTS5: contentless, 'optimize' after the load",
        ],
    )


if __name__ == "__main__":
    main()
