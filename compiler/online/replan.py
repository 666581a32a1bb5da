"""Re-planning a running deployment (``trimtab replan``; docs/online.md, "Re-planning"): after drift (rates,
lengths, prices, GPU counts in the spec) or failures, the cheapest plan for the new spec that keeps as much of
the running plan as it can, next to a from-scratch plan.

    r = replan(current_plan, spec, max_moves=4, fail=["node=h100-sxm-1"])
    r.plan, r.moves (deployment -> (started, stopped)), r.fresh, r.fresh_moves, r.transition_usd

The solve is the planner's MILP (``trimtab.milp.formulate``'s for unified specs) plus the move rows of
``trimtab.milp.windows.add_move_rows``: each replica started costs its start-up (``trimtab.cost.startup``:
price x start-up time, it serves nothing meanwhile) plus ``stop_usd`` per replica stopped, against
``horizon_h`` hours of the new plan's $/h; so among plans of equal cost the one with the fewest moves wins,
and a cheaper plan wins only when it pays back its moves within the horizon. A deployment is matched by name
(the candidate id, e.g. ``chat-h100-sxm-tp4-t8k``): a replica on another GPU type or shape is a stop plus a
start. Rounds, validation by simulation and placement are the one driver's (``trimtab.planning.driver.drive``)
with this planner; a ``redundancy: n+1`` spec keeps n+1 (``RedundantReplanPlanner``: the move rows on the n+1
MILP over the nodes the failures leave), and a spec with adapters or tenants is re-planned on the
adapter-placement MILP (``LoraReplanPlanner``; with n+1, ``RedundantLoraReplanPlanner``).

Failures: ``node=NAME`` removes a node of the plan's placement (its GPUs leave the spec's counts, the replicas
with a stage on it are gone); ``gpus.TYPE=-N`` removes N GPUs of a type, taken from the last nodes of that
type (the replicas placed on them are gone); ``replica=DEPLOYMENT/INDEX`` is one replica gone (its engine
stopped answering: ``trimtab watch``), its GPUs kept, so the re-plan may start a replica on them again.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from trimtab.errors import InputError, Problem
from trimtab.ir.topology import build_topology
from trimtab.milp.formulate import formulate
from trimtab.milp.windows import add_move_rows
from trimtab.cost.startup import candidate_startup_s, startup_for
from trimtab.deployment.price import startup_usd
from trimtab.contract.schema import Plan
from trimtab.planning.planners import UnifiedPlanner
from trimtab.deployment.shape import CandidateSet
from trimtab.planning.lora import LoraPlanner, formulate as lora_formulate
from trimtab.planning.redundancy import (RedundantLoraPlanner, RedundantPlanner, balance_survivors,
                                         redundant_model)
from trimtab.milp.solve import balance_routes, two_stage
from trimtab.solvers.base import SolveResult
from trimtab.api import plan as fresh_plan
from trimtab.ir.lower import lower
from trimtab.planning.driver import drive

HORIZON_H = 24.0  # hours a re-plan is expected to run: a cheaper plan must pay back its moves within it


@dataclass(frozen=True)
class Failure:
    lost_gpus: dict[str, int]  # GPU type -> GPUs gone
    lost_replicas: dict[str, int]  # deployment -> replicas gone
    nodes: tuple[str, ...]  # nodes gone (by name)


def parse_failures(plan: Plan, spec, items: list[str]) -> Failure:
    """``node=NAME`` / ``gpus.TYPE=-N`` / ``replica=DEPLOYMENT/INDEX`` against the running plan's
    placement."""
    topo = build_topology(spec, lower(spec))
    by_name = {n.name: n for n in topo.nodes}
    gone_gpus: dict[str, set] = {}  # node -> GPU indices gone
    lost: dict[str, int] = {}
    replicas: set[tuple[str, int]] = set()  # (deployment, replica) gone on their own
    deps = {d.name: d.replicas for d in plan.deployments}
    problems = []
    for it in items:
        key, _, val = it.partition("=")
        if key == "replica":
            dep, _, idx = val.rpartition("/")
            if dep not in deps or not idx.isdigit() or int(idx) >= deps[dep]:
                problems.append(Problem(f"--fail {it}", f"no replica {val!r}: give DEPLOYMENT/INDEX, INDEX "
                                                        "below the deployment's replicas (deployments: "
                                                        f"{', '.join(deps)})"))
                continue
            replicas.add((dep, int(idx)))
        elif key == "node":
            if val not in by_name:
                problems.append(Problem(f"--fail {it}", f"no node {val!r}; nodes: "
                                                        f"{', '.join(sorted(by_name))}"))
                continue
            gone_gpus[val] = set(range(by_name[val].gpus))
        elif key.startswith("gpus.") and val.lstrip("-").isdigit() and int(val) < 0:
            gpu, k = key[5:], -int(val)
            nodes = sorted((n for n in topo.nodes if n.gpu == gpu), key=lambda n: n.name, reverse=True)
            if not nodes:
                problems.append(Problem(f"--fail {it}", f"no GPUs of type {gpu!r} in the spec"))
                continue
            for n in nodes:
                if k <= 0:
                    break
                take = min(k, n.gpus - len(gone_gpus.get(n.name, ())))
                have = gone_gpus.setdefault(n.name, set())
                have |= set(range(n.gpus - len(have) - take, n.gpus - len(have)))
                k -= take
        else:
            problems.append(Problem(f"--fail {it}", "give node=NAME, gpus.TYPE=-N (N GPUs lost) or "
                                                    "replica=DEPLOYMENT/INDEX"))
    if problems:
        raise InputError(problems, "arguments")
    for d in plan.deployments:
        hit = {p.replica for p in d.placement if set(p.gpus) & gone_gpus.get(p.node, set())}
        hit |= {i for dep, i in replicas if dep == d.name}
        if hit:
            lost[d.name] = len(hit)
    lost_gpus: dict[str, int] = {}
    for node, idx in gone_gpus.items():
        lost_gpus[by_name[node].gpu] = lost_gpus.get(by_name[node].gpu, 0) + len(idx)
    whole = tuple(sorted(n for n, idx in gone_gpus.items() if len(idx) == by_name[n].gpus))
    return Failure(lost_gpus, lost, whole)


def spec_after(spec, f: Failure):
    """``spec`` with the failed GPUs removed from ``gpus[].count`` (and whole failed nodes from ``nodes``)."""
    gpus = [g.model_copy(update={"count": max(0, g.count - f.lost_gpus.get(g.type, 0))}) for g in spec.gpus]
    upd: dict = {"gpus": gpus}
    if spec.nodes is not None:
        groups = []
        for grp in spec.nodes:
            names = [f"{grp.name}-{i}" if grp.count > 1 else grp.name for i in range(grp.count)]
            left = grp.count - sum(n in f.nodes for n in names)
            if left > 0:
                groups.append(grp.model_copy(update={"count": left}))
        upd["nodes"] = groups
    out = spec.model_copy(update=upd)
    out._base_dir = spec.base_dir
    return out


class Moves:
    """What a re-plan adds to a planner (module docstring): the running plan (``current``: deployment ->
    replicas still running) and the price of moving away from it, as rows on the planner's own MILP
    (``solve_moved``), and the --max-moves line after the planner's own infeasibility lines. Mixed in before a
    planner, so each kind of spec is re-planned by its own planner: unified, n+1, adapters and tenants, or
    n+1 with adapters or tenants."""

    def __init__(self, current: dict[str, int], max_moves: int | None, horizon_h: float, stop_usd: float,
                 startup, fixed_moves: int):
        self.current, self.max_moves, self.horizon_h = current, max_moves, horizon_h
        self.stop_usd, self.startup, self.fixed_moves = stop_usd, startup, fixed_moves
        self._built: tuple | None = None  # (IR, its candidates)

    def candidates(self, ir):
        """The planner's candidates of ``ir``, built once per IR: ``replan`` reads them to count the running
        replicas no candidate matches, and the driver asks again; a search on one GPU type alone
        (``trimtab.planning.driver.single_types``) asks for its own IR's."""
        if self._built is None or self._built[0] is not ir:
            self._built = (ir, super().candidates(ir))
        return self._built[1]

    def solve_moved(self, ir, model, cands: CandidateSet, backend, options) -> SolveResult:
        """Solve the planner's MILP with the move rows (``add_move_rows``). ``model(floor)`` -> (MILP,
        replicas: each candidate's n[c] where the MILP is not ``formulate``'s, else None), ``floor`` as in
        ``trimtab.milp.solve.two_stage``. ``min_cost``: one solve of the cost over the horizon plus the
        moves' price. ``max_goodput``: the most traffic served within --max-moves (stage 1 keeps its own
        objective: the moves' price added to a maximised served rate would buy moves), then the cheapest plan,
        moves priced, that serves it."""
        su = {c.id: startup_usd(c.usd_per_hour, candidate_startup_s(self.startup, ir, c))
              for c in cands.candidates}

        def moved(floor):
            m, replicas = model(floor)
            served, sense = m.objective, m.sense
            add_move_rows(m, cands, self.current, su, self.horizon_h, self.stop_usd, self.max_moves,
                          self.fixed_moves, replicas)
            if sense == "max":
                m.objective = served
            return m

        if ir.objective == "max_goodput":
            return two_stage(moved, backend, options)
        return backend.solve(moved(None), options)

    def infeasible(self, ir, cands, backend, options) -> list[str]:
        lines = super().infeasible(ir, cands, backend, options)
        if self.max_moves is not None:
            lines.append(f"  or allow more than --max-moves {self.max_moves} replica starts and stops")
        return lines


