"""Shared helpers for the benchmark scripts: datasets, timing statistics, result files.

Every script in ``bench/`` runs as ``python bench/NAME.py`` from the repository root, prints its
figures (medians and ratios against a baseline measured in the same run) and writes a markdown
file to ``bench/results/NAME.md`` with the figures, the machine and the reproducing command.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clew.eval.metrics import percentile as clew_percentile

# Offline, and no tokenizers thread pool fighting onnxruntime/torch for the cores.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
WORK_DIR = BENCH_DIR / ".work"
"""Scratch space for cached indexes (git-ignored)."""
DEFAULT_DATA = REPO_DIR.parent / "shared" / "data"
_STARTED = time.perf_counter()
"""The repository's parent directory holds ``shared/data/<dataset>`` in BEIR layout."""


# -- datasets -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CorpusDoc:
    doc_id: str
    title: str
    text: str


def parser(doc: str | None, *, quiet_wait: float = 30.0) -> argparse.ArgumentParser:
    """The options every benchmark takes: where the datasets are and how long to wait for quiet."""
    p = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="dir holding scifact/")
    p.add_argument(
        "--quiet-wait",
        type=float,
        default=quiet_wait,
        help="seconds to wait for other processes to go idle before each run",
    )
    return p


def scifact_dir(data: Path) -> Path:
    path = data / "scifact"
    if not (path / "corpus.jsonl").is_file():
        sys.exit(f"SciFact not found at {path} (expected corpus.jsonl); pass --data DIR")
    return path


def read_corpus(path: Path, limit: int | None = None) -> list[CorpusDoc]:
    """``corpus.jsonl`` in BEIR layout, in file order, at most ``limit`` documents."""
    out: list[CorpusDoc] = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if limit is not None and len(out) >= limit:
                break
            if not line.strip():
                continue
            obj = json.loads(line)
            out.append(CorpusDoc(str(obj["_id"]), obj.get("title") or "", obj.get("text") or ""))
    return out


