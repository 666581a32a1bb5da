"""``redundancy: n+1`` (docs/online.md, "Redundancy"): plans in which losing any one node keeps every SLO.

Failure model: a node lost takes every replica with a stage on it; the router keeps each deployment's routes
and shares (a route names a deployment, not replicas), so a deployment's surviving replicas carry all of its
traffic. Placement (``trimtab.milp.spread``) spreads each deployment over the nodes of its GPU type, each
replica inside one node, so a node holds at most ceil(n[c] / N_g) replicas of c; every deployment must carry
its load with that many fewer replicas, all deployments at once (a node may hold several). That is a
fixed-share scenario per deployment, linear in the MILP's own routes: no per-failure routes are needed, and it
is exactly what the simulator's router does after a loss, so ``check --fail-each-node``
(``trimtab.gate.nodeloss``) tests the same thing.

Notation (with ``compiler/milp/formulate.py``'s):
    N_g: nodes of GPU type g; G_g: GPUs of its smallest node
    l[c] in Z+: replicas of c one node may hold (``spread[c]``), so the most one node loss removes
Constraints (origin ``redundancy``), for every unified candidate c on g (and every shared candidate of the
adapter planner, ``RedundantLoraPlanner``, its routes x[u,c] being traffic units: base traffic, hot adapters,
cold classes, cap[u,c] the capacity of u's workload):
    N_g l[c] - n[c] >= 0                              (spread[c]: l[c] >= ceil(n[c] / N_g))
    sum_b x[b,c] / cap[b,c] <= n[c] - l[c]            (survive[c]: the survivors carry c's traffic)
    sum_{c on g} gpus[c] l[c] <= G_g                  (node_room[g]: a node has room for l[c] of every c)
so a deployment on a pool of one node (l >= n) can carry nothing, and each pool's nodes hold the spread
placement (a node gets at most l[c] replicas of each c, together at most G_g GPUs). Candidates whose replica
spans more than one node, prefill/decode pairs and KV borrowers (which must share a node with lenders) are
left out. Routing balance of unified plans (as ``trimtab.milp.solve.balance_routes``, over the survivors;
the adapter planner balances none, with n+1 or without): with n and l fixed,
    sum_b x[b,c] / cap[b,c] <= u[w] (n[c] - l[c])     for c of w;   min sum_w u[w]
so each workload's busiest deployment after a node loss is as idle as the replicas bought allow.
"""
from __future__ import annotations

from dataclasses import replace

from trimtab.deployment.shape import CandidateSet, DeploymentSpecView, Pruned
from trimtab.milp.formulate import formulate, n_var, x_var
from trimtab.ir.model import ProblemIR
from trimtab.planning.lora import LoraIndex, LoraPlanner, formulate as lora_formulate
from trimtab.planning.lora_candidates import LoraProblem, build as build_lora, usable
from trimtab.planning.planners import UnifiedPlanner
from trimtab.milp.solve import solve_balance, two_stage, util_var
from trimtab.spec.paths import SpecPath
from trimtab.milp.spread import node_cap, place_spread
from trimtab.solvers.base import Backend, SolveOptions, SolveResult
from trimtab.solvers.model import Constraint, MilpModel
from trimtab.gate.nodeloss import losses_by_node, without_node
from trimtab.ir.topology import build_topology
from trimtab.milp.extract import with_placement
from trimtab.planning.explain import precheck_by_workload
from trimtab.planning.rounds import simulate_and_derate
from trimtab.solvers import NetExpired

ORIGIN = SpecPath("redundancy")


def spread_var(cid: str) -> str:
    return f"spread[{cid}]"


def pools_of(topo) -> dict[str, tuple[int, int]]:
    """GPU type -> (nodes, GPUs of its smallest node)."""
    out: dict[str, tuple[int, int]] = {}
    for n in topo.nodes:
        k, g = out.get(n.gpu, (0, n.gpus))
        out[n.gpu] = (k + 1, min(g, n.gpus))
    return out


