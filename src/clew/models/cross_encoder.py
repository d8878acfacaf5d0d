"""Cross-encoder reranking: training one from the packaged MiniLM, and scoring with it.

A cross-encoder reads the query and one passage together and returns one relevance logit.
:func:`train_cross_encoder` fine-tunes one from the packaged all-MiniLM-L6-v2 encoder (a
classification head on top, listwise softmax cross-entropy over one positive and hard negatives
per group) and writes a directory that three things can load: :class:`CrossEncoderReranker`
(onnxruntime, through ``model.onnx``), transformers (``save_pretrained``) and
``sentence_transformers.CrossEncoder``.

:class:`CrossEncoderReranker` scores on onnxruntime when the directory has ``model.onnx`` and
``tokenizer.json``, otherwise on torch through transformers. Both backends tokenize with the
``tokenizers`` library exactly as training did: the pair (query, passage), truncated
``longest_first`` to ``max_length`` so a short query is kept whole and the passage is cut.
Loaded sessions are shared per process, so constructing a reranker is cheap.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import math
import os
import random
import shutil
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from clew.errors import ModelError
from clew.models.embedder import _hub_snapshot, _sha256, packaged_minilm_dir
from clew.protocols import RerankCandidate, RerankScores

log = logging.getLogger(__name__)

META_FILE = "clew-reranker.json"
"""What :func:`train_cross_encoder` writes next to the weights (the TrainReport, kind)."""

MIN_LENGTH = 16
"""Shortest truncation length accepted: room for the special tokens and some text."""

IntArray = npt.NDArray[np.int64]


def passage_text(title: str, text: str) -> str:
    """The passage a cross-encoder reads for a chunk (the same in training and scoring)."""
    return f"{title}\n{text}" if title else text


# --------------------------------------------------------------------------- tokenization


class _PairTokenizer:
    """(query, passage) pairs → padded int64 arrays, truncated ``longest_first``."""

    def __init__(self, path: Path, max_length: int, pad_id: int) -> None:
        from tokenizers import Tokenizer

        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as exc:
            raise ModelError(f"cannot load tokenizer {str(path)!r}: {exc}") from exc
        tok.no_padding()
        tok.enable_truncation(max_length, strategy="longest_first")
        self._tok = tok
        self.max_length = max_length
        self.pad_id = pad_id

    def encode(self, query: str, passages: Sequence[str]) -> list[Any]:
        if not passages:
            return []
        return list(self._tok.encode_batch([(query, p) for p in passages]))

    def arrays(self, encodings: Sequence[Any]) -> tuple[IntArray, IntArray, IntArray]:
        """input_ids, attention_mask, token_type_ids, right-padded to the longest in the batch."""
        width = max(len(e.ids) for e in encodings)
        ids = np.full((len(encodings), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        types = np.zeros((len(encodings), width), dtype=np.int64)
        for row, e in enumerate(encodings):
            n = len(e.ids)
            ids[row, :n] = e.ids
            mask[row, :n] = 1
            types[row, :n] = e.type_ids
        return ids, mask, types


# --------------------------------------------------------------------------- model files


def load_reranker_meta(path: str | Path) -> dict[str, Any]:
    """The ``clew-reranker.json`` of a model directory, or ``{}`` when it has none."""
    f = Path(path).expanduser() / META_FILE
    if not f.is_file():
        return {}
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelError(
            f"cannot read {str(f)!r}: {exc}; expected the JSON written by train_cross_encoder"
        ) from exc
    if not isinstance(data, dict):
        raise ModelError(f"{str(f)!r} holds {type(data).__name__}; expected a JSON object")
    return data


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


@dataclass(frozen=True, slots=True)
class _Files:
    """Resolved files of one cross-encoder."""

    directory: Path
    name: str
    backend: str
    """``onnx`` or ``torch``."""
    weights: Path
    tokenizer: Path
    length_limit: int
    """Longest input the model takes (position embeddings); 0 = unknown."""
    default_length: int
    """Truncation length when the caller gives none (training meta, tokenizer config)."""
    pad_id: int
    type_ids: bool
    """Feed the tokenizer's segment ids (False: zeros, for a single-segment vocabulary)."""


