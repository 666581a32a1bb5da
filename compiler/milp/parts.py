"""The workload MILPs of a decomposed solve (``trimtab.milp.decompose``): each solved at given GPU-type
prices, remembered across the rounds of a planning run, and many at once in forked processes.

Entry point: ``Parts(ir, cands, backend, options, derate, memo).solve(names, prices)``.

Why processes: a price search solves the parts of a 100-workload spec again at every step, about 30-50 ms
each in the solver, and the parts are independent; forked workers inherit the candidates (nothing is
pickled but the prices in and the solutions out), and each part's answer is the same in any process, so
the result does not depend on the number of processes (``TRIMTAB_JOBS``).
"""
from __future__ import annotations

import multiprocessing
import time
from dataclasses import dataclass, replace

from trimtab.deployment.shape import CandidateSet
from trimtab.ir.model import ProblemIR
from trimtab.milp.formulate import formulate, n_var
from trimtab.solvers.base import Backend, SolveOptions, SolveResult, Status, Termination
from trimtab.solvers.model import Constraint, MilpModel
from trimtab.util.jobs import jobs_default

MIN_FORK = 8  # parts to solve below which one process is faster than forking

_PARTS: "Parts | None" = None  # the parts the forked workers inherit


@dataclass(frozen=True)
class Plan:
    """One plan of a workload's MILP: its solution, at the spec's prices, and its GPUs per type."""

    result: SolveResult  # objective: the cost at the spec's prices
    gpus: dict[str, int]


def choose(m: MilpModel, plans: dict[str, list[Plan]]) -> tuple[dict[str, list[str]], list, dict[str, list]]:
    """Variables in ``m`` choosing one of each workload's ``plans`` (a row each that one is chosen): (each
    workload's variables in the order of its plans, their objective terms at the plans' costs, per GPU type
    their terms of GPUs bought)."""
    ys: dict[str, list[str]] = {}
    objective, use = [], {}
    for w, ps in plans.items():
        ys[w] = [m.add_var(f"y[{w}/{i}]", "integer", 0.0, 1.0, family="plan") for i in range(len(ps))]
        m.add(Constraint(f"one[{w}]", "one", tuple((y, 1.0) for y in ys[w]), "==", 1.0))
        for y, p in zip(ys[w], ps):
            objective.append((y, p.result.objective))
            for t, n in p.gpus.items():
                if n:
                    use.setdefault(t, []).append((y, float(n)))
    return ys, objective, use


def same_plan(a: Plan, b: Plan) -> bool:
    return a.gpus == b.gpus and abs(a.result.objective - b.result.objective) <= 1e-9 * max(
        abs(a.result.objective), 1.0)


