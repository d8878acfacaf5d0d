"""``clew ingest | docs list | migrate``: what goes into an index, what it holds, and copying it
to another store.

``clew ingest`` prints its report (``--json``: :meth:`IngestReport.to_dict`): a summary line,
then the documents it removed (``--prune``) and a table of the files it skipped with the reason
for each. It exits with status 1 when it ingested nothing and removed nothing (every file
skipped, or none found), 2 on an error (nothing written), 0 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from clew.cli.render import columns
from clew.config import EngineConfig
from clew.errors import ConfigError
from clew.types import IngestReport, SkippedFile

__all__ = ["NOTHING_INGESTED", "docs_command", "ingest_command", "migrate_command", "print_ingest"]

NOTHING_INGESTED = 1
"""Exit status of an ingest that loaded no document and removed none (the ingest ran, as a
failed gate does; 2 is an error that stopped it)."""


def ingest_command(args: argparse.Namespace, config: EngineConfig) -> int:
    from clew.engine import Engine
    from clew.ingest.load import load_path
    from clew.ingest.transcript import is_transcript

    limits = config.ingest
    if args.ray:
        if args.follow_symlinks:
            raise ConfigError("--follow-symlinks is not supported with --ray")
        if args.prune:
            raise ConfigError("--prune is not supported with --ray")
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
        code = print_ingest(ray_report, args.json)
        return 1 if ray_report.failed else code
    chats = [p for p in args.paths if is_transcript(p, max_bytes=limits.max_file_bytes)]
    if args.prune and (chats or args.follow_symlinks):
        raise ConfigError(
            "--prune mirrors directories as the engine walks them; it cannot be combined with "
            + ("chat transcripts" if chats else "--follow-symlinks")
        )
    with Engine(args.index, config, create=True) as engine:
        sources: list[Any] = list(args.paths)
        skipped: list[SkippedFile] = []
        if chats or args.follow_symlinks:
            # loaded here: chat turns become memories, and the walk may leave the directory
            from clew.ingest.transcript import load_transcript

            sources = []
            for p in args.paths:
                if p in chats:
                    sources.extend(load_transcript(p, limits=limits))
                    continue
                found: list[SkippedFile] = []
                sources.extend(
                    load_path(
                        p,
                        limits=limits,
                        follow_symlinks=args.follow_symlinks,
                        skipped=found if Path(p).is_dir() else None,
                    )
                )
                skipped.extend(found)
        if args.prune:
            report = engine.ingest(sources, progress=not args.no_progress, prune=True)
        else:
            report = engine.ingest(sources, progress=not args.no_progress)
        if skipped:
            report = dataclasses.replace(report, skipped=(*report.skipped, *skipped))
    return print_ingest(report, args.json)


def print_ingest(report: IngestReport, as_json: bool) -> int:
    """Print an ingest report; the exit status (:data:`NOTHING_INGESTED` when it loaded and
    removed nothing, else 0)."""
    skipped, removed = report.skipped, report.removed
    if as_json:
        print(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
    else:
        print(
            f"ingested {len(report.added)} new, {len(report.updated)} updated, "
            f"{len(report.unchanged)} unchanged documents; {report.chunks_written} chunks "
            f"written; release {report.release} ({report.seconds:.1f} s)"
        )
        if report.calibrated is not None:
            print(
                f"abstention threshold measured on this corpus: {report.calibrated:.4f} "
                "(answer.self_calibrate)"
            )
        if removed:
            print(f"removed {len(removed)} document(s) whose file is gone:")
            for doc_id in removed:
                print(f"  {doc_id}")
        if skipped:
            print(f"skipped {len(skipped)} file(s):")
            table = columns(("path", "reason"), [(s.path, s.reason) for s in skipped])
            print("\n".join(f"  {line}" for line in table.splitlines()))
    if report.ingested == 0 and not removed:
        why = f" ({len(skipped)} file(s) skipped)" if skipped else ""
        print(f"clew: nothing was ingested{why}", file=sys.stderr)
        return NOTHING_INGESTED
    return 0


def docs_command(args: argparse.Namespace, config: EngineConfig) -> int:
    """``clew docs list``: every document of the index (the CLI is unscoped)."""
    from clew.engine import Engine

    with Engine(args.index, config) as engine:
        docs = engine.documents()
    if args.json:
        print(json.dumps([d.to_dict() for d in docs], indent=2, ensure_ascii=False))
        return 0
    if not docs:
        print("no documents")
        return 0
    rows = [(d.doc_id, d.title, d.chunks, d.source) for d in docs]
    print(columns(("id", "title", "chunks", "source"), rows, widest=(60, 50, 0, 60)))
    print(f"{len(docs)} document(s), {sum(d.chunks for d in docs)} chunk(s)")
    return 0


def migrate_command(args: argparse.Namespace) -> int:
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