def spans_nodes(c, pools: dict[str, tuple[int, int]]) -> str:
    """Why a replica of candidate ``c`` cannot be placed whole inside every node of its type ("" if it can):
    a node loss must take whole replicas, so each must fit in the smallest node."""
    per = pools.get(c.gpu, (0, 0))[1]
    return f"a replica of {c.gpus} GPUs spans nodes of {per}" if c.gpus > per else ""


def redundant_candidates(cands: CandidateSet, pools: dict[str, tuple[int, int]]) -> CandidateSet:
    """The candidates n+1 plans over: unified, one node per replica, no KV borrowing; the others pruned with
    why."""
    keep, pruned = [], list(cands.pruned)
    for c in cands.unified:
        span = spans_nodes(c, pools)
        if span:
            pruned.append(Pruned(c.id, f"redundancy n+1: {span}", c.workload, "redundancy n+1"))
        elif c.kv_borrow_gib > 0:
            pruned.append(Pruned(c.id, "redundancy n+1: KV borrowing ties a replica to a lender on its node",
                                 c.workload, "redundancy n+1"))
        else:
            keep.append(c)
    pruned += [Pruned(c.id, "redundancy n+1: prefill/decode pairs are not planned for node loss", c.workload,
                       "redundancy n+1")
               for c in cands.disagg]
    return replace(cands, candidates=tuple(keep), pruned=tuple(pruned))


def add_redundancy_rows(m: MilpModel, cands: CandidateSet, pools: dict[str, tuple[int, int]],
                        derate: dict[str, float] | None = None) -> None:
    """``spread``, ``survive`` and ``node_room`` rows (module docstring) over ``m``'s unified candidates."""
    derate = derate or {}

    def load(c):
        f = derate.get(c.id, 1.0)
        return tuple((x_var(c.workload, b, c.id), 1.0 / (cap * f)) for b, cap in c.capacity_rps
                     if x_var(c.workload, b, c.id) in m.variables)

    add_survival_rows(m, ((c, n_var(c.id), c.gpu, c.gpus, load(c)) for c in cands.candidates), pools)


def add_survival_rows(m: MilpModel, reps, pools: dict[str, tuple[int, int]]) -> None:
    """The n+1 rows (module docstring) for each ``(candidate, its replicas variable n[c], GPU type, GPUs
    per replica, load)`` of ``reps``, ``load`` being the terms sum_u x[u,c] / cap[u,c] of the candidate's
    capacity row (whatever its routes are: a bucket's of a unified candidate, a traffic unit's of a shared
    adapter candidate). The one statement of the rule: ``add_redundancy_rows`` and ``RedundantLoraPlanner``
    both come here, each with the replicas variable its own formulation made."""
    room: dict[str, list[tuple[str, float]]] = {}
    for c, n, gpu, gpus, load in reps:
        cid = c.id
        nodes, _ = pools.get(gpu, (0, 0))
        ub = m.variables[n].ub
        lv = m.add_var(spread_var(cid), "integer", 0, ub)
        m.add(Constraint(f"spread[{cid}]", "spread", ((lv, float(nodes)), (n, -1.0)), ">=", 0.0,
                         origin=ORIGIN))
        m.add(Constraint(f"survive[{cid}]", "survive", tuple(load) + ((n, -1.0), (lv, 1.0)), "<=",
                         0.0, origin=ORIGIN, key=c))
        room.setdefault(gpu, []).append((lv, float(gpus)))
    for g, terms in sorted(room.items()):
        m.add(Constraint(f"node_room[{g}]", "node_room", tuple(terms), "<=", float(pools[g][1]),
                         origin=ORIGIN))


def redundant_model(ir: ProblemIR, cands: CandidateSet, pools, derate=None, **kw) -> MilpModel:
    m = formulate(ir, cands, derate, **kw)
    add_redundancy_rows(m, cands, pools, derate)
    return m


