"""The encoder on ONNX Runtime: a model directory exported once to ONNX, run without torch.

``SDR_ENCODER_BACKEND=onnx`` runs the model's forward pass (token ids and attention mask in, the
last hidden state out) in float32 through ONNX Runtime's CPU provider; ``onnx-int8`` runs the same
graph with its weight matrices quantised to int8 (dynamic quantisation: per-output-channel int8
weights, activations quantised per batch). Tokenising (``tokenizers`` with the directory's
``tokenizer.json``: the token ids and truncation of the torch path), batching under the token
budget and pooling (with the attention mask, in numpy) stay the encoder's.

**The export.** Any local HuggingFace directory that ``transformers.AutoModel`` loads (the bundled
all-MiniLM-L6-v2, a model ``sdr train`` wrote, an MPNet...) is exported once, with dynamic batch
and sequence axes, by ``torch.onnx.export`` (torch's exporter; needs torch, transformers and
``onnxscript``), and quantised by ``onnxruntime.quantization.quantize_dynamic``. The files live
in ``$SDR_CACHE_DIR/onnx/<model content hash>-e<EXPORT_VERSION>/`` (``model.onnx``,
``model-int8.onnx``, ``export.json``): made on first use (the encoder's first load), or ahead of
time by loading the encoder once:

    SDR_ENCODER_BACKEND=onnx-int8 python -c "from sdr_search.core.encoder import SentenceEncoder; SentenceEncoder().load()"

(``SDR_MODEL=DIR`` for another model; ``onnx-int8`` writes both files), and then reused by every
process (writes are atomic; concurrent first uses export once, under a file lock). Nothing is
downloaded. A process without torch (a CPU-only install) needs the files made beforehand, where
torch is installed, in the same cache directory (the key is the hash of the model's files, so a
copied ``onnx/`` directory serves the same model).

**Vectors and the encoder tag.** fp32 ONNX gives the torch fp32 path's vectors to float noise
(cosine > 0.99999 on real sentences), so it carries the same tag (``...|fp32|...``): a store
built with either accepts queries encoded by the other, and the embedding cache serves both.
int8 vectors differ (mean cosine ~0.99 to fp32), so they carry their own precision
``int8`` in the tag (with the quantisation recipe's version), and a store built in fp32 or bf16
refuses int8 queries, and the other way round. int8 results also depend on the CPU's integer
kernels (VNNI or not), as bf16's depend on native bf16.
"""

from __future__ import annotations

import json
import logging
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from .bert import casing_disagreement
from .errors import InvalidInputError, ModelNotFoundError

__all__ = ["ONNX_BACKENDS", "INT8_TAG", "EXPORT_VERSION", "onnx_support", "onnx_dir", "ensure_onnx", "export_onnx",
           "quantize_int8", "OnnxModel", "pool_numpy", "pad_numpy"]

logger = logging.getLogger(__name__)

ONNX_BACKENDS = {"onnx": "fp32", "onnx-int8": "int8"}
"""``SDR_ENCODER_BACKEND`` values run by ONNX Runtime, and the precision each computes."""

EXPORT_VERSION = 1
"""Part of the export directory's name: raise it when the export or the quantisation changes the
files (a new directory is made; old ones can be deleted)."""

INT8_TAG = "int8q1"
"""The precision part of an int8 encoder's tag: int8 and the quantisation recipe (raise the number
when :func:`quantize_int8` changes the vectors)."""

FILES = {"fp32": "model.onnx", "int8": "model-int8.onnx"}
_OPSET = 18


def onnx_support(path: Path) -> str | None:
    """None when the ONNX backend can run the model directory ``path``; otherwise why not."""
    if not (path / "tokenizer.json").is_file():
        return "no tokenizer.json (the ONNX backend tokenises with the tokenizers library)"
    return casing_disagreement(path)


