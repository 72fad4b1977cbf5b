"""Stage 2, encoder: :class:`SentenceEncoder` on CUDA, fp16 and bf16, over the first sentences of
the corpus: the whole pipeline and the bare forward pass on the same padded batches, for a sweep of
the token budget; the tokeniser's share; the cosine of each precision to fp32.

:class:`EncoderStage` runs in the orchestrator; :func:`cmd_encoder` (``gpu.py _encoder``) in the
project's environment."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from .common import TARGET_SENTENCES_PER_S, tail, write_atomic
from .record import Recorder


class EncoderStage(Recorder):
    def stage_encoder(self) -> None:
        a = self.args
        st = self.stage("encoder")
        budget = min(a.encoder_budget, self.left() - 30)
        if budget < 10:
            return self.skip("encoder", f"{self.left():.0f} s left")
        res = self.work / "encoder.json"
        precisions = a.precisions or ("bf16,fp16" if self.device == "cuda" else "bf16,fp32")  # the workers' first
        budgets = a.token_budgets or ("16384,65536,262144" if self.device == "cuda" else "4096")
        rc, out, log = self.call(self.helper(
            "_encoder", "--model", self.model, "--corpus", self.data["corpus"], "--device", self.device,
            "--sentences", str(a.encoder_sentences), "--precisions", precisions, "--budgets", budgets,
            "--repeat", "1" if a.dry_run else "2", "--out", str(res), "--seconds", str(budget - 5)), "encoder", budget + 20)
        got = json.loads(res.read_text()) if res.exists() else None
        if got is None:
            st.update(status="timeout" if rc is None else "failed", error=tail(log))
            self.event(f"encoder: {st['status']}")
        else:
            st.update(got)
            st["status"] = "ok" if rc == 0 and not got.get("cut_short") else ("timeout" if rc is None else "partial")
            best = got.get("best") or {}
            self.event(f"encoder: best pipeline {best.get('pipeline_sentences_per_s', 0):,.0f} sentences/s "
                       f"({best.get('precision')}, {best.get('max_batch_tokens')} tokens), target {TARGET_SENTENCES_PER_S:,}")
        self.save()


def cmd_encoder(a: argparse.Namespace) -> int:
    """Stage 2 (see the module docstring); writes its JSON to --out after every measurement."""
    import itertools

    import numpy as np
    import torch

    from sdr_search.core.documents import read_documents
    from sdr_search.core.encoder import SentenceEncoder, plan_batches
    from sdr_search.core.settings import EncoderSettings

    t_start = time.monotonic()
    stop_at = t_start + a.seconds
    res: dict[str, Any] = {"device": a.device, "rows": [], "target": TARGET_SENTENCES_PER_S}

    def save() -> None:
        write_atomic(Path(a.out), json.dumps(res, indent=1) + "\n")

    t = time.perf_counter()
    sentences: list[str] = []
    n_docs = 0
    for doc in itertools.islice(read_documents([a.corpus]), 0, None):
        n_docs += 1
        sentences.extend(doc.sentences)
        if len(sentences) >= a.sentences:
            break
    read_s = time.perf_counter() - t
    sentences = sentences[: a.sentences]
    res.update(sentences=len(sentences), documents_read=n_docs, read_seconds=round(read_s, 2),
               read_documents_per_s=round(n_docs / read_s, 1) if read_s else None,
               torch_threads=torch.get_num_threads())
    save()
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    ref_n = min(len(sentences), 2000 if cuda else 16)
    ref = SentenceEncoder(settings=EncoderSettings(model=a.model, precision="fp32", device=a.device)).encode(sentences[:ref_n])
    res["cosine"], res["cosine_sentences"] = {}, ref_n
    budgets = [int(x) for x in a.budgets.split(",")]
    cut_short = False
    for precision in a.precisions.split(","):
        if precision == "fp16" and not cuda:
            res.setdefault("skipped", []).append("fp16: not supported on CPU")
            continue
        enc = SentenceEncoder(settings=EncoderSettings(model=a.model, precision=precision, device=a.device,
                                                       max_batch_tokens=max(budgets)))
        enc.encode(sentences[: 256 if cuda else 8])  # load + warm up
        v = enc.encode(sentences[:ref_n])
        cos = np.sum(v * ref, axis=1)
        res["cosine"][precision] = {"min": float(cos.min()), "mean": float(cos.mean())}
        t = time.perf_counter()
        ids = enc.tokenize(sentences)
        tok_s = time.perf_counter() - t
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(enc.precision)
        model = enc._model
        for mbt in budgets:
            if time.monotonic() > stop_at:
                cut_short = True
                break
            enc.settings.max_batch_tokens = mbt
            batches = plan_batches([len(x) for x in ids], mbt)
            try:
                padded = [enc._tokenizer.pad([ids[i] for i in b]) for b in batches]
            except Exception:  # noqa: BLE001 - recorded by bare() below
                padded = None
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()

            def bare() -> None:
                if padded is None:
                    raise RuntimeError("the encoder's tokenizer has no pad(): bare forward not measured")
                with torch.inference_mode():
                    for input_ids, mask in padded:
                        input_ids, mask = input_ids.to(dev, non_blocking=True), mask.to(dev, non_blocking=True)
                        with torch.autocast(device_type=dev.type, dtype=dtype or torch.float32, enabled=dtype is not None):
                            model.hidden(input_ids, mask)
                if cuda:
                    torch.cuda.synchronize()

            if cuda:
                enc.encode(sentences[:4096])  # this budget's shapes, once
            times_pipe, times_bare, bare_error = [], [], None
            for _ in range(a.repeat):
                t = time.perf_counter()
                enc.encode(sentences)
                times_pipe.append(time.perf_counter() - t)
                if bare_error is None:
                    try:  # the encoder's internals (model.hidden, tokenizer.pad) may change under this script
                        t = time.perf_counter()
                        bare()
                        times_bare.append(time.perf_counter() - t)
                    except Exception as e:  # noqa: BLE001
                        bare_error = f"{type(e).__name__}: {e}"
                if time.monotonic() > stop_at:
                    break
            n = len(sentences)
            row = {"precision": enc.precision, "max_batch_tokens": mbt, "batches": len(batches), "mean_batch": round(n / len(batches), 1),
                   "pipeline_s": round(min(times_pipe), 3), "pipeline_sentences_per_s": round(n / min(times_pipe), 1),
                   "bare_s": round(min(times_bare), 4) if times_bare else None,
                   "bare_sentences_per_s": round(n / min(times_bare), 1) if times_bare else None, "bare_error": bare_error,
                   "tokenize_s": round(tok_s, 3), "tokenize_sentences_per_s": round(n / tok_s, 1),
                   "tokens": int(sum(len(x) for x in ids)),
                   "padded_tokens": int(sum(p[0].numel() for p in padded)) if padded else None,
                   "repeats": len(times_pipe)}
            if cuda:
                row["peak_gpu_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
            res["rows"].append(row)
            save()
        del enc
        if cuda:
            torch.cuda.empty_cache()
        if cut_short:
            break
    by_precision: dict[str, dict] = {}
    for row in res["rows"]:
        cur = by_precision.get(row["precision"])
        if cur is None or row["pipeline_sentences_per_s"] > cur["pipeline_sentences_per_s"]:
            by_precision[row["precision"]] = row
    res["by_precision"] = by_precision
    res["best"] = max(res["rows"], key=lambda r: r["pipeline_sentences_per_s"]) if res["rows"] else None
    bare_rows = [r for r in res["rows"] if r.get("bare_sentences_per_s")]
    res["best_bare"] = max(bare_rows, key=lambda r: r["bare_sentences_per_s"]) if bare_rows else None
    res["target_met"] = bool(res["best"] and res["best"]["pipeline_sentences_per_s"] >= TARGET_SENTENCES_PER_S)
    res["cut_short"] = cut_short
    res["seconds"] = round(time.monotonic() - t_start, 1)
    save()
    return 0
