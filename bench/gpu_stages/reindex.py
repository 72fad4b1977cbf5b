"""Stage 3, reindex: ``sdr reindex --store`` of the corpus through the workers (untrained encoder,
stage 2's best token budget): sentences/s of the indexing phase against the bare encoder's, then
the statistics and FAISS build. :meth:`ReindexStage.reindex` also builds the trained encoders'
stores (stage 5)."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time

from .common import cores, kill_group, last_json, tail
from .services import ServicesStage


class ReindexStage(ServicesStage):
    def reindex(self, name: str, model: str | None, timeout: float, on_poll=None) -> dict:
        """``sdr reindex --store WORK/stores/NAME`` through the workers; the summary (or an error)."""
        cmd = self.sdr("reindex", "--store", str(self.work / "stores" / name), self.data["corpus"], "--no-cache",
                       "--no-progress", "--batch-docs", str(self.args.batch_docs), *(["--model", model] if model else []))
        env = self.penv(SDR_BROKER_URL=self.redis_url, SDR_QUEUE=f"gpu-{os.getpid()}", SDR_MODEL=self.model)
        log = self.work / "logs" / f"reindex-{name}.log"
        (self.work / "stores").mkdir(exist_ok=True)
        self.log(f"$ sdr reindex --store stores/{name} ... {'--model ' + model if model else '(untrained)'} (timeout {timeout:.0f} s)")
        t = time.monotonic()
        offsets = self.log_sizes()
        if name == "base":
            self._base_offsets = offsets
        with log.open("w") as err, tempfile.TemporaryFile("w+") as outf:
            proc = subprocess.Popen(cmd, cwd=self.work, env=env, stdout=outf, stderr=err, text=True, start_new_session=True)
            index_phase = None
            while proc.poll() is None:
                if index_phase is None and self.stats_phase_started(offsets):
                    index_phase = time.monotonic() - t
                    self.event(f"reindex {name}: indexing phase over after {index_phase:.1f} s (statistics next)")
                if on_poll is not None:
                    on_poll()
                if time.monotonic() - t > timeout:
                    kill_group(proc)
                    proc.wait()
                    return {"status": "timeout", "error": tail(log), "wall_s": round(time.monotonic() - t, 1)}
                time.sleep(0.25)
            outf.seek(0)
            summary = last_json(outf.read())
        wall = time.monotonic() - t
        # `sdr reindex` exits 1 when any document failed, also when the new store was completed and
        # swapped in without the documents it rejected as input (the IRLeD corpus has 6 empty ones):
        # that store is what the later stages need, so it counts, with the rejected documents listed
        rejected = input_rejections(summary)
        usable = summary is not None and summary.get("swapped") and summary.get("complete", True)
        if summary is None or not usable or (proc.returncode != 0 and rejected is None):
            return {"status": "failed", "rc": proc.returncode, "summary": summary, "error": tail(log), "wall_s": round(wall, 1)}
        sentences = summary.get("sentences") or 0
        out = {"status": "ok", "summary": summary, "wall_s": round(wall, 1), "rc": proc.returncode,
               "rejected_documents": [f["id"] for f in rejected or []],
               "index_phase_detected_s": None if index_phase is None else round(index_phase, 1),
               "sentences": sentences,
               "index_sentences_per_s": round(sentences / summary["index_seconds"], 1) if summary.get("index_seconds") else None,
               "end_to_end_sentences_per_s": round(sentences / wall, 1) if wall else None,
               "stats_s": (summary.get("stats") or {}).get("seconds") or self.stats_window(offsets), "ann_s": summary.get("ann_seconds"),
               "store": str(self.work / "stores" / name)}
        return out

    def stage_reindex(self) -> None:
        a = self.args
        st = self.stage("reindex")
        enc = self.r["stages"].get("encoder") or {}
        rows = [r for r in enc.get("rows") or [] if r["precision"] == self.precision_used()]
        rate = lambda r: r["pipeline_sentences_per_s"]  # noqa: E731
        top = max(rows, key=rate) if rows else None
        current = next((r for r in rows if r["max_batch_tokens"] == self.batch_tokens), None)
        # the workers take stage 2's best token budget when it beats the one they started with by
        # more than 10 % (a restart of the workers costs about their start-up); never in a dry run
        chosen = a.batch_tokens or self.batch_tokens
        if not a.batch_tokens and not a.dry_run and top and (current is None or rate(top) > 1.1 * rate(current)):
            chosen = top["max_batch_tokens"]
        best = next((r for r in rows if r["max_batch_tokens"] == chosen), None) or top or {}
        self.restart_workers_if_needed(int(chosen))
        timeout = min(a.reindex_budget, self.left() - 20)
        if timeout < 20:
            return self.skip("reindex", f"{self.left():.0f} s left")
        try:
            self.workers_ready(min(180.0, timeout))
        except (RuntimeError, TimeoutError) as e:
            st.update(status="failed", error=str(e))
            self.event("reindex: workers failed to start")
            return self.save()
        st.update(workers=self.n_workers, torch_threads=max(1, cores() // self.n_workers), max_batch_tokens=self.batch_tokens,
                  batch_docs=a.batch_docs, precision=self.precision_used(), device=self.device)
        self.event("reindex: workers ready")
        got = self.reindex("base", None, timeout - 5, on_poll=self.maybe_start_training)  # TrainStage: training overlaps the statistics
        st.update(got)
        if got["status"] == "ok":
            bare = best.get("pipeline_sentences_per_s")
            st["bare_encoder_sentences_per_s"] = bare
            st["bare_encoder_note"] = (f"stage 2, one process, {self.precision_used()}, max_batch_tokens "
                                       f"{best.get('max_batch_tokens')}: encode() over the corpus's first sentences"
                                       if best else "stage 2 did not run in this call")
            if bare and got.get("index_sentences_per_s"):
                st["index_vs_bare"] = round(got["index_sentences_per_s"] / bare, 3)
            vs_bare = f"{st['index_vs_bare']:.0%} of the bare encoder" if st.get("index_vs_bare") else "no bare encoder figure"
            self.event(f"reindex: {got['sentences']:,} sentences, indexing {got.get('index_sentences_per_s') or 0:,.0f} "
                       f"sentences/s ({vs_bare}), statistics {got.get('stats_s')} s, "
                       f"FAISS {got.get('ann_s')} s, wall {got['wall_s']} s")
        else:
            self.event(f"reindex: {got['status']}")
        self.save()

    def precision_used(self) -> str:
        if self.args.precision != "auto":
            return self.args.precision
        return ((self.r["stages"].get("env") or {}).get("auto_precision")) or "fp32"


def input_rejections(summary: dict | None) -> list[dict] | None:
    """The failures of a reindex summary when every one is a document rejected as input (no
    sentence, say), else None: a worker or store failure is not an input's fault."""
    failures = (summary or {}).get("failures") or []
    if len(failures) != (summary or {}).get("failed", len(failures)):
        return None  # more failed than are listed: cannot tell what they were
    if all("empty document" in str(f.get("error", "")) for f in failures):
        return failures
    return None