def onnx_dir(fingerprint: str, root: Path | None = None) -> Path:
    """Where the export of the model whose content hash is ``fingerprint`` lives."""
    if root is None:
        from .settings import CacheSettings

        root = CacheSettings().cache_dir
    return Path(root) / "onnx" / f"{fingerprint}-e{EXPORT_VERSION}"


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive lock on ``directory/.lock`` (one export at a time across processes)."""
    import fcntl

    with (directory / ".lock").open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_onnx(model_dir: Path, fingerprint: str, variant: str = "fp32", *, root: Path | None = None) -> Path:
    """The ONNX file of ``model_dir`` in ``variant`` (``fp32`` or ``int8``), exported (and
    quantised) on first use; afterwards read from the cache directory."""
    if variant not in FILES:
        raise InvalidInputError(f"unknown ONNX variant {variant!r}; choose from {', '.join(FILES)}")
    directory = onnx_dir(fingerprint, root)
    target = directory / FILES[variant]
    if target.is_file():
        return target
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ModelNotFoundError(f"cannot write the ONNX export of {model_dir} to {directory}: {e}") from e
    with _locked(directory):
        if target.is_file():  # another process made it while this one waited
            return target
        fp32 = directory / FILES["fp32"]
        record = _read_record(directory)
        if not fp32.is_file():
            t = time.perf_counter()
            record = export_onnx(model_dir, fp32)
            record["export_s"] = round(time.perf_counter() - t, 2)
        if variant == "int8":
            t = time.perf_counter()
            record["int8"] = quantize_int8(fp32, target)
            record["int8"]["quantize_s"] = round(time.perf_counter() - t, 2)
        record.update(model_dir=str(model_dir), fingerprint=fingerprint, export_version=EXPORT_VERSION)
        _write_atomic(directory / "export.json", json.dumps(record, indent=1).encode())
        return target


def _read_record(directory: Path) -> dict:
    try:
        data = json.loads((directory / "export.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def export_onnx(model_dir: Path, out: Path) -> dict:
    """Export the model directory ``model_dir`` (``transformers.AutoModel``, float32) to the ONNX
    file ``out``: inputs ``input_ids`` and ``attention_mask`` (int64, dynamic batch and sequence
    axes), output ``last_hidden_state``. Needs torch, transformers and onnxscript (torch's
    exporter). Returns what was used, for ``export.json``."""
    try:
        import torch
        from transformers import AutoModel
        from transformers.utils import logging as hf_logging
    except ImportError as e:
        raise ModelNotFoundError(
            f"no ONNX export of {model_dir} in {out.parent} yet, and making one needs torch and transformers ({e}): "
            "load the encoder once with the same settings where they are installed (SDR_ENCODER_BACKEND=onnx-int8 "
            "python -c 'from sdr_search.core.encoder import SentenceEncoder; SentenceEncoder().load()') and copy "
            f"{out.parent} here (or share SDR_CACHE_DIR), or use SDR_ENCODER_BACKEND=auto"
        ) from e
    logger.warning("exporting %s to ONNX (once per model, into %s)", model_dir, out.parent)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # a trained model's unused MLM head is expected, not news
    try:
        model = AutoModel.from_pretrained(str(model_dir), local_files_only=True, torch_dtype=torch.float32).eval()
    except (OSError, ValueError, KeyError) as e:
        raise ModelNotFoundError(f"cannot load a model from {model_dir} to export it: {e}") from e
    finally:
        hf_logging.set_verbosity(verbosity)

    class LastHidden(torch.nn.Module):
        def __init__(self, inner) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    wrapped = LastHidden(model).eval()
    ids = torch.full((2, 16), 1000, dtype=torch.long)  # 2 x 16: no axis of size 0 or 1 to specialise on
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    names = {"input_names": ["input_ids", "attention_mask"], "output_names": ["last_hidden_state"]}
    import warnings

    quiet = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "onnxscript")]
    levels = [q.level for q in quiet]
    for q in quiet:  # "torchvision is not installed", the exporter's progress lines
        q.setLevel(logging.ERROR)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        try:
            dyn = torch.export.Dim.DYNAMIC
            torch.onnx.export(wrapped, (ids, mask), str(tmp), dynamo=True, external_data=False, optimize=True,
                              opset_version=_OPSET, verbose=False,
                              dynamic_shapes={"input_ids": {0: dyn, 1: dyn}, "attention_mask": {0: dyn, 1: dyn}},
                              **names)
            exporter = "dynamo"
        except Exception as e:  # noqa: BLE001 - an architecture torch.export cannot capture: the TorchScript exporter
            logger.warning("torch.onnx.export (dynamo) failed for %s (%s); trying the TorchScript exporter", model_dir, e)
            axes = {"batch": 0, "sequence": 1}
            torch.onnx.export(wrapped, (ids, mask), str(tmp), dynamo=False, opset_version=17,
                              dynamic_axes={n: {v: k for k, v in axes.items()} for n in
                                            ("input_ids", "attention_mask", "last_hidden_state")}, **names)
            exporter = "torchscript"
        finally:
            for q, level in zip(quiet, levels):
                q.setLevel(level)
    os.replace(tmp, out)
    import onnxruntime

    return {"exporter": exporter, "torch": torch.__version__, "onnxruntime": onnxruntime.__version__,
            "opset": _OPSET if exporter == "dynamo" else 17, "hidden_size": int(model.config.hidden_size)}


def quantize_int8(src: Path, dst: Path) -> dict:
    """``dst``: ``src`` with its weight matrices (MatMul with a constant side) quantised to int8,
    one scale per output channel; activations are quantised per batch at run time. Per-tensor
    scales gave a mean cosine of 0.956 (min 0.89) to fp32 on IRLeD sentences, per channel 0.992
    (min 0.98)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    options = {"op_types_to_quantize": ["MatMul"], "per_channel": True, "weight_type": "QInt8"}
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the quantiser logs "consider pre-processing" on the root logger
    try:
        quantize_dynamic(str(src), str(tmp), op_types_to_quantize=["MatMul"], per_channel=True,
                         weight_type=QuantType.QInt8, extra_options={"MatMulConstBOnly": True})
    finally:
        root.setLevel(level)
    os.replace(tmp, dst)
    return options