def solve_redundant(ir: ProblemIR, cands: CandidateSet, pools, backend: Backend, options: SolveOptions,
                    derate: dict[str, float] | None = None) -> SolveResult:
    """The MILP with the n+1 rows (whole: ``node_room`` couples the workloads of a GPU type), then, for
    ``min_cost``, the balance over the survivors. A ``max_goodput`` plan is not balanced, as a unified one is
    not (``trimtab.milp.solve.solve_ir``): its demand rows are ``<=``, so the balance LP, which minimises
    utilisation, would route nothing (served 0 rps beside the replicas bought)."""
    if ir.objective == "max_goodput":
        return two_stage(lambda floor: redundant_model(ir, cands, pools, derate, objective="max_goodput",
                                                       goodput_floor=floor), backend, options)
    res = backend.solve(redundant_model(ir, cands, pools, derate), options)
    return balance_survivors(ir, cands, pools, backend, options, res, derate)


def balance_survivors(ir: ProblemIR, cands: CandidateSet, pools, backend: Backend, options: SolveOptions,
                      res: SolveResult, derate: dict[str, float] | None = None) -> SolveResult:
    """``res`` with its routes re-spread so that each workload's busiest deployment after a node loss is as
    idle as it can be (module docstring); replicas, cost and status are the MILP's. ``res`` unchanged when the
    LP gives no solution."""
    if not res.has_solution:
        return res
    bought = {c.id: round(res.values.get(n_var(c.id), 0.0)) for c in cands.candidates}
    cands = replace(cands, candidates=tuple(c for c in cands.unified if bought[c.id] > 0))
    if not cands.candidates:
        return res
    m = redundant_model(ir, cands, pools, derate)
    for c in cands.candidates:
        n = float(bought[c.id])
        m.variables[n_var(c.id)] = replace(m.variables[n_var(c.id)], lb=n, ub=n)
        lv = float(node_cap(bought[c.id], pools[c.gpu][0]))
        m.variables[spread_var(c.id)] = replace(m.variables[spread_var(c.id)], lb=lv, ub=lv)
    util: dict[str, str] = {}
    rows = []
    for con in m.constraints:
        c = con.key if con.family == "survive" else None  # (the rows of ``cands``: its model's own)
        if c is not None:
            u = util.get(c.workload) or m.add_var(util_var(c.workload), "continuous", 0.0, 1.0)
            util[c.workload] = u
            left = bought[c.id] - node_cap(bought[c.id], pools[c.gpu][0])
            expr = tuple(t for t in con.expr if m.variables[t[0]].family == "route") + ((u, -float(left)),)
            con = replace(con, expr=expr)
        rows.append(con)
    return solve_balance(m, rows, util, backend, options, res)