_EXPECTED = (
    "a directory written by train_cross_encoder, a cross-encoder directory (config.json + "
    "tokenizer.json + model.safetensors or pytorch_model.bin, or model.onnx + tokenizer.json), "
    "or a hub name present in the local Hugging Face cache"
)


def _model_dir(model: str) -> tuple[Path, str]:
    path = Path(model).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelError(f"reranker model {model!r} is a file; expected {_EXPECTED}")
        return path, path.resolve().name
    if "/" in model and not model.startswith((".", "/", "~")) and model.count("/") == 1:
        try:
            return _hub_snapshot(model), model
        except ModelError as exc:
            raise ModelError(
                f"reranker model {model!r} is neither a local directory nor in the local Hugging "
                f"Face cache (clew never downloads); expected {_EXPECTED}"
            ) from exc
    raise ModelError(f"reranker model {model!r} does not exist; expected {_EXPECTED}")


def _resolve(model: str) -> _Files:
    if not model:
        raise ModelError(f"reranker model {model!r} is empty; expected {_EXPECTED}")
    path, name = _model_dir(model)
    tokenizer = path / "tokenizer.json"
    if not tokenizer.is_file():
        raise ModelError(f"reranker model {model!r} has no tokenizer.json; expected {_EXPECTED}")
    onnx = next(
        (p for p in (path / "model.onnx", path / "onnx" / "model.onnx") if p.is_file()), None
    )
    config = _read_json(path / "config.json")
    if onnx is not None:
        backend, weights = "onnx", onnx
    else:
        weights = path / "model.safetensors"
        if not weights.is_file():
            weights = path / "pytorch_model.bin"
        if not weights.is_file() or not config:
            raise ModelError(f"{model!r} is not a cross-encoder directory; expected {_EXPECTED}")
        backend = "torch"
    labels = config.get("id2label")
    if isinstance(labels, dict) and len(labels) != 1:
        raise ModelError(
            f"reranker model {model!r} has {len(labels)} output labels; expected a cross-encoder "
            "with one relevance logit (num_labels=1)"
        )
    positions = config.get("max_position_embeddings")
    limit = positions if isinstance(positions, int) and positions > 0 else 0
    if limit and "roberta" in str(config.get("model_type", "")).lower():
        limit -= 2  # RoBERTa positions start after the padding index
    default = 512
    meta = load_reranker_meta(path)
    tok_cfg = _read_json(path / "tokenizer_config.json").get("model_max_length")
    for value in (meta.get("max_length"), tok_cfg):
        if isinstance(value, int) and 0 < value <= 100_000:
            default = value
            break
    pad = config.get("pad_token_id")
    type_vocab = config.get("type_vocab_size")
    return _Files(
        directory=path,
        name=name,
        backend=backend,
        weights=weights,
        tokenizer=tokenizer,
        length_limit=limit,
        default_length=default,
        pad_id=pad if isinstance(pad, int) and pad >= 0 else 0,
        type_ids=not (isinstance(type_vocab, int) and type_vocab <= 1),
    )


# --------------------------------------------------------------------------- backends


class _Runner(Protocol):
    def logits(self, ids: IntArray, mask: IntArray, types: IntArray) -> npt.NDArray[np.float32]:
        """One relevance logit per row."""
        ...


