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

from clew.config import PRESETS, EngineConfig, preset_config
from clew.errors import ClewError, ConfigError
from clew.types import SearchResult


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``clew search: error: ...``), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="clew", description="Explainable hybrid retrieval.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--index", required=True, help="index directory")
        sp.add_argument("--config", help="YAML config file (sections of EngineConfig)")

    ing = sub.add_parser("ingest", help="ingest files or directories")
    ing.add_argument("paths", nargs="+", help=".md .txt .html .jsonl files or directories")
    common(ing)
    ing.add_argument("--json", action="store_true", help="print the report as JSON")
    ing.add_argument("--no-progress", action="store_true")

    se = sub.add_parser("search", help="search the index")
    se.add_argument("query")
    common(se)
    se.add_argument("--k", type=int, default=None, help="number of hits (default 10)")
    se.add_argument("--filter", help='access filter as JSON, e.g. {"audience": "public"}')
    se.add_argument("--preset", choices=sorted(PRESETS), default=None)
    se.add_argument("--json", action="store_true", help="print one JSON object")
    se.add_argument("--explain", action="store_true", help="print contributions per hit")

    de = sub.add_parser("delete", help="remove documents from every leg")
    de.add_argument("doc_ids", nargs="+")
    common(de)

    st = sub.add_parser("stats", help="index counts and versions")
    common(st)

    ev = sub.add_parser("eval", help="evaluate on a BEIR-layout dataset")
    ev.add_argument(
        "--dataset",
        required=True,
        help="directory with corpus.jsonl, queries.jsonl, qrels/<split>.tsv",
    )
    ev.add_argument(
        "--index", help="index directory (default: a cache keyed by corpus and ingest settings)"
    )
    ev.add_argument("--config", help="YAML config file (sections of EngineConfig)")
    ev.add_argument(
        "--preset",
        action="append",
        choices=sorted(PRESETS),
        default=[],
        help="preset to evaluate (repeatable; default: default)",
    )
    ev.add_argument(
        "--ablate",
        action="store_true",
        help="lexical, dense, graph alone, hybrid RRF, hybrid + graph",
    )
    ev.add_argument("--split", default="test")
    ev.add_argument("--k", type=int, default=10, help="cut-off for context tokens (default 10)")
    ev.add_argument("--limit", type=int, default=None, help="evaluate the first N queries only")
    ev.add_argument("--run-out", help="write a TREC run file (one per config when several)")
    ev.add_argument("--json", action="store_true", help="print the full result object")
    ev.add_argument("--gate", help="YAML file of per-dataset, per-slice thresholds")
    ev.add_argument("--no-progress", action="store_true")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
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
    if args.config:
        return EngineConfig.from_yaml(args.config)
    return preset_config(preset) if preset else EngineConfig()


def _run(args: argparse.Namespace) -> int:
    from clew.retrieve.engine import Engine

    if args.command == "eval":
        return _eval(args)
    config = _config(args)
    if args.command == "ingest":
        with Engine(args.index, config, create=True) as engine:
            report = engine.ingest(args.paths, progress=not args.no_progress)
        if args.json:
            print(json.dumps(report.to_dict(), indent=2))
        else:
            print(
                f"ingested {len(report.added)} new, {len(report.updated)} updated, "
                f"{len(report.unchanged)} unchanged documents; {report.chunks_written} chunks "
                f"written; release {report.release} ({report.seconds:.1f} s)"
            )
        return 0
    with Engine(args.index, config) as engine:
        if args.command == "search":
            result = engine.search(args.query, k=args.k, filter=args.filter, preset=args.preset)
            if args.json:
                print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
            else:
                print(render(result, explain=args.explain))
        elif args.command == "delete":
            release = engine.delete(args.doc_ids)
            print(f"deleted {len(args.doc_ids)} document(s); release {release}")
        elif args.command == "stats":
            print(json.dumps(engine.stats(), indent=2))
    return 0


def _eval(args: argparse.Namespace) -> int:
    from pathlib import Path

    from clew.eval.datasets import load_dataset
    from clew.eval.gate import check_gates, load_gates
    from clew.eval.runner import configs_for, format_table, run_eval, write_trec_run

    dataset = load_dataset(args.dataset, args.split)
    if args.limit is not None:
        if args.limit < 1:
            raise ClewError(f"--limit {args.limit} is invalid; allowed: >= 1")
        dataset = dataset.subset(args.limit)
    gates = load_gates(args.gate) if args.gate else ()
    base = EngineConfig.from_yaml(args.config) if args.config else None
    configs = configs_for(args.preset, args.ablate, base)
    result = run_eval(dataset, configs, index=args.index, k=args.k, progress=not args.no_progress)
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
    if gates:
        primary = "default" if args.ablate else configs[0][0]
        reasons = check_gates(gates, result.dataset, result.table(), config=primary)
        if reasons:
            print(f"gate FAILED for {result.dataset} ({len(reasons)}):", file=sys.stderr)
            for reason in reasons:
                print(f"  - {reason}", file=sys.stderr)
            return 1
        print(f"gate passed for {result.dataset}", file=sys.stderr)
    return 0


def render(result: SearchResult, *, explain: bool = False) -> str:
    """Readable text for a result; with ``explain`` the provenance table of every hit."""
    legs = ", ".join(f"{leg} {w:g}" for leg, w in result.route.legs.items()) or "none"
    lines = [
        f"query: {result.query}",
        f"route: {legs}   features: {', '.join(result.route.features) or '-'}",
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


def _table(
    contribs: Sequence[Any], graph: Any, duplicates: Sequence[str], metadata: dict[str, Any]
) -> str:
    rows = ["    leg        rank   raw score   fused part"]
    for c in contribs:
        rows.append(f"    {c.leg:<9} {c.rank:>5}   {c.raw_score:>9.4f}   {c.fused_part:>10.6f}")
    if graph is not None:
        via = f" via {', '.join(graph.via)}" if graph.via else ""
        rows.append(f"    graph: {graph.hops} hop(s) from {', '.join(graph.concepts)}{via}")
    if duplicates:
        rows.append(f"    same content as: {', '.join(duplicates)}")
    if metadata:
        rows.append(f"    metadata: {json.dumps(metadata, ensure_ascii=False)}")
    return "\n".join(rows)


if __name__ == "__main__":
    raise SystemExit(main())
