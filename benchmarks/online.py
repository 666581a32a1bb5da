"""Plans over time on ServeGen shapes (docs/online.md, "Measured"): the schedule against a static plan sized
for the peak and a reactive HPA-like baseline, attainment per window for each; and re-planning after +30 % on
one workload (moves against a from-scratch plan's).

    python benchmarks/online.py --days 14 --window-h 6 --requests 4000 [--out benchmarks/data/online.json]

Spec: the quickstart's chat (llama-3.1-70b, peak 4 rps) and summarize (llama-3.1-8b, peak 10 rps) workloads
and GPU pools; chat follows ServeGen m-large's aggregate per-10-minute rates, summarize m-mid's
(../shared/traces/servegen/aggregated), over the first ``--days`` days averaged into windows of ``--window-h``
hours, each scaled so its busiest window is the peak. Three policies on the same windows:

- schedule: ``trimtab plan`` with ``schedule`` (the schedule MILP, start-up costs, validated on its fullest
  windows)
- static peak: ``trimtab plan`` of the spec at each workload's peak rate, held all period
- reactive: the static plan's deployments, each scaled per window in proportion to its load (replicas =
  ceil(peak replicas x window rate / peak rate), at least 1), as an HPA holding the per-replica load the
  static plan found safe would settle to, with no lag (optimistic for it)

Every window of each policy is simulated as a static plan (``trimtab.gate.windows``) with ``--requests``
requests on one seed not used by the planner; a window passes when no workload's upper 95 % bound is below
its target (``check``'s criterion). The schedule's boundaries where replicas are added are also simulated over
time (``check_transitions``, one seed: 5 minutes before, 15 after), with starts issued ahead by the start-up
time as planned and, for comparison, at the boundary.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trimtab.api import plan  # noqa: E402
from trimtab.gate.windows import check_transitions, check_windows  # noqa: E402
from trimtab.spec.rates import window_rates, window_spec  # noqa: E402
from trimtab.online.replan import count_moves, replan  # noqa: E402
from trimtab.contract.schema import PlanSchedule, ScheduleWindow  # noqa: E402
from trimtab.spec.load import load_spec  # noqa: E402
from trimtab.spec.overrides import apply_overrides  # noqa: E402

SERVEGEN = Path("/work/shared/traces/servegen/aggregated")

SPEC = """version: 1
name: online-bench
budget_usd_per_hour: 400
gpus:
  - {{type: h100-sxm, count: 16, usd_per_hour: 3.90}}
  - {{type: a100-80gb, count: 16, usd_per_hour: 2.20}}
  - {{type: l40s, count: 16, usd_per_hour: 1.80}}
  - {{type: l4, count: 32, usd_per_hour: 0.80}}
models:
  - name: llama-3.1-8b
  - name: llama-3.1-70b
solver: {{time_limit_s: {limit}}}
schedule: {{window_s: {window_s}, validate_windows: {validate}}}
workloads:
  - name: chat
    model: llama-3.1-70b
    rate_profile: {{rps: {chat}}}
    input_tokens: {{lognormal: {{median: 1000, p99: 8000}}}}
    output_tokens: {{lognormal: {{median: 250, p99: 1500}}}}
    slo: {{ttft_ms: 2000, tpot_ms: 60, percentile: 99}}
  - name: summarize
    model: llama-3.1-8b
    rate_profile: {{rps: {summarize}}}
    input_tokens: {{uniform: {{min: 2000, max: 6000}}}}
    output_tokens: {{fixed: 200}}
    slo: {{ttft_ms: 3000, tpot_ms: 100, percentile: 90}}
