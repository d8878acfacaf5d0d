"""Answers over agent memories: eval/dev/memory stored with ``Engine.remember`` (each turn a
memory of its session, said at noon UTC of its date), asked as an agent would ask them.

    python bench/memory_answers.py

``bench/answers.py`` asks the same questions of the set ingested as documents, which have no
day of their own. Here each turn is a memory, so the answer may use the day it was said: a
time question fits a memory's day (``clew.compose.dated.MEMORY_TIME_FIT``) and a question
about the present favours newer memories (``clew.compose.dated.CURRENT_WEIGHT``). The baseline
row, run side by side in the same process on the same index, sets both to 0 (the days are
still shown before memory sentences, which moves no figure but the word count). Writes
``bench/results/memory_answers.md``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from _common import REPO_DIR, WORK_DIR, log, parser, table, write_result
from clew import Engine
from clew.compose import dated
from clew.eval.answers import run_answers
from clew.eval.datasets import load_dataset

COLUMNS = ("in_answer", "in_cited", "answered", "words_median", "grounded")


@contextmanager
def without_days() -> Iterator[None]:
    """The answer as before memories had days: no time fit, no preference for newer ones."""
    saved = dated.MEMORY_TIME_FIT, dated.CURRENT_WEIGHT
    dated.MEMORY_TIME_FIT, dated.CURRENT_WEIGHT = 0.0, 0.0
    try:
        yield
    finally:
        dated.MEMORY_TIME_FIT, dated.CURRENT_WEIGHT = saved


def main() -> int:
    p = parser(__doc__, quiet_wait=0.0)
    p.parse_args()
    root = REPO_DIR / "eval" / "dev" / "memory"
    dataset = load_dataset(root, "dev")
    index = WORK_DIR / "memory_answers"
    shutil.rmtree(index, ignore_errors=True)
    with Engine(index, create=True) as engine:
        with (root / "corpus.jsonl").open(encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                meta = row["metadata"]
                engine.remember(
                    row["text"], session=meta["session"], timestamp=f"{meta['date']}T12:00:00Z"
                )
        stored = engine.store.counts()["documents"]
    log(f"memory: {len(dataset.queries)} questions over {stored} memories")
    reports: dict[str, dict[str, Any]] = {}
    for label in ("baseline (no days)", "default"):
        with Engine(index) as engine:  # a fresh result cache for each row
            if label == "default":
                reports[label] = run_answers(engine, dataset)
            else:
                with without_days():
                    reports[label] = run_answers(engine, dataset)
    rows: list[list[object]] = []
    groups: list[tuple[str, str, str | None]] = [("all", "overall", None)]
    groups += [(f"slice {s}", "slices", s) for s in ("single-hop", "multi-hop", "temporal")]
    groups += [("type time", "types", "time")]
    for name, part, key in groups:
        for label, report in reports.items():
            values = report[part] if key is None else report[part].get(key, {})
            rows.append([name, label, values.get("n", "–"), *(values.get(c, "–") for c in COLUMNS)])
    body = "\n".join(
        [
            "eval/dev/memory (dev data, in-sample), each turn stored as a memory of its session. "
            "Columns as in `bench/results/answers.md`.",
            "",
            table(["rows", "config", "n", *COLUMNS], rows),
        ]
    )
    write_result("memory_answers", "Answers over agent memories", body)
    print(body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