class _OnnxRunner:
    def __init__(self, path: Path, threads: int) -> None:
        from clew.models.embedder import onnx_session

        self._session = onnx_session(path, threads)
        inputs = [i.name for i in self._session.get_inputs()]
        known = {"input_ids", "attention_mask", "token_type_ids"}
        if "input_ids" not in inputs or not set(inputs) <= known:
            raise ModelError(
                f"ONNX model {str(path)!r} takes inputs {inputs}; expected input_ids and "
                "optionally attention_mask and token_type_ids"
            )
        self._inputs = inputs
        outputs = [o.name for o in self._session.get_outputs()]
        self._output = "logits" if "logits" in outputs else outputs[0]
        width = self._session.get_outputs()[outputs.index(self._output)].shape[-1]
        if isinstance(width, int) and width != 1:
            raise ModelError(
                f"ONNX model {str(path)!r} returns {width} logits per pair; expected one "
                "relevance logit (a cross-encoder with num_labels=1)"
            )

    def logits(self, ids: IntArray, mask: IntArray, types: IntArray) -> npt.NDArray[np.float32]:
        given = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        feed = {n: given[n] for n in self._inputs}
        out = self._session.run([self._output], feed)[0]
        return np.asarray(out, dtype=np.float32).reshape(len(ids), -1)[:, 0]


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """Silence transformers' load report and progress bars (a new head is expected)."""
    from transformers.utils import logging as _hf_logging

    hf_logging: Any = _hf_logging  # some of its helpers are untyped
    verbosity = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def _import_torch(what: str) -> tuple[Any, Any]:
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise ModelError(
            f"{what} needs torch and transformers: pip install 'clew[torch]'"
            " (or score with a directory holding model.onnx + tokenizer.json)"
        ) from exc
    return torch, transformers


def _forward_kwargs(model: Any) -> frozenset[str]:
    params = inspect.signature(model.forward).parameters
    return frozenset(n for n in ("attention_mask", "token_type_ids") if n in params)


class _TorchRunner:
    def __init__(self, directory: Path) -> None:
        torch, transformers = _import_torch(f"scoring with {str(directory)!r}")
        try:
            with _quiet_transformers():
                model = transformers.AutoModelForSequenceClassification.from_pretrained(
                    str(directory), local_files_only=True
                )
        except Exception as exc:
            raise ModelError(f"cannot load cross-encoder {str(directory)!r}: {exc}") from exc
        if int(model.config.num_labels) != 1:
            raise ModelError(
                f"cross-encoder {str(directory)!r} has num_labels={model.config.num_labels}; "
                "expected one relevance logit (num_labels=1)"
            )
        self._torch = torch
        self._model = model.eval()
        self._takes = _forward_kwargs(model)

    def logits(self, ids: IntArray, mask: IntArray, types: IntArray) -> npt.NDArray[np.float32]:
        torch = self._torch
        given = {"attention_mask": mask, "token_type_ids": types}
        kwargs = {n: torch.from_numpy(given[n]) for n in self._takes}
        with torch.inference_mode():
            out = self._model(input_ids=torch.from_numpy(ids), **kwargs).logits
        return np.asarray(out.float().numpy(), dtype=np.float32).reshape(len(ids), -1)[:, 0]


_RUNNERS: dict[tuple[str, str, int, int, int], _Runner] = {}
_TOKENIZERS: dict[tuple[str, int, int, int, int], _PairTokenizer] = {}
_LOCK = threading.Lock()