"""


def shape(model: str, days: int, window_s: int, peak: float) -> list[float]:
    from trimtab.spec.rates import EMPTY_FLOOR, read_servegen, servegen_shape

    r = read_servegen(SERVEGEN / f"servegen_{model}_rate_10min.csv")[: days * 144]
    s = servegen_shape(r, window_s, "none")
    top = max(s)
    return [round(max(x / top, EMPTY_FLOOR) * peak, 3) for x in s]


def with_schedule(p, wr, replicas: list[dict[str, int]], costs: list[float], routes):
    """``p`` (a static plan) with a schedule block of the given replicas per window (for per-window
    checks)."""
    wins = [ScheduleWindow(start_s=t * wr.window_s, rates=wr.at(t), replicas=replicas[t], started=0,
                           stopped=0,
                           cost_usd_per_hour=round(costs[t], 4), routes=list(routes)) for t in range(wr.n)]
    return p.model_copy(update={"schedule": PlanSchedule(
        window_s=wr.window_s, cyclic=True, min_lifetime_windows=1, max_changes_per_window=None, startup_s={},
        startup_source="", cost_usd_per_hour_mean=round(sum(costs) / len(costs), 4),
        startup_usd_per_period=0.0, windows=wins)})


def per_window(p, spec, requests: int) -> dict:
    cs = check_windows(p, spec, seeds=1, requests=requests)
    return {"passed": sum(c.report.ok for c in cs), "windows": len(cs),
            "failed": [c.window for c in cs if not c.report.ok],
            "worst_margin": round(min(c.margin for c in cs), 4),
            "attainment_min": {k: round(min(c.result.intervals[k].mean for c in cs), 4)
                               for k in cs[0].result.intervals}}


def transitions(p, spec, lead_s: float | None) -> dict:
    """Every boundary where the schedule adds replicas simulated over time (one seed): starts issued ahead by
    the start-up time (``lead_s`` None, as planned) or at the boundary (0)."""
    cs = check_transitions(p, spec, seeds=1, lead_s=lead_s)
    return {"passed": sum(c.ok for c in cs), "boundaries": len(cs),
            "failed": [c.window for c in cs if not c.ok],
            "worst_margin": round(min((c.margin for c in cs), default=0.0), 4),
            "head_attainment_min": {k: round(min(c.head.intervals[k].mean for c in cs), 4)
                                    for k in (cs[0].head.intervals if cs else {})}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=int, default=14)
    ap.add_argument("--window-h", type=float, default=6)
    ap.add_argument("--requests", type=int, default=4000, help="simulated requests per window check")
    ap.add_argument("--validate", type=int, default=3, help="windows the schedule planner simulates")
    ap.add_argument("--time-limit", type=float, default=120)
    ap.add_argument("--skip-replan", action="store_true")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--plan-out", type=Path, help="write the schedule plan here")
    args = ap.parse_args()
    window_s = int(args.window_h * 3600)
    text = SPEC.format(window_s=window_s, validate=args.validate, limit=args.time_limit,
                       chat=shape("m-large", args.days, window_s, 4.0),
                       summarize=shape("m-mid", args.days, window_s, 10.0))
    base = Path("/tmp/online-bench.yaml")
    base.write_text(text)
    spec = load_spec(base)
    wr = window_rates(spec)
    out: dict = {"days": args.days, "window_h": args.window_h, "windows": wr.n,
                 "requests_per_window": args.requests}
    t0 = time.perf_counter()
    sched = plan(spec).plan
    out["schedule_plan_s"] = round(time.perf_counter() - t0, 1)
    out["schedule"] = {"usd_per_hour_mean": sched.schedule.cost_usd_per_hour_mean,
                       "startup_usd_per_period": sched.schedule.startup_usd_per_period,
                       "held_usd_per_hour": sched.cost_usd_per_hour,
                       "replicas_started": sum(w.started for w in sched.schedule.windows),
                       **per_window(sched, spec, args.requests)}
    out["schedule"]["transitions_planned"] = transitions(sched, spec, None)
    out["schedule"]["transitions_started_at_boundary"] = transitions(sched, spec, 0.0)
    if args.plan_out:
        from trimtab.contract.write import emit

        args.plan_out.write_text(emit(sched))
    print(json.dumps(out, indent=1), flush=True)
    peak_t = max(range(wr.n), key=lambda t: sum(wr.at(t)[w] / wr.peak(w) for w in wr.rates))
    peak_spec = window_spec(spec, wr, 0).model_copy(update={"workloads": [
        w.model_copy(update={"rate_rps": wr.peak(w.name)}) for w in window_spec(spec, wr, 0).workloads]})
    peak_spec._base_dir = spec.base_dir
    t0 = time.perf_counter()
    static = plan(peak_spec).plan
    out["static_plan_s"] = round(time.perf_counter() - t0, 1)
    price = {g.type: g.usd_per_hour for g in spec.gpus}
    usd = {d.name: price[d.gpu] * d.tensor_parallel * d.pipeline_parallel for d in static.deployments}
    held = {d.name: d.replicas for d in static.deployments}
    st = with_schedule(static, wr, [held] * wr.n, [static.cost_usd_per_hour] * wr.n, static.routes)
    out["static_peak"] = {"usd_per_hour_mean": static.cost_usd_per_hour,
                          **per_window(st, spec, args.requests)}
    workload_of = {r.deployment: r.workload for r in static.routes if r.deployment}
    reps = [{d: max(1, math.ceil(n * wr.at(t)[workload_of[d]] / wr.peak(workload_of[d]) - 1e-9))
             for d, n in held.items()} for t in range(wr.n)]
    costs = [sum(usd[d] * n for d, n in r.items()) for r in reps]
    rx = with_schedule(static, wr, reps, costs, static.routes)
    out["reactive"] = {"usd_per_hour_mean": round(sum(costs) / len(costs), 4),
                       **per_window(rx, spec, args.requests)}
    out["peak_window"] = peak_t
    print(json.dumps(out, indent=1), flush=True)
    if not args.skip_replan:
        qs = load_spec(Path(__file__).resolve().parent.parent / "examples" / "quickstart.yaml")
        cur = plan(qs).plan
        up = apply_overrides(qs, {"workloads.chat.rate_rps": 4 * 1.3})
        r = replan(cur, up)
        out["replan_chat_plus_30pct"] = {
            "current_usd_per_hour": cur.cost_usd_per_hour,
            "replan": {"usd_per_hour": r.plan.cost_usd_per_hour, "moves": count_moves(r.moves),
                       "startup_usd": r.transition_usd},
            "from_scratch": {"usd_per_hour": r.fresh.cost_usd_per_hour, "moves": count_moves(r.fresh_moves),
                             "startup_usd": r.fresh_transition_usd}}
        node = cur.deployments[0].placement[0].node if cur.deployments[0].placement else None
        if node:
            f = replan(cur, qs, fail=[f"node={node}"])
            out["repair_node_" + node] = {
                "lost_replicas": f.failure.lost_replicas,
                "replan": {"usd_per_hour": f.plan.cost_usd_per_hour, "moves": count_moves(f.moves)},
                "from_scratch": {"usd_per_hour": f.fresh.cost_usd_per_hour,
                                 "moves": count_moves(f.fresh_moves)}}
    text_out = json.dumps(out, indent=1)
    print(text_out)
    if args.out:
        args.out.write_text(text_out + "\n")


if __name__ == "__main__":
    main()
