"""``check`` of a schedule (docs/online.md): every window (or the ones asked for) simulated as the static plan it
runs (its replicas, routes and placement) under its own rates and burstiness, on seeds the planner did not use;
the report gives each window's attainment and names the worst window.

The windows are simulated in steady state: replicas a window needs are started ahead of it by their start-up
time (``schedule.startup_s``) and those it drops stop at its start, so at each boundary the fleet serving is the
larger of the two windows' (the transition is covered by the window on either side).
"""
from __future__ import annotations

from dataclasses import dataclass

from compiler.check import CheckReport
from compiler.online.profile import window_rates, window_spec
from compiler.plan.schema import Plan
from compiler.sim.check import check_simulated
from compiler.sim.validate import SeedsResult

RATE_TOL = 1e-4  # relative: a window's planned rate differs from the spec's


@dataclass
class WindowCheck:
    window: int
    start_s: int
    report: CheckReport
    result: SeedsResult

    @property
    def margin(self) -> float:
        """Lowest (lower 95 % bound - target) over the workloads: the window's distance from missing."""
        return min(self.result.intervals[n].lower - self.result.targets[n] for n in self.result.intervals)


def window_plan(plan: Plan, t: int) -> Plan:
    """The static plan window ``t`` runs: its replicas (deployments with none dropped), routes and the first
    replicas' placement, at the cost the schedule states for it (which ``check`` re-derives)."""
    w = plan.schedule.windows[t]
    deps, gpus = [], {}
    for d in plan.deployments:
        n = w.replicas.get(d.name, 0)
        if n <= 0:
            continue
        deps.append(d.model_copy(update={"replicas": n, "placement": [p for p in d.placement if p.replica < n]}))
        gpus[d.gpu] = gpus.get(d.gpu, 0) + n * d.tensor_parallel * d.pipeline_parallel
    return plan.model_copy(update={"deployments": deps, "routes": list(w.routes), "gpus": dict(sorted(gpus.items())),
                                   "cost_usd_per_hour": w.cost_usd_per_hour, "schedule": None, "simulation": None})


def check_windows(plan: Plan, spec, *, seed: int | None = None, seeds: int = 3, requests: int | None = None,
                  windows: list[int] | None = None, strict: bool = False, profiles=None) -> list[WindowCheck]:
    """One ``compiler.sim.check.check_simulated`` per window; a window whose planned rates are not the spec's
    gets a violation instead of a run."""
    wr = window_rates(spec)
    sched = plan.schedule
    out = []
    if sched is None or len(sched.windows) != wr.n:
        raise ValueError(f"the plan has {len(sched.windows) if sched else 0} schedule windows, the spec {wr.n}")
    for t in (windows if windows is not None else range(wr.n)):
        w = sched.windows[t]
        rep, res = check_simulated(window_plan(plan, t), window_spec(spec, wr, t), profiles=profiles, seed=seed,
                                   seeds=seeds, requests=requests, strict=strict)
        stale = [f"{k}: planned for {w.rates.get(k)} rps, the spec has {v} rps" for k, v in wr.at(t).items()
                 if abs(w.rates.get(k, -1.0) - v) > RATE_TOL * max(v, 1.0)]
        if stale:
            rep = CheckReport(False, rep.violations + [f"window {t}: {s}" for s in stale], rep.notes, rep.assessment)
        out.append(WindowCheck(t, w.start_s, rep, res))
    return out


def worst_window(checks: list[WindowCheck]) -> WindowCheck:
    return min(checks, key=lambda c: (c.report.ok, c.margin, c.window))