def _stamp(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


def _runner(files: _Files, threads: int) -> _Runner:
    # keyed by the weights' size and mtime too: a model retrained into the same directory is
    # loaded afresh instead of serving the old session
    key = (str(files.weights.resolve()), files.backend, threads, *_stamp(files.weights))
    with _LOCK:
        runner = _RUNNERS.get(key)
        if runner is None:
            if files.backend == "onnx":
                runner = _OnnxRunner(files.weights, threads)
            else:
                runner = _TorchRunner(files.directory)
            _RUNNERS[key] = runner
        return runner


def _tokenizer(files: _Files, max_length: int) -> _PairTokenizer:
    key = (str(files.tokenizer.resolve()), max_length, files.pad_id, *_stamp(files.tokenizer))
    with _LOCK:
        tok = _TOKENIZERS.get(key)
        if tok is None:
            tok = _PairTokenizer(files.tokenizer, max_length, files.pad_id)
            _TOKENIZERS[key] = tok
        return tok


# --------------------------------------------------------------------------- reranker


class CrossEncoderReranker:
    """A :class:`~clew.protocols.Reranker` scoring each (query, passage) pair with a
    cross-encoder. Scores are the raw logits; ``explain[i]`` is ``{"logit": score}``.

    ``model`` is a local directory or a hub name resolved from the local Hugging Face cache.
    ``threads`` sets onnxruntime's intra-op threads (0 = one per core); the torch backend uses
    torch's process-wide setting. The model loads at the first :meth:`score`, once per process.
    """

    def __init__(
        self,
        model: str,
        *,
        max_length: int | None = None,
        batch_size: int = 16,
        threads: int = 0,
    ) -> None:
        if max_length is not None and max_length < MIN_LENGTH:
            raise ModelError(
                f"cross-encoder max_length={max_length} is too short; allowed: >= {MIN_LENGTH} "
                "or None (the model's own limit)"
            )
        if batch_size < 1:
            raise ModelError(f"cross-encoder batch_size={batch_size}; allowed: >= 1")
        if threads < 0:
            raise ModelError(f"cross-encoder threads={threads}; allowed: >= 0 (0 = all cores)")
        self._files = _resolve(str(model))
        self.name = f"cross-encoder:{self._files.name}"
        self.version = _sha256(self._files.weights)[:16]
        length = max_length or self._files.default_length
        if self._files.length_limit:
            length = min(length, self._files.length_limit)
        self.max_length = max(length, MIN_LENGTH)
        self.batch_size = batch_size
        self.threads = threads
        self.backend = self._files.backend
        self._loaded: tuple[_Runner, _PairTokenizer] | None = None

    def _load(self) -> tuple[_Runner, _PairTokenizer]:
        loaded = self._loaded
        if loaded is None:
            loaded = (_runner(self._files, self.threads), _tokenizer(self._files, self.max_length))
            self._loaded = loaded
        return loaded

    def score(self, query: str, candidates: Sequence[RerankCandidate]) -> RerankScores:
        if not candidates:
            return RerankScores(scores=(), explain=())
        runner, tok = self._load()
        encodings = tok.encode(query, [passage_text(c.title, c.text) for c in candidates])
        out = np.zeros(len(candidates), dtype=np.float32)
        # longest first, so each batch pads little; the order never changes a score
        order = sorted(range(len(encodings)), key=lambda i: (-len(encodings[i].ids), i))
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            ids, mask, types = tok.arrays([encodings[i] for i in idx])
            if not self._files.type_ids:
                types = np.zeros_like(types)
            out[idx] = runner.logits(ids, mask, types)
        scores = tuple(float(s) for s in out)
        return RerankScores(scores=scores, explain=tuple({"logit": s} for s in scores))


# --------------------------------------------------------------------------- training


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
    path, _ = _model_dir(base)
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
    torch, transformers = _import_torch("training a cross-encoder")
    config = _read_json(base_dir / "config.json")
    positions = config.get("max_position_embeddings")
    if isinstance(positions, int) and max_length > positions:
        raise ModelError(
            f"train_cross_encoder max_length={max_length} exceeds the base model's "
            f"{positions} positions; allowed: {MIN_LENGTH}..{positions}"
        )

    torch.manual_seed(seed)
    try:
        with _quiet_transformers():
            model = transformers.AutoModelForSequenceClassification.from_pretrained(
                str(base_dir), num_labels=1, local_files_only=True
            )
    except Exception as exc:
        raise ModelError(f"cannot load base model {str(base_dir)!r}: {exc}") from exc
    pad = config.get("pad_token_id")
    tok = _PairTokenizer(
        base_dir / "tokenizer.json", max_length, pad if isinstance(pad, int) and pad >= 0 else 0
    )
    takes = _forward_kwargs(model)
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
        with _quiet_transformers():
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
    tok: _PairTokenizer,
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
