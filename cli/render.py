"""Human-readable tables (rich) for plans, checks, predictions and profiles. No computation here."""
from __future__ import annotations

import math

from rich.console import Console
from rich.table import Table

from trimtab.api import PlanResult
from trimtab.cost.model import ClosedLoopPrediction
from trimtab.deployment.price import fleet_usd_per_hour, replica_usd_per_hour


def _ms(v: float | None) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def _ms_ci(v: float, ci) -> str:
    """A measured percentile with its 95 % interval; an open end (too few requests to bound it) reads
    'inf'."""
    lo, hi = ci
    end = lambda x: "inf" if x is None or math.isinf(x) else _ms(x)  # noqa: E731
    return f"{_ms(v)} [{end(lo)}-{end(hi)}]"


def plan_summary(console: Console, r: PlanResult, verbose: bool = False) -> None:
    p = r.plan
    t = Table(title=f"plan for {p.spec}: {p.cost_usd_per_hour:,.2f} $/h on "
                    + ", ".join(f"{n} x {g}" for g, n in p.gpus.items()))
    # MoE layouts: dp, ep columns
    moe = any(d.data_parallel > 1 or d.expert_parallel > 1 for d in p.deployments)
    cols = ("deployment", "gpu", "tp", "pp") + (("dp", "ep") if moe else ()) + (
        "replicas", "$/h", "load rps/replica", "capacity at SLO", "prefill util")
    for col in cols:
        t.add_column(col, justify="left" if col in ("deployment", "gpu") else "right")
    for d in p.deployments:
        price = fleet_usd_per_hour([(d.replicas, replica_usd_per_hour(r.ir.gpu(d.gpu).usd_per_hour,
                                                                        d.gpus_per_replica))])
        layout = (str(d.data_parallel), str(d.expert_parallel)) if moe else ()
        t.add_row(d.name, d.gpu, str(d.tensor_parallel), str(d.pipeline_parallel), *layout, str(d.replicas),
                  f"{price:,.2f}", f"{d.load_rps_per_replica:.2f}",
                  "-" if d.capacity_rps_per_replica is None else f"{d.capacity_rps_per_replica:.2f}",
                  f"{d.utilization:.0%}")
    console.print(t)
    w = Table(title="workloads: predicted (whole length mix; worst bucket) vs SLO, +- the model's error")
    for col in ("workload", "rate rps", "TTFT ms", "worst", "SLO", "TPOT ms", "worst ", "SLO ", "pct", "met",
                "error TTFT/TPOT"):
        w.add_column(col, justify="left" if col == "workload" else "right")
    for wl in r.ir.workloads:
        pr = p.predictions[wl.name]
        bar = pr.error_bar
        err = "-" if bar is None else f"{bar.ttft_pct:g}/{bar.tpot_pct:g} %" + ("*" if bar.notes else "")
        w.add_row(wl.name, f"{wl.rate_rps:g}", _ms(pr.ttft_ms), _ms(pr.ttft_ms_worst_bucket),
                  f"{wl.slo.ttft_ms:g}", _ms(pr.tpot_ms), _ms(pr.tpot_ms_worst_deployment),
                  f"{wl.slo.tpot_ms:g}", f"p{pr.percentile:g}",
                  "[green]yes[/]" if pr.slo_met else "[red]NO[/]", err)
    console.print(w)
    if any(pr.error_bar and pr.error_bar.notes for pr in p.predictions.values()):
        console.print("* the pooled error of all measured classes stands in for a class with too few runs "
                      "(the plan's error_bar.notes)", markup=False)
    s = p.solver
    gap = "" if s.gap in (None, 0) else f", gap {s.gap:.2%}"
    if gap and s.bound is not None:
        gap += f" (no plan at these capacities below {s.bound:,.2f} $/h)"
    console.print(f"solver: {s.backend} {s.status}{gap}, {r.rounds} round(s); "
                  f"{len(r.candidates.candidates)} candidates, {len(r.candidates.pruned)} pruned; "
                  f"planned in {r.seconds.get('total', 0):.2f} s")
    if p.schedule is not None:  # docs/online.md
        sc = p.schedule
        console.print(f"schedule: {len(sc.windows)} windows of {sc.window_s} s, "
                      f"{sc.cost_usd_per_hour_mean:,.2f} $/h over the period (start-ups "
                      f"{sc.startup_usd_per_period:,.2f} $ per period, {sum(w.started for w in sc.windows)} "
                      "replicas started); the table shows the fleet held (the most each deployment "
                      "runs at once)")
    for msg in p.warnings:
        console.print(f"[yellow]warning:[/] {msg}")
    if p.simulation is not None and p.simulation.undersampled:  # trimtab.sim.validate.SeedsResult.too_few
        names = p.simulation.undersampled
        console.print(f"note: {len(names)} workload(s) had too few simulated requests for a lower "
                      "bound to reach their percentile; accepted on attainment at or above target: "
                      f"{', '.join(names)} "
                      "(`trimtab check --seeds N` with more seeds gathers more)", markup=False)
    if verbose:
        named = {k: v for k, v in r.seconds.items() if k != "total"}
        other = max(0.0, r.seconds.get("total", 0.0) - sum(named.values()))
        console.print(f"rounds: {r.rounds} ({p.simulation.rounds if p.simulation else 0} after a "
                      f"simulated miss, {r.simulations} simulated); "
                      "seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in {**named, "other": other}.items()))
        if any(r.sim_runs):
            console.print(f"simulation: {r.sim_runs[1]} deployment runs simulated, {r.sim_runs[0]} "
                          "taken unchanged from a former round")
        pt = Table(title="pruned candidates")
        pt.add_column("candidate")
        pt.add_column("reason")
        for pr_ in r.candidates.pruned:
            pt.add_row(pr_.id, pr_.reason)
        console.print(pt)


def prediction_table(console: Console, title: str, pr: ClosedLoopPrediction) -> None:
    t = Table(title=title)
    t.add_column("metric")
    t.add_column("value", justify="right")
    rows = [("TTFT (mean)", f"{pr.ttft_ms:.1f} ms"), ("TPOT (mean)", f"{pr.tpot_ms:.2f} ms"),
            ("output tokens/s", f"{pr.output_tokens_per_s:,.0f}"),
            ("output tokens/s per GPU", f"{pr.output_tokens_per_s_per_gpu:,.0f}"),
            ("requests/s", f"{pr.requests_per_s:.3f}"), ("concurrency", str(pr.concurrency)),
            ("fits", "yes" if pr.fits else "NO"), ("max concurrency that fits", str(pr.max_concurrency)),
            ("KV cache tokens", f"{pr.kv_cache_tokens:,}")]
    for k, v in rows:
        t.add_row(k, v)
    console.print(t)


def loadtest_table(res) -> Table:
    """Measured vs predicted (cost model) vs simulated (same request stream) per workload, ``trimtab
    loadtest``."""
    t = Table(title=f"load test (rates x {res.rate_scale:g}, seed {res.seed}): measured vs predicted "
                    "vs simulated")
    for col in ("workload", "reqs", "failed", "TTFT p50", "TTFT p90", "TTFT pSLO", "pred", "sim", "TPOT p50",
                "TPOT p90", "TPOT pSLO", "pred ", "sim ", "attain", "sim att", "target", "met"):
        t.add_column(col, justify="left" if col == "workload" else "right")
    for w in res.workloads.values():
        m, p, s = w.measured, w.predicted, w.simulated
        t.add_row(w.name, str(w.requests), str(w.errors), _ms(m["ttft_p50"]), _ms(m["ttft_p90"]),
                  _ms_ci(m["ttft_pslo"], m["ttft_pslo_ci"]),
                  _ms(p.get("ttft_pslo")), _ms(s.get("ttft_pslo")), _ms(m["tpot_p50"]), _ms(m["tpot_p90"]),
                  _ms_ci(m["tpot_pslo"], m["tpot_pslo_ci"]), _ms(p.get("tpot_pslo")), _ms(s.get("tpot_pslo")),
                  f"{m['attainment']:.1%}", f"{s['attainment']:.1%}" if s else "-", f"{w.target:.0%}",
                  {"met": "yes", "missed": "NO",
                   "insufficient": f"insufficient (<{w.min_requests})"}[w.verdict])
    return t
