"""The planner for specs without adapters: unified candidates, P/D pairs and KV-tier variants
(``trimtab.milp.candidates``, ``trimtab.milp.disagg``), the MILP of ``compiler/milp/formulate.py``,
extraction to a plan (``trimtab.milp.extract``). ``trimtab.planning.driver.drive`` runs its rounds;
``trimtab.planning.lora.LoraPlanner`` is the planner for specs with adapters or tenants.
"""
from __future__ import annotations

from trimtab.milp.candidates import build_candidates, for_one_type, one_type_floor, unified_of
from trimtab.deployment.shape import CandidateSet
from trimtab.planning.explain import precheck, relaxations
from trimtab.milp.formulate import capacity_fill
from trimtab.milp.decompose import lp_floor
from trimtab.milp.solve import solve_ir
from trimtab.milp.extract import build_plan, chosen
from trimtab.solvers.base import Status


class UnifiedPlanner:
    def candidates(self, ir) -> CandidateSet:
        return build_candidates(ir)

    def for_one_type(self, cands: CandidateSet, ir, one) -> CandidateSet | None:
        return for_one_type(cands, ir, one)

    def one_type_floor(self, cands: CandidateSet, ir, one) -> float:
        return one_type_floor(cands, ir, one)

    def one_type_refused(self, cands: CandidateSet, ir, one) -> bool:
        """Whether the precheck refuses the set ``for_one_type`` derives for ``one``, known before its P/D
        pairs are built: the precheck reads the unified candidates alone (workloads and buckets without one,
        the budget's floor), and that set takes them from ``cands`` as they are, with no bests. Planners with
        their own precheck are not answered here (False: the drive decides)."""
        if type(self).precheck is not UnifiedPlanner.precheck:
            return False
        kept = unified_of(cands, ir, one)
        return kept is not None and bool(precheck(one, CandidateSet(kept, ())))

    def may_plan_below(self, ir, cands: CandidateSet, cost: float, backend, options) -> bool:
        """Whether the drive of ``ir`` on ``cands`` (a GPU type alone) may plan below ``cost``, by the LP
        relaxation of its MILP at the cost model's capacities (``lp_floor``), then the MILP itself: not where
        either is infeasible, nor where the LP's optimum or the bound the MILP's solve proved is at ``cost``
        or above (beyond the LP's tolerance), as every solve of the drive is then infeasible or at least that
        (its capacities are these or lower: ``drive``'s ``above``, the drive ends without a plan). Planners
        with a solve or precheck of their own, and a set the precheck refuses, are left to the drive (True).
        Why: a type's first solves cost seconds each (with the capacity prior, then without it, where the
        prior asks for more than the type has), the relaxation a fraction of one; and the LP, at a fraction
        of a replica per small workload, is often half the MILP. The MILP's workload parts stay in this
        planner's memo, so a drive that solves at these capacities after all (its prior dropped) takes them:
        on specgen's target seed 2 each of three types took one solve here instead of one or two there."""
        if type(self).solve is not UnifiedPlanner.solve or type(self).precheck is not UnifiedPlanner.precheck:
            return True
        if precheck(ir, cands):
            return True
        low = lp_floor(ir, cands, backend, options)
        if low is None or low >= cost * (1 + 1e-6):
            return False
        res = self.solve(ir, cands, {}, backend, options)
        if res.status == Status.INFEASIBLE:
            return False
        return not (res.has_solution and res.bound is not None and res.bound >= cost * (1 + 1e-6))

    def precheck(self, ir, cands: CandidateSet) -> list[str]:
        return precheck(ir, cands)

    def solve(self, ir, cands, derate, backend, options):
        # workload MILPs solved in earlier rounds of this planning run (trimtab.milp.decompose.solve_split)
        memo = self.__dict__.setdefault("_split_memo", {})
        return solve_ir(ir, cands, backend, options, derate, memo)

    def build(self, ir, cands, res, rounds, warnings):
        deps, routes = chosen(ir, cands, res)
        return build_plan(ir, deps, routes, res, rounds, warnings)

    def fill(self, cands, res, derate) -> dict[str, float]:
        return capacity_fill(cands, res, derate)

    def infeasible(self, ir, cands, backend, options) -> list[str]:
        return (["no deployment meets every SLO within the GPU counts and budget:"]
                + ["  " + r for r in relaxations(ir, cands, backend, options)])

    def candidate_set(self, cands: CandidateSet) -> CandidateSet:
        return cands

    def peers(self, cands: CandidateSet, fitted: bool = False) -> dict[str, tuple[str, ...]]:
        """workload -> the ids of its candidates (unified, prefill and decode), for
        ``trimtab.planning.rounds``;
        ``fitted``: only those of the kind the capacity prior was fitted on (unified serving)."""
        out: dict[str, list[str]] = {}
        for c in cands.candidates:
            if not fitted or c.role == "unified":
                out.setdefault(c.workload, []).append(c.id)
        return {w: tuple(ids) for w, ids in out.items()}
