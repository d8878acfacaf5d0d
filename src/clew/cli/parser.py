"""The ``clew`` command line's arguments: one argparse parser with a subcommand per verb.

A bad argument is a one-line error (``clew search: error: ...``) with exit status 2."""

from __future__ import annotations

import argparse
from typing import NoReturn

from clew.config import ANSWER_MODES, PRESETS, RERANKERS

__all__ = ["Parser", "build_parser", "store_url"]


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``clew search: error: ...``), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def store_url(value: str) -> str:
    if not value.startswith(("postgresql://", "postgres://")):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a store URL; allowed: postgresql://USER@HOST/DB[?schema=NAME]"
        )
    return value


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="clew", description="Explainable hybrid retrieval.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)

    def common(sp: argparse.ArgumentParser, *, store: bool = True) -> None:
        if store:
            where = sp.add_mutually_exclusive_group(required=True)
            where.add_argument("--index", help="index directory (the embedded store)")
            where.add_argument(
                "--store",
                dest="index",
                type=store_url,
                metavar="URL",
                help="PostgreSQL URL instead of a directory: postgresql://USER@HOST/DB"
                "[?schema=NAME] (needs the pgvector and pg_search extensions)",
            )
        else:
            sp.add_argument("--index", required=True, help="index directory")
        sp.add_argument("--config", help="YAML config file (sections of EngineConfig)")

    def eval_index(sp: argparse.ArgumentParser, help: str) -> None:
        """--index DIR or --store URL, optional: the eval cache for the corpus when neither."""
        where = sp.add_mutually_exclusive_group()
        where.add_argument("--index", help=help)
        where.add_argument(
            "--store",
            dest="index",
            type=store_url,
            metavar="URL",
            help="or a PostgreSQL URL (the corpus is ingested into it when it holds another)",
        )

    ing = sub.add_parser("ingest", help="ingest files or directories")
    ing.add_argument("paths", nargs="+", help="files or directories (.md .txt .html .jsonl, ...)")
    common(ing)
    ing.add_argument("--json", action="store_true", help="print the report as JSON")
    ing.add_argument("--no-progress", action="store_true")
    ing.add_argument(
        "--prune",
        action="store_true",
        help="mirror the given directories: remove documents whose file is gone",
    )
    ing.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help="load, chunk, extract and embed on a Ray cluster (ADDRESS; default: a local one)",
    )
    ing.add_argument("--workers", type=int, default=2, help="with --ray: worker actors")
    ing.add_argument(
        "--follow-symlinks",
        action="store_true",
        help="follow symlinks that lead out of a directory (default: skip them with a warning)",
    )

    se = sub.add_parser("search", help="search the index")
    se.add_argument("query")
    common(se)
    se.add_argument("--k", type=int, default=None, help="number of hits (default 10)")
    se.add_argument("--explain", action="store_true", help="print contributions per hit")

    def stages(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--filter", help='access filter as JSON, e.g. {"audience": "public"}')
        sp.add_argument("--preset", choices=sorted(PRESETS), default=None)
        sp.add_argument("--json", action="store_true", help="print one JSON object")
        sp.add_argument(
            "--expand",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="graph expansion from the top fused hits (default: as configured)",
        )
        sp.add_argument("--rerank", choices=RERANKERS, help="reranker (default: as configured)")
        sp.add_argument(
            "--rerank-model", help="cross-encoder directory, feature weights file, or LLM model"
        )

    stages(se)

    ask = sub.add_parser("ask", help="answer a question with citations (or abstain)")
    ask.add_argument("question")
    common(ask)
    ask.add_argument(
        "--k", type=int, default=None, help="hits considered for the context (default 20)"
    )
    ask.add_argument("--mode", choices=ANSWER_MODES, help="extractive (default) or generative")
    stages(ask)

    rp = sub.add_parser("replay", help="re-run a traced search or ask and report differences")
    rp.add_argument("trace_id", nargs="?", help="trace id (default: list the newest traces)")
    common(rp)
    rp.add_argument("--json", action="store_true")

    tr = sub.add_parser(
        "train-reranker", help="train a reranker on a BEIR train split (hard negatives mined)"
    )
    tr.add_argument("--dataset", required=True, help="BEIR-layout directory")
    tr.add_argument("--split", default="train")
    tr.add_argument("--out", required=True, help="output directory")
    tr.add_argument("--kind", choices=("cross-encoder", "features"), default="cross-encoder")
    tr.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="DIR[:SPLIT]",
        help="features: more train sets (split default: --split), each weighing the same",
    )
    eval_index(tr, "index directory (default: the eval cache for the corpus)")
    tr.add_argument("--limit", type=int, default=None, help="use the first N queries only")
    # defaults: the recipe measured in bench/results/quality.md (about 22 min on 2 cores)
    tr.add_argument("--epochs", type=int, default=2)
    tr.add_argument("--max-length", type=int, default=128, help="tokens per (query, passage)")
    tr.add_argument("--group-size", type=int, default=4, help="1 positive + N-1 negatives")
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--lr", type=float, default=1e-4, help="peak learning rate (default 1e-4)")
    tr.add_argument("--config", help="YAML config file (sections of EngineConfig)")
    tr.add_argument("--no-progress", action="store_true")

    tro = sub.add_parser(
        "train-router", help="learn the query-adaptive leg weights from BEIR train splits"
    )
    tro.add_argument(
        "--dataset",
        action="append",
        required=True,
        metavar="DIR[:SPLIT]",
        help="a BEIR-layout directory and its split (default: train); repeat for each",
    )
    tro.add_argument("--out", help="router model JSON file to write")
    tro.add_argument(
        "--examples",
        metavar="FILE",
        help="collected examples: read from FILE when it exists (no retrieval), else written",
    )
    tro.add_argument(
        "--lodo", action="store_true", help="also refit without each dataset and score it"
    )
    tro.add_argument(
        "--indexes",
        metavar="DIR",
        help="index folder per dataset: DIR/<name> (default: the eval cache)",
    )
    tro.add_argument("--l2", type=float, default=0.1, help="L2 penalty (default 0.1)")
    tro.add_argument("--config", help="YAML config file (sections of EngineConfig)")
    tro.add_argument("--no-progress", action="store_true")

    ca = sub.add_parser("calibrate", help="fit the abstention threshold on a BEIR split")
    ca.add_argument("--dataset", help="BEIR-layout directory (or --self)")
    ca.add_argument("--self", dest="self_", action="store_true", help="from the index's own text")
    ca.add_argument("--split", default="train")
    ca.add_argument(
        "--scope",
        help='with --self: calibrate for callers of this scope (filter JSON, e.g. {"tenant": '
        '"a"}), measured on what the scope holds; its answers use it, other scopes do not',
    )
    ca.add_argument("--out", help="calibration JSON file to write")
    ca.add_argument(
        "--check",
        metavar="FILE",
        help='instead of fitting: measure how this calibration file ("" = shipped) separates '
        "the split's queries from their evidence-removed versions",
    )
    eval_index(ca, "index directory (default: the eval cache for the corpus)")
    ca.add_argument("--limit", type=int, default=None, help="sample N queries")
    ca.add_argument("--config", help="YAML config file (e.g. another embedder.model)")
    ca.add_argument(
        "--unrelated",
        help="a BEIR dataset whose queries this corpus cannot answer (extra negatives)",
    )
    ca.add_argument("--save-evidence", help="also write the evidence features to this JSON file")
    ca.add_argument(
        "--answer-rate",
        type=float,
        default=0.9,
        help="threshold answers this share of answerable queries (default 0.9; 0 = balanced)",
    )
    ca.add_argument("--no-progress", action="store_true")

    rm = sub.add_parser("remember", help="store a memory (prints its id)")
    rm.add_argument("text")
    common(rm)
    rm.add_argument("--session", help="session or conversation id")
    rm.add_argument("--time", help="when it happened, ISO 8601 (default: now)")
    rm.add_argument("--meta", help='extra metadata as a JSON object, e.g. {"topic": "db"}')
    rm.add_argument(
        "--relation",
        action="append",
        default=[],
        metavar="TYPE=TARGET",
        help="typed edge to a memory/document id or concept:NAME, e.g. caused_by=mem-1a2b "
        "(repeatable)",
    )
    rm.add_argument("--json", action="store_true", help='print {"id": ...}')

    rc = sub.add_parser("recall", help="search memories (time window, session, as of)")
    rc.add_argument("query")
    common(rc)
    rc.add_argument("--session")
    rc.add_argument("--since", help="created at or after (ISO 8601)")
    rc.add_argument("--until", help="created before (ISO 8601)")
    rc.add_argument("--as-of", help="only what was known then; recency measured from it")
    rc.add_argument("--k", type=int, default=None)
    rc.add_argument("--filter", help="extra metadata filter as JSON")
    rc.add_argument("--json", action="store_true", help="print one JSON object (as search)")
    rc.add_argument("--explain", action="store_true", help="print contributions per hit")

    fg = sub.add_parser("forget", help="delete a memory from every leg")
    fg.add_argument("memory_id")
    common(fg)

    co = sub.add_parser("concepts", help="concepts and the surface forms merged into each")
    common(co)
    co.add_argument("--merged", action="store_true", help="only concepts written several ways")
    co.add_argument("--json", action="store_true")

    dc = sub.add_parser("docs", help="the index's documents")
    dcs = dc.add_subparsers(dest="docs_command", required=True, parser_class=Parser)
    dl = dcs.add_parser("list", help="every document: id, title, chunks, source")
    common(dl)
    dl.add_argument("--json", action="store_true", help="print a JSON list (with metadata)")

    de = sub.add_parser("delete", help="remove documents from every leg")
    de.add_argument("doc_ids", nargs="+")
    common(de)

    st = sub.add_parser("stats", help="index counts and versions")
    common(st)

    mg = sub.add_parser(
        "migrate", help="copy an index between stores (directory <-> PostgreSQL URL)"
    )
    mg.add_argument("--from", dest="source", required=True, help="index directory or URL")
    mg.add_argument("--to", dest="target", required=True, help="index directory or URL")
    mg.add_argument("--batch", type=int, default=500, help="documents per write (default 500)")
    mg.add_argument("--json", action="store_true", help="print the report as JSON")

    ev = sub.add_parser("eval", help="evaluate on a BEIR-layout dataset")
    ev.add_argument(
        "--dataset",
        required=True,
        help="directory with corpus.jsonl, queries.jsonl, qrels/<split>.tsv",
    )
    eval_index(ev, "index directory (default: a cache keyed by corpus and ingest settings)")
    ev.add_argument(
        "--config",
        help="YAML config file (sections of EngineConfig); alone, it is evaluated as written "
        "(row 'config'); with --preset or --ablate, each row keeps its own fusion, router, "
        "expand and rerank and takes the other sections from the file",
    )
    ev.add_argument(
        "--preset",
        action="append",
        choices=[*sorted(PRESETS), "+expand", "+rerank-blend", "+rerank-features", "+rerank-ce"],
        default=[],
        help="preset or extra row to evaluate (repeatable; default: default)",
    )
    ev.add_argument(
        "--ablate",
        action="store_true",
        help="lexical, dense, graph alone, hybrid RRF, hybrid + graph, +expand, +rerank-*",
    )
    ev.add_argument("--rerank-model", help="cross-encoder directory for the +rerank-ce row")
    ev.add_argument(
        "--feature-model",
        help="feature weights for the +rerank-features row (default: the ones clew ships)",
    )
    ev.add_argument("--split", default="test")
    ev.add_argument("--k", type=int, default=10, help="cut-off for context tokens (default 10)")
    ev.add_argument("--limit", type=int, default=None, help="evaluate the first N queries only")
    ev.add_argument("--run-out", help="write a TREC run file (one per config when several)")
    ev.add_argument("--json", action="store_true", help="print the full result object")
    ev.add_argument("--gate", help="YAML file of per-dataset, per-slice thresholds")
    ev.add_argument(
        "--save",
        metavar="DIR",
        help="also write the result to DIR/<dataset>.json (what `clew serve` shows at /eval)",
    )
    ev.add_argument("--answers", action="store_true", help="score answers, not rankings")
    ev.add_argument("--unrelated", help="with --answers: a dataset whose questions should abstain")
    ev.add_argument("--hidden", action="store_true", help="with --answers: ask again, gold hidden")
    ev.add_argument("--no-progress", action="store_true")

    sv = sub.add_parser("serve", help="HTTP API (FastAPI on uvicorn)")
    common(sv)
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=int, default=8765)
    sv.add_argument("--keys", help="API keys file (`clew keys add` writes it)")
    sv.add_argument(
        "--no-auth", action="store_true", help="no keys, everyone is admin (loopback hosts only)"
    )
    sv.add_argument("--create", action="store_true", help="create the index if it is missing")
    sv.add_argument("--eval-results", help="folder of `clew eval --save` results (for /eval)")
    sv.add_argument("--gates", help="gates YAML for GET /eval/gate")
    sv.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))

    ui = sub.add_parser("ui", help="web UI (Streamlit) over a running `clew serve`")
    ui.add_argument("--api", help="API base URL (default: start one for --index on loopback)")
    ui.add_argument("--index", help="index directory to serve when no --api is given")
    ui.add_argument(
        "--store", dest="index", type=store_url, metavar="URL", help="or a PostgreSQL URL"
    )
    ui.add_argument("--port", type=int, default=8501)
    ui.add_argument("--host", default="127.0.0.1")
    ui.add_argument("--eval-results", help="with --index: folder of `clew eval --save` results")
    ui.add_argument("--gates", help="with --index: gates YAML for the eval page")

    mc = sub.add_parser(
        "mcp", help="MCP server on stdio (tools: search, ask, remember, forget)", add_help=False
    )
    mc.add_argument("mcp_args", nargs="*", help="see `clew mcp --help`")

    ky = sub.add_parser("keys", help="manage API keys (stored hashed)")
    kys = ky.add_subparsers(dest="keys_command", required=True, parser_class=Parser)
    ka = kys.add_parser("add", help="create a key; it is printed once and stored only as a hash")
    ka.add_argument("--file", required=True, help="keys file (created if missing)")
    ka.add_argument("--name", required=True, help="who holds the key (shown in logs and traces)")
    ka.add_argument(
        "--scope", help='access filter JSON this key is limited to, e.g. {"tenant": "a"}'
    )
    ka.add_argument("--admin", action="store_true", help="may write documents and read all traces")
    ka.add_argument(
        "--metrics", action="store_true", help="may read /metrics and the counts of /health"
    )
    kl = kys.add_parser("list", help="names, scopes and admin flags (never the keys)")
    kl.add_argument("--file", required=True)
    kr = kys.add_parser("revoke", help="remove a key: it no longer authenticates")
    kr.add_argument("name", help="the key's name (as `clew keys list` shows it)")
    kr.add_argument("--file", required=True, help="keys file")
    return p
