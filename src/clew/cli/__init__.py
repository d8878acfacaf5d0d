"""Command line: ``clew ingest | search | ask | docs | delete | stats | serve | ...``.

Errors print one line (``clew: error: ...``) naming the problem and exit with status 2;
nothing is half-written. Output cut short by its reader (``clew search ... | head -1``) ends
quietly with status 141, as a process stopped by SIGPIPE does; Ctrl-C ends with 130.

The commands live beside this module: :mod:`clew.cli.parser` (the arguments),
:mod:`clew.cli.index` (ingest, docs, migrate), :mod:`clew.cli.evaluation` (eval, train,
calibrate), :mod:`clew.cli.render` (what search and ask print) and :mod:`clew.serve.cli`
(serve, ui, mcp, keys).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import sys
from collections.abc import Sequence
from typing import Any

from clew.cli.parser import build_parser
from clew.cli.render import render, render_answer
from clew.config import EngineConfig, preset_config
from clew.errors import ClewError, ConfigError

__all__ = ["BROKEN_PIPE", "main", "render", "render_answer"]

BROKEN_PIPE = 141
"""Exit status when the reader of stdout went away (128 + SIGPIPE, what a shell reports)."""


EXTRAS = {
    "fastapi": "serve",
    "starlette": "serve",
    "uvicorn": "serve",
    "mcp": "serve",
    "anyio": "serve",
    "pydantic": "serve",
    "swagger_ui_bundle": "serve",
    "streamlit": "ui",
    "psycopg": "postgres",
    "psycopg_pool": "postgres",
    "ray": "ray",
    "torch": "train",
    "sentence_transformers": "train",
    "transformers": "train",
}
"""The optional dependencies a command may need, and the extra that installs each."""


def _missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The one-line error for a command whose optional dependency is not installed."""
    top = (exc.name or "").split(".")[0]
    extra = EXTRAS.get(top)
    if extra is None:
        return None
    return f"this command needs {top}, which is not installed: pip install 'clew[{extra}]'"


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] == ["mcp"]:  # its own parser: `clew mcp --help` lists the MCP server's options
            try:
                from clew.serve.mcp import main as mcp_main
            except ImportError as exc:
                cause = exc if isinstance(exc, ModuleNotFoundError) else exc.__cause__
                message = _missing_extra(cause) if isinstance(cause, ModuleNotFoundError) else None
                print(f"clew: error: {message or exc}", file=sys.stderr)
                return 2
            return mcp_main(argv[1:])
        args = build_parser().parse_args(argv)
        try:
            code = _run(args)
        except ClewError as exc:
            print(f"clew: error: {exc}", file=sys.stderr)
            code = 2
        except ModuleNotFoundError as exc:
            message = _missing_extra(exc)
            if message is None:
                raise
            print(f"clew: error: {message}", file=sys.stderr)
            code = 2
        except KeyboardInterrupt:
            print("clew: interrupted", file=sys.stderr)
            code = 130
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return code
    except BrokenPipeError:
        if not _stdout_gone():
            raise  # another pipe (a child process, a socket): a real error
        _silence_stdout()
        return BROKEN_PIPE


def _stdout_gone() -> bool:
    """Whether stdout is a pipe (or socket) whose reader has gone away."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no real stdout (captured): not it
        return False


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that flushing what is still buffered at exit cannot fail
    again (Python would print "Exception ignored ... BrokenPipeError")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real stdout (captured, or closed)
        pass


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


def _run(args: argparse.Namespace) -> int:
    from clew.engine import Engine

    if args.command in ("eval", "train-reranker", "calibrate"):
        from clew.cli.evaluation import eval_command, train_command

        return eval_command(args) if args.command == "eval" else train_command(args)
    if args.command in ("serve", "ui", "mcp", "keys"):
        from clew.serve.cli import run_service_command

        return run_service_command(args)
    if args.command == "train-router":
        from clew.train.cli import train_router

        return train_router(args)
    if args.command == "migrate":
        from clew.cli.index import migrate_command

        return migrate_command(args)
    config = _config(args)
    if args.command in ("ingest", "docs"):
        from clew.cli.index import docs_command, ingest_command

        return (
            ingest_command(args, config) if args.command == "ingest" else docs_command(args, config)
        )
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
