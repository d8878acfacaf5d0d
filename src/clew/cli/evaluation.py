"""``clew eval | train-reranker | calibrate``: evaluation on BEIR-layout datasets and the
models trained or fitted on them."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from clew.config import EngineConfig
from clew.errors import ClewError, ConfigError

__all__ = ["eval_command", "train_command"]


def train_command(args: argparse.Namespace) -> int:
    if args.command == "calibrate" and (args.self_ or not args.dataset):
        from clew.train.cli import calibrate_self_command

        return calibrate_self_command(args)
    from pathlib import Path

    from clew.eval.datasets import load_dataset
    from clew.eval.runner import open_index
    from clew.train.calibrate import (
        abstention_evidence,
        calibrate,
        check_calibration,
        unrelated_evidence,
    )
    from clew.train.features import mine_examples, train_features

    if getattr(args, "also", None):
        from clew.train.cli import train_features_across

        return train_features_across(args)
    dataset = load_dataset(args.dataset, args.split)
    if args.limit is not None:
        if args.limit < 1:
            raise ClewError(f"--limit {args.limit} is invalid; allowed: >= 1")
        if args.command == "train-reranker":
            dataset = dataset.subset(args.limit)
    progress = not args.no_progress
    unrelated: list[str] = []
    if getattr(args, "unrelated", None):
        others = load_dataset(args.unrelated, "test")
        unrelated = [q.text for q in others.queries][: args.limit or None]
    config = EngineConfig.from_yaml(args.config) if args.config else EngineConfig()
    engine = open_index(dataset, config, args.index, progress=progress)
    try:
        if args.command == "calibrate" and args.check is not None:
            from clew.compose.answer import load_calibration

            cal = load_calibration(args.check)
            pos, neg = abstention_evidence(
                engine, dataset, config, limit=args.limit, progress=progress
            )
            far = unrelated_evidence(engine, unrelated, config, progress=progress)
            checked = check_calibration(cal, pos, neg, far)
            print(json.dumps({"calibration": args.check or "shipped", **checked}, indent=2))
            return 0
        if not args.out:
            raise ConfigError("--out is required (or --check FILE for calibrate)")
        out = Path(args.out)
        if args.command == "calibrate":
            evidence: dict[str, Any] = {}
            cal = calibrate(
                engine,
                dataset,
                config,
                unrelated=unrelated,
                answer_rate=args.answer_rate or None,
                limit=args.limit,
                progress=progress,
                evidence=evidence,
            )
            if args.save_evidence:
                Path(args.save_evidence).write_text(json.dumps(evidence), encoding="utf-8")
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(cal.to_json(), indent=2) + "\n", encoding="utf-8")
            info = cal.info
            print(
                f"calibration written to {out}: threshold {cal.threshold:.4f}, balanced accuracy "
                f"{info.get('balanced_accuracy')} on {info.get('queries')} queries × 2"
            )
            return 0
        if args.kind == "features":
            model = train_features(engine, dataset, config, progress=progress)
            out.mkdir(parents=True, exist_ok=True)
            target = out / "clew-features.json"
            from clew.retrieve.rerank import FORMAT

            target.write_text(json.dumps(model.to_json(FORMAT), indent=2) + "\n", encoding="utf-8")
            weights = ", ".join(
                f"{n} {w:+.3f}" for n, w in zip(model.features, model.weights, strict=True)
            )
            print(f"feature weights written to {target}: {weights}")
            return 0
        from clew.train.cross_encoder import TrainExample, train_cross_encoder

        examples = [
            TrainExample(q, pos, neg)
            for q, pos, neg in mine_examples(engine, dataset, config, progress=progress)
        ]
    finally:
        engine.close()
    report = train_cross_encoder(
        examples,
        out,
        epochs=args.epochs,
        group_size=args.group_size,
        max_length=args.max_length,
        lr=args.lr,
        seed=args.seed,
        progress=progress,
    )
    print(
        f"cross-encoder written to {report.out_dir}: {report.groups} groups from "
        f"{report.examples} queries, {report.steps} steps, final loss {report.final_loss:.4f}, "
        f"{report.seconds:.0f} s"
    )
    return 0


def eval_command(args: argparse.Namespace) -> int:
    from pathlib import Path

    from clew.eval.datasets import load_dataset
    from clew.eval.gate import check_gates, load_gates, report_gates
    from clew.eval.runner import configs_for, format_table, run_eval, write_trec_run

    dataset = load_dataset(args.dataset, args.split)
    if args.limit is not None:
        if args.limit < 1:
            raise ClewError(f"--limit {args.limit} is invalid; allowed: >= 1")
        dataset = dataset.subset(args.limit)
    if args.answers:
        from clew.eval.answers import answers_command

        return answers_command(args, dataset)
    gates = load_gates(args.gate) if args.gate else ()
    base = EngineConfig.from_yaml(args.config) if args.config else None
    models = {}
    if args.rerank_model:
        models["cross-encoder"] = args.rerank_model
    if args.feature_model:
        models["features"] = args.feature_model
    if "+rerank-ce" in args.preset and "cross-encoder" not in models:
        raise ConfigError("+rerank-ce needs its model: give --rerank-model DIR (a cross-encoder)")
    configs = configs_for(args.preset, args.ablate, base, models)
    result = run_eval(
        dataset,
        configs,
        index=args.index,
        k=args.k,
        progress=not args.no_progress,
        oracle=args.ablate,
    )
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
    if args.save:
        out = Path(args.save) / f"{Path(result.dataset).name}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(result.to_dict(per_query=False), indent=2), encoding="utf-8")
        tmp.replace(out)
        print(f"saved {out}", file=sys.stderr)
    if gates:
        primary = "default" if args.ablate else configs[0][0]
        reasons = check_gates(gates, result.dataset, result.table(), config=primary)
        return report_gates("gate", result.dataset, reasons)
    return 0