class ReplanPlanner(Moves, UnifiedPlanner):
    """The unified planner whose solve also pays for moving away from ``current`` (module docstring)."""

    def solve(self, ir, cands, derate, backend, options):
        res = self.solve_moved(ir, lambda floor: (formulate(ir, cands, derate, goodput_floor=floor), None),
                               cands, backend, options)
        if ir.objective == "max_goodput":  # not balanced (trimtab.milp.solve.solve_ir)
            return res
        return balance_routes(ir, cands, backend, options, res, derate)


class RedundantReplanPlanner(Moves, RedundantPlanner):
    """The re-plan of a ``redundancy: n+1`` spec, which keeps n+1: the move rows on the n+1 MILP
    (``trimtab.planning.redundancy.redundant_model``: the ``spread``, ``survive`` and ``node_room`` rows over
    the nodes left after the failures), the routes balanced over the survivors, and n+1's candidates,
    precheck, validation of each kind of node loss and infeasibility lines (``RedundantPlanner``), with the
    re-plan's --max-moves line after them. The moves only add columns and a relaxable row to that MILP, so
    the two compose without a row of either changing."""

    def __init__(self, topo, *args):
        Moves.__init__(self, *args)
        RedundantPlanner.__init__(self, topo)

    def solve(self, ir, cands, derate, backend, options):
        res = self.solve_moved(ir, lambda floor: (redundant_model(ir, cands, self.pools, derate,
                                                                  goodput_floor=floor), None),
                               cands, backend, options)
        if ir.objective == "max_goodput":  # not balanced (trimtab.planning.redundancy.solve_redundant)
            return res
        return balance_survivors(ir, cands, self.pools, backend, options, res, derate)


