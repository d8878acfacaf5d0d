"""Command line: ``clew ingest | search | delete | stats``.

Errors print one line (``clew: error: ...``) naming the problem and exit with status 2;
nothing is half-written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from clew.config import ANSWER_MODES, PRESETS, RERANKERS, EngineConfig, preset_config
from clew.errors import ClewError, ConfigError
from clew.types import SearchResult


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``clew search: error: ...``), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _store_url(value: str) -> str:
    if not value.startswith(("postgresql://", "postgres://")):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a store URL; allowed: postgresql://USER@HOST/DB[?schema=NAME]"
        )
    return value


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="clew", description="Explainable hybrid retrieval.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def common(sp: argparse.ArgumentParser, *, store: bool = True) -> None:
        if store:
            where = sp.add_mutually_exclusive_group(required=True)
            where.add_argument("--index", help="index directory (the embedded store)")
            where.add_argument(
                "--store",
                dest="index",
                type=_store_url,
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
            type=_store_url,
            metavar="URL",
            help="or a PostgreSQL URL (the corpus is ingested into it when it holds another)",
        )

    ing = sub.add_parser("ingest", help="ingest files or directories")
    ing.add_argument("paths", nargs="+", help=".md .txt .html .jsonl files or directories")
    common(ing)
    ing.add_argument("--json", action="store_true", help="print the report as JSON")
    ing.add_argument("--no-progress", action="store_true")
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
    ev.add_argument("--config", help="YAML config file (sections of EngineConfig)")
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
    ev.add_argument("--feature-model", help="feature weights for the +rerank-features row")
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
        "--store", dest="index", type=_store_url, metavar="URL", help="or a PostgreSQL URL"
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
    kys = ky.add_subparsers(dest="keys_command", required=True, parser_class=_Parser)
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
    return p


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["mcp"]:  # its own parser: `clew mcp --help` lists the MCP server's options
        from clew.serve.mcp import main as mcp_main

        return mcp_main(argv[1:])
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except ClewError as exc:
        print(f"clew: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("clew: interrupted", file=sys.stderr)
        return 130


def _config(args: argparse.Namespace) -> EngineConfig:
    preset = getattr(args, "preset", None)
    if preset and args.config:
        raise ConfigError("give either --preset or --config (whose 'preset:' key picks the base)")
    config = (
        EngineConfig.from_yaml(args.config)
        if args.config
        else (preset_config(preset) if preset else EngineConfig())
    )
    overrides: dict[str, dict[str, Any]] = {}
    if getattr(args, "expand", None) is not None:
        overrides["expand"] = {"enabled": args.expand}
    if getattr(args, "rerank", None):
        overrides["rerank"] = {"kind": args.rerank}
    if getattr(args, "rerank_model", None):
        overrides.setdefault("rerank", {})["model"] = args.rerank_model
    if getattr(args, "mode", None):
        overrides["answer"] = {"mode": args.mode}
    return config.with_overrides(**overrides) if overrides else config


def _print_ingest(report: Any, as_json: bool) -> int:
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(
            f"ingested {len(report.added)} new, {len(report.updated)} updated, "
            f"{len(report.unchanged)} unchanged documents; {report.chunks_written} chunks "
            f"written; release {report.release} ({report.seconds:.1f} s)"
        )
    return 0


def _migrate(args: argparse.Namespace) -> int:
    """Copy every document of one store into another, then build the target's indexes."""
    from clew.backends.copy import copy_index
    from clew.engine import Engine

    def open_store(where: str, create: bool) -> Any:
        if where.startswith(("postgresql://", "postgres://")):
            from clew.backends.postgres.store import PostgresStore

            return PostgresStore(where, create=create)
        from clew.backends.embedded.store import SQLiteStore

        return SQLiteStore(where, create=create)

    src = open_store(args.source, create=False)
    try:
        dst = open_store(args.target, create=True)
        try:
            report = copy_index(src, dst, batch=args.batch)
        finally:
            dst.close()
    finally:
        src.close()
    with Engine(args.target) as engine:  # builds the target's derived indexes once
        engine.refresh()
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print(
            f"copied {report['documents']} documents ({report['chunks']} chunks, "
            f"{report['skipped']} already there) in {report['seconds']:.1f} s; "
            f"counts match: {report['matches']}"
        )
    return 0 if report["matches"] else 1


