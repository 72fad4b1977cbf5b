"""Stage 5, eval: ``sdr eval --store`` on the dev queries (full and short sources, hybrid then
sdr) for the untrained store (while the trainings run) and, while time is left, for a store of
each trained encoder; per-query AP against the untrained encoder (paired).

:class:`EvalStage` runs in the orchestrator; :func:`cmd_eval` (``gpu.py _eval``) in the project's
environment."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import threading
import time
from pathlib import Path
from typing import Any

from .common import SHORT_CUT, last_json, tail, write_atomic
from .reindex import ReindexStage


class EvalStage(ReindexStage):
    def evaluate(self, name: str, store: str, budget: float) -> dict:
        a = self.args
        res = self.work / f"eval-{name}.json"
        evals = a.evals if name == "base" else (a.trained_evals or a.evals)
        rc, out, log = self.call(self.helper(
            "_eval", "--store", store, "--queries", self.data["queries"], "--qrels", self.data["qrels"],
            "--evals", evals, "--out", str(res), "--seconds", str(max(5.0, budget - 10)), "--runs", str(self.work / "runs" / name)),
            f"eval-{name}", budget + 20)
        got = json.loads(res.read_text()) if res.exists() else {}
        status = "ok" if rc == 0 and got and not got.get("cut_short") else ("timeout" if rc is None else "partial" if got else "failed")
        out_ = {"status": status, **got}
        if status != "ok":
            out_["error"] = tail(log)
        return out_

    def stage_eval_base(self) -> None:
        """The untrained store's evaluation, in a thread: the trained encoders' stores are built
        meanwhile (both are CPU work on a 16-core machine; their wall times overlap)."""
        st = self.stage("eval")
        rx = self.r["stages"].get("reindex") or {}
        if rx.get("status") != "ok":
            return self.skip("eval", "no untrained store (reindex did not finish)")
        budget = min(self.args.base_eval_budget, self.left() - 15)
        if budget < 15:
            st["base"] = {"status": "skipped", "reason": f"{self.left():.0f} s left"}
            return self.skip("eval", f"{self.left():.0f} s left")

        def work() -> None:
            got = self.evaluate("base", rx["store"], budget)
            st["base"] = got
            st["status"] = got["status"]
            self.event(f"eval base: {eval_line(got)}")
            self.save()

        st["base"] = {"status": "running"}
        self._base_eval = threading.Thread(target=work, name="eval-base", daemon=True)
        self._base_eval.start()

    def join_eval_base(self) -> None:
        if self._base_eval is not None:
            self._base_eval.join(timeout=max(1.0, self.left() + 15))
        st = self.stage("eval")
        self.r["comparison"] = compare(st)
        self.save()

    def stage_trained(self) -> None:
        """For each trained model, in objective order: a store through the workers, then its evaluation."""
        a = self.args
        st = self.stage("eval")
        stores = self.stage("stores")
        runs = (self.r["stages"].get("train") or {}).get("runs") or {}
        per_model_spent: list[float] = []
        wanted = (a.eval_objectives or a.objectives).split(",")
        for o in [o for o in a.objectives.split(",") if o in runs]:
            if o not in wanted:
                st[o] = {"status": "skipped", "reason": f"not in --eval-objectives ({','.join(wanted)})"}
                continue
            if runs[o].get("status") != "ok":
                st[o] = {"status": "skipped", "reason": f"training {runs[o].get('status')}"}
                continue
            plan = (self.r["stages"].get("train") or {}).get("plan") or {}
            need = (sum(per_model_spent) / len(per_model_spent)) if per_model_spent else (
                plan.get("store_estimate_s", a.store_estimate) + plan.get("eval_estimate_s", a.eval_estimate))
            if self.left() - a.final_reserve < 0.6 * need and not a.dry_run:
                st[o] = {"status": "skipped", "reason": f"{self.left():.0f} s left, a store and its evaluation take about {need:.0f} s"}
                stores[o] = {"status": "skipped", "reason": st[o]["reason"]}
                self.event(f"eval {o}: skipped ({st[o]['reason']})")
                self.save()
                continue
            t = time.monotonic()
            got = self.reindex(o, runs[o]["out"], max(10.0, self.left() - a.final_reserve - 20))
            stores[o] = got
            self.event(f"store {o}: {got['status']} in {got.get('wall_s')} s")
            self.save()
            if got["status"] != "ok":
                st[o] = {"status": "skipped", "reason": f"its store {got['status']}"}
                continue
            budget = min(a.base_eval_budget, self.left() - a.final_reserve)
            if budget < 15:
                st[o] = {"status": "skipped", "reason": f"{self.left():.0f} s left"}
                continue
            st[o] = self.evaluate(o, got["store"], budget)
            per_model_spent.append(time.monotonic() - t)
            self.event(f"eval {o}: {eval_line(st[o])}")
            self.save()
        stores["status"] = "ok" if any(v.get("status") == "ok" for v in stores.values() if isinstance(v, dict)) else "skipped"
        self.save()


def eval_line(got: dict) -> str:
    parts = []
    for k, v in (got.get("results") or {}).items():
        if isinstance(v, dict) and "MAP" in v:
            parts.append(f"{k} MAP {v['MAP']:.3f} nDCG@10 {v['nDCG@10']:.3f}")
    return f"{got.get('status')}: " + ("; ".join(parts) or "no figures")


def paired(a: dict[str, float], b: dict[str, float]) -> dict | None:
    """Mean difference b - a of per-query AP over the queries both have, its standard error, up/down."""
    qs = sorted(set(a) & set(b))
    if not qs:
        return None
    d = [b[q] - a[q] for q in qs]
    mean = sum(d) / len(d)
    se = (sum((x - mean) ** 2 for x in d) / (len(d) - 1)) ** 0.5 / len(d) ** 0.5 if len(d) > 1 else float("nan")
    return {"queries": len(qs), "mean_diff": round(mean, 4), "se": round(se, 4), "up": sum(x > 0 for x in d),
            "down": sum(x < 0 for x in d)}


def compare(ev: dict) -> list[dict]:
    base = (ev.get("base") or {}).get("results") or {}
    rows = []
    for model, got in ev.items():
        if model in ("base", "status") or not isinstance(got, dict):
            continue
        for key, res in (got.get("results") or {}).items():
            ref = base.get(key)
            if not (isinstance(res, dict) and "MAP" in res and isinstance(ref, dict) and "MAP" in ref):
                continue
            rows.append({"model": model, "eval": key, "MAP": res["MAP"], "nDCG@10": res["nDCG@10"], "MRR": res.get("MRR"),
                         "base_MAP": ref["MAP"], "base_nDCG@10": ref["nDCG@10"], "base_MRR": ref.get("MRR"),
                         "paired_AP": paired(ref.get("per_query_ap") or {}, res.get("per_query_ap") or {})})
    return rows


def average_precision(ranked: list[str], relevant: set[str]) -> float:
    hits, total = 0, 0.0
    for k, d in enumerate(ranked, 1):
        if d in relevant:
            hits += 1
            total += hits / k
    return total / len(relevant) if relevant else 0.0


def cmd_eval(a: argparse.Namespace) -> int:
    """``sdr eval --store`` for each of --evals (cut:method) in this one process (the CLI's own
    main, so the same code path), per-query AP from its run file; JSON to --out after each."""
    from sdr_search.cli import main as sdr_main

    stop_at = time.monotonic() + a.seconds
    res: dict[str, Any] = {"store": a.store, "results": {}}
    runs = Path(a.runs)
    runs.mkdir(parents=True, exist_ok=True)
    relevant: dict[str, set[str]] = {}
    for line in Path(a.qrels).read_text().splitlines():
        parts = line.split()
        if len(parts) >= 4 and float(parts[3]) > 0:
            relevant.setdefault(parts[0], set()).add(parts[2])
    last = 0.0
    for key in a.evals.split(","):
        cut, method = key.split(":")
        if time.monotonic() + 0.8 * last > stop_at:
            res["results"][key] = {"status": "skipped", "reason": "out of time"}
            res["cut_short"] = True
            continue
        run_file = runs / f"{cut}-{method}.trec"
        argv = ["--log-level", "WARNING", "eval", "--store", a.store, "--queries", a.queries, "--qrels", a.qrels,
                "--method", method, "--no-progress", "--run", str(run_file)]
        if cut == "short":
            argv += ["--source-cut", SHORT_CUT]
        buf = io.StringIO()
        t = time.perf_counter()
        with contextlib.redirect_stdout(buf):
            rc = sdr_main(argv)
        last = time.perf_counter() - t
        got = last_json(buf.getvalue())
        if rc != 0 or got is None:
            res["results"][key] = {"status": "failed", "rc": rc}
            continue
        ranked: dict[str, list[str]] = {}
        for line in run_file.read_text().splitlines():
            q, _, d, *_ = line.split()
            ranked.setdefault(q, []).append(d)
        ap = {q: round(average_precision(ranked.get(q, []), rel), 5) for q, rel in relevant.items() if q in ranked}
        got["per_query_ap"] = ap
        got["map_check"] = round(sum(ap.values()) / len(ap), 4) if ap else None
        got["argv"] = "sdr " + " ".join(argv[2:])
        got["wall_s"] = round(last, 1)
        res["results"][key] = got
        write_atomic(Path(a.out), json.dumps(res, indent=1) + "\n")
    write_atomic(Path(a.out), json.dumps(res, indent=1) + "\n")
    return 0
