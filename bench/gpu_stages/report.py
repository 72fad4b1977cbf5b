"""``gpu.md``: the summary of a run's record, whatever stage it got to."""

from __future__ import annotations

import math

from .common import STAGES, TARGET_SENTENCES_PER_S


def _f(x, fmt="{:,.0f}") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    try:
        return fmt.format(x)
    except (TypeError, ValueError):
        return str(x)


def render_markdown(r: dict) -> str:
    st = r.get("stages", {})
    env = st.get("env", {})
    out = [f"# bench/gpu.sh run ({r.get('mode')}), {r.get('started')}", ""]
    out.append(f"- device: {env.get('gpu') or env.get('device') or '-'}; torch {((env.get('versions') or {}).get('torch')) or '-'}; "
               f"python {r['host'].get('python')}; {r['host'].get('cores')} cores; nvidia-smi: {r['host'].get('nvidia_smi', '-')}")
    out.append(f"- elapsed {r.get('elapsed_s')} s of a {r.get('budget_s')} s budget; stages asked: {', '.join(r.get('stages_asked', []))}")
    data = r.get("data") or {}
    if data:
        out.append(f"- data: {data.get('corpus_documents')} corpus documents ({'whole corpus' if data.get('corpus_whole') else 'not the whole corpus'}), "
                   f"{data.get('query_documents')} queries{'; ' + data['note'] if data.get('note') else ''}")
    if (env.get("pack") or {}).get("model"):
        out.append("- model: all-MiniLM-L6-v2 as carried in .gpu (weights rounded to bf16, upcast to fp32 on the device)")
    if r.get("error"):
        out.append(f"- **error**: {r['error']}")
    for name in STAGES:
        s = st.get(name)
        if s and s.get("status") not in ("ok", None):
            out.append(f"- stage {name}: **{s.get('status')}** {s.get('reason') or ''} {('(' + s['fix'] + ')') if s.get('fix') else ''}".rstrip())
    out.append("")

    enc = st.get("encoder") or {}
    if enc.get("rows"):
        out += [f"## Encoder throughput ({enc.get('device')}, {enc.get('sentences'):,} sentences of the corpus, target "
                f"{TARGET_SENTENCES_PER_S:,} sentences/s)", "",
                "| precision | max_batch_tokens | mean batch (sentences) | pipeline sentences/s | bare forward sentences/s | tokenise sentences/s | peak GPU MiB |",
                "| --- | --- | --- | --- | --- | --- | --- |"]
        for row in enc["rows"]:
            out.append(f"| {row['precision']} | {row['max_batch_tokens']:,} | {_f(row.get('mean_batch'), '{:,.0f}')} | "
                       f"{_f(row.get('pipeline_sentences_per_s'))} | {_f(row.get('bare_sentences_per_s'))} | "
                       f"{_f(row.get('tokenize_sentences_per_s'))} | {_f(row.get('peak_gpu_mib'))} |")
        best = enc.get("best") or {}
        out += ["", f"Best pipeline: {_f(best.get('pipeline_sentences_per_s'))} sentences/s ({best.get('precision')}, "
                    f"{_f(best.get('max_batch_tokens'))} tokens): target {'met' if enc.get('target_met') else 'not met'}. "
                    f"Cosine to fp32 (min / mean over {enc.get('cosine_sentences')} sentences): "
                    + ", ".join(f"{p} {_f(c.get('min'), '{:.5f}')} / {_f(c.get('mean'), '{:.6f}')}" for p, c in (enc.get("cosine") or {}).items()), ""]
    rx = st.get("reindex") or {}
    if rx.get("summary"):
        s = rx["summary"]
        out += ["## `sdr reindex` through Celery", "",
                f"{rx.get('workers')} worker processes (`sdr worker --pool solo`, {rx.get('torch_threads')} torch threads each, "
                f"{rx.get('device')}, {rx.get('precision')}, SDR_MAX_BATCH_TOKENS={rx.get('max_batch_tokens')}), "
                f"`--batch-docs {rx.get('batch_docs')}`, Redis {((rx.get('redis') or {}).get('version') or '').split(' sha=')[0]}.", "",
                "| documents | sentences | indexing s | indexing sentences/s | vs bare encoder | statistics s | FAISS s | wall s | end-to-end sentences/s |",
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
                f"| {s.get('indexed')} | {_f(s.get('sentences'))} | {_f(s.get('index_seconds'), '{:.1f}')} | "
                f"{_f(rx.get('index_sentences_per_s'))} | {_f(rx.get('index_vs_bare'), '{:.0%}')} | {_f(rx.get('stats_s'), '{:.1f}')} | "
                f"{_f(rx.get('ann_s'), '{:.1f}')} | {_f(rx.get('wall_s'), '{:.1f}')} | {_f(rx.get('end_to_end_sentences_per_s'))} |", "",
                f"Bare encoder: {_f(rx.get('bare_encoder_sentences_per_s'))} sentences/s ({rx.get('bare_encoder_note', '-')}).", ""]
        if rx.get("rejected_documents"):
            out += [f"`sdr reindex` exited {rx.get('rc')}: it rejected {len(rx['rejected_documents'])} documents of the corpus "
                    f"as input (no sentence: {', '.join(rx['rejected_documents'])}) and swapped in the store without them.", ""]
    tr = st.get("train") or {}
    if tr.get("runs"):
        out += ["## Training (`sdr train`, corpus only)", "",
                "| objective | flags | steps | s/step | loop s | loss first 20 -> last 20 | loss by fifths | probe gap before -> after | status |",
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for o, run in tr["runs"].items():
            s = run.get("summary") or {}
            probe = s.get("probe_cosines") or {}
            gap = f"{_f((probe.get('before') or {}).get('gap'), '{:.3f}')} -> {_f((probe.get('after') or {}).get('gap'), '{:.3f}')}" if probe else "-"
            out.append(f"| {o} | `{' '.join(run.get('flags', []))}` | {_f(s.get('steps') or run.get('steps'))} | {_f(run.get('step_s'), '{:.3f}')} | "
                       f"{_f(s.get('seconds'), '{:.0f}')} | {_f(s.get('loss_first_20'), '{:.3f}')} -> {_f(s.get('loss_last_20'), '{:.3f}')} | "
                       f"{run.get('loss_curve') or '-'} | {gap} | {run.get('status')}{': ' + run['reason'] if run.get('reason') else ''} |")
        if tr.get("plan"):
            out += ["", f"Plan: {tr['plan']}; calibration: "
                    + ", ".join(f"{o} {c.get('step_s', '?')} s/step" for o, c in (tr.get("calibration") or {}).items())]
        out.append("")
    ev = st.get("eval") or {}
    models = [m for m in ev if m not in ("status", "reason") and isinstance(ev[m], dict)]
    if models:
        out += ["## Dev evaluation (`sdr eval --store`, two-stage engine, default settings)", "",
                "| encoder | eval | MAP | nDCG@10 | MRR | Recall@100 | s | status |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for m in models:
            got = ev[m]
            res = got.get("results") or {}
            if not res:
                out.append(f"| {m} | - | - | - | - | - | - | {got.get('status')}: {got.get('reason') or ''} |")
            for key, v in res.items():
                if isinstance(v, dict) and "MAP" in v:
                    out.append(f"| {m} | {key} | {v['MAP']:.3f} | {v['nDCG@10']:.3f} | {_f(v.get('MRR'), '{:.3f}')} | "
                               f"{_f(v.get('Recall@100'), '{:.3f}')} | {_f(v.get('seconds'), '{:.0f}')} | ok |")
                else:
                    out.append(f"| {m} | {key} | - | - | - | - | - | {(v or {}).get('status', '-')}: {(v or {}).get('reason', '')} |")
        out.append("")
    comp = r.get("comparison") or []
    if comp:
        out += ["## Trained against untrained (per-query AP, paired)", "",
                "| encoder | eval | MAP (untrained) | nDCG@10 (untrained) | MRR (untrained) | paired AP: mean diff ± se (up / down) |",
                "| --- | --- | --- | --- | --- | --- |"]
        for c in comp:
            p = c.get("paired_AP") or {}
            out.append(f"| {c['model']} | {c['eval']} | {c['MAP']:.3f} ({c['base_MAP']:.3f}) | {c['nDCG@10']:.3f} ({c['base_nDCG@10']:.3f}) | "
                       f"{_f(c.get('MRR'), '{:.3f}')} ({_f(c.get('base_MRR'), '{:.3f}')}) | "
                       f"{_f(p.get('mean_diff'), '{:+.4f}')} ± {_f(p.get('se'), '{:.4f}')} ({p.get('up', '-')} / {p.get('down', '-')}) |")
        out.append("")
    out += ["## Timeline", "", "| s | event |", "| --- | --- |"]
    out += [f"| {e['t']} | {e['event'].replace('|', '/')} |" for e in r.get("timeline", [])]
    return "\n".join(out) + "\n"