def _run(args: argparse.Namespace) -> int:
    from clew.engine import Engine

    if args.command == "eval":
        return _eval(args)
    if args.command in ("serve", "ui", "mcp", "keys"):
        from clew.serve.cli import run_service_command

        return run_service_command(args)
    if args.command in ("train-reranker", "calibrate"):
        return _train(args)
    if args.command == "train-router":
        from clew.train.cli import train_router

        return train_router(args)
    if args.command == "migrate":
        return _migrate(args)
    config = _config(args)
    if args.command == "ingest":
        from clew.ingest.load import load_path
        from clew.ingest.transcript import is_transcript, load_transcript

        limits = config.ingest
        if args.ray:
            if args.follow_symlinks:
                raise ConfigError("--follow-symlinks is not supported with --ray")
            if any(is_transcript(p) for p in args.paths):
                raise ConfigError("--ray ingests files and directories, not chat transcripts")
            from clew.ingest.distributed import engine_ingest_ray

            with Engine(args.index, config, create=True) as engine:
                ray_report = engine_ingest_ray(
                    engine,
                    args.paths,
                    address=None if args.ray == "local" else args.ray,
                    workers=args.workers,
                    progress=not args.no_progress,
                )
            for failure in ray_report.failed:
                print(f"clew: could not load {failure.source}: {failure.error}", file=sys.stderr)
            code = _print_ingest(ray_report, args.json)
            return 1 if ray_report.failed else code
        with Engine(args.index, config, create=True) as engine:
            sources = [  # chat turns become memories
                d
                for p in args.paths
                for d in (
                    load_transcript(p, limits=limits)
                    if is_transcript(p, max_bytes=limits.max_file_bytes)
                    else load_path(p, limits=limits, follow_symlinks=args.follow_symlinks)
                )
            ]
            report = engine.ingest(sources, progress=not args.no_progress)
        return _print_ingest(report, args.json)
    with Engine(args.index, config, create=args.command == "remember") as engine:
        if args.command == "search":
            result = engine.search(args.query, k=args.k, filter=args.filter, config=config)
            if args.json:
                print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
            else:
                print(render(result, explain=args.explain))
        elif args.command == "ask":
            answer = engine.ask(args.question, k=args.k, filter=args.filter, config=config)
            if args.json:
                print(json.dumps(answer.to_dict(), indent=2, ensure_ascii=False))
            else:
                print(render_answer(answer))
        elif args.command == "replay":
            return _replay(engine, args)
        elif args.command == "remember":
            relations = []
            for item in args.relation:
                rel, sep, target = item.partition("=")
                if not sep:
                    raise ConfigError(f"--relation {item!r} is invalid; allowed: TYPE=TARGET")
                relations.append((rel.strip(), target.strip()))
            meta = None
            if args.meta:
                try:
                    meta = json.loads(args.meta)
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"--meta is not valid JSON: {exc.msg}") from None
            memory_id = engine.remember(
                args.text,
                session=args.session,
                timestamp=args.time,
                metadata=meta,
                relations=relations,
            )
            print(json.dumps({"id": memory_id}) if args.json else memory_id)
        elif args.command == "recall":
            result = engine.recall(
                args.query,
                session=args.session,
                since=args.since,
                until=args.until,
                as_of=args.as_of,
                k=args.k,
                filter=args.filter,
                config=config,
            )
            if args.json:
                print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
            else:
                print(render(result, explain=args.explain))
        elif args.command == "concepts":
            found = engine.concepts(merged_only=args.merged)
            if args.json:
                print(json.dumps(found, indent=2, ensure_ascii=False))
            else:
                for c in found:
                    aliases = " | ".join(c["aliases"])
                    print(f"{c['key']}\t{c['kind']}\t{c['chunks']} chunk(s)\t{aliases}")
        elif args.command == "forget":
            release = engine.forget(args.memory_id)
            print(f"forgot {args.memory_id}; release {release}")
        elif args.command == "delete":
            release = engine.delete(args.doc_ids)
            print(f"deleted {len(args.doc_ids)} document(s); release {release}")
        elif args.command == "stats":
            print(json.dumps(engine.stats(), indent=2))
    return 0


