"""Stage 4, train: ``sdr train`` on the corpus only (never queries or qrels), each objective of
``--objectives`` side by side. Training starts from the base reindex's poll loop once its indexing
phase is over (its statistics and FAISS build are CPU work) and is sized to the time left: a
calibration of each objective gives the step time."""

from __future__ import annotations

import gzip
import json
import math
import subprocess
import threading
import time
from pathlib import Path

from .common import OBJECTIVES, kill_group, last_json, tail
from .services import ServicesStage


class TrainStage(ServicesStage):
    def maybe_start_training(self) -> None:
        """Called from the base reindex's poll loop: once its indexing phase is over, training starts
        in a thread (calibration, sizing, the runs) and the reindex goes on with its statistics."""
        if self._train_thread is not None or "train" not in self.stages or self.args.no_overlap:
            return
        if self.stats_phase_started():
            self.start_training_thread()

    def start_training_thread(self) -> None:
        if self._train_thread is not None:
            return

        def flow() -> None:
            try:
                self.start_training()
                if any(not k.startswith("_") for k in self.trainings):
                    self.wait_trainings()
            except Exception as e:  # noqa: BLE001 - recorded; the other stages go on
                st = self.stage("train")
                st.update(status="failed", error=f"{type(e).__name__}: {e}")
                self.event(f"train: {type(e).__name__}: {e}")
                self.save()

        self._train_thread = threading.Thread(target=flow, name="train", daemon=True)
        self._train_thread.start()

    def join_training(self) -> None:
        if self._train_thread is not None:
            self._train_thread.join(timeout=max(1.0, self.left() + 5))

    def start_training(self) -> None:
        a = self.args
        st = self.stage("train")
        if self.trainings:
            return
        self.trainings = {"_started": True}
        objectives = [o for o in a.objectives.split(",") if o]
        st.update(objectives=objectives, started_at_s=round(self.elapsed(), 1), corpus=self.data["corpus"],
                  note="corpus documents only: no query or qrels file is passed to sdr train")
        for o in objectives:
            if o not in OBJECTIVES:
                st.setdefault("runs", {})[o] = {"status": "failed", "error": f"unknown objective {o!r}"}
        objectives = [o for o in objectives if o in OBJECTIVES]
        # what must still fit after training: a store and an evaluation per trained model
        store_est, eval_est = a.store_estimate, a.eval_estimate
        idx = (self.r["stages"].get("reindex") or {}).get("index_phase_detected_s")
        if idx:
            store_est = max(store_est, 2.0 * idx + 10)
        after = self.left() - a.final_reserve
        n_eval = len(objectives)
        while n_eval > 1 and after - n_eval * (store_est + eval_est) < a.min_train:
            n_eval -= 1
        train_end = time.monotonic() + after - n_eval * (store_est + eval_est)
        plan = {"store_estimate_s": store_est, "eval_estimate_s": eval_est, "models_planned_for_eval": n_eval,
                "train_window_s": round(train_end - time.monotonic(), 1)}
        st["plan"] = plan
        if train_end - time.monotonic() < a.min_train and not a.dry_run:
            for o in objectives:
                st.setdefault("runs", {})[o] = {"status": "skipped", "reason": f"{plan['train_window_s']} s for training"}
            self.skip("train", f"only {plan['train_window_s']} s left for training after the evaluations to come")
            return
        steps: dict[str, int] = {}
        if a.train_steps:
            steps = {o: a.train_steps for o in objectives}
            # the H200's loop ran 0.044-0.065 s/step after about 60 s of start-up (docs/results/gpu.md)
            need = 60.0 + 0.05 * a.train_steps
            if need > plan["train_window_s"] and not a.dry_run:
                self.event(f"train: warning: --train-steps {a.train_steps} needs about {need:.0f} s on an H200, the "
                           f"window is {plan['train_window_s']} s: the trained stores and their evaluations may not fit "
                           "(raise --budget or lower --train-steps)")
        elif a.dry_run:
            steps = {o: 2 for o in objectives}
        else:
            steps = self.calibrate(objectives, train_end)
        self.train_end = train_end
        for o in objectives:
            run = st.setdefault("runs", {}).setdefault(o, {})
            if steps.get(o, 0) < (1 if a.dry_run else a.min_steps):
                run.update(status="skipped", flags=OBJECTIVES[o], reason=f"{steps.get(o, 0)} steps fit the window")
                continue
            out_dir = self.work / "models" / o
            cmd = self.sdr("train", "--corpus", self.data["corpus"], "--out", str(out_dir), "--base", self.model,
                           *OBJECTIVES[o], "--steps", str(steps[o]), "--seed", "0", "--device", self.device,
                           "--checkpoint-every", "1000000", "--no-progress",
                           *(["--threads", str(a.train_threads)] if a.train_threads else []),
                           *(["--head-warmup-steps", str(a.head_warmup_steps)] if a.head_warmup_steps is not None and o == "sdr" else []),
                           *(["--head-warmup-steps", "2", "--batch-size", "4", "--threads", "1"] if a.dry_run else []))
            log = self.work / "logs" / f"train-{o}.log"
            outf = (self.work / "logs" / f"train-{o}.out").open("w")
            env = self.penv(**({"SDR_TRAIN_PROBE_PAIRS": "4"} if a.dry_run else {}))
            proc = subprocess.Popen(cmd, cwd=self.work, env=env, stdout=outf, stderr=log.open("w"), start_new_session=True)
            run.update(status="running", steps=steps[o], flags=OBJECTIVES[o], out=str(out_dir), started_at_s=round(self.elapsed(), 1))
            self.trainings[o] = {"proc": proc, "log": log, "out": self.work / "logs" / f"train-{o}.out", "t": time.monotonic()}
            self.event(f"train {o}: {steps[o]} steps ({' '.join(OBJECTIVES[o])})")
        self.save()

    def calibrate(self, objectives: list[str], train_end: float) -> dict[str, int]:
        """30 steps of each objective side by side on a 40-document slice: step time and start-up cost."""
        a = self.args
        st = self.stage("train")
        calib_corpus = self.work / "data" / "calibration.jsonl"
        opener = gzip.open if self.data["corpus"].endswith(".gz") else open
        with opener(self.data["corpus"], "rt", encoding="utf-8") as fh, calib_corpus.open("w") as out:
            for i, line in enumerate(fh):
                if i >= 40:
                    break
                out.write(line)
        n = a.calibration_steps
        procs = {}
        t = time.monotonic()
        for o in objectives:
            cmd = self.sdr("train", "--corpus", str(calib_corpus), "--out", str(self.work / "calib" / o), "--base", self.model,
                           *OBJECTIVES[o], "--steps", str(n), "--head-warmup-steps", "0", "--seed", "0",
                           "--device", self.device, "--checkpoint-every", "1000000", "--no-progress",
                           *(["--threads", str(a.train_threads)] if a.train_threads else []))
            log = self.work / "logs" / f"calib-{o}.log"
            env = self.penv(SDR_TRAIN_PROBE_PAIRS="16")  # the probe's cost is not what is calibrated
            procs[o] = (subprocess.Popen(cmd, cwd=self.work, env=env, stdout=subprocess.PIPE, stderr=log.open("w"),
                                         text=True, start_new_session=True), log)
        calib: dict[str, dict] = {}
        limit = t + max(10.0, min(120.0, train_end - time.monotonic()))
        ended: dict[str, float] = {}
        while len(ended) < len(procs) and time.monotonic() < limit:  # each one's own wall time
            for o, (proc, _) in procs.items():
                if o not in ended and proc.poll() is not None:
                    ended[o] = time.monotonic()
            time.sleep(0.1)
        for o, (proc, log) in procs.items():
            if o not in ended:
                kill_group(proc)
            out = proc.communicate()[0] if o in ended else ""
            wall = ended.get(o, time.monotonic()) - t
            summary = last_json(out or "")
            if summary is None:  # size the run from an assumed step time rather than lose the objective
                calib[o] = {"status": "failed", "error": tail(log), "step_s": a.assumed_step_s, "startup_s": 60.0,
                            "note": f"calibration failed: sized with an assumed {a.assumed_step_s} s/step and 60 s of start-up"}
                continue
            calib[o] = {"status": "ok", "steps": n, "loop_s": summary["seconds"], "wall_s": round(wall, 1),
                        "step_s": round(summary["seconds"] / n, 4), "startup_s": round(wall - summary["seconds"], 1)}
        # the full corpus is segmented by each run: about as long as the encoder stage took per document
        seg = (self.r["stages"].get("encoder") or {}).get("read_documents_per_s") or 50.0
        seg_s = self.r["data"]["corpus_documents"] / seg * 1.5
        steps = {}
        for o, c in calib.items():
            warm = (200 if a.head_warmup_steps is None else a.head_warmup_steps) if o == "sdr" else 0  # on top (cheaper; counted as full)
            window = train_end - time.monotonic() - c["startup_s"] - seg_s - 15
            steps[o] = int(max(0, min(a.max_steps, window / c["step_s"] - warm)))
            c.update(corpus_segmentation_estimate_s=round(seg_s, 1), window_s=round(window, 1), steps=steps[o])
        st["calibration"] = calib
        self.event("train calibration: " + ", ".join(f"{o} {c.get('step_s', '?')} s/step -> {steps.get(o, 0)} steps"
                                                      for o, c in calib.items()))
        return steps

    def wait_trainings(self) -> None:
        st = self.stage("train")
        runs = st.get("runs") or {}
        grace = 60.0 if not self.args.dry_run else 120.0
        for o, tr in self.trainings.items():
            if o.startswith("_"):
                continue
            proc = tr["proc"]
            limit = max(5.0, min(self.train_end + grace, self.deadline) - time.monotonic())
            try:
                proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                kill_group(proc)
                proc.wait()
                runs[o].update(status="timeout", error=tail(tr["log"]))
                self.event(f"train {o}: killed at its deadline")
                continue
            summary = last_json(tr["out"].read_text())
            if proc.returncode != 0 or summary is None:
                runs[o].update(status="failed", rc=proc.returncode, error=tail(tr["log"]))
                self.event(f"train {o}: failed")
                continue
            runs[o].update(status="ok", summary=summary, wall_s=round(time.monotonic() - tr["t"], 1),
                           step_s=round(summary["seconds"] / max(1, summary["steps"]), 4),
                           loss_curve=loss_fifths(Path(runs[o]["out"]) / "training_log.jsonl"))
            self.event(f"train {o}: {summary['steps']} steps in {summary['seconds']} s, loss {summary['loss_first_20']} -> "
                       f"{summary['loss_last_20']}")
        done = [r for r in runs.values() if r.get("status") == "ok"]
        st["status"] = "ok" if done and len(done) == len(runs) else ("partial" if done else "failed")
        self.save()


def loss_fifths(path: Path) -> list[float] | None:
    """Mean loss over fifths of the joint (post-warm-up) steps of a training log."""
    try:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return None
    losses = [r["loss"] for r in rows if not r.get("head_warmup")]
    if not losses:
        return None
    k = max(1, math.ceil(len(losses) / 5))
    return [round(sum(c) / len(c), 4) for c in (losses[i : i + k] for i in range(0, len(losses), k))]
