"""Cross-encoder training: fine-tuning one from the packaged MiniLM, and exporting it to ONNX.

:func:`train_cross_encoder` fine-tunes a cross-encoder from the packaged all-MiniLM-L6-v2
encoder (a classification head on top, listwise softmax cross-entropy over one positive and
hard negatives per group) and writes a directory that three things can load:
:class:`clew.models.cross_encoder.CrossEncoderReranker` (onnxruntime, through ``model.onnx``),
transformers (``save_pretrained``) and ``sentence_transformers.CrossEncoder``. Tokenization is
:class:`clew.models.cross_encoder.PairTokenizer`, the same as scoring uses.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import shutil
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clew.errors import ModelError
from clew.models.cross_encoder import (
    META_FILE,
    MIN_LENGTH,
    PairTokenizer,
    forward_kwargs,
    import_torch,
    model_dir,
    quiet_transformers,
    read_json,
)
from clew.models.embedder import packaged_minilm_dir

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TrainExample:
    """One training query with relevant passages and hard negatives (passage texts)."""

    query: str
    positives: tuple[str, ...]
    negatives: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TrainReport:
    """What :func:`train_cross_encoder` did; also written to ``clew-reranker.json``."""

    out_dir: str
    base: str
    examples: int
    """Examples used (those with at least one positive and one negative)."""
    groups: int
    """Groups per epoch: one per positive, with up to ``group_size - 1`` negatives."""
    epochs: int
    steps: int
    seconds: float
    final_loss: float
    """Mean group loss over the last epoch."""
    max_length: int
    seed: int


@dataclass(frozen=True, slots=True)
class _Group:
    query: str
    passages: tuple[str, ...]
    """The positive first, then the negatives."""


def _groups(
    examples: Sequence[TrainExample], group_size: int, rng: random.Random
) -> tuple[list[_Group], int]:
    groups: list[_Group] = []
    used = 0
    for ex in examples:
        if not ex.positives or not ex.negatives:
            continue
        used += 1
        want = min(group_size - 1, len(ex.negatives))
        for pos in ex.positives:
            negs = rng.sample(list(ex.negatives), want)
            groups.append(_Group(ex.query, (pos, *negs)))
    return groups, used


def _base_dir(base: str) -> Path:
    if base.casefold() == "minilm":
        return packaged_minilm_dir()
    path, _ = model_dir(base)
    if not (path / "config.json").is_file() or not (path / "tokenizer.json").is_file():
        raise ModelError(
            f"base model {base!r} is not a transformers directory; allowed: 'minilm', or a "
            "directory with config.json, tokenizer.json and weights"
        )
    return path


def _check_args(
    epochs: int, group_size: int, batch_groups: int, lr: float, max_length: int
) -> None:
    checks = (
        (epochs >= 1, "epochs", epochs, ">= 1"),
        (group_size >= 2, "group_size", group_size, ">= 2 (one positive, some negatives)"),
        (batch_groups >= 1, "batch_groups", batch_groups, ">= 1"),
        (0.0 < lr < 1.0, "lr", lr, "0 < lr < 1"),
        (max_length >= MIN_LENGTH, "max_length", max_length, f">= {MIN_LENGTH}"),
    )
    for ok, name, value, allowed in checks:
        if not ok:
            raise ModelError(f"train_cross_encoder {name}={value!r}; allowed: {allowed}")


def train_cross_encoder(
    examples: Sequence[TrainExample],
    out_dir: str | Path,
    *,
    base: str = "minilm",
    epochs: int = 1,
    group_size: int = 8,
    batch_groups: int = 4,
    lr: float = 3e-5,
    max_length: int = 256,
    seed: int = 0,
    progress: bool = False,
    on_step: Callable[[int, float], None] | None = None,
) -> TrainReport:
    """Fine-tune a cross-encoder from ``base`` on (query, positive, hard negatives) examples.

    Each group is one query, one positive and up to ``group_size - 1`` negatives sampled with
    ``random.Random(seed)``; the loss is softmax cross-entropy of the positive within its group.
    AdamW, linear warm-up over the first 10% of steps then linear decay, gradient norm clipped
    to 1.0. The result (transformers weights + tokenizer, ``model.onnx``, ``clew-reranker.json``)
    is written to a temporary directory beside ``out_dir`` and renamed into place at the end,
    replacing an earlier model there. ``on_step(step, loss)`` is called after every step.
    """
    started = time.perf_counter()
    _check_args(epochs, group_size, batch_groups, lr, max_length)
    out = Path(out_dir).expanduser()
    if out.exists() and not out.is_dir():
        raise ModelError(f"out_dir {str(out)!r} is a file; expected a directory path")
    base_dir = _base_dir(base)
    rng = random.Random(seed)
    groups, used = _groups(examples, group_size, rng)
    if not groups:
        raise ModelError(
            f"train_cross_encoder got {len(examples)} examples and none has both a positive and "
            "a negative; each example needs at least one of each"
        )
    torch, transformers = import_torch("training a cross-encoder")
    config = read_json(base_dir / "config.json")
    positions = config.get("max_position_embeddings")
    if isinstance(positions, int) and max_length > positions:
        raise ModelError(
            f"train_cross_encoder max_length={max_length} exceeds the base model's "
            f"{positions} positions; allowed: {MIN_LENGTH}..{positions}"
        )

    torch.manual_seed(seed)
    try:
        with quiet_transformers():
            model = transformers.AutoModelForSequenceClassification.from_pretrained(
                str(base_dir), num_labels=1, local_files_only=True
            )
    except Exception as exc:
        raise ModelError(f"cannot load base model {str(base_dir)!r}: {exc}") from exc
    pad = config.get("pad_token_id")
    tok = PairTokenizer(
        base_dir / "tokenizer.json", max_length, pad if isinstance(pad, int) and pad >= 0 else 0
    )
    takes = forward_kwargs(model)
    type_vocab = config.get("type_vocab_size")
    segment_ids = not (isinstance(type_vocab, int) and type_vocab <= 1)

    no_decay = ("bias", "LayerNorm.weight", "layer_norm.weight")
    params = list(model.named_parameters())
    optimizer = torch.optim.AdamW(
        [
            {"params": [p for n, p in params if not n.endswith(no_decay)], "weight_decay": 0.01},
            {"params": [p for n, p in params if n.endswith(no_decay)], "weight_decay": 0.0},
        ],
        lr=lr,
    )
    per_epoch = math.ceil(len(groups) / batch_groups)
    total = per_epoch * epochs
    warmup = round(0.1 * total)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))

    from tqdm import tqdm

    bar = tqdm(total=total, desc="train cross-encoder", unit="step", disable=not progress)
    model.train()
    step = 0
    epoch_losses: list[float] = []
    try:
        for _ in range(epochs):
            order = list(range(len(groups)))
            rng.shuffle(order)
            epoch_losses = []
            for start in range(0, len(order), batch_groups):
                batch = [groups[i] for i in order[start : start + batch_groups]]
                loss = _step_loss(torch, model, tok, batch, takes, segment_ids)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                for g in optimizer.param_groups:
                    g["lr"] = lr * factor(step)
                optimizer.step()
                step += 1
                value = float(loss.detach())
                epoch_losses.append(value)
                bar.update(1)
                bar.set_postfix(loss=f"{value:.4f}")
                if on_step is not None:
                    on_step(step, value)
    finally:
        bar.close()
    model.eval()
    final_loss = sum(epoch_losses) / len(epoch_losses)

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        with quiet_transformers():
            model.save_pretrained(str(tmp))
            hf_tok = transformers.AutoTokenizer.from_pretrained(
                str(base_dir), local_files_only=True
            )
            hf_tok.model_max_length = max_length
            hf_tok.save_pretrained(str(tmp))
        _export_onnx(torch, model, takes, tmp / "model.onnx", tok.pad_id, segment_ids)
        report = TrainReport(
            out_dir=str(out),
            base=base,
            examples=used,
            groups=len(groups),
            epochs=epochs,
            steps=step,
            seconds=round(time.perf_counter() - started, 3),
            final_loss=final_loss,
            max_length=max_length,
            seed=seed,
        )
        meta = {"kind": "cross-encoder", **asdict(report)}
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        _replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("cross-encoder written to %s (%d steps, final loss %.4f)", out, step, final_loss)
    return report


def _step_loss(
    torch: Any,
    model: Any,
    tok: PairTokenizer,
    batch: Sequence[_Group],
    takes: frozenset[str],
    segment_ids: bool,
) -> Any:
    """Mean listwise softmax cross-entropy of the positive (column 0) over the batch's groups."""
    encodings: list[Any] = []
    rows: list[int] = []
    cols: list[int] = []
    for r, g in enumerate(batch):
        encodings.extend(tok.encode(g.query, g.passages))
        rows.extend([r] * len(g.passages))
        cols.extend(range(len(g.passages)))
    ids, mask, types = tok.arrays(encodings)
    if not segment_ids:
        types = np.zeros_like(types)
    given = {"attention_mask": mask, "token_type_ids": types}
    kwargs = {n: torch.from_numpy(given[n]) for n in takes}
    flat = model(input_ids=torch.from_numpy(ids), **kwargs).logits[:, 0]
    width = max(len(g.passages) for g in batch)
    table = flat.new_full((len(batch), width), float("-inf"))
    table[torch.tensor(rows), torch.tensor(cols)] = flat
    target = torch.zeros(len(batch), dtype=torch.long)
    return torch.nn.functional.cross_entropy(table, target)