class SurvivesNodeLoss:
    """What both n+1 planners share beyond the rows (``add_survival_rows``): the topology, the validating
    simulation of every kind of node loss, and how a workload n+1 left without candidates and an infeasible
    spec are said. A subclass sets ``_peers`` (``peers`` of its candidates) when it builds them."""

    def __init__(self, topo):
        self.topo, self.pools = topo, pools_of(topo)
        self._peers: dict[str, tuple[str, ...]] = {}

    def pruned_line(self, name: str, why: list[str]) -> str:
        """The precheck line of workload ``name`` whose candidates n+1 pruned, each for one of ``why``."""
        pools = ", ".join(f"{g} {k} GPU{'s' if k != 1 else ''}" for g, (_, k) in sorted(self.pools.items()))
        more = "; ..." if len(why) > 3 else ""
        return (f"{name}: with redundancy n+1 no candidate that meets its SLO is left ({'; '.join(why[:3])}"
                f"{more}): each replica must fit in the smallest node of its GPU type ({pools}); give nodes "
                "that hold its replicas (nodes[].gpus_per_node, or a pool count in whole nodes) or "
                "redundancy: none")

    def infeasible_lines(self, plain: list[str]) -> list[str]:
        """Why no n+1 plan exists, then what the spec would need without n+1 (``plain``: the plain planner's
        relaxation lines, its header left out)."""
        # k is the smallest node's GPUs (``pools_of``): "7 nodes of 7 GPUs" read as 49 GPUs for a pool of 55
        pools = ", ".join(f"{g} 1 node of {k} GPUs" if n == 1
                          else f"{g} {n} nodes (the smallest of {k} GPU{'s' if k != 1 else ''})"
                          for g, (n, k) in sorted(self.pools.items()))
        rest = [x for x in plain if "needs no relaxation" not in x]
        return (["no deployment keeps every SLO after the loss of any one node (redundancy: n+1) within the "
                 "GPU counts, the nodes and the budget; more nodes per GPU type, a larger budget, or "
                 "redundancy: none",
                 f"  nodes: {pools}; a node lost takes ceil(replicas / nodes) replicas of each deployment, "
                 "so a pool of one node carries nothing"]
                + (["  without n+1 the spec would also need:"] + rest if rest else []))

    def simulate(self, plan_, spec, ir, seeds, requests, derate, fill, net=None):
        """The plan as ``trimtab.planning.rounds.simulate_and_derate`` validates any plan, then, placed as it
        will be, with each kind of node loss (``trimtab.gate.nodeloss``): the survivors run fuller than the
        cost model's capacity may allow, and a miss there derates the deployment at fault at the survivors'
        fill, so the next solve buys it more spare. Returns the first failing runs (or the whole plan's) and
        the derates. ``net`` (``trimtab.solvers.SafetyNet``), asked between simulations: its expiry raises
        ``NetExpired``."""
        res, out = simulate_and_derate(plan_, spec, ir, seeds, requests, derate, fill, self._peers)
        if not res.ok:
            return res, out
        placed = with_placement(plan_, place_spread(
            [DeploymentSpecView.of_plan(d) for d in plan_.deployments], self.topo))
        kinds: dict[tuple, str] = {}
        for node, lost in losses_by_node(placed).items():
            kinds.setdefault(tuple(lost.items()), node)
        reps = {d.name: d.replicas for d in placed.deployments}
        for sig, node in sorted(kinds.items(), key=lambda kv: kv[1]):
            if net is not None and net.expired():
                raise NetExpired(f"before the simulation without node {node}")
            reduced, unserved = without_node(placed, node, ir)
            if unserved:  # the rows make this impossible; check reports it if it happens
                continue
            left = {k: reps[k] - n for k, n in sig}  # > 0: survive[c] keeps a replica of every deployment
            f = {k: v * reps[k] / left[k] if left.get(k, 0) > 0 else v for k, v in (fill or {}).items()}
            lost, out = simulate_and_derate(reduced, spec, ir, seeds, requests, out, f, self._peers)
            if not lost.ok:
                return lost, out
        return res, out


class RedundantPlanner(SurvivesNodeLoss, UnifiedPlanner):
    """The unified planner with the n+1 rows and candidates (module docstring); placement is
    ``trimtab.milp.spread``'s (``trimtab.milp.extract.finish_plan`` picks it from ``ir.redundancy``)."""

    def candidates(self, ir) -> CandidateSet:
        cands = redundant_candidates(super().candidates(ir), self.pools)
        self._peers = self.peers(cands)
        return cands

    def precheck(self, ir, cands: CandidateSet) -> list[str]:
        """The plain precheck, except where n+1's own pruning (``redundant_candidates``: a replica inside one
        node, the smallest of its type; no pairs, no borrowing) left a workload's buckets without a candidate
        the plain candidates have: that is said as such, with the smallest node of each type, instead of
        "no candidate meets TTFT and TPOT together" beside low-load values far inside the SLO (specgen_mix
        seed 87: gpt-oss-120b, whose candidates need 4-8 GPUs, on pools whose last node holds 1-3)."""
        out = precheck_by_workload(ir, cands)
        if not out:
            return []
        plain = {line for _, line in precheck_by_workload(ir, UnifiedPlanner.candidates(self, ir))}
        keep = [line for _, line in out if line in plain]
        moved = sorted({w for w, line in out if line not in plain and w is not None})
        for name in moved:
            why = sorted({p.reason.removeprefix("redundancy n+1: ") for p in cands.pruned
                          if p.workload == name and p.cause == "redundancy n+1"})
            keep.append(self.pruned_line(name, why))
        return keep

    def solve(self, ir, cands, derate, backend, options):
        return solve_redundant(ir, cands, self.pools, backend, options, derate)

    def infeasible(self, ir, cands, backend, options) -> list[str]:
        return self.infeasible_lines(super().infeasible(ir, cands, backend, options)[1:])


