"""Planning with LoRA adapters and tenants: the placement MILP, extraction, the loop (the shared candidates
and traffic units are built by ``trimtab.planning.lora_candidates``).

Used by ``trimtab.api.plan`` when the spec has adapters or tenants (``ir.lora``); other specs never come here.
docs/multi-lora.md describes the model; the notation, on top of compiler/milp/formulate.py's:

    G: groups (base model, dtype, KV cache precision); k: a tenant colour (conflicting tenants get different
        colours, greedily)
    C_G,k: shared candidates (GPU type, TP, PP, token budget, L = max_loras) of group G for colour k; each
        serves any workload of G of colour k. cap[w,c]: per-replica rate of workload w's whole length mix at
        w's SLO on c (harmonic over its buckets), computed with the LoRA cost model (compiler/cost/lora.py).
    U: traffic units: a workload's base-model traffic, a hot adapter of a workload (exact), or a class of its
        cold adapters (N_k adapters, total rate R_k, largest single rate rmax_k)
    n[c] in Z+ replicas; x[u,c] >= 0 rps; y[a,c] in {0,1}: hot adapter a held by c; z[k,c] in Z+: adapters of
        cold class k held by c; slots[c]: adapters c may hold (1 for L = 1, else MAX_CPU_LORAS)
Constraints (family names as in the model):
    sum_c x[u,c] == rate[u]                                (demand)
    sum_u x[u,c] / (cap[w(u),c] derate[c]) <= n[c]         (capacity)
    x[u,c] <= rate[u] y[a(u),c]                            (lora_hold: adapter traffic only where it is held)
    x[k,c] <= rmax_k z[k,c];   sum_c z[k,c] >= N_k         (lora_class, lora_cover)
    sum_a y[a,c] + sum_k z[k,c] <= slots[c]                (lora_slots: --max-cpu-loras)
    inventory[g], budget as in compiler/milp/formulate.py
Objective: min sum_c usd[c] n[c] + EPS_GPU x GPUs + EPS_HOLD x (sum y + sum z) (hold nothing needlessly).
Rank: every candidate of G has max_lora_rank = the largest rank among G's adapters (so any adapter fits).
Isolation: a unit may only use the candidates of its tenant's colour; colours are assigned so that no two
tenants that must not share (a dedicated tenant with anyone) get the same one. compiler/gate/lora.py checks
the plan independently.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from trimtab.milp.assess import assess
from trimtab.deployment.shape import Candidate, CandidateSet, DeploymentSpecView, RouteView, replica_model_of
from trimtab.errors import InfeasibleError
from trimtab.milp.formulate import EPS_GPU, n_var
from trimtab.deployment.price import fleet_usd_per_hour
from trimtab.planning.lora_candidates import LoraProblem, Unit, build, usable
from trimtab.spec.lora import NO_TENANT
from trimtab.spec.paths import SpecPath
from trimtab.milp.extract import goodput_of, plan_buckets, predictions, solver_info
from trimtab.contract.schema import AdapterRoute, Deployment, Plan, Route
from trimtab.solvers.base import SolveOptions, Status, Termination
from trimtab.solvers.model import Constraint, MilpModel
from trimtab.cost.predict import fidelity_warnings
from trimtab.milp.solve import two_stage
from trimtab.planning.explain import (Explanation, adapter_precheck, elastic_changes, relaxation_lines,
                                      relaxed_ir)

EPS_HOLD = 1e-7
TOL = 1e-7


@dataclass(frozen=True, slots=True)
class RouteVars:
    """A traffic unit's route to a shared candidate it may use (``usable``): x[u,c], and the hold variable
    that gates it: y[a,c] of a hot adapter (one per adapter and candidate, shared by the units of workloads
    that request the same adapter), z[k,c] of a cold class, "" for base traffic."""

    unit: Unit
    cand: Candidate
    x: str
    hold: str


@dataclass(frozen=True)
class LoraIndex:
    """The adapter MILP's variables by the records they stand for (the module docstring's n[c], x[u,c],
    y[a,c], z[k,c]), made from the problem before the model: ``formulate`` adds exactly these, and extraction,
    fill, explain and n+1 read the solver's values through them, so no stage after the solve rebuilds or
    parses a variable name (names are for display and the backends)."""

    replicas: dict[Candidate, str]  # n[c]
    routes: dict[Unit, tuple[RouteVars, ...]]  # each unit's routes, in candidate order
    onto: dict[Candidate, tuple[RouteVars, ...]]  # each candidate's routes, in unit order

    @classmethod
    def of(cls, prob: LoraProblem) -> LoraIndex:
        onto: dict[Candidate, list[RouteVars]] = {c: [] for c in prob.cands}
        routes = {}
        for u in prob.units:
            mine = []
            for c in prob.cands:
                if not usable(u, c):
                    continue
                hold = (f"hold[{u.adapter},{c.id}]" if u.kind == "hot" else f"hold[{u.id},{c.id}]"
                        if u.kind == "class" else "")
                r = RouteVars(u, c, f"route[{u.id},{c.id}]", hold)
                mine.append(r)
                onto[c].append(r)
            routes[u] = tuple(mine)
        return cls({c: n_var(c.id) for c in prob.cands}, routes, {c: tuple(rs) for c, rs in onto.items()})

    def bought(self, values: dict[str, float]) -> dict[Candidate, int]:
        """Replicas of each candidate in a solution (0 included), in candidate order."""
        return {c: int(round(values.get(n, 0.0))) for c, n in self.replicas.items()}


def _rate_cap(c: Candidate, u: Unit, derate: dict[str, float]) -> float:
    """Per-replica rate of ``u``'s workload on ``c`` at its SLO, derated: the capacity row's divisor."""
    return c.lora_group.capacity(u.workload) * derate.get(c.id, 1.0)


def formulate(ir, prob: LoraProblem, derate: dict[str, float], group: str | None = None,
              elastic: bool = False, goodput_floor: float | None = None) -> tuple[MilpModel, LoraIndex]:
    """The MILP of ``prob`` (or of one group's part of it: that group's candidates and units only) and the
    index of its variables (``LoraIndex``). ``capacity`` rows are keyed by their candidate.
    ``elastic``: replicas bounded by what carries all the traffic the candidate may serve instead of by the
    inventory, for ``MilpModel.elastic`` (inventory and budget rows are relaxable;
    ``trimtab.planning.explain.elastic_changes``).
    ``max_goodput`` specs: demand rows become ``<=``; without ``goodput_floor`` the objective is the served
    rate (maximised), with it the cost subject to serving at least that much (the two stages of
    compiler/milp/solve.py)."""
    goodput = ir.objective == "max_goodput"
    served = []
    if group is not None:
        prob = LoraProblem([c for c in prob.cands if c.lora_group.name == group],
                           [u for u in prob.units if u.group == group], prob.colors)
    ix = LoraIndex.of(prob)
    m = MilpModel(name=f"trimtab-lora:{ir.name}" + (f"/{group}" if group else ""))
    for c in prob.cands:
        ub = ir.gpu(c.gpu).count // c.gpus
        if elastic:
            ub = math.ceil(sum(r.unit.rate / _rate_cap(c, r.unit, derate) for r in ix.onto[c])) + 1
        m.add_var(ix.replicas[c], "integer", 0, ub)
    cap_terms: dict[Candidate, list] = {c: [] for c in prob.cands}
    holds: dict[Candidate, list] = {c: [] for c in prob.cands}
    hold_cost = []
    for u in prob.units:
        terms = []
        cover = []
        for r in ix.routes[u]:
            c = r.cand
            x = m.add_var(r.x, "continuous", 0.0, u.rate, "route")
            terms.append((x, 1.0))
            cap_terms[c].append((x, 1.0 / _rate_cap(c, u, derate)))
            if u.kind == "hot":
                if r.hold not in m.variables:  # the adapter's y[a,c], made by its first unit
                    m.add_var(r.hold, "integer", 0, 1)
                    holds[c].append((r.hold, 1.0))
                    hold_cost.append((r.hold, EPS_HOLD))
                m.add(Constraint(f"lora_hold[{u.id},{c.id}]", "lora_hold", ((x, 1.0), (r.hold, -u.rate)),
                                 "<=", 0.0, origin=SpecPath.workload(ir.workload(u.workload), "adapter")))
            elif u.kind == "class":
                cpu = c.lora_group.cpu_slots
                z = m.add_var(r.hold, "integer", 0, min(len(u.members), max(cpu, 1)))
                holds[c].append((z, 1.0))
                hold_cost.append((z, EPS_HOLD))
                cover.append((z, 1.0))
                m.add(Constraint(f"lora_class[{u.id},{c.id}]", "lora_class", ((x, 1.0), (z, -u.rmax)), "<=",
                                 0.0, origin=SpecPath.workload(ir.workload(u.workload), "adapter")))
        if not terms:
            raise InfeasibleError([f"{u.workload}: no deployment of {u.group} meets its SLO with LoRA "
                                   f"enabled ({u.id})"])
        m.add(Constraint(f"demand[{u.id}]", "demand", tuple(terms), "<=" if goodput else "==", u.rate,
                         origin=SpecPath.workload(ir.workload(u.workload), "rate_rps")))
        served += terms
        if u.kind == "class":
            m.add(Constraint(f"lora_cover[{u.id}]", "lora_cover", tuple(cover), ">=", float(len(u.members)),
                             origin=SpecPath.workload(ir.workload(u.workload), "adapter")))
    for c in prob.cands:
        m.add(Constraint(f"capacity[{c.id}]", "capacity", tuple(cap_terms[c]) + ((ix.replicas[c], -1.0),),
                         "<=", 0.0, origin=SpecPath("workloads", field="slo"), key=c))
        if holds[c]:
            m.add(Constraint(f"lora_slots[{c.id}]", "lora_slots", tuple(holds[c]), "<=",
                             float(c.lora_group.cpu_slots),
                             origin=SpecPath("adapters", note="max_cpu_loras")))
    for pool in ir.gpus:
        cs = [c for c in prob.cands if c.gpu == pool.type]
        m.add(Constraint(f"inventory[{pool.type}]", "inventory",
                         tuple((ix.replicas[c], float(c.gpus)) for c in cs),
                         "<=", float(pool.count), origin=SpecPath.gpu(pool, "count"), relaxable=True))
    if ir.budget_usd_per_hour is not None:
        m.add(Constraint("budget", "budget", tuple((ix.replicas[c], c.usd_per_hour) for c in prob.cands),
                         "<=", ir.budget_usd_per_hour, origin=SpecPath("budget_usd_per_hour"),
                         relaxable=True))
    if goodput and goodput_floor is not None:
        m.add(Constraint("goodput[total]", "goodput", tuple(served), ">=", goodput_floor,
                         origin=SpecPath("objective")))
    m.objective = tuple([(ix.replicas[c], c.usd_per_hour + EPS_GPU * c.gpus) for c in prob.cands] + hold_cost)
    if goodput and goodput_floor is None and not elastic:
        m.sense, m.objective = "max", tuple(served)
    return m, ix


def solve(ir, prob: LoraProblem, derate: dict[str, float], be, opts: SolveOptions):
    """Solve group by group (groups share only the GPU inventories and the budget); when the union of the
    groups' optima breaks neither, it is the optimum of the whole MILP. Otherwise solve the whole MILP.
    ``max_goodput``: the most traffic served, then the cheapest plan serving it
    (``trimtab.milp.solve.two_stage``)."""
    if ir.objective == "max_goodput":
        return two_stage(lambda floor: formulate(ir, prob, derate, goodput_floor=floor)[0], be, opts)
    groups = sorted({c.lora_group.name for c in prob.cands})
    if len(groups) > 1:
        values: dict[str, float] = {}
        secs, gaps, bounds, res, worst = 0.0, [], [], None, Status.OPTIMAL
        for g in groups:
            res = be.solve(formulate(ir, prob, derate, g)[0], opts.after(secs))
            secs += res.seconds
            if res.termination == Termination.TIME_LIMIT:  # the safety net: no answer (trimtab.solvers.base)
                return replace(res, seconds=secs)
            if not res.has_solution:
                break
            values.update(res.values)
            gaps.append(res.gap)
            bounds.append(res.bound)
            worst = Status.FEASIBLE if res.status == Status.FEASIBLE else worst
        else:
            whole, _ = formulate(ir, prob, derate)
            if not whole.violations(values, 1e-5):
                # (the groups' bounds add up: the whole MILP is theirs plus the rows they share)
                return replace(res, values=values, seconds=secs, status=worst,
                               gap=None if None in gaps else max(gaps, default=0.0),
                               bound=None if None in bounds else sum(bounds),
                               objective=whole.evaluate(whole.objective, values))
        res = be.solve(formulate(ir, prob, derate)[0], opts.after(secs))
        return replace(res, seconds=res.seconds + secs)
    return be.solve(formulate(ir, prob, derate)[0], opts)


def extract(ir, prob: LoraProblem, values: dict[str, float]):
    """-> (chosen [(Candidate, replicas)], flows {(workload, adapter): {deployment: rps}}), read through the
    MILP's index (``LoraIndex``)."""
    ix = LoraIndex.of(prob)
    chosen = [(c, n) for c, n in ix.bought(values).items() if n > 0]
    live = {c for c, _ in chosen}
    flows: dict[tuple[str, str], dict[str, float]] = {}

    def add(w, a, d, r):
        f = flows.setdefault((w, a), {})
        f[d] = f.get(d, 0.0) + r

    for u in prob.units:
        got = [(r.cand.id, values.get(r.x, 0.0)) for r in ix.routes[u] if r.cand in live]
        got = [(d, r) for d, r in got if r > TOL]
        if u.kind != "class":
            for d, r in got:
                add(u.workload, u.adapter, d, r)
            continue
        # Water-fill the class's adapters (largest first) into its deployments in proportion to their flows:
        # the class's whole rate (min_cost serves it all: the flows sum to it but for the solver's tolerance);
        # a max_goodput plan serves what its flows carry, the largest adapters first, none of a class it does
        # not serve.
        if not got:
            continue
        total = sum(r for _, r in got)
        goodput = ir.objective == "max_goodput"
        served = min(total, u.rate) if goodput else u.rate
        targets = [[d, r * served / total] for d, r in sorted(got)]
        i = 0
        for a, r in u.members:
            left = r
            while left > TOL and i < len(targets):
                take = min(left, targets[i][1])
                if take > TOL:
                    add(u.workload, a, targets[i][0], take)
                left -= take
                targets[i][1] -= take
                if targets[i][1] <= TOL:
                    i += 1
            if left > TOL and not goodput:  # rounding: the rest to the last deployment
                add(u.workload, a, targets[-1][0], left)
    return chosen, flows


