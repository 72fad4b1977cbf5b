"""Stage 1, env: the Python, the packages the stages import, CUDA and the card. Where the project's
dependencies are missing and ``.gpu/`` (``bench/gpu.sh --prepare``) travelled, it is unpacked
first (:mod:`gpu_env`); where they are still missing the run stops here and says which.

:class:`EnvStage` runs in the orchestrator; :func:`cmd_envcheck` (``gpu.py _envcheck``) in the
project's environment."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import gpu_env

from .common import last_json, tail
from .record import Recorder


class EnvStage(Recorder):
    def envcheck(self) -> tuple[dict | None, Path]:
        a = self.args
        rc, out, log = self.call(self.helper("_envcheck", "--device", a.device, *(["--model", self.model] if self.model else [])),
                                 "envcheck", 300)
        return last_json(out), log

    def stage_env(self) -> bool:
        """One check where everything imports (here); on the device: check, unpack .gpu and link the
        working tree's package, check again."""
        st = self.stage("env")
        t = time.monotonic()
        a = self.args
        self.env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
                         "SDR_NO_CACHE": "1", "SDR_CACHE_DIR": str(self.work / "cache"), "TOKENIZERS_PARALLELISM": "true"})
        if a.model:
            self.model = a.model
        pack = Path(a.pack)
        st["pack"] = None
        info, log = self.envcheck()
        missing = set((info or {}).get("missing") or {})
        unpack = (pack / "MANIFEST.json").exists() and (a.use_pack or bool(missing - {"sdr_search"}))
        if unpack:
            self.log(f"unpacking {pack} into {a.env_dir} (missing here: {', '.join(sorted(missing)) or 'nothing'})")
            got = gpu_env.unpack(pack, Path(a.env_dir))
            self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [got["site"], os.environ.get("PYTHONPATH")]))
            self.env["SDR_REDIS_SERVER"] = got["redis_server"]
            self.model = a.model or got["model"]
            man = got["manifest"]
            self.data["packed"] = got["data"]
            st["pack"] = {"dir": str(pack), "env_dir": a.env_dir, "unpack_seconds": got["unpack_seconds"],
                          "corpus": man.get("corpus"), "model": man.get("model"), "packages": man.get("packages"),
                          "redis": man.get("redis"), "prepared_at": man.get("prepared_at")}
        if "sdr_search" in missing:  # not installed (the device): the working tree through a package farm
            farm = gpu_env.package_farm(self.work / "pkg")
            self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(farm), self.env.get("PYTHONPATH"),
                                                                    os.environ.get("PYTHONPATH")]))
            st["package_farm"] = str(farm)
        if unpack or "sdr_search" in missing:
            info, log = self.envcheck()
        if info is None:
            st.update(status="failed", reason="the environment check failed", error=tail(log))
            self.event("env: check failed")
            return False
        st.update(info)
        if info.get("missing"):
            st.update(status="failed", reason=f"modules missing: {', '.join(sorted(info['missing']))}",
                      fix=("on a development machine: bench/gpu.sh --prepare, then carry .gpu: "
                           "run(command='bash bench/gpu.sh', carry=['.gpu'])") if not unpack else
                      "bench/gpu.sh --prepare packs the project's dependency closure less the device image's packages "
                      "(gpu_env.packages_to_pack): install the missing ones in .venv, or take them out of gpu_env.NOT_PACKED")
            self.event(f"env: {st['reason']}")
            return False
        self.model = info["model_dir"]
        self.device = info["device"]
        if self.device != "cuda" and not a.dry_run and not a.allow_cpu:
            st.update(status="failed", reason=f"no CUDA device ({info.get('cuda_error') or 'torch.cuda.is_available() is False'}); "
                      "a full run on CPU would take hours (--allow-cpu to force it, --dry-run for the CPU smoke run)")
            self.event("env: no CUDA")
            return False
        self.env["SDR_DEVICE"] = self.device
        st["status"] = "ok"
        st["seconds"] = round(time.monotonic() - t, 1)
        self.event(f"env: ok ({info.get('gpu') or 'cpu'}, torch {info['versions'].get('torch')}, model {self.model})")
        self.save()
        return True