def _export_onnx(
    torch: Any, model: Any, takes: frozenset[str], target: Path, pad_id: int, segment_ids: bool
) -> None:
    """Export ``model`` (eval mode) to ONNX: logits of shape (batch, 1), dynamic axes."""
    names = ["input_ids", *(n for n in ("attention_mask", "token_type_ids") if n in takes)]

    class _Logits(torch.nn.Module):  # type: ignore[misc]
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *inputs: Any) -> Any:
            return self.inner(**dict(zip(names, inputs, strict=True))).logits

    # a padded row in the sample, so the exported graph keeps the attention mask path
    mask = torch.tensor([[1] * 8, [1] * 5 + [0] * 3])
    sample = {
        "input_ids": torch.where(mask.bool(), torch.arange(5, 13).expand(2, 8), pad_id),
        "attention_mask": mask,
        "token_type_ids": torch.tensor([[0] * 4 + [1] * 4, [0] * 3 + [1] * 2 + [0] * 3])
        if segment_ids
        else torch.zeros_like(mask),
    }
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _Logits(model),
            tuple(sample[n] for n in names),
            str(target),
            input_names=names,
            output_names=["logits"],
            dynamic_axes={
                **{n: {0: "batch", 1: "sequence"} for n in names},
                "logits": {0: "batch"},
            },
            opset_version=17,
            dynamo=False,
        )


def _replace_dir(tmp: Path, out: Path) -> None:
    """Move a finished model directory into place, replacing what was there."""
    old: Path | None = None
    if out.exists():
        old = out.parent / f".{out.name}.old-{os.getpid()}-{time.monotonic_ns()}"
        os.replace(out, old)
    try:
        os.replace(tmp, out)
    except BaseException:
        if old is not None:
            os.replace(old, out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