def build_plan(ir, prob: LoraProblem, chosen, flows, res, rounds: int, warnings: list[str]):
    lo = ir.lora
    held: dict[str, set[str]] = {c.id: set() for c, _ in chosen}
    tenants: dict[str, set[str]] = {c.id: set() for c, _ in chosen}
    wd: dict[tuple[str, str], float] = {}
    aroutes = []
    goodput = ir.objective == "max_goodput"  # shares are of the offered rate: what is served
    for (w, a), f in sorted(flows.items()):
        # an adapter route's share is of the adapter's requests: served ones, or offered ones for max_goodput
        tot = ir.workload(w).rate_rps * dict(lo.workloads[w].adapters)[a] if goodput else sum(f.values())
        for d, r in sorted(f.items()):
            if a:
                held[d].add(a)
                aroutes.append(AdapterRoute(workload=w, adapter=a, deployment=d, share=min(r / tot, 1.0)))
            wd[(w, d)] = wd.get((w, d), 0.0) + r
            t = lo.workloads[w].tenant
            if t != NO_TENANT:
                tenants[d].add(t)
    routes = []
    wtot: dict[str, float] = {}
    for (w, _d), r in wd.items():
        wtot[w] = wtot.get(w, 0.0) + r
    for (w, d), r in sorted(wd.items()):
        for b in ir.workload(w).buckets:
            s = min(b.prob * r / (ir.workload(w).rate_rps if goodput else wtot[w]), 1.0)
            if s > 1e-12:
                routes.append(RouteView(w, b.name, d, s))
    views = {c.id: DeploymentSpecView.of_candidate(
                 c, n, lora=replace(c.lora, adapters=len(held[c.id])) if c.lora else None)
             for c, n in chosen}
    a = assess(ir, list(views.values()), routes)

    gpus: dict[str, int] = {}
    for c, n in chosen:
        gpus[c.gpu] = gpus.get(c.gpu, 0) + n * c.gpus
    cost = fleet_usd_per_hour((n, c.usd_per_hour) for c, n in chosen)
    deployments = []
    for cid in sorted(views):
        v = views[cid]
        deployments.append(Deployment.of_view(
            v, kv_cache_tokens=replica_model_of(ir, v).memory.kv_cache_tokens,
            load_rps_per_replica=a.deployments[cid].rate_rps_per_replica,
            utilization=a.deployments[cid].utilization, adapters=sorted(held[cid]),
            tenants=sorted(tenants[cid])))

    plan = Plan(
        spec=ir.name, input_hash=ir.input_hash, cost_usd_per_hour=round(cost, 4),
        gpus=dict(sorted(gpus.items())),
        solver=solver_info(res, rounds, round(cost, 4)),
        deployments=deployments,
        routes=[Route(workload=r.workload, bucket=r.bucket, deployment=r.deployment, share=r.share)
                for r in sorted(routes, key=lambda r: (r.workload, r.bucket, r.deployment))],
        predictions=predictions(ir, a, list(views.values()), routes),
        buckets=plan_buckets(ir),
        warnings=warnings + fidelity_warnings(ir, chosen),
        adapter_routes=sorted(aroutes, key=lambda r: (r.workload, r.adapter, r.deployment)),
        goodput=goodput_of(ir, routes) if goodput else None,
    )
    return plan, a