# subcommands run in the project's environment (they import torch and sdr_search)
MODULES = ("numpy", "scipy", "tqdm", "tokenizers", "safetensors", "transformers", "click", "celery", "kombu", "redis",
           "pydantic", "pydantic_settings", "bm25s", "nltk", "faiss", "torch", "sdr_search.core.encoder",
           "sdr_search.workers.app", "sdr_search.reranker.engine")


def import_project() -> tuple[dict[str, str], list[str]]:
    """Import every module of sdr_search (what a stage may import later, at module level): the
    failures, except those that only the HTTP service or the OpenSearch store would meet."""
    import importlib
    import pkgutil

    import sdr_search

    failed: dict[str, str] = {}
    tolerated: list[str] = []

    def onerror(name: str) -> None:
        e = sys.exc_info()[1]
        failed[name] = f"{type(e).__name__}: {e}"

    for info in pkgutil.walk_packages(sdr_search.__path__, "sdr_search.", onerror=onerror):
        if info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except Exception as e:  # noqa: BLE001
            top = (getattr(e, "name", None) or "").split(".")[0]
            if isinstance(e, ModuleNotFoundError) and top in gpu_env.NOT_NEEDED_MODULES:
                tolerated.append(f"{info.name} (needs {top})")
            else:
                failed[info.name] = f"{type(e).__name__}: {e}"
    return failed, tolerated


def cmd_envcheck(a: argparse.Namespace) -> int:
    """Import what the stages need (each failure reported, ``sdr_search`` when the project is not
    installed); with everything there, CUDA, the card, the model and one encode."""
    import importlib

    versions, missing = {}, {}
    for mod in MODULES:
        try:
            m = importlib.import_module(mod)
            versions[mod] = str(getattr(m, "__version__", "")) or "ok"
        except Exception as e:  # noqa: BLE001
            key = "sdr_search" if isinstance(e, ModuleNotFoundError) and (e.name or "").startswith("sdr_search") else mod
            missing[key] = f"{type(e).__name__}: {e}"
    info: dict[str, Any] = {"versions": {k: v for k, v in versions.items() if not k.startswith("sdr_search")},
                            "missing": missing, "python": sys.version.split()[0], "executable": sys.executable}
    if not missing:
        failed, info["not_needed_here"] = import_project()
        missing.update(failed)
    if missing:
        print(json.dumps(info))
        return 4
    import torch

    from sdr_search.core.encoder import SentenceEncoder, resolve_model_dir, resolve_precision
    from sdr_search.core.settings import EncoderSettings

    try:
        cuda = torch.cuda.is_available()
    except Exception as e:  # noqa: BLE001
        cuda, info["cuda_error"] = False, str(e)
    info["device"] = "cuda" if (a.device in ("auto", "cuda") and cuda) else "cpu"
    if cuda:
        p = torch.cuda.get_device_properties(0)
        info.update(gpu=torch.cuda.get_device_name(0), gpu_memory_gib=round(p.total_memory / 2**30, 1),
                    capability=f"{p.major}.{p.minor}", multiprocessors=p.multi_processor_count,
                    bf16=torch.cuda.is_bf16_supported(), torch_cuda=torch.version.cuda)
    model = resolve_model_dir(a.model)
    info["model_dir"] = str(model)
    info["auto_precision"] = resolve_precision("auto", torch.device(info["device"]))
    enc = SentenceEncoder(settings=EncoderSettings(model=str(model), device=info["device"]))
    v = enc.encode(["The court dismissed the appeal.", "A tenant must give notice."])
    info["encoder"] = {"backend": enc.backend, "dim": int(v.shape[1]), "precision": enc.precision, "cache_tag": enc.cache_tag}
    from sdr_search.core.sentences import default_splitter

    info["sentence_splitter"] = str(getattr(default_splitter(), "source", "?"))
    print(json.dumps(info))
    return 0