def _replay(engine: Any, args: argparse.Namespace) -> int:
    from clew.trace import TraceStore

    if not args.trace_id:
        store = TraceStore(engine.directory)
        ids = store.latest(20)
        for tid in ids:
            t = store.read(tid)
            print(f"{tid}  {t.get('created_at', '')}  {t.get('kind', '')}  {t.get('query', '')!r}")
        if not ids:
            print("no traces yet")
        return 0
    report = engine.replay(args.trace_id)
    if args.json:
        print(
            json.dumps(
                {
                    "trace_id": report.trace_id,
                    "identical": report.identical,
                    "release_then": report.release_then,
                    "release_now": report.release_now,
                    "differences": list(report.differences),
                },
                indent=2,
            )
        )
    else:
        moved = (
            f" (the index moved from release {report.release_then} to {report.release_now})"
            if report.release_then != report.release_now
            else f" (release {report.release_now})"
        )
        if report.identical:
            print(f"replay of {report.trace_id}: identical{moved}")
        else:
            print(f"replay of {report.trace_id}: {len(report.differences)} difference(s){moved}")
            for d in report.differences:
                print(f"  {d}")
    return 0 if report.identical else 1


def _train(args: argparse.Namespace) -> int:
    if args.command == "calibrate" and (args.self_ or not args.dataset):
        from clew.train.cli import calibrate_self_command

        return calibrate_self_command(args)
    from pathlib import Path

    from clew.eval.datasets import load_dataset
    from clew.eval.runner import open_index
    from clew.train.calibrate import (
        abstention_evidence,
        calibrate,
        check_calibration,
        unrelated_evidence,
    )
    from clew.train.features import mine_examples, train_features

    if getattr(args, "also", None):
        from clew.train.cli import train_features_across

        return train_features_across(args)
    dataset = load_dataset(args.dataset, args.split)
    if args.limit is not None:
        if args.limit < 1:
            raise ClewError(f"--limit {args.limit} is invalid; allowed: >= 1")
        if args.command == "train-reranker":
            dataset = dataset.subset(args.limit)
    progress = not args.no_progress
    unrelated: list[str] = []
    if getattr(args, "unrelated", None):
        others = load_dataset(args.unrelated, "test")
        unrelated = [q.text for q in others.queries][: args.limit or None]
    config = EngineConfig.from_yaml(args.config) if args.config else EngineConfig()
    engine = open_index(dataset, config, args.index, progress=progress)
    try:
        if args.command == "calibrate" and args.check is not None:
            from clew.compose.answer import load_calibration

            cal = load_calibration(args.check)
            pos, neg = abstention_evidence(
                engine, dataset, config, limit=args.limit, progress=progress
            )
            far = unrelated_evidence(engine, unrelated, config, progress=progress)
            checked = check_calibration(cal, pos, neg, far)
            print(json.dumps({"calibration": args.check or "shipped", **checked}, indent=2))
            return 0
        if not args.out:
            raise ConfigError("--out is required (or --check FILE for calibrate)")
        out = Path(args.out)
        if args.command == "calibrate":
            evidence: dict[str, Any] = {}
            cal = calibrate(
                engine,
                dataset,
                config,
                unrelated=unrelated,
                answer_rate=args.answer_rate or None,
                limit=args.limit,
                progress=progress,
                evidence=evidence,
            )
            if args.save_evidence:
                Path(args.save_evidence).write_text(json.dumps(evidence), encoding="utf-8")
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(cal.to_json(), indent=2) + "\n", encoding="utf-8")
            info = cal.info
            print(
                f"calibration written to {out}: threshold {cal.threshold:.4f}, balanced accuracy "
                f"{info.get('balanced_accuracy')} on {info.get('queries')} queries × 2"
            )
            return 0
        if args.kind == "features":
            model = train_features(engine, dataset, config, progress=progress)
            out.mkdir(parents=True, exist_ok=True)
            target = out / "clew-features.json"
            from clew.retrieve.rerank import FORMAT

            target.write_text(json.dumps(model.to_json(FORMAT), indent=2) + "\n", encoding="utf-8")
            weights = ", ".join(
                f"{n} {w:+.3f}" for n, w in zip(model.features, model.weights, strict=True)
            )
            print(f"feature weights written to {target}: {weights}")
            return 0
        from clew.train.cross_encoder import TrainExample, train_cross_encoder

        examples = [
            TrainExample(q, pos, neg)
            for q, pos, neg in mine_examples(engine, dataset, config, progress=progress)
        ]
    finally:
        engine.close()
    report = train_cross_encoder(
        examples,
        out,
        epochs=args.epochs,
        group_size=args.group_size,
        max_length=args.max_length,
        lr=args.lr,
        seed=args.seed,
        progress=progress,
    )
    print(
        f"cross-encoder written to {report.out_dir}: {report.groups} groups from "
        f"{report.examples} queries, {report.steps} steps, final loss {report.final_loss:.4f}, "
        f"{report.seconds:.0f} s"
    )
    return 0


