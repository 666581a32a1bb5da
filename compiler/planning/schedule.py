"""The schedule planner (spec ``schedule``; docs/online.md): a ``trimtab.planning.driver.Planner`` whose
solve is the
schedule MILP of ``trimtab.milp.windows`` over the unified planner's candidates, and whose validation
simulates every window. The one driver (``trimtab.planning.driver.drive``) runs its rounds.

    ir (lowered at each workload's peak rate) --candidates (UnifiedPlanner)--> schedule MILP
        --per window: balance LP, extraction--> window plans; the plan = the fleet held (max per deployment)
        with each workload's routes of its peak window, + ``schedule`` (replicas, routes, cost per window)
"""
from __future__ import annotations

from dataclasses import replace

from trimtab.milp.formulate import capacity_fill, n_var
from trimtab.milp.windows import (WindowKey, formulate_schedule, switching, window_derate, window_ir,
                                  window_result)
from trimtab.spec.rates import window_rates, window_spec
from trimtab.cost.startup import candidate_startup_s, startup_for
from trimtab.milp.extract import build_plan, chosen
from trimtab.deployment.price import fleet_usd_per_hour, startup_usd
from trimtab.contract.schema import PlanSchedule, Route, ScheduleWindow
from trimtab.planning.planners import UnifiedPlanner
from trimtab.milp.solve import balance_routes, solve_ir
from trimtab.solvers import NetExpired, Termination
from trimtab.planning.rounds import simulate_and_derate
from trimtab.sim.validate import clear_pass


# relative MIP gap the schedule MILP stops at (windows x candidates: proving 1e-4 takes minutes)
SCHEDULE_GAP = 0.02
# A window outside the fullest is first screened with SCREEN_SHARE of the validation requests, and at least
# SCREEN_MIN of them
SCREEN_SHARE = 0.25
SCREEN_MIN = 2_000