class LoraReplanPlanner(Moves, LoraPlanner):
    """The re-plan of a spec with adapters or tenants: the move rows on the adapter-placement MILP
    (``trimtab.planning.lora.formulate``, whole: the --max-moves row couples its groups), over its shared
    candidates, whose ids are the running plan's deployment names as a unified candidate's are; the adapters
    each deployment holds and the adapter routes are the adapter planner's extraction of the new solution."""

    def solve(self, ir, prob, derate, backend, options):
        def model(floor):
            m, ix = lora_formulate(ir, prob, derate, goodput_floor=floor)
            return m, ix.replicas

        return self.solve_moved(ir, model, self.candidate_set(prob), backend, options)


class RedundantLoraReplanPlanner(Moves, RedundantLoraPlanner):
    """The re-plan of an n+1 spec with adapters or tenants: the move rows on the adapter MILP with its n+1
    rows (``RedundantLoraPlanner.model``), over the nodes the failures leave."""

    def __init__(self, topo, *args):
        Moves.__init__(self, *args)
        RedundantLoraPlanner.__init__(self, topo)

    def solve(self, ir, prob, derate, backend, options):
        def model(floor):
            m, ix = self.indexed_model(ir, prob, derate, goodput_floor=floor)
            return m, ix.replicas

        return self.solve_moved(ir, model, self.candidate_set(prob), backend, options)