def _eval(args: argparse.Namespace) -> int:
    from pathlib import Path

    from clew.eval.datasets import load_dataset
    from clew.eval.gate import check_gates, load_gates, report_gates
    from clew.eval.runner import configs_for, format_table, run_eval, write_trec_run

    dataset = load_dataset(args.dataset, args.split)
    if args.limit is not None:
        if args.limit < 1:
            raise ClewError(f"--limit {args.limit} is invalid; allowed: >= 1")
        dataset = dataset.subset(args.limit)
    if args.answers:
        from clew.eval.answers import answers_command

        return answers_command(args, dataset)
    gates = load_gates(args.gate) if args.gate else ()
    base = EngineConfig.from_yaml(args.config) if args.config else None
    models = {}
    if args.rerank_model:
        models["cross-encoder"] = args.rerank_model
    if args.feature_model:
        models["features"] = args.feature_model
    missing = [
        name
        for name, key in (("+rerank-ce", "cross-encoder"), ("+rerank-features", "features"))
        if name in args.preset and key not in models
    ]
    if missing:
        raise ConfigError(
            f"{missing[0]} needs its model: give --rerank-model DIR (cross-encoder) or "
            "--feature-model FILE (features)"
        )
    configs = configs_for(args.preset, args.ablate, base, models)
    result = run_eval(
        dataset,
        configs,
        index=args.index,
        k=args.k,
        progress=not args.no_progress,
        oracle=args.ablate,
    )
    if args.run_out:
        out = Path(args.run_out)
        for run in result.runs:
            target = (
                out
                if len(result.runs) == 1
                else out.with_name(f"{out.stem}.{run.name}{out.suffix}")
            )
            write_trec_run(target, run)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(format_table(result))
    if args.save:
        out = Path(args.save) / f"{Path(result.dataset).name}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(result.to_dict(per_query=False), indent=2), encoding="utf-8")
        tmp.replace(out)
        print(f"saved {out}", file=sys.stderr)
    if gates:
        primary = "default" if args.ablate else configs[0][0]
        reasons = check_gates(gates, result.dataset, result.table(), config=primary)
        return report_gates("gate", result.dataset, reasons)
    return 0