class Parts:
    """``memo`` (one per planning run, across its rounds): each part solved to optimality is kept under the
    derates of its own candidates and the prices of its own GPU types; a later solve with the same ones takes
    that solution (the backend is deterministic: the same answer), and so are the plans each part showed
    (``known``: the columns of ``trimtab.milp.columns``). ``stopped``: a part the wall-clock safety net
    stopped, the answer of the whole split."""

    def __init__(self, ir: ProblemIR, cands: CandidateSet, backend: Backend, options: SolveOptions,
                 derate: dict[str, float], memo: dict):
        self.ir, self.cands, self.backend, self.options = ir, cands, backend, options
        self.derate, self.memo = derate, memo
        self.mine: dict[str, list] = {w.name: [] for w in ir.workloads}
        self.spent = 0.0
        self.stopped: list[SolveResult] = []

    def split(self) -> bool:
        """Each candidate given to its workload's part; False where one belongs to no workload of the IR."""
        for c in self.cands.candidates:
            if c.workload not in self.mine:
                return False
            self.mine[c.workload].append(c)
        return True

    def own(self, name: str) -> tuple:
        return tuple(self.mine[name])

    def _priced(self, name: str, prices: dict[str, float] | None) -> tuple:
        """The prices of the part's own types (a price that moved elsewhere finds the same solve)."""
        types = {c.gpu for c in self.own(name)}
        return tuple(sorted((g, p) for g, p in (prices or {}).items() if p and g in types))

    def _key(self, name: str, priced: tuple) -> tuple:
        return (id(self.ir), id(self.cands), self.backend.name, self.options.mip_rel_gap,
                self.options.threads, name, tuple(self.derate.get(c.id, 1.0) for c in self.own(name)), priced)

    def solve(self, names, prices: dict[str, float] | None = None) -> dict[str, SolveResult | None]:
        """Each part of ``names`` with its candidates on each type at ``prices`` more per GPU-hour; None for
        a part with no solution (the whole solve says why)."""
        out: dict[str, SolveResult | None] = {}
        todo = []
        for name in names:
            priced = self._priced(name, prices)
            hit = self.memo.get(self._key(name, priced))
            # (the objects themselves: ids can be reused)
            if hit is not None and hit[0] is self.ir and hit[1] is self.cands:
                out[name] = self._seen(name, hit[2], priced)
            elif (r := self._still_optimal(name, priced)) is not None:
                self.memo[self._key(name, priced)] = (self.ir, self.cands, r)
                out[name] = self._seen(name, r, priced)
            else:
                todo.append((name, priced))
        if not todo:
            return out
        limit = self.options.after(self.spent)
        t0 = time.perf_counter()
        jobs = min(jobs_default(), len(todo))
        # Forked only with one solver thread (a child forked from a process whose solver holds worker threads
        # could wait on threads it does not have) and not from a daemonic worker (it may not have children)
        if (jobs > 1 and len(todo) >= MIN_FORK and self.options.threads == 1
                and not multiprocessing.current_process().daemon
                and "fork" in multiprocessing.get_all_start_methods()):
            global _PARTS
            _PARTS = self
            try:
                with multiprocessing.get_context("fork").Pool(jobs) as pool:
                    got = pool.starmap(_solve_forked, [(n, p, limit) for n, p in todo], chunksize=1)
            finally:
                _PARTS = None
        else:
            got = [self._solve(n, p, limit) for n, p in todo]
        # (the safety net's clock: wall time, whatever the number of processes)
        self.spent += time.perf_counter() - t0
        for (name, priced), r in zip(todo, got):
            if r.termination == Termination.TIME_LIMIT:
                self.stopped.append(replace(r, seconds=self.spent))
            if r.status == Status.OPTIMAL and r.termination == Termination.CONVERGED:
                self.memo[self._key(name, priced)] = (self.ir, self.cands, r)
                self._optima(name).append((dict(priced), r, self.plan(name, r, dict(priced)).gpus))
            out[name] = self._seen(name, r, priced) if r.has_solution and r.objective is not None else None
        return {n: out[n] for n in names}

    def _list(self, kind: str, name: str) -> list:
        """A list the memo keeps for the part under these derates, at any prices (``kind`` names it), for
        this IR and candidate set."""
        key = (kind,) + self._key(name, ())[:-1]
        entry = self.memo.get(key)
        if entry is None or entry[0] is not self.ir or entry[1] is not self.cands:
            entry = self.memo[key] = (self.ir, self.cands, [])
        return entry[2]

    def _optima(self, name: str) -> list:
        """The part's optimal solves at any prices under these derates: (prices, result, its GPUs per
        type)."""
        return self._list("optima", name)

    def _still_optimal(self, name: str, priced: tuple) -> SolveResult | None:
        """An optimum the part had at other prices that is one at ``priced`` too: no price of the part's
        types is lower now, and those it buys are the same. Every other plan costs as much as then or more
        and it costs the same, so it is within the solver's gap of the optimum still (the bound it was proven
        against can only have risen): the price search's steps re-solve only the parts whose answer may
        have changed. (Solved again, the part could return another plan of the same cost; the one kept is
        the first found, so the answer is the same on every machine.)"""
        new = dict(priced)
        types = {c.gpu for c in self.own(name)}
        for old, r, gpus in self._optima(name):
            if all(new.get(t, 0.0) == old.get(t, 0.0) for t in gpus) and \
                    all(new.get(t, 0.0) >= old.get(t, 0.0) for t in types):
                return r
        return None

    def _solve(self, name: str, priced: tuple, options: SolveOptions) -> SolveResult:
        cs = tuple(self.mine[name])
        if priced:
            cs = priced_at(cs, dict(priced))
        sub = replace(self.cands, candidates=cs, pruned=(), best=())
        w = self.ir.workload(name)
        return self.backend.solve(formulate(replace(self.ir, workloads=(w,)), sub, self.derate),
                                  replace(options, small=True))

    def joint(self, names: list[str], others: dict[str, list[Plan]],
              gap: float) -> dict[str, SolveResult] | None:
        """The parts ``names`` solved as one MILP in which each part of ``others`` chooses one of its plans
        (the repair of ``trimtab.milp.columns``), to the relative ``gap`` (or the options' own, if larger): a
        chosen plan is that part's answer; the solved parts' are the solution read by each one's own model's
        variables. None where it has none."""
        mine = set(names)
        ws = tuple(w for w in self.ir.workloads if w.name in mine)
        sub = replace(self.cands, candidates=tuple(c for c in self.cands.candidates if c.workload in mine),
                      pruned=(), best=())
        m = formulate(replace(self.ir, workloads=ws), sub, self.derate)
        ys, objective, use = choose(m, others)
        m.objective = m.objective + tuple(objective)
        m.constraints = [replace(c, expr=c.expr + tuple(use.get(c.key, ()))) if c.family == "inventory" else c
                         for c in m.constraints]
        t0 = time.perf_counter()
        options = self.options.after(self.spent, mip_rel_gap=max(gap, self.options.mip_rel_gap))
        r = self.backend.solve(m, options)
        self.spent += time.perf_counter() - t0
        if r.termination == Termination.TIME_LIMIT:
            self.stopped.append(replace(r, seconds=self.spent))
        if not r.has_solution:
            return None
        out = {w: next(p.result for p, y in zip(ps, ys[w]) if round(r.values.get(y, 0.0)) == 1)
               for w, ps in others.items()}
        for w in ws:
            own = formulate(replace(self.ir, workloads=(w,)),
                            replace(self.cands, candidates=self.own(w.name), pruned=(), best=()), self.derate)
            values = {v: r.values.get(v, 0.0) for v in own.variables}
            out[w.name] = replace(r, values=values, objective=own.evaluate(own.objective, values), bound=None)
        return out

    def known(self, name: str) -> list[Plan]:
        """Every plan of the part met so far, at the spec's prices, in this solve and in the rounds before it
        whose derates left the part's candidates unchanged (kept in the memo: a round's price search then
        starts from the plans the last one found)."""
        return self._list("plans", name)

    def _seen(self, name: str, r: SolveResult, priced: tuple) -> SolveResult:
        plan = self.plan(name, r, dict(priced))
        known = self.known(name)
        if not any(same_plan(plan, q) for q in known):
            known.append(plan)
        return r

    def plan(self, name: str, r: SolveResult, prices: dict[str, float]) -> Plan:
        """A part's solution at ``prices`` as a plan: its GPUs per type, its cost at the spec's prices."""
        gpus: dict[str, int] = {}
        for c in self.own(name):
            n = round(r.values.get(n_var(c.id), 0.0))
            if n:
                gpus[c.gpu] = gpus.get(c.gpu, 0) + n * c.gpus
        cost = r.objective - sum(p * gpus.get(g, 0) for g, p in prices.items())
        return Plan(replace(r, objective=cost), gpus)


def _solve_forked(name: str, priced: tuple, options: SolveOptions) -> SolveResult:
    assert _PARTS is not None
    return _PARTS._solve(name, priced, options)


def priced_at(cs: tuple, prices: dict[str, float]) -> tuple:
    """``cs`` with the candidates on each type of ``prices`` that much more per GPU-hour (per replica: x its
    GPUs)."""
    return tuple(replace(c, usd_per_hour=c.usd_per_hour + prices[c.gpu] * c.gpus) if c.gpu in prices else c
                 for c in cs)
