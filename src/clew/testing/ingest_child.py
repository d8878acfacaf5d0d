"""A writer process for crash and concurrency tests (FAKE encoder: never for real retrieval).

``python -m clew.testing.ingest_child INDEX CORPUS.jsonl [--group N] [--hold-at POINT]``
ingests the documents of a JSONL file (one ``{"id", "title", "text", "metadata"}`` object a
line) into ``INDEX`` in groups of ``N`` documents, each group one :meth:`clew.Engine.ingest`
call (one store commit, then a refresh that saves the derived index files). It uses the
deterministic FAKE hash encoder and identifier-only concepts, so it starts in about a second.

It prints one line per step on stdout, flushed, for the parent to time its kill:
``ready`` once the engine is open, ``group I RELEASE`` after each group, ``done RELEASE`` at
the end. ``--hold-at commit`` stops right after the first store commit, before the refresh
saves any derived file; ``--hold-at publish`` stops inside the first derived-index save, after
its data files are written and before its manifest is replaced. Either prints
``holding POINT`` and sleeps until it is killed. A write that is rejected (another writer holds
the index) prints ``error MESSAGE`` and exits with status 3.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clew.config import ConceptConfig
from clew.engine import Engine
from clew.errors import StoreError
from clew.ingest.concepts import ConceptExtractor
from clew.testing.fakes import FakeHashEncoder
from clew.types import Document

HOLD_POINTS = ("commit", "publish")


def read_corpus(path: Path) -> list[Document]:
    docs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            docs.append(
                Document(
                    row["id"],
                    row.get("title", row["id"]),
                    row["text"],
                    f"{path.name}:{row['id']}",
                    metadata=row.get("metadata", {}),
                )
            )
    return docs


def open_engine(index: str | Path, *, write_timeout: float = 5.0) -> Engine:
    """The engine every crash/concurrency test uses, in the child and in the parent."""
    return Engine(
        index,
        create=True,
        encoder=FakeHashEncoder(),
        extractor=ConceptExtractor(ConceptConfig(spacy=False)),
        write_timeout=write_timeout,
    )


def _hold(point: str) -> None:
    print(f"holding {point}", flush=True)
    while True:
        time.sleep(60)


def _install_hold(engine: Engine, point: str) -> None:
    if point == "commit":
        write = engine.store.write

        def write_then_hold(records: Sequence[Any]) -> int:
            write(records)
            _hold("commit")
            raise AssertionError("unreachable")

        setattr(engine.store, "write", write_then_hold)  # noqa: B010 (instance override)
        return
    from clew.backends.embedded import files

    publish = files.publish

    def hold_before_publish(directory: Path, name: str, stamp: str, meta: dict[str, Any]) -> None:
        _hold("publish")
        publish(directory, name, stamp, meta)

    # every derived-index save publishes through files.saving, which looks publish up here
    setattr(files, "publish", hold_before_publish)  # noqa: B010


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clew.testing.ingest_child")
    parser.add_argument("index")
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--group", type=int, default=20, help="documents per ingest call")
    parser.add_argument("--hold-at", choices=HOLD_POINTS, default=None)
    parser.add_argument("--wait", type=float, default=5.0, help="write lock wait, seconds")
    args = parser.parse_args(argv)
    docs = read_corpus(args.corpus)
    engine = open_engine(args.index, write_timeout=args.wait)
    try:
        if args.hold_at:
            _install_hold(engine, args.hold_at)
        print("ready", flush=True)
        for i in range(0, len(docs), max(args.group, 1)):
            try:
                report = engine.ingest(docs[i : i + args.group])
            except StoreError as exc:
                print(f"error {exc}", flush=True)
                return 3
            print(f"group {i // args.group} {report.release}", flush=True)
        print(f"done {engine.store.release()}", flush=True)
    finally:
        engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
