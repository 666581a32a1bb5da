"""``check`` of a schedule (docs/online.md): every window (or the ones asked for) simulated as the static plan
it runs (its replicas, routes and placement) under its own rates and burstiness, on seeds the planner did not
use; the report gives each window's attainment and names the worst window.

Each window is simulated in steady state (``check_windows``); the boundaries where replicas are added are
simulated over time (``check_transitions``: the end of one window and the start of the next as one run of
``trimtab.sim.schedule``, added replicas serving only after their start-up, removed ones draining).
"""
from __future__ import annotations

from dataclasses import dataclass

from trimtab.gate.analytic import CheckReport
from trimtab.spec.rates import window_rates, window_spec
from trimtab.contract.schema import Plan
from trimtab.gate.simulated import check_simulated
from trimtab.sim.validate import SeedsResult, check_seeds, combine
from trimtab.ir.lower import lower
from trimtab.sim.metrics import summarise
from trimtab.sim.scenario import build_scenario
from trimtab.sim.schedule import ScheduleSimulation, Segment, scale_events

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
        deps.append(d.model_copy(update={"replicas": n,
                                         "placement": [p for p in d.placement if p.replica < n]}))
        gpus[d.gpu] = gpus.get(d.gpu, 0) + n * d.gpus_per_replica
    return plan.model_copy(update={"deployments": deps, "routes": list(w.routes),
                                   "gpus": dict(sorted(gpus.items())),
                                   "cost_usd_per_hour": w.cost_usd_per_hour, "schedule": None,
                                   "simulation": None})


def check_windows(plan: Plan, spec, *, seed: int | None = None, seeds: int = 3, requests: int | None = None,
                  windows: list[int] | None = None, strict: bool = False, profiles=None) -> list[WindowCheck]:
    """One ``trimtab.gate.simulated.check_simulated`` per window; a window whose planned rates are not the
    spec's
    gets a violation instead of a run."""
    wr = window_rates(spec)
    sched = plan.schedule
    out = []
    if sched is None or len(sched.windows) != wr.n:
        raise ValueError(f"the plan has {len(sched.windows) if sched else 0} schedule windows, the spec "
                         f"{wr.n}")
    for t in (windows if windows is not None else range(wr.n)):
        w = sched.windows[t]
        rep, res = check_simulated(window_plan(plan, t), window_spec(spec, wr, t), profiles=profiles,
                                   seed=seed, seeds=seeds, requests=requests, strict=strict)
        stale = [f"{k}: planned for {w.rates.get(k)} rps, the spec has {v} rps" for k, v in wr.at(t).items()
                 if abs(w.rates.get(k, -1.0) - v) > RATE_TOL * max(v, 1.0)]
        if stale:
            rep = CheckReport(False, rep.violations + [f"window {t}: {s}" for s in stale], rep.notes,
                              rep.assessment)
        out.append(WindowCheck(t, w.start_s, rep, res))
    return out


def worst_window(checks: list[WindowCheck]) -> WindowCheck:
    return min(checks, key=lambda c: (c.report.ok, c.margin, c.window))


# ---------------------------------------------------------------------------------------------- transitions
BEFORE_S = 300.0  # simulated seconds of the window before a boundary (its first quarter is warm-up) ...
AFTER_S = 900.0  # ... and of the window after it
HEAD_S = 300.0  # the boundary minutes: reported on their own


class TransitionsUnsupported(ValueError):
    """A schedule whose boundaries ``check_transitions`` cannot simulate (P/D pairs)."""


@dataclass
class TransitionCheck:
    """One boundary simulated as one run (``trimtab.sim.schedule``): window ``window - 1``'s last BEFORE_S
    seconds, then window ``window``'s first AFTER_S, the fleet scaling at the boundary. ``before``: the
    requests arriving in the earlier window (after warm-up); ``head``: in the first HEAD_S seconds of
    ``window``; ``after``: in all of its simulated part."""

    window: int
    start_s: int
    started: dict[str, int]  # deployment -> replicas added at the boundary
    stopped: dict[str, int]
    ready_s: dict[str, float]  # deployment -> seconds after the boundary its added replicas serve from
    before: SeedsResult
    head: SeedsResult
    after: SeedsResult
    violations: list[str]

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def margin(self) -> float:
        return min(r.intervals[n].lower - r.targets[n] for r in (self.head, self.after) for n in r.intervals)


