"""``clew train-router`` (collect examples from train splits, fit, report, write the model) and
``clew train-reranker --kind features --also ...`` (one feature model from several sets)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from clew.config import EngineConfig
from clew.errors import ConfigError, FilterError
from clew.eval.datasets import load_dataset
from clew.eval.runner import open_index
from clew.retrieve.adaptive import fit_summary
from clew.train.router import Example, collect, fit, leave_one_out, mean_gain


def _examples(args: argparse.Namespace, config: EngineConfig) -> list[Example]:
    cache = Path(args.examples) if args.examples else None
    if cache is not None and cache.is_file():
        data = json.loads(cache.read_text(encoding="utf-8"))
        return [Example.from_json(e) for e in data["examples"]]
    out: list[Example] = []
    for spec in args.dataset:
        path, _, split = spec.partition(":")
        if split == "test":
            raise ConfigError(
                f"--dataset {spec!r}: the router trains on train and dev splits only; "
                "allowed: DIR[:train|dev|...], never test"
            )
        dataset = load_dataset(path, split or "train")
        index = Path(args.indexes) / dataset.name if args.indexes else None
        engine = open_index(dataset, config, index, progress=not args.no_progress)
        try:
            out += collect(engine, dataset, progress=not args.no_progress)
        finally:
            engine.close()
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        payload = {"datasets": args.dataset, "examples": [e.to_json() for e in out]}
        cache.write_text(json.dumps(payload) + "\n", encoding="utf-8")
    return out


def train_router(args: argparse.Namespace) -> int:
    config = EngineConfig.from_yaml(args.config) if args.config else EngineConfig()
    if not (config.router.enabled and config.router.adaptive):
        raise ConfigError("train-router needs router.enabled and router.adaptive on")
    if args.lodo and len(args.dataset) < 2:
        raise ConfigError("--lodo needs at least two --dataset entries (one to leave out)")
    examples = _examples(args, config)
    model = fit(examples, l2=args.l2, info={"datasets": list(args.dataset)})
    names = sorted({e.dataset for e in examples})
    print(f"{len(examples)} examples from {', '.join(names)}")
    print(
        f"{'dataset':<20} {'n':>5} {'lexical':>8} {'balanced':>8} {'dense':>8} "
        f"{'learned':>8} {'oracle':>8}"
    )
    for name in names:
        rows = [e for e in examples if e.dataset == name]
        oracle = sum(max(e.gains) for e in rows) / len(rows)
        print(
            f"{name:<20} {len(rows):>5} {mean_gain(None, rows, 0.0):>8.4f} "
            f"{mean_gain(None, rows, 0.5):>8.4f} {mean_gain(None, rows, 1.0):>8.4f} "
            f"{mean_gain(model, rows):>8.4f} {oracle:>8.4f}"
        )
    if args.lodo:
        print("\nleave one dataset out (the model trained without the row's dataset):")
        for name, row in leave_one_out(examples, l2=args.l2).items():
            print(
                f"{name:<20} {int(row['n']):>5} {row['lexical']:>8.4f} {row['balanced']:>8.4f} "
                f"{row['dense']:>8.4f} {row['learned_lodo']:>8.4f} {row['oracle']:>8.4f}"
            )
    print("\nsignal weights (per standard deviation; + = towards dense):")
    for signal, weight in fit_summary(model):
        print(f"  {signal:<22} {weight:+.3f}")
    print(f"  {'bias':<22} {model.bias:+.3f}")
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(model.to_json(), encoding="utf-8")
        print(f"router model written to {out}")
    return 0


def train_features_across(args: argparse.Namespace) -> int:
    """``train-reranker --kind features --also ...``: one feature model from several sets."""
    from clew.retrieve.rerank import FORMAT
    from clew.train.features import feature_rows, fit_features_across

    if args.kind != "features" or not args.out:
        raise ConfigError("--also needs --kind features and --out")
    config = EngineConfig.from_yaml(args.config) if args.config else EngineConfig()
    rows = []
    for spec in [f"{args.dataset}:{args.split}", *args.also]:
        path, _, split = spec.rpartition(":") if ":" in spec else (spec, "", "")
        dataset = load_dataset(path, split or args.split)
        if args.limit is not None:
            dataset = dataset.subset(args.limit)
        engine = open_index(dataset, config, progress=not args.no_progress)
        try:
            x, y = feature_rows(engine, dataset, config, progress=not args.no_progress)
        finally:
            engine.close()
        rows.append((f"{dataset.name}:{dataset.split}", x, y))
    model = fit_features_across(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    target = out / "clew-features.json"
    target.write_text(json.dumps(model.to_json(FORMAT), indent=2) + "\n", encoding="utf-8")
    weights = ", ".join(f"{n} {w:+.3f}" for n, w in zip(model.features, model.weights, strict=True))
    print(f"feature weights written to {target} ({len(rows)} sets): {weights}")
    return 0


def calibrate_self_command(args: argparse.Namespace) -> int:
    """``clew calibrate --self --index DIR [--scope JSON] [--out FILE]``: an abstention
    threshold for this index (or for callers of one scope: measured on what the scope holds)
    from how clew's off-topic questions score on it (no judged questions needed), with the
    weights of ``answer.calibration`` (default: the shipped ones); written to FILE or into the
    index (its answers for that scope then use it)."""
    from clew.engine import Engine, calibration_file
    from clew.filters import parse_filter, to_json
    from clew.train.calibrate import calibrate_self

    if not args.self_:
        raise ConfigError("calibrate needs --dataset DIR (a judged BEIR split) or --self")
    if not args.index:
        raise ConfigError("calibrate --self needs --index DIR (the index to calibrate)")
    try:  # a bad scope is named before any work
        scope = to_json(parse_filter(args.scope))
    except FilterError as exc:
        raise ConfigError(f'--scope {args.scope!r}: {exc} (e.g. {{"tenant": "a"}})') from exc
    config = EngineConfig.from_yaml(args.config) if args.config else EngineConfig()
    engine = Engine(args.index, config)
    try:
        from clew.compose.answer import load_calibration

        base = load_calibration(config.answer.calibration)  # its weights; "": the shipped ones
        cal, rates = calibrate_self(
            engine, config, base=base, progress=not args.no_progress, scope=scope
        )
    finally:
        engine.close()
    out = Path(args.out) if args.out else engine.directory / calibration_file(scope)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(cal.to_json(), indent=2) + "\n", encoding="utf-8")
    tmp.replace(out)
    print(
        f"calibration written to {out}: threshold {cal.threshold:.4f}; in sample it abstains on "
        f"{rates['abstained_unrelated']:.0%} of {cal.info['unrelated']} off-topic questions"
    )
    if args.out:
        print(f"use it with answer.calibration: {out}")
    elif scope is not None:
        print(
            "answers to callers of this scope use it from now on (a running service: after a "
            "restart); other scopes keep theirs or the shipped one"
        )
    else:
        print(
            "the index's unscoped answers use it from now on (a running service: after a "
            "restart); a scoped caller uses its scope's own (--scope) or the shipped one"
        )
    return 0