class RedundantLoraPlanner(SurvivesNodeLoss, LoraPlanner):
    """The adapter planner (``trimtab.planning.lora``) with the same n+1 rule: its MILP gets
    ``add_survival_rows`` over each shared candidate's capacity row (every traffic unit it carries: base
    traffic, hot adapters, cold classes), so a node loss leaves each deployment enough survivors for all the
    adapters and tenants it serves; adapter routes name deployments, as routes do, so the survivors carry
    them.
    Candidates whose replica spans nodes are left out; the groups are solved as one MILP (``node_room``
    couples the groups of a GPU type). Placement, validation and the node-loss check are the unified n+1
    plan's (``SurvivesNodeLoss``, ``trimtab.milp.spread``, ``trimtab.gate.nodeloss``)."""

    def __init__(self, topo):
        super().__init__(topo)
        self._plain: LoraProblem | None = None

    def candidates(self, ir) -> LoraProblem:
        plain = super().candidates(ir)
        keep, pruned = [], list(plain.pruned)
        for c in plain.cands:
            span = spans_nodes(c, self.pools)
            if span:
                pruned.append(f"{c.id}: redundancy n+1: {span}")
            else:
                keep.append(c)
        prob = replace(plain, cands=keep, pruned=pruned)
        self._plain, self._peers = plain, self.peers(prob)
        return prob

    def precheck(self, ir, prob: LoraProblem) -> list[str]:
        """The adapter precheck of the spec without n+1 where that fails; a workload whose traffic only n+1's
        pruning left without a candidate is said as such (as ``RedundantPlanner.precheck`` says it)."""
        plain = self._plain if self._plain is not None else build_lora(ir)
        now, before = stuck(prob), stuck(plain)
        if not now:
            return []
        out = LoraPlanner.precheck(self, ir, plain) if before else []
        for name in sorted(now - before):
            group = next(u.group for u in prob.units if u.workload == name)
            out.append(self.pruned_line(name, sorted({spans_nodes(c, self.pools) for c in plain.cands
                                                      if c.lora_group.name == group} - {""})))
        return out

    def model(self, ir, prob: LoraProblem, derate: dict[str, float], **kw) -> MilpModel:
        return self.indexed_model(ir, prob, derate, **kw)[0]

    def indexed_model(self, ir, prob: LoraProblem, derate: dict[str, float],
                      **kw) -> tuple[MilpModel, LoraIndex]:
        """The adapter MILP (``trimtab.planning.lora.formulate``, whole) with the n+1 rows, each over its
        candidate's capacity row (found by the row's key) less the replicas term, and the MILP's index."""
        m, ix = lora_formulate(ir, prob, derate, **kw)
        rows = {con.key: con for con in m.constraints if con.family == "capacity"}
        add_survival_rows(m, ((c, ix.replicas[c], c.gpu, c.gpus,
                               tuple(t for t in rows[c].expr if t[0] != ix.replicas[c]))
                              for c in prob.cands), self.pools)
        return m, ix

    def solve(self, ir, prob: LoraProblem, derate, backend, options):
        if ir.objective == "max_goodput":
            return two_stage(lambda floor: self.model(ir, prob, derate, goodput_floor=floor), backend,
                             options)
        return backend.solve(self.model(ir, prob, derate), options)

    def infeasible(self, ir, prob, backend, options) -> list[str]:
        plain = self._plain if self._plain is not None else prob
        return self.infeasible_lines(super().infeasible(ir, plain, backend, options)[1:])


def stuck(prob: LoraProblem) -> set[str]:
    """The workloads with traffic no candidate of ``prob`` may carry."""
    return {u.workload for u in prob.units if not any(usable(u, c) for c in prob.cands)}


def redundant_planner(spec, ir) -> SurvivesNodeLoss:
    """The n+1 planner of ``ir``: the adapter one where it has adapters or tenants, else the unified one."""
    topo = build_topology(spec, ir)
    return RedundantLoraPlanner(topo) if ir.lora is not None else RedundantPlanner(topo)
