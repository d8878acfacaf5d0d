"""Per-slice quality gates, read from YAML and checked against a table of mean metrics.

::

    gates:
      - dataset: scifact          # dataset name (directory name)
        slice: all                # "all" (default) = overall row; "*" = every slice row incl. all
        min: {ndcg@10: 0.70}      # metric -> minimum
        no_worse_than_best_leg: 0.01   # at most this far below the best single-leg run
        min_gain_over: {hybrid: 0.04}  # config -> least (config under test - it) on metric
        metric: ndcg@10           # metric for those two (default: first in min)

A results table is ``config name -> slice name ("all" = overall) -> metric -> value``; single-leg
runs (``lexical``, ``dense``, ``graph``) are configs in the same table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from clew.eval.datasets import EvalError
from clew.eval.metrics import canonical_metric

__all__ = [
    "ALL_SLICES",
    "OVERALL",
    "Gate",
    "check_gates",
    "load_gates",
    "parse_gates",
    "report_gates",
]

OVERALL = "all"
"""Slice name of the overall row."""
ALL_SLICES = "*"
"""Gate slice meaning every slice row of the config under test, the overall row included."""
DEFAULT_METRIC = "ndcg@10"

_EPS = 1e-9
"""Slack for float noise in means, so 0.7 computed as 0.69999999999 still passes ``min: 0.7``."""
_GATE_KEYS = ("dataset", "slice", "min", "no_worse_than_best_leg", "min_gain_over", "metric")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True, slots=True)
class Gate:
    dataset: str
    slice: str = OVERALL
    min: dict[str, float] = field(default_factory=dict)
    """Canonical metric name -> minimum value."""
    no_worse_than_best_leg: float | None = None
    """Largest allowed shortfall of the config under test below the best single-leg run."""
    metric: str = DEFAULT_METRIC
    """Metric compared by ``no_worse_than_best_leg`` and ``min_gain_over``."""
    min_gain_over: dict[str, float] = field(default_factory=dict)
    """Config name -> the least the config under test must exceed it by on ``metric``
    (negative: the most it may fall below it)."""

    def __post_init__(self) -> None:
        if not isinstance(self.dataset, str) or not self.dataset:
            raise EvalError(f"dataset={self.dataset!r} is invalid; allowed: a non-empty string")
        if not isinstance(self.slice, str) or not self.slice:
            raise EvalError(f"slice={self.slice!r} is invalid; allowed: a slice name, 'all' or '*'")
        if not isinstance(self.min, Mapping):
            raise EvalError(f"min={self.min!r} is invalid; allowed: a mapping metric -> number")
        minimums: dict[str, float] = {}
        for name, value in self.min.items():
            metric = canonical_metric(name)
            if not _is_number(value):
                raise EvalError(f"min[{name!r}]={value!r} is invalid; allowed: a finite number")
            minimums[metric] = float(value)
        object.__setattr__(self, "min", minimums)
        tolerance = self.no_worse_than_best_leg
        if tolerance is not None:
            if not _is_number(tolerance) or tolerance < 0:
                raise EvalError(
                    f"no_worse_than_best_leg={tolerance!r} is invalid; "
                    "allowed: a finite number >= 0"
                )
            object.__setattr__(self, "no_worse_than_best_leg", float(tolerance))
        object.__setattr__(self, "metric", canonical_metric(self.metric))
        if not isinstance(self.min_gain_over, Mapping) or not all(
            isinstance(k, str) and k and _is_number(v) for k, v in self.min_gain_over.items()
        ):
            raise EvalError(
                f"min_gain_over={self.min_gain_over!r} is invalid; "
                "allowed: a mapping config name -> number"
            )
        object.__setattr__(
            self, "min_gain_over", {k: float(v) for k, v in self.min_gain_over.items()}
        )
        if not minimums and tolerance is None and not self.min_gain_over:
            raise EvalError(
                f"gate for dataset {self.dataset!r} checks nothing; "
                "allowed: set min, no_worse_than_best_leg and/or min_gain_over"
            )


def _parse_entry(entry: object) -> Gate:
    if not isinstance(entry, Mapping):
        raise EvalError(f"got {type(entry).__name__} {entry!r}; allowed: a mapping")
    unknown = [key for key in entry if key not in _GATE_KEYS]
    if unknown:
        raise EvalError(f"unknown key {unknown[0]!r}; allowed: {', '.join(_GATE_KEYS)}")
    if "dataset" not in entry:
        raise EvalError("missing required key 'dataset'")
    slice_name = entry.get("slice", OVERALL)
    if not isinstance(slice_name, str):
        raise EvalError(f"slice={slice_name!r} is invalid; allowed: a slice name, 'all' or '*'")
    minimums = entry.get("min", {})
    if minimums is None:
        minimums = {}
    if not isinstance(minimums, Mapping):
        raise EvalError(f"min={minimums!r} is invalid; allowed: a mapping metric -> number")
    for name in minimums:
        if not isinstance(name, str):
            raise EvalError(f"min key {name!r} is invalid; allowed: a metric name like ndcg@10")
    metric = entry.get("metric")
    if metric is None:
        metric = next(iter(minimums), DEFAULT_METRIC)
    if not isinstance(metric, str):
        raise EvalError(f"metric={metric!r} is invalid; allowed: a metric name like ndcg@10")
    return Gate(
        dataset=entry["dataset"],
        slice=slice_name,
        min=dict(minimums),
        no_worse_than_best_leg=entry.get("no_worse_than_best_leg"),
        metric=metric,
        min_gain_over=entry.get("min_gain_over") or {},
    )


def parse_gates(data: Any, source: str = "gates") -> tuple[Gate, ...]:
    """Gates from parsed YAML (``{"gates": [...]}``); errors name ``source`` and the entry index."""
    if not isinstance(data, Mapping):
        raise EvalError(
            f"{source}: top level is {type(data).__name__}; allowed: a mapping with key 'gates'"
        )
    unknown = [key for key in data if key != "gates"]
    if unknown:
        raise EvalError(f"{source}: unknown top-level key {unknown[0]!r}; allowed: gates")
    entries = data.get("gates")
    if not isinstance(entries, list):
        raise EvalError(f"{source}: gates={entries!r} is invalid; allowed: a list of gate mappings")
    gates: list[Gate] = []
    for index, entry in enumerate(entries):
        try:
            gates.append(_parse_entry(entry))
        except EvalError as exc:
            raise EvalError(f"{source}: gates[{index}]: {exc}") from None
    return tuple(gates)


def load_gates(path: str | Path) -> tuple[Gate, ...]:
    """Read and validate a gate YAML file."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise EvalError(f"gate file {str(file)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise EvalError(f"cannot read gate file {str(file)!r}: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise EvalError(f"{file}: invalid YAML: {exc}") from None
    return parse_gates(data, source=str(file))


def _names(keys: Sequence[str]) -> str:
    return ", ".join(keys) if keys else "none"


def _slice_order(slices: Sequence[str]) -> list[str]:
    return sorted(slices, key=lambda s: (s != OVERALL, s))


def _check_slice(
    gate: Gate,
    dataset: str,
    slice_name: str,
    table: Mapping[str, Mapping[str, Mapping[str, float]]],
    config: str,
    legs: Sequence[str],
) -> list[str]:
    where = f"{dataset}/{slice_name}"
    row = table[config].get(slice_name)
    if row is None:
        have = _names(_slice_order(list(table[config])))
        return [f"{where}: slice {slice_name!r} missing from results of {config!r} (have: {have})"]
    reasons: list[str] = []
    for metric, minimum in gate.min.items():
        value = row.get(metric)
        if value is None:
            reasons.append(
                f"{where}: {metric} missing from results of {config!r} (have: {_names(list(row))})"
            )
        elif value < minimum - _EPS:
            reasons.append(f"{where}: {metric} {value:.4f} < min {minimum:.4f}")
    for other, least in gate.min_gain_over.items():
        mine, theirs = row.get(gate.metric), table.get(other, {}).get(slice_name, {})
        base = theirs.get(gate.metric)
        if mine is None or base is None:
            reasons.append(
                f"{where}: {gate.metric} of {config!r} or {other!r} missing; "
                "needed for min_gain_over (run with --ablate)"
            )
        elif mine - base < least - _EPS:
            reasons.append(
                f"{where}: {gate.metric} {mine:.4f} is {mine - base:+.4f} over {other} "
                f"({base:.4f}); allowed at least {least:+.4f}"
            )
    tolerance = gate.no_worse_than_best_leg
    if tolerance is None:
        return reasons
    metric = gate.metric
    value = row.get(metric)
    if value is None:
        reasons.append(
            f"{where}: {metric} missing from results of {config!r} (have: {_names(list(row))}); "
            "needed for no_worse_than_best_leg"
        )
        return reasons
    leg_values: list[tuple[str, float]] = []
    for leg in legs:
        leg_value = table.get(leg, {}).get(slice_name, {}).get(metric)
        if leg_value is not None:
            leg_values.append((leg, leg_value))
    if not leg_values:
        reasons.append(
            f"{where}: no single-leg results for {metric} (legs: {_names(list(legs))}); "
            "run with --ablate to check no_worse_than_best_leg"
        )
        return reasons
    best_leg, best = max(leg_values, key=lambda item: item[1])
    shortfall = best - value
    if shortfall > tolerance + _EPS:
        reasons.append(
            f"{where}: {metric} {value:.4f} is {shortfall:.4f} below best leg {best_leg} "
            f"({best:.4f}); allowed {tolerance:.4f}"
        )
    return reasons


def check_gates(
    gates: Sequence[Gate],
    dataset: str,
    table: Mapping[str, Mapping[str, Mapping[str, float]]],
    *,
    config: str = "default",
    legs: Sequence[str] = ("lexical", "dense", "graph", "hybrid"),
) -> list[str]:
    """Check the gates of ``dataset`` against ``table``; one human-readable reason per failure.

    ``table`` maps config name -> slice name (``"all"`` = overall) -> canonical metric -> value.
    ``config`` is the config under test; ``legs`` name the configs that
    ``no_worse_than_best_leg`` compares against (each leg alone and hybrid RRF without graph).
    Missing slices, metrics or leg rows are failures too, with a reason naming what is missing.
    An empty list means every gate passed.
    """
    reasons: list[str] = []
    for gate in gates:
        if gate.dataset != dataset:
            continue
        if config not in table:
            reasons.append(
                f"{dataset}/{gate.slice}: config {config!r} missing from results "
                f"(have: {_names(sorted(table))})"
            )
            continue
        if gate.slice == ALL_SLICES:
            slices = _slice_order(list(table[config]))
            if not slices:
                reasons.append(f"{dataset}/{ALL_SLICES}: no slice rows in results of {config!r}")
                continue
        else:
            slices = [gate.slice]
        for slice_name in slices:
            reasons.extend(_check_slice(gate, dataset, slice_name, table, config, legs))
    return reasons


def report_gates(label: str, dataset: str, reasons: Sequence[str]) -> int:
    """Print a gate check's verdict on stderr (every reason when it failed) and return the exit
    status: 1 when it failed, else 0. ``label``: ``gate`` or ``answer gate``."""
    import sys

    if reasons:
        print(f"{label} FAILED for {dataset} ({len(reasons)}):", file=sys.stderr)
        for reason in reasons:
            print(f"  - {reason}", file=sys.stderr)
        return 1
    print(f"{label} passed for {dataset}", file=sys.stderr)
    return 0
