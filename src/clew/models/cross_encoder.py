"""Cross-encoder reranking: scoring (query, passage) pairs with a trained cross-encoder.

A cross-encoder reads the query and one passage together and returns one relevance logit.
:class:`CrossEncoderReranker` loads a directory written by
:func:`clew.train.cross_encoder.train_cross_encoder` (or any cross-encoder directory, or a hub
name in the local Hugging Face cache) and scores on onnxruntime when the directory has
``model.onnx`` and ``tokenizer.json``, otherwise on torch through transformers. Both backends
tokenize with the ``tokenizers`` library exactly as training did: the pair (query, passage),
truncated ``longest_first`` to ``max_length`` so a short query is kept whole and the passage is
cut. Loaded sessions are shared per process, so constructing a reranker is cheap.

The helpers training shares with scoring (:class:`PairTokenizer`, :func:`model_dir`,
:func:`read_json`, :func:`import_torch`, :func:`quiet_transformers`, :func:`forward_kwargs`)
live here, so a trained model is read exactly as it was written.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import threading
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from clew.errors import ModelError
from clew.models.embedder import hub_snapshot, weights_sha256
from clew.protocols import RerankCandidate, RerankScores

META_FILE = "clew-reranker.json"
"""What :func:`train_cross_encoder` writes next to the weights (the TrainReport, kind)."""

MIN_LENGTH = 16
"""Shortest truncation length accepted: room for the special tokens and some text."""

IntArray = npt.NDArray[np.int64]


def passage_text(title: str, text: str) -> str:
    """The passage a cross-encoder reads for a chunk (the same in training and scoring)."""
    return f"{title}\n{text}" if title else text


# --------------------------------------------------------------------------- tokenization


class PairTokenizer:
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


def read_json(path: Path) -> dict[str, Any]:
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


def model_dir(model: str) -> tuple[Path, str]:
    path = Path(model).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelError(f"reranker model {model!r} is a file; expected {_EXPECTED}")
        return path, path.resolve().name
    if "/" in model and not model.startswith((".", "/", "~")) and model.count("/") == 1:
        try:
            return hub_snapshot(model), model
        except ModelError as exc:
            raise ModelError(
                f"reranker model {model!r} is neither a local directory nor in the local Hugging "
                f"Face cache (clew never downloads); expected {_EXPECTED}"
            ) from exc
    raise ModelError(f"reranker model {model!r} does not exist; expected {_EXPECTED}")


def _resolve(model: str) -> _Files:
    if not model:
        raise ModelError(f"reranker model {model!r} is empty; expected {_EXPECTED}")
    path, name = model_dir(model)
    tokenizer = path / "tokenizer.json"
    if not tokenizer.is_file():
        raise ModelError(f"reranker model {model!r} has no tokenizer.json; expected {_EXPECTED}")
    onnx = next(
        (p for p in (path / "model.onnx", path / "onnx" / "model.onnx") if p.is_file()), None
    )
    config = read_json(path / "config.json")
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
    tok_cfg = read_json(path / "tokenizer_config.json").get("model_max_length")
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
def quiet_transformers() -> Iterator[None]:
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


def import_torch(what: str) -> tuple[Any, Any]:
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise ModelError(
            f"{what} needs torch and transformers: pip install 'clew[torch]'"
            " (or score with a directory holding model.onnx + tokenizer.json)"
        ) from exc
    return torch, transformers


def forward_kwargs(model: Any) -> frozenset[str]:
    params = inspect.signature(model.forward).parameters
    return frozenset(n for n in ("attention_mask", "token_type_ids") if n in params)


class _TorchRunner:
    def __init__(self, directory: Path) -> None:
        torch, transformers = import_torch(f"scoring with {str(directory)!r}")
        try:
            with quiet_transformers():
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
        self._takes = forward_kwargs(model)

    def logits(self, ids: IntArray, mask: IntArray, types: IntArray) -> npt.NDArray[np.float32]:
        torch = self._torch
        given = {"attention_mask": mask, "token_type_ids": types}
        kwargs = {n: torch.from_numpy(given[n]) for n in self._takes}
        with torch.inference_mode():
            out = self._model(input_ids=torch.from_numpy(ids), **kwargs).logits
        return np.asarray(out.float().numpy(), dtype=np.float32).reshape(len(ids), -1)[:, 0]


_RUNNERS: dict[tuple[str, str, int, int, int], _Runner] = {}
_TOKENIZERS: dict[tuple[str, int, int, int, int], PairTokenizer] = {}
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


def _tokenizer(files: _Files, max_length: int) -> PairTokenizer:
    key = (str(files.tokenizer.resolve()), max_length, files.pad_id, *_stamp(files.tokenizer))
    with _LOCK:
        tok = _TOKENIZERS.get(key)
        if tok is None:
            tok = PairTokenizer(files.tokenizer, max_length, files.pad_id)
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
        self.version = weights_sha256(self._files.weights)[:16]
        length = max_length or self._files.default_length
        if self._files.length_limit:
            length = min(length, self._files.length_limit)
        self.max_length = max(length, MIN_LENGTH)
        self.batch_size = batch_size
        self.threads = threads
        self.backend = self._files.backend
        self._loaded: tuple[_Runner, PairTokenizer] | None = None

    def _load(self) -> tuple[_Runner, PairTokenizer]:
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
