"""The ONNX Runtime encoder backend (sdr_core/onnx_backend.py) against the torch path, its reference.

The export (torch.onnx, 10-35 s on 2 cores) is made once per test session into a temporary cache
directory that every test here points ``SDR_CACHE_DIR`` at.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from sdr_search.core.encoder import SentenceEncoder, default_model_dir, model_fingerprint, pool
from sdr_search.core.errors import InvalidInputError, ModelMismatchError
from sdr_search.core.settings import EncoderSettings

pytest.importorskip("onnxruntime", reason="the ONNX backend needs onnxruntime (not installed)")

from sdr_search.core import onnx_backend  # noqa: E402
from sdr_search.core.onnx_backend import ensure_onnx, onnx_dir, pad_numpy, pool_numpy  # noqa: E402

unit = pytest.mark.unit
integration = pytest.mark.integration

SENTENCES = [
    "The appeal is dismissed.",
    "Costs.",
    "x",
    "   leading and trailing spaces   ",
    "The High Court erred in law when it construed Section 64 of the Income Tax Act against the assessee.",
    "The appellant's counsel, Mr. Sharma, relied on Art. 14 and s. 302 I.P.C. (1860).",
    "Ünïcödé café, naïve façade; 北京 and Москва — ‘quotes’ … ellipsis",
    "Anarchism is a political philosophy that advocates self-governed societies based on voluntary institutions.",
    "word " * 300,  # cut at 128 tokens
    "z" * 2000,
    "The respondent was in possession of the land since 1962 and paid the revenue for it every year.",
    "It is well settled that a writ of certiorari lies only where the inferior tribunal acted without jurisdiction.",
    "The learned Single Judge allowed the writ petition and quashed the order of the Board of Revenue.",
    "In our opinion, the Tribunal was right in holding that the assessee was not entitled to the deduction.",
    "The sale deed was executed on 12 March 1971 and registered the next day at the office of the Sub-Registrar.",
    "No question of law arises; the finding is one of fact.",
    "Mitochondria are the powerhouse of the cell.",
    "Paris is the capital and most populous city of France.",
    "The Treaty of Westphalia ended the Thirty Years' War in 1648.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "He was convicted under Section 302 read with Section 34 of the Indian Penal Code and sentenced to life.",
    "The notification was ultra vires the parent Act.",
    "Learned counsel for the State supported the judgment of the High Court.",
    "We accordingly set aside the order and remit the matter to the trial court for fresh disposal.",
    "A long sentence " + "with many clauses, each adding a little more to what was said, " * 12 + "ends here.",
    "The petition fails and is dismissed with costs.",
    "1.",
    "(ii)",
    "The evidence of PW-3 is corroborated by the medical evidence.",
    "The compensation awarded by the Land Acquisition Officer was enhanced by the reference court.",
]


@pytest.fixture(scope="session")
def onnx_root(tmp_path_factory):
    """A cache directory holding the bundled model's ONNX export (fp32 and int8), made once."""
    root = tmp_path_factory.mktemp("onnx-cache")
    path = default_model_dir()
    t = time.perf_counter()
    ensure_onnx(path, model_fingerprint(path), "int8", root=root)
    root.joinpath("export_seconds").write_text(f"{time.perf_counter() - t:.1f}")
    return root


@pytest.fixture()
def onnx_env(onnx_root, monkeypatch):
    monkeypatch.setenv("SDR_CACHE_DIR", str(onnx_root))
    return onnx_root


def _encoder(backend: str = "auto", precision: str = "auto") -> SentenceEncoder:
    return SentenceEncoder(settings=EncoderSettings(encoder_backend=backend, precision=precision, device="cpu"))


@unit
@pytest.mark.parametrize("mode", ["mean", "cls", "max", "weightedmean", "lasttoken"])
@pytest.mark.parametrize("skip_first", [0, 2])
def test_numpy_pooling_is_the_torch_pooling(mode, skip_first):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(4, 7, 16)).astype(np.float32)
    ids = [[1] * 7, [1] * 3, [1] * 5, [1] * 1]
    _, mask = pad_numpy(ids, 0)
    ours = pool_numpy(hidden, mask, mode, skip_first=skip_first)
    ref = pool(torch.from_numpy(hidden), torch.from_numpy(mask), mode, skip_first=skip_first).numpy()
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-6)


@unit
def test_padding_is_right_padding_with_the_pad_id():
    ids, mask = pad_numpy([[101, 7, 102], [101, 102]], 0)
    assert ids.tolist() == [[101, 7, 102], [101, 102, 0]] and mask.tolist() == [[1, 1, 1], [1, 1, 0]]
    assert ids.dtype == mask.dtype == np.int64


@unit
def test_the_onnx_backends_compute_on_the_cpu_in_their_own_precision():
    assert _encoder("onnx").precision == "fp32"
    assert _encoder("onnx-int8").precision == "int8"
    with pytest.raises(InvalidInputError, match="computes in fp32"):
        _ = _encoder("onnx", "bf16").precision
    with pytest.raises(InvalidInputError, match="CPU only"):
        _ = SentenceEncoder(settings=EncoderSettings(encoder_backend="onnx", device="cuda")).precision