def read_queries(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                obj = json.loads(line)
                out[str(obj["_id"])] = str(obj["text"])
    return out


def read_qrels(path: Path) -> dict[str, set[str]]:
    """``qrels/*.tsv`` with a header row: query id → relevant corpus ids (score > 0)."""
    out: dict[str, set[str]] = {}
    with path.open(encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            parts = line.rstrip("\n").split("\t")
            if i == 0 or len(parts) < 3:
                continue
            if float(parts[2]) > 0:
                out.setdefault(parts[0], set()).add(parts[1])
    return out


def test_queries(dataset: Path, limit: int | None = None) -> list[tuple[str, str]]:
    """(query id, text) of the test split, in qrels order, at most ``limit``."""
    queries = read_queries(dataset / "queries.jsonl")
    qrels = read_qrels(dataset / "qrels" / "test.tsv")
    out = [(qid, queries[qid]) for qid in qrels if qid in queries]
    return out[:limit] if limit is not None else out


def write_jsonl(path: Path, docs: Iterable[CorpusDoc]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for d in docs:
            fh.write(json.dumps({"_id": d.doc_id, "title": d.title, "text": d.text}) + "\n")
    return path


# -- timing -------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in 0..100); NaN when there are no values."""
    return clew_percentile(values, q) if values else float("nan")


@dataclass(frozen=True, slots=True)
class Stats:
    n: int
    p50: float
    p95: float
    mean: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Stats:
        if not values:
            nan = float("nan")
            return cls(0, nan, nan, nan, nan)
        return cls(
            len(values),
            percentile(values, 50),
            percentile(values, 95),
            statistics.fmean(values),
            max(values),
        )


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


class Clock:
    """``with Clock() as c: ...`` then ``c.seconds`` / ``c.ms``."""

    def __init__(self) -> None:
        self.start = 0.0
        self.seconds = 0.0

    def __enter__(self) -> Clock:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.start

    @property
    def ms(self) -> float:
        return self.seconds * 1000.0


def ratio(value: float, baseline: float) -> str:
    if baseline == 0 or baseline != baseline or value != value:
        return "n/a"
    return f"{value / baseline:.2f}×"


def batched(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def log(msg: str) -> None:
    print(msg, flush=True)


# -- other work on the machine ------------------------------------------------------------------


def _busy_cpu_seconds() -> float | None:
    """CPU seconds all processes have spent busy since boot (``/proc/stat``), or None."""
    try:
        fields = Path("/proc/stat").read_text(encoding="utf-8").split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    values = [int(x) for x in fields]
    busy = sum(values[:8]) - values[3] - values[4]  # all but idle and iowait
    return busy / os.sysconf("SC_CLK_TCK")


def _own_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class Background:
    """Measures how many cores *other* processes kept busy between ``start`` and ``stop``."""

    def __init__(self) -> None:
        self.start()

    def start(self) -> None:
        self._busy = _busy_cpu_seconds()
        self._own = _own_cpu_seconds()
        self._wall = time.perf_counter()

    def cores(self) -> float:
        busy = _busy_cpu_seconds()
        if busy is None or self._busy is None:
            return float("nan")
        wall = max(time.perf_counter() - self._wall, 1e-9)
        other = (busy - self._busy) - (_own_cpu_seconds() - self._own)
        return max(other, 0.0) / wall


def wait_quiet(max_wait: float, threshold: float = 0.3, sample: float = 1.0) -> float:
    """Wait (at most ``max_wait`` s) until other processes use under ``threshold`` cores.

    Returns the background cores seen in the last sample. The benchmarks share a 2-core machine
    with tests and builds; a measurement taken while another process holds a core is not a
    measurement of clew.
    """
    deadline = time.perf_counter() + max_wait
    told = False
    while True:
        bg = Background()
        time.sleep(sample)
        cores = bg.cores()
        if cores != cores or cores < threshold or time.perf_counter() >= deadline:
            return cores
        if not told:
            log(f"  (other processes use {cores:.1f} cores; waiting up to {max_wait:.0f} s)")
            told = True


# -- reporting ----------------------------------------------------------------------------------


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub markdown table; floats are printed with up to 3 significant decimals."""

    def cell(v: object) -> str:
        if isinstance(v, float):
            if v != v:
                return "–"
            return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}" if abs(v) < 1 else f"{v:.2f}"
        return str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def loadavg() -> str:
    """The 1/5/15-minute load averages; other work on the machine skews the figures."""
    if not hasattr(os, "getloadavg"):
        return "n/a"
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def machine() -> dict[str, str]:
    import numpy

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    info = {
        "nproc": str(cores),
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "numpy": numpy.__version__,
    }
    info["load average (1/5/15 min, at write)"] = loadavg()
    try:
        import clew

        info["clew"] = clew.__version__
    except ImportError:
        pass
    return info


def command() -> str:
    script = Path(sys.argv[0])
    with contextlib.suppress(ValueError):
        script = script.resolve().relative_to(REPO_DIR)
    return shlex.join(["python", str(script), *sys.argv[1:]])


def write_result(name: str, title: str, body: str, *, notes: Sequence[str] = ()) -> Path:
    """Write ``bench/results/<name>.md``: title, figures, notes, machine, command."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    info = machine()
    parts = [f"# {title}", "", body.rstrip(), ""]
    minutes = (time.perf_counter() - _STARTED) / 60.0
    notes = [*notes, f"run time of this script: {minutes:.1f} min"]
    parts += ["## Notes", "", *[f"- {n}" for n in notes], ""]
    parts += [
        "## Machine",
        "",
        *[f"- {k}: {v}" for k, v in info.items()],
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        "## Reproduce",
        "",
        "From the repository root:",
        "",
        "```sh",
        f"HF_HUB_OFFLINE=1 {command()}",
        "```",
        "",
    ]
    path = RESULTS_DIR / f"{name}.md"
    path.write_text("\n".join(parts), encoding="utf-8")
    log(f"wrote {path.relative_to(REPO_DIR)}")
    return path


def write_settings(
    name: str,
    title: str,
    labels: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    notes: Sequence[str] = (),
) -> Path:
    """``bench/results/<name>.md`` for an idea measured on the train and dev sets: a row per set
    (its label, then a value per setting and the change of each setting after the first), a
    column per setting of ``labels``, the first being ``off`` (the shipped default)."""
    header = ["set", *labels, *(f"Δ {label}" for label in labels[1:])]
    rule = [
        "train and dev sets only; `Δ` is the setting minus `off` (the shipped default)",
        "kept only if a setting gains on some set and loses on none (by more than 0.002)",
    ]
    return write_result(name, title, table(header, rows), notes=[*rule, *notes])


def setting_row(label: str, scores: Sequence[float]) -> list[object]:
    """A row of :func:`write_settings`: the label, each setting's score, then each later
    setting's change against the first (``off``)."""
    return [label, *scores, *(s - scores[0] for s in scores[1:])]


# -- the SciFact index shared by ingest.py and search.py ----------------------------------------


def scifact_index_dir(n_docs: int, total_docs: int) -> Path:
    """``bench/.work/scifact-index`` for the whole corpus, ``scifact-index-N`` for a prefix."""
    name = "scifact-index" if n_docs >= total_docs else f"scifact-index-{n_docs}"
    return WORK_DIR / name


def corpus_source(dataset: Path, n_docs: int | None) -> tuple[Path, int, int]:
    """The JSONL to ingest for the first ``n_docs`` documents: (path, n_docs, total_docs)."""
    corpus = dataset / "corpus.jsonl"
    docs = read_corpus(corpus)
    total = len(docs)
    n = total if n_docs is None or n_docs >= total else n_docs
    if n == total:
        return corpus, n, total
    return write_jsonl(WORK_DIR / f"scifact-{n}.jsonl", docs[:n]), n, total


def indexed_docs(index_dir: Path) -> int:
    """How many documents an index directory holds (0 when there is none)."""
    import sqlite3

    db = index_dir / "clew.sqlite"
    if not db.is_file():
        return 0
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM documents").fetchone()[0])
    except sqlite3.Error:
        return 0
    finally:
        conn.close()


def uncached() -> Any:
    """The default engine config with the result cache off: benchmarks repeat queries (warm-up,
    several configs) and must measure the work, not the cache."""
    from clew import EngineConfig

    return EngineConfig().with_overrides(cache={"size": 0})