def rising(plan: Plan) -> list[int]:
    """The windows where some deployment runs more replicas than in the window before (the transition
    windows; window 0 only when the period is cyclic)."""
    ws = plan.schedule.windows
    out = []
    for t in range(len(ws)):
        if t == 0 and not plan.schedule.cyclic:
            continue
        prev = ws[t - 1].replicas
        if any(n > prev.get(d, 0) for d, n in ws[t].replicas.items()):
            out.append(t)
    return out


def check_transitions(plan: Plan, spec, *, windows: list[int] | None = None, seed: int | None = None,
                      seeds: int = 3, lead_s: float | None = None, before_s: float = BEFORE_S,
                      after_s: float = AFTER_S, head_s: float = HEAD_S, strict: bool = False,
                      profiles=None) -> list[TransitionCheck]:
    """Each boundary into ``windows`` (default: ``rising``) simulated over time on ``seeds`` runs. A start is
    issued ``lead_s`` before the boundary (None: the plan's ``startup_s``, so the replica serves from the
    boundary, as ``emit``'s cron triggers start it; 0: at the boundary, as a scaler reacting then would) and
    serves from the issue + ``startup_s``. A boundary fails when the runs show a miss (upper 95 % bound below
    target) in its first ``head_s`` seconds or in the whole part of the window simulated (``strict``: when a
    lower bound is below target)."""
    wr = window_rates(spec)
    sched = plan.schedule
    if sched is None or len(sched.windows) != wr.n:
        raise ValueError(f"the plan has {len(sched.windows) if sched else 0} schedule windows, the spec "
                         f"{wr.n}")
    held = plan.model_copy(update={"schedule": None, "simulation": None})
    run_seeds = check_seeds(seeds, seed, tuple(plan.simulation.seeds) if plan.simulation else ())
    out = []
    for t in (windows if windows is not None else rising(plan)):
        if t == 0 and not sched.cyclic:
            continue  # the period starts from nothing: no window before it
        pair = [(t - 1) % wr.n, t]
        scs = [build_scenario(held.model_copy(update={"routes": list(sched.windows[w].routes)}),
                              window_spec(spec, wr, w), lower(window_spec(spec, wr, w), profiles))
               for w in pair]
        if any(sc.pairs for sc in scs):
            raise TransitionsUnsupported("the schedule routes to prefill/decode pairs: their boundaries are "
                                         "not simulated over time (each window is, in steady state)")
        names = [d.view.name for d in scs[0].deployments]
        counts = [[sched.windows[w].replicas.get(n, 0) for n in names] for w in pair]
        st = [float(sched.startup_s.get(n, 0.0)) for n in names]
        lead = [s if lead_s is None else float(lead_s) for s in st]
        serving, events = scale_events(counts, [before_s], st, lead)
        segs = [Segment(0.0, before_s, scs[0]), Segment(before_s, before_s + after_s, scs[1])]
        runs = {"before": [], "head": [], "after": []}
        for s in run_seeds:
            sim = ScheduleSimulation(scs[1], segs, serving, events, s).run()
            runs["before"].append(summarise(sim, (0.25 * before_s, before_s)))
            runs["head"].append(summarise(sim, (before_s, before_s + head_s)))
            runs["after"].append(summarise(sim, (before_s, before_s + after_s)))
        res = {k: combine(tuple(run_seeds), v) for k, v in runs.items()}
        bad = []
        for part, label in (("head", f"first {head_s:g} s"), ("after", f"first {after_s:g} s")):
            r = res[part]
            for n in r.intervals:
                if r.missed(n) or (strict and not r.demonstrated(n)):
                    bad.append(f"into window {t}, {label}: workload {n}: {r.describe(n)}")
        up = {n: b - a for n, a, b in zip(names, *counts) if b > a}
        down = {n: a - b for n, a, b in zip(names, *counts) if a > b}
        ready = {n: round(s - l_, 1) for n, s, l_ in zip(names, st, lead) if n in up}
        out.append(TransitionCheck(t, sched.windows[t].start_s, up, down, ready, res["before"], res["head"],
                                   res["after"], bad))
    return out