def render(result: SearchResult, *, explain: bool = False) -> str:
    """Readable text for a result; with ``explain`` the provenance table of every hit."""
    legs = ", ".join(f"{leg} {w:g}" for leg, w in result.route.legs.items()) or "none"
    lines = [
        f"query: {result.query}",
        f"route: {legs}   features: {', '.join(result.route.features) or '-'}",
        *(
            [f"weighed by {result.route.weighed_by}: {result.route.reason}"]
            if result.route.reason
            else []
        ),
        f"release {result.release}   "
        + "  ".join(f"{k} {v:.1f}ms" for k, v in result.timings_ms.items()),
        "",
    ]
    if not result.hits:
        lines.append("no hits")
    for i, hit in enumerate(result.hits, start=1):
        heading = " > ".join(hit.heading_path)
        lines.append(f"{i:>2}. {hit.score:.5f}  {hit.title}  [{hit.chunk_id}]")
        if heading:
            lines.append(f"    section: {heading}")
        snippet = " ".join(hit.text.split())
        lines.append(f"    {snippet[:200]}{'…' if len(snippet) > 200 else ''}")
        if explain:
            lines.append(_table(hit.contributions, hit.graph, hit.duplicates, hit.metadata))
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def render_answer(answer: Any) -> str:
    """Readable text for an answer: the answer, its citations and why each was chosen."""
    lines = [answer.answer, ""]
    if answer.fallback:
        lines += [f"(generative answer failed, extractive shown: {answer.fallback})", ""]
    lines.append(
        f"confidence {answer.confidence:.2f} (abstains below {answer.threshold:.2f})"
        + ("  → abstained" if answer.abstained else "")
        + (" (a code it names is in no source)" if answer.evidence.get("absent_codes") else "")
    )
    if answer.abstained and answer.nearest:
        lines.append("nearest misses:")
        for h in answer.nearest:
            lines.append(f"  - {h.title} [{h.chunk_id}] score {h.score:.4f}")
    for c in answer.citations:
        lines.append(f"[{c.n}] {c.title} — {c.url}  ({c.chunk_id})")
        for step in c.why.get("trail", []):
            lines.append(f"      why: {_trail_text(step)}")
        legs = ", ".join(
            f"{x['leg']} #{x['rank']}" for x in c.why.get("legs", []) if x["leg"] != "rerank"
        )
        lines.append(f"      found by: {legs}")
        rr = c.why.get("rerank")
        if rr:
            lines.append(f"      reranker {rr['reranker']}: rank {rr['before']} → {rr['after']}")
    dropped: dict[str, int] = {}
    for d in answer.context.dropped:
        dropped[d.reason] = dropped.get(d.reason, 0) + 1
    lines.append(
        f"context: {len(answer.context.kept)} chunks, {answer.context.tokens} tokens; dropped "
        + (", ".join(f"{n} {r}" for r, n in sorted(dropped.items())) or "none")
    )
    if answer.trace_id:
        lines.append(f"trace: {answer.trace_id}  (clew replay {answer.trace_id} --index ...)")
    return "\n".join(lines) + "\n"


def _trail_text(step: dict[str, Any]) -> str:
    end = f"chunk {step['chunk']} → document {step['document']}"
    kind = step.get("from")
    if kind == "query terms":
        return f"query terms {', '.join(step['terms'])} → {end}"
    if kind == "meaning":
        return f"embedding similarity (cosine {step['cosine']}) → {end}"
    if kind == "linked concepts":
        edges = " → ".join(
            e["edge"] + (f" ({', '.join(e['via'])})" if e.get("via") else "") for e in step["edges"]
        )
        return f"concepts {', '.join(step['concepts'])} → {edges} → {end}"
    if kind in ("graph expansion", "graph walk"):
        edges = " → ".join(
            f"{e['edge']}{' ' + repr(e['via']) if e['via'] else ''} → {e['to']}"
            for e in step["edges"]
        )
        seed = step["seed"]
        if kind == "graph walk":
            seed = f"PageRank from {step.get('seed_kind', 'passage')} {seed or '(none in reach)'}"
        else:
            seed = f"seed {seed}"
        return f"{seed} → {edges} → document {step['document']}" if edges else f"{seed} → {end}"
    return json.dumps(step)


def _table(
    contribs: Sequence[Any], graph: Any, duplicates: Sequence[str], metadata: dict[str, Any]
) -> str:
    rows = ["    leg        rank   raw score   fused part"]
    for c in contribs:
        rows.append(f"    {c.leg:<9} {c.rank:>5}   {c.raw_score:>9.4f}   {c.fused_part:>10.6f}")
    if graph is not None and (graph.seed or graph.steps):
        path = "".join(f" -{s.edge}{f' {s.via}' if s.via else ''}-> {s.to}" for s in graph.steps)
        rows.append(f"    graph: PageRank from {graph.seed or '(no seed in reach)'}{path}")
    elif graph is not None:
        via = f" via {', '.join(graph.via)}" if graph.via else ""
        rows.append(f"    graph: {graph.hops} hop(s) from {', '.join(graph.concepts)}{via}")
    if duplicates:
        rows.append(f"    same content as: {', '.join(duplicates)}")
    if metadata:
        rows.append(f"    metadata: {json.dumps(metadata, ensure_ascii=False)}")
    return "\n".join(rows)


if __name__ == "__main__":
    raise SystemExit(main())