def _threads() -> int:
    """ONNX Runtime's intra-op threads: ``SDR_TORCH_THREADS`` when set (the workers' per-process
    thread count, which the torch path obeys), else 0 (ONNX Runtime's default: one per core)."""
    try:
        return max(0, int(os.environ.get("SDR_TORCH_THREADS") or 0))
    except ValueError:
        return 0


def pad_numpy(ids: Sequence[Sequence[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded ``input_ids`` and ``attention_mask`` (int64 arrays), as the torch path pads."""
    longest = max((len(x) for x in ids), default=0)
    input_ids = np.full((len(ids), longest), pad_id, dtype=np.int64)
    mask = np.zeros((len(ids), longest), dtype=np.int64)
    for i, row in enumerate(ids):
        input_ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return input_ids, mask


def _normalize(x: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    return (x / np.maximum(norm, 1e-12)).astype(np.float32, copy=False)  # torch's F.normalize eps


def pool_numpy(hidden: np.ndarray, attention_mask: np.ndarray, mode: str = "mean", *, skip_first: int = 0) -> np.ndarray:
    """:func:`sdr_search.core.encoder.pool` in numpy: one L2-normalised float32 vector per row of
    ``hidden`` (batch, tokens, dim) with the pooling ``mode``."""
    hidden = hidden.astype(np.float32, copy=False)
    if mode == "cls":
        return _normalize(hidden[:, 0])
    if mode == "lasttoken":
        last = attention_mask.shape[1] - 1 - np.argmax(attention_mask[:, ::-1], axis=1)
        return _normalize(hidden[np.arange(hidden.shape[0]), last])
    mask = attention_mask
    if skip_first:
        mask = mask.copy()
        mask[:, :skip_first] = 0
    m = mask.astype(np.float32)
    if mode == "mean":
        pooled = np.einsum("bt,btd->bd", m, hidden) / np.maximum(m.sum(axis=1, keepdims=True), 1.0)
    elif mode == "max":
        pooled = np.where(m[..., None] == 0, np.float32(-1e9), hidden).max(axis=1)
    elif mode == "weightedmean":
        w = m * np.arange(1, hidden.shape[1] + 1, dtype=np.float32)[None, :]
        pooled = np.einsum("bt,btd->bd", w, hidden) / np.maximum(w.sum(axis=1, keepdims=True), 1e-9)
    else:
        raise InvalidInputError(f"unknown pooling {mode!r}")
    return _normalize(pooled)


class OnnxModel:
    """An ONNX Runtime session over an exported model (:meth:`hidden`: last hidden states)."""

    def __init__(self, path: Path, *, threads: int | None = None) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = _threads() if threads is None else threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001 - onnxruntime raises its own exception types
            raise ModelNotFoundError(f"cannot load the ONNX model {path}: {e}") from e
        self.path = path
        self.input_names = [i.name for i in self.session.get_inputs()]
        dim = self.session.get_outputs()[0].shape[-1]
        self.hidden_size = int(dim) if isinstance(dim, int) else int(_read_record(path.parent).get("hidden_size", 0))

    def to(self, device) -> "OnnxModel":
        return self

    def hidden(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """Last-layer token vectors ``(batch, tokens, hidden)``, float32."""
        feed = {"input_ids": input_ids, "attention_mask": attention_mask}
        return self.session.run(None, {k: v for k, v in feed.items() if k in self.input_names})[0]
