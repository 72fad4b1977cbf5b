"""One run on a lent GPU (issue 35, item 1): encoder throughput, `sdr reindex` through Celery, and
training with its dev evaluation, time-boxed to fit one device command (< 10 minutes).

Run it through ``bench/gpu.sh`` (which picks the Python and says how the environment reaches the
device); ``bench/gpu.sh --dry-run`` runs every stage on CPU with tiny sizes in one to two minutes
on 2 cores (``tests/bench/test_gpu_script.py``). Results go to ``--out DIR``, else ``$OUT`` (the device
tool's output folder), else ``/tmp/sdr-gpu-out``: ``gpu.json`` (every figure), ``gpu.md`` (a summary to paste into
docs/results/gpu.md) and ``gpu.log`` (this script's log, with the tails of its subprocesses' logs).
Both files are rewritten after every stage, so a run cut short still leaves what it measured.

Stages, in order (each records ``status``: ok, partial, skipped with a reason, failed or timeout;
a later stage that needs an earlier one's output is skipped with the reason):

1. **env**: the Python, the packages the stages import, CUDA and the card. Where the project's
   dependencies are missing and ``.gpu/`` (``bench/gpu.sh --prepare``) travelled, it is unpacked
   first (:mod:`gpu_env`); where they are still missing the run stops here and says which.
2. **encoder**: :class:`SentenceEncoder` on CUDA, fp16 and bf16, over the first sentences of the
   corpus: the whole pipeline (``encode``: tokenise, sort, batch, forward, pool, copy back) and the
   bare forward pass on the same padded batches, for a sweep of the token budget
   (``max_batch_tokens``, which sets the batch size), against the target of 50k sentences/s; the
   tokeniser's share; the cosine of each precision to fp32.
3. **reindex**: a private redis-server, W ``sdr worker`` processes (solo pool, CUDA, the best token
   budget of stage 2) and ``sdr reindex --store`` of the corpus (untrained encoder, default
   segmentation, no embedding cache): sentences/s of the indexing phase against the bare
   encoder's, then the statistics and FAISS build. This store is the untrained encoder's store.
4. **train**: ``sdr train`` on the corpus only (never queries or qrels), the in-batch objective
   (``--objective inbatch --mlm-weight 0 --batch-size 64``) and the paper's (``--objective sdr``,
   MLM + contrastive, defaults), side by side on the GPU. They start as soon as the indexing phase
   of stage 3 is over (its statistics and FAISS build are CPU work) and are sized to the time left:
   a 30-step calibration of each gives the step time, and the steps are what fits before the
   stores and evaluations still to come.
5. **eval**: ``sdr eval --store`` (the two-stage engine, default settings) on the dev queries, full
   sources and short sources (``--source-cut sentences:9``), ``--method hybrid`` (the default) then
   ``--method sdr``, for the untrained store (while the trainings run), and for each trained
   encoder, in objective order while time is left, a store built by the same workers
   (``sdr reindex --model DIR``); per-query AP against the untrained encoder (paired).

Usage: bench/gpu.sh [--dry-run] [--out DIR] [--budget SECONDS] [--stages env,encoder,reindex,train,eval]
[--objectives inbatch,sdr] [--workers N] [--train-steps N] ...  (``--help`` lists all)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # gpu_env, gpu_stages; never ROOT: the root's sdr_search/ is not the installed package
import gpu_env  # noqa: E402
from gpu_stages.common import EVALS, STAGES, kill_group, now_iso, tail  # noqa: E402
from gpu_stages.data import DataStage  # noqa: E402
from gpu_stages.encoder import EncoderStage, cmd_encoder  # noqa: E402
from gpu_stages.env import EnvStage, cmd_envcheck  # noqa: E402
from gpu_stages.evaluation import EvalStage, cmd_eval  # noqa: E402
from gpu_stages.report import render_markdown  # noqa: E402
from gpu_stages.train import TrainStage  # noqa: E402


class Run(EnvStage, DataStage, EncoderStage, TrainStage, EvalStage):
    """One run: the stages in order (each in its module of bench/gpu_stages/), the services stopped
    and the record written whatever happens."""

    def run(self) -> int:
        a = self.args
        self.stages = set(a.stages.split(","))
        unknown = self.stages - set(STAGES)
        if unknown:
            raise SystemExit(f"unknown stages {sorted(unknown)}; choose from {', '.join(STAGES)}")
        self.r["stages_asked"] = sorted(self.stages, key=STAGES.index)
        self.event(f"start: mode {self.r['mode']}, budget {a.budget:.0f} s, out {self.out}, work {self.work}")
        self.save()
        try:
            if not self.stage_env():
                self.save()
                return 3
            self.stage_data()
            if self.stages & {"reindex", "train", "eval"}:
                self.start_redis()
                self.start_workers()
                if "encoder" in self.stages and not a.dry_run:  # their start-up would share the CPU with stage 2
                    with contextlib.suppress(RuntimeError, TimeoutError):
                        self.workers_ready(min(90.0, max(5.0, self.left() - 60)))
                    self.event("workers: ready" if all(" ready." in tail(log, 10**6) for _, log in self.workers)
                               else "workers: not ready yet; stage 2 goes on")
            if "encoder" in self.stages:
                self.stage_encoder()
            if "reindex" in self.stages or "eval" in self.stages:
                self.stage_reindex()
            if "train" in self.stages:
                self.start_training_thread()  # if the reindex never reached its statistics (or --no-overlap)
            if "eval" in self.stages:
                self.stage_eval_base()  # in a thread
            self.join_training()
            if "eval" in self.stages and any(not k.startswith("_") for k in self.trainings):
                self.stage_trained()
            if "eval" in self.stages:
                self.join_eval_base()
            return 0
        except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - record it, stop the services, keep what was measured
            import traceback

            self.r["error"] = f"{type(e).__name__}: {e}"
            self.r["traceback"] = traceback.format_exc()[-4000:]
            self.event(f"error: {type(e).__name__}: {e}")
            return 1
        finally:
            for o, tr in list(self.trainings.items()):
                if not o.startswith("_") and tr["proc"].poll() is None:
                    kill_group(tr["proc"])
            self.stop_workers()
            if self.redis_proc is not None and self.redis_proc.poll() is None:
                self.redis_proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.redis_proc.wait(5)
            self.r["finished"] = now_iso()
            self.append_logs()
            self.save()
            print("\n" + render_markdown(self.r), flush=True)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="every stage on CPU with tiny sizes (about a minute)")
    ap.add_argument("--out", default=os.environ.get("OUT") or "/tmp/sdr-gpu-out", help="output folder (default $OUT, else /tmp/sdr-gpu-out)")
    ap.add_argument("--work", help="scratch folder (default a new one under /tmp)")
    ap.add_argument("--budget", type=float, help="seconds for the whole run (default 540; dry run 300)")
    ap.add_argument("--stages", default=",".join(STAGES), help="comma-separated subset of " + ",".join(STAGES))
    ap.add_argument("--objectives", default="inbatch,sdr", help="training objectives, in order of evaluation")
    ap.add_argument("--eval-objectives", help="the trained encoders that get a store and an evaluation (default: all; "
                    "dry run: the first)")
    ap.add_argument("--device", default="auto", help="auto (CUDA when present), cuda or cpu")
    ap.add_argument("--allow-cpu", action="store_true", help="a full run without CUDA (hours)")
    ap.add_argument("--model", help="base model directory (default: SDR_MODEL, the unpacked .gpu model, or the bundled one)")
    ap.add_argument("--data", help="folder with corpus.jsonl[.gz], queries-dev.jsonl.gz, qrels-dev.txt (default: .gpu's, else ../shared/data/irled)")
    ap.add_argument("--pack", default=str(gpu_env.PACK), help="the folder bench/gpu.sh --prepare wrote (default .gpu)")
    ap.add_argument("--use-pack", action="store_true", help="unpack .gpu even where the dependencies import")
    ap.add_argument("--env-dir", default="/tmp/sdr-gpu-env", help="where .gpu is unpacked")
    ap.add_argument("--precision", default="auto", help="precision of the workers and stores (default auto: bf16 on CUDA)")
    ap.add_argument("--precisions", help="stage 2 precisions (default bf16,fp16 on CUDA; bf16,fp32 on CPU)")
    ap.add_argument("--token-budgets", help="stage 2 max_batch_tokens sweep (default 16384,65536,262144 on CUDA)")
    ap.add_argument("--encoder-sentences", type=int, help="stage 2 sentences (default 60000; dry run 24)")
    ap.add_argument("--workers", type=int, help="sdr worker processes (default min(8, cores/2) on CUDA, 1 on CPU)")
    ap.add_argument("--batch-tokens", type=int, help="SDR_MAX_BATCH_TOKENS of the workers (default: stage 2's best)")
    ap.add_argument("--batch-docs", type=int, default=16, help="sdr reindex --batch-docs (default 16)")
    ap.add_argument("--train-steps", type=int, help="steps of each objective (default: sized to the time left)")
    ap.add_argument("--train-threads", type=int, help="sdr train --threads")
    ap.add_argument("--calibration-steps", type=int, default=30)
    ap.add_argument("--assumed-step-s", type=float, default=0.25, help="s/step when a calibration fails (default 0.25)")
    ap.add_argument("--head-warmup-steps", type=int, help="sdr train --head-warmup-steps of the paper's objective (default: its own, 200)")
    ap.add_argument("--min-steps", type=int, default=100, help="fewer steps than this: the objective is not trained")
    ap.add_argument("--max-steps", type=int, default=20000)
    ap.add_argument("--evals", default=",".join(EVALS), help="cut:method pairs per store, in order (cut: full or short)")
    ap.add_argument("--trained-evals", help="the same for the trained encoders' stores (default: --evals)")
    ap.add_argument("--no-overlap", action="store_true", help="start training after the base reindex, not during its statistics")
    ap.add_argument("--dry-queries", type=int, default=2)
    ap.add_argument("--dry-docs", type=int, default=2, help="dry run: corpus documents besides the relevant ones")
    for name, default in (("encoder-budget", 75), ("reindex-budget", 200), ("base-eval-budget", 110), ("store-estimate", 75),
                          ("eval-estimate", 50), ("final-reserve", 20), ("min-train", 60)):
        ap.add_argument(f"--{name}", type=float, default=default, help=f"seconds (default {default})")
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("_envcheck", "_encoder", "_eval"):
        sp = argparse.ArgumentParser(prog=f"gpu.py {argv[0]}")
        if argv[0] == "_envcheck":
            sp.add_argument("--device", default="auto")
            sp.add_argument("--model")
            return cmd_envcheck(sp.parse_args(argv[1:]))
        if argv[0] == "_encoder":
            for k in ("--model", "--corpus", "--device", "--precisions", "--budgets", "--out"):
                sp.add_argument(k, required=True)
            sp.add_argument("--sentences", type=int, required=True)
            sp.add_argument("--seconds", type=float, required=True)
            sp.add_argument("--repeat", type=int, default=2)
            return cmd_encoder(sp.parse_args(argv[1:]))
        for k in ("--store", "--queries", "--qrels", "--evals", "--out", "--runs"):
            sp.add_argument(k, required=True)
        sp.add_argument("--seconds", type=float, required=True)
        return cmd_eval(sp.parse_args(argv[1:]))
    a = build_parser().parse_args(argv)
    if a.dry_run:
        a.budget = a.budget or 300
        a.encoder_sentences = a.encoder_sentences or 24
        a.store_estimate, a.eval_estimate, a.min_train, a.final_reserve = 10, 10, 5, 10
        a.encoder_budget = min(a.encoder_budget, 60)
        if a.evals == ",".join(EVALS):
            a.evals = "full:hybrid,short:hybrid"
            a.trained_evals = a.trained_evals or "full:hybrid"
        a.eval_objectives = a.eval_objectives or a.objectives.split(",")[0]
    a.budget = a.budget or 540

    def on_term(signum, frame):  # the device tool's limit, or a kill: stop the services and keep what was measured
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    a.encoder_sentences = a.encoder_sentences or 60_000
    return Run(a).run()


if __name__ == "__main__":
    sys.exit(main())
