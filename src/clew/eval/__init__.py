"""Offline evaluation: BEIR datasets, IR metrics (trec_eval parity) and per-slice quality gates.

``clew eval --dataset DIR [--ablate] [--gate FILE]`` on the command line; in Python::

    from clew.eval import load_dataset, run_eval, configs_for, check_gates, load_gates
"""

from clew.eval.datasets import Dataset, EvalError, EvalQuery, load_dataset
from clew.eval.gate import Gate, check_gates, load_gates, parse_gates
from clew.eval.metrics import evaluate, mean_metrics, ndcg_at_k, recall_at_k
from clew.eval.runner import (
    ABLATIONS,
    METRICS,
    ConfigRun,
    EvalResult,
    configs_for,
    format_table,
    run_eval,
    write_trec_run,
)

__all__ = [
    "ABLATIONS",
    "METRICS",
    "ConfigRun",
    "Dataset",
    "EvalError",
    "EvalQuery",
    "EvalResult",
    "Gate",
    "check_gates",
    "configs_for",
    "evaluate",
    "format_table",
    "load_dataset",
    "load_gates",
    "mean_metrics",
    "ndcg_at_k",
    "parse_gates",
    "recall_at_k",
    "run_eval",
    "write_trec_run",
]
