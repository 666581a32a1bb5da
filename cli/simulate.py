"""Bodies of ``trimtab simulate`` and the simulating ``trimtab check`` (cli/main.py keeps the commands
thin)."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from rich.console import Console

from trimtab.errors import InputError, Problem
from trimtab.contract.schema import Goodput, Plan
from trimtab.spec.schema import Spec
from trimtab.cli.sim_report import deployment_table, progress_bar, summary_line, workload_table, write_plots
from trimtab.gate.analytic import check as analytic_check
from trimtab.gate.nodeloss import check_each_node, worst_loss
from trimtab.gate.simulated import check_simulated
from trimtab.gate.windows import (AFTER_S, HEAD_S, TransitionsUnsupported, check_transitions, check_windows,
                                  worst_window)
from trimtab.ir.lower import lower
from trimtab.sim import default_requests, simulate
from trimtab.spec.traces import read_trace


def _args(requests: int | None, duration: float | None, trace: Path | None, trace_format: str):
    if requests is not None and duration is not None:
        raise InputError([Problem("--requests/--duration", "give one of them, not both")])
    tr = None
    if trace is not None:
        tr = read_trace(trace, trace_format)
    return tr


def sim_report(plan: Plan, spec: Spec, out: Console, err: Console, fmt: str, seed: int, requests: int | None,
               duration: float | None, trace: Path | None, trace_format: str, arrival_cv: float | None,
               plot: Path | None) -> None:
    tr = _args(requests, duration, trace, trace_format)
    ir = lower(spec)
    n = requests if requests is not None or duration is not None else default_requests(ir)
    with progress_bar(err, n if duration is None else None) as progress:
        res = simulate(plan, spec, ir=ir, requests=n if duration is None else None, duration_s=duration,
                       seed=seed,
                       trace=tr, arrival_cv=arrival_cv, timeline=plot is not None, progress=progress)
    files = write_plots(res, plot) if plot is not None else []
    if fmt == "json":
        d = res.to_dict()
        d["plots"] = [str(f) for f in files]
        sys.stdout.write(json.dumps(d, indent=2) + "\n")
        return
    out.print(workload_table(res))
    out.print(deployment_table(res))
    for note in res.notes:
        out.print(f"note: {note}", markup=False)
    for line in res.failures():
        out.print(f"FAIL {line}", markup=False)
    out.print(summary_line(res), markup=False)
    for f in files:
        out.print(f"wrote {f}", markup=False)


def sim_check(plan: Plan, spec: Spec, out: Console, err: Console, fmt: str, seed: int | None, seeds: int,
              requests: int | None, duration: float | None, trace: Path | None, trace_format: str,
              strict: bool, margin: str | None = None) -> bool:
    tr = _args(requests, duration, trace, trace_format)
    runs = 1 if tr is not None else max(seeds, 1)
    with progress_bar(err,
                      requests * runs if requests is not None and duration is None else None) as progress:
        rep, res = check_simulated(plan, spec, seed=seed, seeds=seeds, requests=requests, duration_s=duration,
                                   trace=tr, strict=strict, progress=progress, margin=margin)
    # a max_goodput plan's workloads served not at all: no attainment to show (check_simulated skips them)
    unserved = Goodput.unserved(plan)
    if fmt == "json":
        data = {"ok": rep.ok, "violations": rep.violations, "notes": rep.notes, "mode": "simulation",
                "seeds": list(res.seeds), "requests": sum(r.requests for r in res.runs),
                "workloads": {k: {"attainment": round(iv.mean, 6), "attainment_lower": round(iv.lower, 6),
                                  "attainment_upper": round(iv.upper, 6), "target": res.targets[k],
                                  "verdict": "unserved" if k in unserved else res.verdict(k),
                                  "slo_met": k in unserved or res.verdict(k) != "fail",
                                  "ttft_ms": _fin(max(r.workloads[k].ttft_at_target_ms for r in res.runs)),
                                  "tpot_ms": _fin(max(r.workloads[k].tpot_at_target_ms for r in res.runs)),
                                  "percentile": res.targets[k] * 100,
                                  "worst_deployment": res.worst_deployment(k)}
                              for k, iv in res.intervals.items()}}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return rep.ok
    for n in rep.notes:
        out.print(f"note: {n}", markup=False)
    marks = {"pass": "ok  ", "inconclusive": "~   ", "fail": "FAIL"}
    for k, iv in res.intervals.items():
        if k in unserved:
            out.print(f"-    {k}: not served (max_goodput: the plan's goodput serves it 0 rps)", markup=False)
            continue
        ws = [r.workloads[k] for r in res.runs]
        pct = f"p{res.targets[k] * 100:g}"
        out.print(f"{marks[res.verdict(k)]} {k}: simulated SLO attainment {iv.mean:.2%} [{iv.lower:.2%}, "
                  f"{iv.upper:.2%}] (target {res.targets[k]:.0%}); TTFT {pct} "
                  f"{_num(max(w.ttft_at_target_ms for w in ws))} ms, TPOT {pct} "
                  f"{_num(max(w.tpot_at_target_ms for w in ws))} ms (worst seed)", markup=False)
    for v in rep.violations:
        out.print(f"FAIL {v}", markup=False)
    seeds_s = ", ".join(str(s) for s in res.seeds)
    out.print(f"simulated {sum(r.requests for r in res.runs):,} requests "
              f"(seed{'s' if len(res.seeds) > 1 else ''} {seeds_s}; 95% bounds in brackets) in "
              f"{sum(r.wall_s for r in res.runs):.1f} s", markup=False)
    out.print("check passed" if rep.ok else f"check failed: {len(rep.violations)} violation(s)", markup=False)
    return rep.ok


def _fin(v: float):
    return round(v, 3) if math.isfinite(v) else None


def _num(v: float) -> str:
    if not math.isfinite(v):
        return "inf"
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}"


def schedule_check(plan: Plan, spec: Spec, out: Console, fmt: str, seed: int | None, seeds: int,
                   requests: int | None, strict: bool, transitions: bool = True,
                   start_lead: float | None = None) -> bool:
    """``check`` of a plan with a schedule: every window simulated (trimtab.gate.windows), one line per window
    and the worst window named; then (``transitions``) each boundary where replicas are added simulated over
    time (``check_transitions``; ``start_lead``: seconds ahead of the boundary a start is issued, default the
    plan's start-up time), one line per boundary."""
    checks = check_windows(plan, spec, seed=seed, seeds=seeds, requests=requests, strict=strict)
    worst = worst_window(checks)
    trans, skipped = [], ""
    if transitions:
        try:
            trans = check_transitions(plan, spec, seed=seed, seeds=seeds, lead_s=start_lead, strict=strict)
        except TransitionsUnsupported as e:
            skipped = f"transitions not simulated: {e}"
    ok = all(c.report.ok for c in checks) and all(c.ok for c in trans)
    if fmt == "json":
        data = {"ok": ok, "mode": "simulation", "worst_window": worst.window,
                "windows": [{"window": c.window, "start_s": c.start_s, "ok": c.report.ok,
                             "violations": c.report.violations,
                             "attainment": {k: round(iv.mean, 6) for k, iv in c.result.intervals.items()},
                             "attainment_lower": {k: round(iv.lower, 6)
                                                  for k, iv in c.result.intervals.items()}}
                            for c in checks],
                "transitions": [{"window": c.window, "start_s": c.start_s, "ok": c.ok,
                                 "violations": c.violations,
                                 "started": c.started, "stopped": c.stopped, "ready_s": c.ready_s,
                                 **{part: {k: {"attainment": round(iv.mean, 6),
                                               "attainment_lower": round(iv.lower, 6)}
                                           for k, iv in getattr(c, part).intervals.items()}
                                    for part in ("before", "head", "after")}} for c in trans],
                "notes": [skipped] if skipped else []}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return ok
    for c in checks:
        att = ", ".join(f"{k} {iv.mean:.2%} [{iv.lower:.2%}]" for k, iv in c.result.intervals.items())
        unsure = any(c.result.verdict(k) == "inconclusive" for k in c.result.intervals)
        mark = "FAIL" if not c.report.ok else ("~   " if unsure else "ok  ")
        out.print(f"{mark} window {c.window} (t={c.start_s} s): {att}", markup=False)
        for v in c.report.violations:
            out.print(f"FAIL window {c.window}: {v}", markup=False)
    out.print(f"worst window: {worst.window} (t={worst.start_s} s), lowest margin of the lower "
              f"95% bound over target {worst.margin:+.2%}; '~': below target within noise (more "
              "--seeds to decide)", markup=False)
    if skipped:
        out.print(f"note: {skipped}", markup=False)
    for c in trans:
        adds = ", ".join(f"+{n} {d} (serving {c.ready_s[d]:+.0f} s)" for d, n in c.started.items())
        head = ", ".join(f"{k} {iv.mean:.2%} [{iv.lower:.2%}]" for k, iv in c.head.intervals.items())
        whole = ", ".join(f"{k} {iv.mean:.2%}" for k, iv in c.after.intervals.items())
        out.print(f"{'ok  ' if c.ok else 'FAIL'} into window {c.window}: {adds}; first {HEAD_S:g} s {head}; "
                  f"first {AFTER_S:g} s {whole}", markup=False)
        for v in c.violations:
            out.print(f"FAIL {v}", markup=False)
    bad = sum(not c.report.ok for c in checks)
    bad_t = sum(not c.ok for c in trans)
    out.print("check passed" if ok else f"check failed: {bad} of {len(checks)} window(s), {bad_t} of "
                                        f"{len(trans)} transition(s)", markup=False)
    return ok


def node_loss_check(plan: Plan, spec: Spec, out: Console, err: Console, fmt: str, analytic: bool,
                    seed: int | None, seeds: int, requests: int | None, strict: bool) -> bool:
    """``check`` with each node removed (``trimtab.gate.nodeloss``; docs/online.md, "Redundancy"): the plan
    itself, then one line per kind of node loss with each workload's attainment (or predicted latency), and
    the worst node named."""
    if analytic:
        whole = analytic_check(plan, spec)
    else:
        whole, _ = check_simulated(plan, spec, seed=seed, seeds=seeds, requests=requests, strict=strict)
    losses = check_each_node(plan, spec, analytic=analytic, seed=seed, seeds=seeds, requests=requests,
                             strict=strict)
    worst = worst_loss(losses)
    ok = whole.ok and all(x.report.ok for x in losses)
    if fmt == "json":
        data = {"ok": ok, "mode": "analytic" if analytic else "simulation", "violations": whole.violations,
                "redundancy": plan.redundancy or "none", "worst_node": worst.nodes[0] if worst else None,
                "node_loss": [{"nodes": list(x.nodes), "lost": x.lost, "ok": x.report.ok,
                               "violations": x.report.violations, "margin": _fin(x.margin),
                               "attainment": {k: round(iv.mean, 6) for k, iv in x.result.intervals.items()}
                               if x.result is not None else {},
                               "attainment_lower": {k: round(iv.lower, 6)
                                                    for k, iv in x.result.intervals.items()}
                               if x.result is not None else {}} for x in losses]}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return ok
    for v in whole.violations:
        out.print(f"FAIL plan: {v}", markup=False)
    out.print(f"{'ok  ' if whole.ok else 'FAIL'} plan with every node", markup=False)
    for x in losses:
        lost = ", ".join(f"{k} -{n}" for k, n in x.lost.items())
        nodes = x.nodes[0] + (f" (and {len(x.nodes) - 1} like it: "
                              f"{', '.join(x.nodes[1:])})" if len(x.nodes) > 1
                              else "")
        if x.result is not None:
            what = ", ".join(f"{k} {iv.mean:.2%} [{iv.lower:.2%}]" for k, iv in x.result.intervals.items())
        elif x.report.assessment is not None:
            what = ", ".join(f"{k} TTFT {_num(p.ttft_ms)} ms, TPOT {_num(p.tpot_ms)} ms"
                             for k, p in x.report.assessment.workloads.items())
        else:
            what = "unserved"
        out.print(f"{'ok  ' if x.report.ok else 'FAIL'} without {nodes} ({lost}): {what}", markup=False)
        for v in x.report.violations:
            out.print(f"FAIL without {x.nodes[0]}: {v}", markup=False)
    if worst is not None:
        out.print(f"worst node: {worst.nodes[0]}, margin {_fin(worst.margin)} ("
                  + ("lowest lower 95% bound minus target" if not analytic else "lowest share of an SLO left")
                  + ")", markup=False)
    bad = sum(not x.report.ok for x in losses)
    out.print("check passed (every node loss)" if ok else
              f"check failed: {bad} of {len(losses)} kind(s) of node loss"
              + ("" if whole.ok else ", and the plan"),
              markup=False)
    return ok