class LoraPlanner:
    """``trimtab.planning.driver.Planner`` for specs with adapters or tenants: shared candidates per base
    model, the adapter-placement MILP, adapter routes (the module docstring has the formulation)."""

    def candidates(self, ir) -> LoraProblem:
        return build(ir)

    def precheck(self, ir, prob: LoraProblem) -> list[str]:
        """Traffic no candidate carries, said as the plain planner says it, for every such workload
        (``trimtab.planning.explain.adapter_precheck``; specgen_mix seeds 62 and 77)."""
        stuck = [(u.workload, u.group, u.adapter if u.kind == "hot" else u.kind) for u in prob.units
                 if not any(usable(u, c) for c in prob.cands)]
        if not stuck:
            return []

        return adapter_precheck(ir, stuck)

    def solve(self, ir, prob: LoraProblem, derate, backend, options):
        return solve(ir, prob, derate, backend, options)

    def build(self, ir, prob: LoraProblem, res, rounds, warnings):
        chosen, flows = extract(ir, prob, res.values)
        return build_plan(ir, prob, chosen, flows, res, rounds, warnings)

    def fill(self, prob: LoraProblem, res, derate) -> dict[str, float]:
        """The left side of each bought candidate's ``capacity`` row over its replicas (as in
        ``formulate``)."""
        ix = LoraIndex.of(prob)
        out = {}
        for c, n in ix.bought(res.values).items():
            if n >= 1:
                out[c.id] = sum(res.values.get(r.x, 0.0) / _rate_cap(c, r.unit, derate)
                                for r in ix.onto[c]) / n
        return out

    def infeasible(self, ir, prob, backend, options) -> list[str]:
        changes = elastic_changes(ir, formulate(ir, prob, {}, elastic=True)[0], backend, options)
        return (["no deployment meets every SLO within the GPU counts and budget with the adapters and "
                 "tenant isolation of the spec:"] + ["  " + line for line in relaxation_lines(changes)])

    def explain(self, ir, backend, options):
        """``trimtab explain`` for the adapter problem: infeasible, the smallest relaxation of the relaxable
        rows (GPU counts, budget; read off each row's ``origin``), verified by re-solving; feasible, each
        relaxable row that binds and what relaxing it would save."""
        prob = self.candidates(ir)
        problems = self.precheck(ir, prob)
        if problems:  # traffic no candidate carries: what plan says (the MILP cannot even be built)
            return Explanation(False, problems, [])
        res = solve(ir, prob, {}, backend, options)
        problem = ("no deployment meets every SLO within the GPU counts and budget with the adapters and "
                   "tenant isolation of the spec")
        if not res.has_solution:
            changes = elastic_changes(ir, formulate(ir, prob, {}, elastic=True)[0], backend, options)
            ok = bool(changes) and self._cost(relaxed_ir(ir, ((c.origin, c.new) for c in changes)), backend,
                                              options)
            return Explanation(False, [problem], [changes] if ok is not None and changes else [])
        m, ix = formulate(ir, prob, {})
        base = _fleet_cost(ix, res)
        binding = []
        for con in m.constraints:
            if not con.relaxable:
                continue
            used = m.evaluate(con.expr, res.values)
            step = min((a for _, a in con.expr), default=0.0)  # one more of the smallest unit the row counts
            if con.rhs - used >= step:
                continue
            more = {"inventory": max(2 * con.rhs, con.rhs + 8), "budget": None}[con.family]
            alt = self._cost(relaxed_ir(ir, [(con.origin, more if more is None else int(more))]), backend,
                             options)
            what = "no cheaper plan" if alt is None or alt >= base - 0.005 else \
                f"the cost model's plan would cost {alt:.2f} $/h ({alt - base:+.2f})"
            new = "without it" if more is None else f"with {int(more)}"
            binding.append(f"{con.origin}: {used:g} of {con.rhs:g} used; {new}, {what}")
        return Explanation(True, binding=binding, cost_usd_per_hour=base, binding_base_usd_per_hour=base)

    def _cost(self, ir, backend, options) -> float | None:
        prob = self.candidates(ir)
        res = solve(ir, prob, {}, backend, options)
        if not res.has_solution:
            return None
        return _fleet_cost(LoraIndex.of(prob), res)

    def candidate_set(self, prob: LoraProblem) -> CandidateSet:
        # capacities are per workload (``Candidate.lora_group``), none per bucket: the driver's analytic
        # derating of peers (trimtab.milp.assess.analytic_needs) finds nothing to price on them
        return CandidateSet(tuple(prob.cands), ())

    def peers(self, prob: LoraProblem, fitted: bool = False) -> dict[str, tuple[str, ...]]:
        """workload -> the ids of the shared candidates it may use (its group and tenant colour), for
        ``trimtab.planning.rounds``: the capacity prior of the ``lora-`` regimes and the workload-wide
        correction after a simulated miss. A candidate shared by several workloads is listed under each (the
        prior takes the lowest factor; a correction derates it for all of them). Every candidate is of the
        kind the ``lora-`` regimes were fitted on, so ``fitted`` changes nothing."""
        ix = LoraIndex.of(prob)
        out: dict[str, set[str]] = {}
        for u in prob.units:
            out.setdefault(u.workload, set()).update(r.cand.id for r in ix.routes[u])
        return {w: tuple(sorted(ids)) for w, ids in sorted(out.items())}


def _fleet_cost(ix: LoraIndex, res) -> float:
    """The $/h of the replicas a solution buys."""
    return fleet_usd_per_hour((n, c.usd_per_hour) for c, n in ix.bought(res.values).items())