class SchedulePlanner(UnifiedPlanner):
    def __init__(self, spec):
        self.spec = spec
        self.sched = spec.schedule
        self.wr = window_rates(spec)
        self.startup = startup_for(self.sched.startup)
        self.windows: list = []  # per window: (ir_t, balanced SolveResult) of the solve being built
        # id(schedule result) -> (result, its windows): build reads its own
        self._solved: dict[int, tuple] = {}
        self.sims: dict[int, object] = {}  # window -> SeedsResult of the last validation
        # (window plan, rates, burstiness, seeds, requests) -> passing result
        self._passed: dict[tuple, object] = {}

    def rates(self) -> list[dict[str, float]]:
        return [self.wr.at(t) for t in range(self.wr.n)]

    def startup_s(self, ir, cands) -> dict[str, float]:
        return {c.id: candidate_startup_s(self.startup, ir, c) for c in cands.candidates}

    def screen(self, ir, cands, derate, backend, options):
        """The candidates some window's own cheapest static plan uses (``trimtab.milp.solve.solve_ir`` per
        window,
        distinct rate vectors once): the schedule MILP chooses among these. Returns them, the seconds spent
        and the window solve the safety net stopped (None: none did)."""
        keep: set[str] = set()
        spent = 0.0
        for t, r in enumerate(self.rates()):
            res = solve_ir(window_ir(ir, r), cands, backend, options.after(spent), window_derate(derate, t))
            spent += res.seconds
            if res.termination == Termination.TIME_LIMIT:
                # the safety net stopped it: no answer, and a candidate set without this window's shapes
                # would make the plan depend on the machine's load
                return cands, spent, res
            keep |= {c.id for c in cands.candidates if res.values.get(n_var(c.id), 0.0) > 0.5}
        if not keep:
            return cands, spent, None
        return replace(cands, candidates=tuple(c for c in cands.candidates if c.id in keep)), spent, None

    def solve(self, ir, cands, derate, backend, options):
        """Screening and the schedule MILP, within what the run's safety net has left (``options``): a solve
        it stops gives no answer (exit 4), like any other."""
        s = self.sched
        small, spent, stopped = self.screen(ir, cands, derate, backend, options)
        if stopped is not None:
            return replace(stopped, seconds=spent)
        m, names = formulate_schedule(ir, small, self.rates(), s.window_s, self.startup_s(ir, small), derate,
                               cyclic=s.cyclic, min_lifetime=s.min_lifetime_windows,
                               max_changes=s.max_changes_per_window)
        res = backend.solve(m, options.after(spent, mip_rel_gap=max(options.mip_rel_gap, SCHEDULE_GAP)))
        spent += res.seconds
        windows = []
        if res.has_solution:
            for t, r in enumerate(self.rates()):
                ir_t = window_ir(ir, r)
                bal = balance_routes(ir_t, small, backend, options, window_result(res, names[t]),
                                    window_derate(derate, t))
                spent += max(bal.seconds - res.seconds, 0.0)
                windows.append((ir_t, bal))
        res = replace(res, seconds=spent)
        self._solved[id(res)] = (res, windows)
        return res

    def use(self, res) -> None:
        """Make ``res``'s windows the ones extraction, fill and validation read."""
        self.windows = self._solved[id(res)][1]

    def peak_window(self, workload: str) -> int:
        r = self.wr.rates[workload]
        return max(range(len(r)), key=lambda t: (r[t], -t))

    def build(self, ir, cands, res, rounds, warnings):
        """The fleet held (max replicas per deployment over the windows) with each workload's routes of its
        peak window, assessed at the peak rates; ``schedule`` gives every window."""
        self.use(res)
        # The fleet held is the most replicas any window runs. The MILP's held[c] is bounded below by them but
        # pushed down only by an epsilon term (EPS_HELD) a solver may leave inside its gap: read it off the
        # windows, never off the variable (one solve held 15 A100 where no window ran more than 2).
        held = {c.id: max((round(r_t.values.get(n_var(c.id), 0.0)) for _, r_t in self.windows), default=0)
                for c in cands.candidates}
        per_window = [chosen(ir_t, cands, r_t) for ir_t, r_t in self.windows]
        deps = [(c, n) for c in cands.candidates if (n := held[c.id]) > 0]
        routes = [r for w in ir.workloads for r in per_window[self.peak_window(w.name)][1]
                  if r.workload == w.name]
        # the MILP's objective is the period's dollars: its bound per hour bounds the schedule's mean $/h
        hours = self.wr.n * self.wr.window_s / 3600.0
        per_hour = replace(res, bound=None if res.bound is None else res.bound / hours)
        plan, a = build_plan(ir, deps, routes, per_hour, rounds, warnings)
        return plan.model_copy(update={"schedule": self.schedule_block(ir, cands, res, deps, per_window)}), a

    def schedule_block(self, ir, cands, res, deps, per_window) -> PlanSchedule:
        s, wr = self.sched, self.wr
        st = self.startup_s(ir, cands)
        sw = switching(res, cands, wr.n, s.cyclic)
        windows = []
        total = 0.0
        start_usd = 0.0
        by_id = {c.id: c for c, _ in deps}
        for t, (ir_t, r_t) in enumerate(self.windows):
            reps = {c.id: round(r_t.values.get(n_var(c.id), 0.0)) for c, _ in deps}
            cost = fleet_usd_per_hour((n, by_id[d].usd_per_hour) for d, n in reps.items())
            total += cost
            routes = per_window[t][1]
            windows.append(ScheduleWindow(
                start_s=t * wr.window_s, rates={w: round(v, 6) for w, v in sorted(wr.at(t).items())},
                replicas=dict(sorted(reps.items())), started=sw[t][0], stopped=sw[t][1],
                cost_usd_per_hour=round(cost, 4),
                routes=[Route(workload=r.workload, bucket=r.bucket, deployment=r.deployment or None,
                              prefill=r.prefill or None, decode=r.decode or None, share=r.share)
                        for r in sorted(routes, key=lambda r: (r.workload, r.bucket, r.deployment, r.prefill,
                                                              r.decode))]))
            for c, _ in deps:
                up = max(0, reps[c.id] - round(self.windows[t - 1][1].values.get(n_var(c.id), 0.0))) \
                    if (t > 0 or s.cyclic) else reps[c.id]
                start_usd += startup_usd(c.usd_per_hour, st[c.id], up)
        hours = wr.n * wr.window_s / 3600.0
        return PlanSchedule(window_s=wr.window_s, cyclic=s.cyclic,
                            min_lifetime_windows=s.min_lifetime_windows,
                            max_changes_per_window=s.max_changes_per_window,
                            startup_s={c.id: round(st[c.id], 1) for c, _ in deps},
                            startup_source=self.startup.source,
                            cost_usd_per_hour_mean=round(
                                (total * wr.window_s / 3600.0 + start_usd) / hours, 4),
                            startup_usd_per_period=round(start_usd, 4), windows=windows)

    def fill(self, cands, res, derate) -> dict[str, float]:
        """Per deployment: the largest share of its capacity any window uses."""
        self.use(res)
        out: dict[str, float] = {}
        for t, (_, r_t) in enumerate(self.windows):
            for k, v in capacity_fill(cands, r_t, window_derate(derate, t)).items():
                out[k] = max(out.get(k, 0.0), v)
        return out

    def fullest(self, cands, derate, k: int) -> list[int]:
        """The ``k`` windows whose busiest deployment is the fullest (then the busiest traffic, then
        earliest), each workload's peak window (the held plan's routes come from it), and for each distinct
        burstiness (rate_profile.cv) other than the default the fullest window with it: burstier arrivals miss
        at a lower fill."""
        score = []
        for t, (_, r_t) in enumerate(self.windows):
            f = capacity_fill(cands, r_t, window_derate(derate, t))
            score.append((-(max(f.values()) if f else 0.0), -sum(self.wr.at(t).values()), t))
        pick = {t for *_, t in sorted(score)[:k]}
        bursty: dict[tuple, tuple] = {}
        for sc in sorted(score):
            cv = tuple(self.wr.cv[w][sc[2]] for w in sorted(self.wr.cv))
            if any(c is not None and c > 1 for c in cv):
                bursty.setdefault(cv, sc)
        peaks = {self.peak_window(w) for w in self.wr.rates}
        return sorted(pick | peaks | {sc[2] for sc in bursty.values()})

    def window_plan(self, ir, cands, t: int, rounds: int = 1):
        ir_t, r_t = self.windows[t]
        deps, routes = chosen(ir_t, cands, r_t)
        plan, _ = build_plan(ir_t, deps, routes, r_t, rounds, [])
        return ir_t, plan

    def simulate(self, plan, spec, ir, seeds, requests, derate, fill, net=None):
        """Validation of a schedule: **every window**, each simulated as a static plan (its replicas and
        routes) under its own rates and burstiness (``validate_window``). A miss derates the deployment at
        fault (``trimtab.planning.rounds.simulate_and_derate``: to the fill it missed at) in that window and
        in every window where it runs at least as full with at least as bursty traffic and on no more replicas
        (keys ``WindowKey(t, cid)``). Returns the worst window's result (the lowest margin of the lower bound
        over target) and the derates. ``net`` (``trimtab.solvers.SafetyNet``), asked between windows: its
        expiry raises ``NetExpired`` (a window's simulation is never cut)."""
        cands = self._cands
        self.sims = {}
        out = dict(derate)
        fills = [capacity_fill(cands, r_t, window_derate(derate, t))
                 for t, (_, r_t) in enumerate(self.windows)]
        reps = [{c.id: r_t.values.get(n_var(c.id), 0.0) for c in cands.candidates}
                for _, r_t in self.windows]
        burst = [max((c or 1.0) for w in self.wr.cv for c in (self.wr.cv[w][t],)) for t in range(self.wr.n)]
        full = set(self.fullest(cands, derate, self.sched.validate_windows))
        worst, worst_margin = None, None
        for t in range(self.wr.n):
            if t and net is not None and net.expired():
                raise NetExpired(f"after {t} of its {self.wr.n} windows")
            res_t, new = self.validate_window(ir, spec, t, seeds, requests, window_derate(derate, t),
                                              fills[t], t in full)
            self.sims[t] = res_t
            d_t = window_derate(derate, t)
            for cid, v in new.items():
                if v >= d_t.get(cid, 1.0) - 1e-12:
                    continue
                factor = v / d_t.get(cid, 1.0)
                n_t = reps[t].get(cid, 0.0)
                for t2 in range(self.wr.n):
                    if (fills[t2].get(cid, 0.0) >= fills[t].get(cid, 0.0) - 1e-9
                            and burst[t2] >= burst[t] - 1e-9
                            and reps[t2].get(cid, 0.0) <= n_t + 1e-9):
                        key = WindowKey(t2, cid)
                        out[key] = min(out.get(key, 1.0), derate.get(key, 1.0) * factor)
            margin = min(res_t.intervals[n].lower - res_t.targets[n] for n in res_t.intervals)
            if worst is None or margin < worst_margin:
                worst, worst_margin = res_t, margin
        return worst, out

    def validate_window(self, ir, spec, t, seeds, requests, d_t, fill_t, full: bool):
        """Window ``t``'s validation: the fullest windows (``full``: ``fullest``) on ``seeds`` with
        ``requests`` each; every other window first screened on one seed with SCREEN_SHARE of the requests,
        and validated in full only when the screen neither shows a miss (its derates are taken) nor a clear
        pass (``trimtab.sim.validate.clear_pass``). A window whose plan and traffic a previous round already
        validated as passing is not simulated again. Returns (SeedsResult, derates) as
        ``trimtab.planning.rounds.simulate_and_derate``."""
        cands = self._cands
        ir_t, plan_t = self.window_plan(ir, cands, t)
        spec_t = window_spec(spec, self.wr, t)
        key = (tuple((d.name, d.replicas) for d in plan_t.deployments),
               tuple((r.workload, r.bucket, r.deployment, r.prefill, r.decode, round(r.share, 6))
                     for r in plan_t.routes),
               tuple(sorted(self.wr.at(t).items())), tuple(self.wr.cv[w][t] for w in sorted(self.wr.cv)),
               tuple(seeds), requests)
        if key in self._passed:
            return self._passed[key], dict(d_t)
        if not full:
            screen = max(SCREEN_MIN, int(requests * SCREEN_SHARE))
            res, new = simulate_and_derate(plan_t, spec_t, ir_t, seeds[:1], screen, d_t, fill_t)
            if any(res.missed(n) for n in res.intervals):
                return res, new
            if clear_pass(res):
                self._passed[key] = res
                return res, dict(d_t)
        res, new = simulate_and_derate(plan_t, spec_t, ir_t, seeds, requests, d_t, fill_t)
        if res.ok:
            self._passed[key] = res
        return res, new

    def candidates(self, ir):
        self._cands = super().candidates(ir)
        return self._cands

    def with_windows_validated(self, plan):
        """``plan`` with each simulated window's attainment bound recorded in its schedule."""
        if plan.schedule is None or not self.sims:
            return plan
        wins = [w.model_copy(update={"attainment_lower": {k: round(iv.lower, 4) for k, iv in
                                                         sorted(self.sims[t].intervals.items())}})
                if t in self.sims else w for t, w in enumerate(plan.schedule.windows)]
        return plan.model_copy(update={"schedule": plan.schedule.model_copy(update={"windows": wins})})