@unit
def test_the_encoder_tag_changes_only_with_the_vectors():
    """fp32 ONNX gives torch fp32's vectors (same tag: stores and caches are shared); int8 does not."""
    fp32, onnx, int8, bf16 = _encoder("auto", "fp32"), _encoder("onnx"), _encoder("onnx-int8"), _encoder("auto", "bf16")
    assert onnx.cache_tag == fp32.cache_tag
    assert int8.cache_tag != fp32.cache_tag and "|int8q1|" in int8.cache_tag
    assert len({fp32.cache_tag, int8.cache_tag, bf16.cache_tag}) == 3


@integration
def test_onnx_vectors_agree_with_the_torch_path(onnx_env):
    ref = _encoder("auto", "fp32").encode(SENTENCES)
    fp32 = _encoder("onnx")
    a = fp32.encode(SENTENCES)
    assert fp32.backend == "onnx" and a.dtype == np.float32 and a.shape == ref.shape
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    assert np.sum(a * ref, axis=1).min() > 0.9999
    int8 = _encoder("onnx-int8")
    cos = np.sum(int8.encode(SENTENCES) * ref, axis=1)
    assert int8.backend == "onnx-int8"
    assert cos.mean() > 0.99 and cos.min() > 0.97, cos  # IRLeD sentences: mean 0.992, min 0.984 over 1,000


@integration
def test_token_ids_and_truncation_counts_match_the_torch_path(onnx_env):
    torch_enc, onnx_enc = _encoder("auto", "fp32"), _encoder("onnx")
    torch_cuts, onnx_cuts = [], []
    assert onnx_enc.tokenize(SENTENCES, cuts=onnx_cuts) == torch_enc.tokenize(SENTENCES, cuts=torch_cuts)
    assert onnx_cuts == torch_cuts and sum(1 for c in onnx_cuts if c) >= 2
    onnx_enc.encode(SENTENCES)
    torch_enc.encode(SENTENCES)
    assert onnx_enc.truncation == torch_enc.truncation
    assert onnx_enc.truncation.truncated == 2 * sum(1 for c in onnx_cuts if c)


@integration
def test_the_export_is_made_once_and_reused(onnx_env, monkeypatch):
    path = default_model_dir()
    directory = onnx_dir(model_fingerprint(path), onnx_env)
    files = {p.name: p.stat().st_mtime_ns for p in directory.glob("*.onnx")}
    assert set(files) == {"model.onnx", "model-int8.onnx"}

    def no_export(*_args, **_kwargs):
        raise AssertionError("exported again")

    monkeypatch.setattr(onnx_backend, "export_onnx", no_export)
    monkeypatch.setattr(onnx_backend, "quantize_int8", no_export)
    for backend in ("onnx", "onnx-int8"):
        enc = _encoder(backend)
        enc.encode(SENTENCES[:3])
        assert enc._model.path.parent == directory
    assert {p.name: p.stat().st_mtime_ns for p in directory.glob("*.onnx")} == files
    assert not list(directory.glob(".*.tmp"))  # written atomically, nothing left behind


@integration
def test_a_store_accepts_onnx_fp32_queries_and_refuses_int8(onnx_env, tmp_path):
    from sdr_search.indexer.embedded.store import EmbeddedStore
    from sdr_search.indexer.provenance import index_meta
    from sdr_search.reranker.sources import SourceResolver

    segmentation = {"paragraph_unit": "paragraph"}
    built = index_meta(_encoder("auto", "fp32"), segmentation)
    with EmbeddedStore(tmp_path / "store", create=True) as store:
        store.ensure_meta(built)
        assert store.ensure_meta(index_meta(_encoder("onnx"), segmentation)).encoder_tag == built.encoder_tag
        with pytest.raises(ModelMismatchError):
            store.ensure_meta(index_meta(_encoder("onnx-int8"), segmentation))
    SourceResolver(store=None, encoder=_encoder("onnx"), max_query_sentences=10).check_encoder(built)
    with pytest.raises(ModelMismatchError, match="int8q1"):
        SourceResolver(store=None, encoder=_encoder("onnx-int8"), max_query_sentences=10).check_encoder(built)


@integration
def test_the_onnx_path_encodes_without_torch(onnx_env):
    """With the export made, encoding imports neither torch nor transformers (a CPU-only install)."""
    code = ("import sys; from sdr_search.core.encoder import SentenceEncoder; "
            "from sdr_search.core.settings import EncoderSettings; "
            "e = SentenceEncoder(settings=EncoderSettings(encoder_backend='onnx-int8')); v = e.encode(['A sentence.', 'Another.']); "
            "print(v.shape, e.backend, sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True,
                         env={**os.environ, "SDR_CACHE_DIR": str(onnx_env)})
    assert out.stdout.strip() == "(2, 384) onnx-int8 []", out.stdout + out.stderr


@integration
def test_a_missing_export_without_torch_says_how_to_make_it(tmp_path, monkeypatch):
    """A process that cannot import torch and finds no export fails with the command that makes one."""
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    monkeypatch.setenv("SDR_CACHE_DIR", str(tmp_path))
    from sdr_search.core.errors import ModelNotFoundError

    with pytest.raises(ModelNotFoundError, match=r"SentenceEncoder\(\)\.load\(\)"):
        _encoder("onnx").encode(["A sentence."])