@dataclass(frozen=True)
class ReplanResult:
    plan: Plan
    fresh: Plan
    moves: dict[str, tuple[int, int]]  # deployment -> (started, stopped) going from the current plan
    fresh_moves: dict[str, tuple[int, int]]
    transition_usd: float  # start-ups of the re-plan's started replicas
    fresh_transition_usd: float
    failure: Failure
    seconds: float


def diff_moves(current: dict[str, int], new: Plan) -> dict[str, tuple[int, int]]:
    """Per deployment: (replicas started, replicas stopped) from ``current`` to ``new``."""
    after = {d.name: d.replicas for d in new.deployments}
    out = {}
    for name in sorted(set(current) | set(after)):
        a, b = current.get(name, 0), after.get(name, 0)
        if a != b:
            out[name] = (max(0, b - a), max(0, a - b))
    return out


def count_moves(moves: dict[str, tuple[int, int]]) -> int:
    return sum(a + b for a, b in moves.values())


def replan(current: Plan, spec, *, max_moves: int | None = None, fail: list[str] = (),
           horizon_h: float = HORIZON_H, stop_usd: float = 0.0, backend: str | None = None,
           time_limit_s: float | None = None,
           validate: bool = True, seed: int = 0, progress=None) -> ReplanResult:
    """The re-plan and a from-scratch plan of the (failed) spec, with the moves each makes from ``current``.
    ``progress``: told each planning step as it starts (``trimtab.planning.driver.drive``)."""
    t0 = time.perf_counter()
    f = parse_failures(current, spec, list(fail))
    new_spec = spec_after(spec, f)
    running = {d.name: d.replicas - f.lost_replicas.get(d.name, 0) for d in current.deployments}
    running = {k: v for k, v in running.items() if v > 0}
    ir = lower(new_spec)
    st = startup_for(spec.schedule.startup if spec.schedule else None)
    args = (running, max_moves, horizon_h, stop_usd, st, 0)
    lora = ir.lora is not None  # adapters or tenants: the adapter planner's MILP
    if ir.redundancy == "n+1":  # over the nodes the failures left
        topo = build_topology(new_spec, ir)
        planner = RedundantLoraReplanPlanner(topo, *args) if lora else RedundantReplanPlanner(topo, *args)
    else:
        planner = LoraReplanPlanner(*args) if lora else ReplanPlanner(*args)
    cands = planner.candidates(ir)
    cset = planner.candidate_set(cands)
    known = {c.id for c in cset.candidates}
    planner.fixed_moves = sum(n for d, n in running.items() if d not in known)
    say = progress or (lambda _: None)
    res = drive(planner, new_spec, ir, backend=backend, time_limit_s=time_limit_s, validate=validate,
                seed=seed, progress=lambda step: say(f"re-plan: {step}"))
    fresh = fresh_plan(new_spec, backend=backend, time_limit_s=time_limit_s, validate=validate, seed=seed,
                       progress=lambda step: say(f"from scratch: {step}")).plan
    moves, fmoves = diff_moves(running, res.plan), diff_moves(running, fresh)

    def start_usd(p: Plan, mv) -> float:
        per = {d.name: d for d in p.deployments}
        cs = {c.id: c for c in cset.candidates}
        return round(sum(startup_usd(cs[n].usd_per_hour, candidate_startup_s(st, ir, cs[n]), a)
                         for n, (a, _) in mv.items() if a and n in per and n in cs), 4)

    return ReplanResult(res.plan, fresh, moves, fmoves, start_usd(res.plan, moves), start_usd(fresh, fmoves),
                        f, time.perf_counter() - t0)
