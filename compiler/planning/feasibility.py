"""The feasibility test ``trimtab explain`` asks of each relaxation it tries (``trimtab.planning.explain``),
and what it rebuilds for one: the pre-solve checks (``precheck``), the planner's solve (``min_cost``), a
workload's candidates rebuilt for a new SLO (``with_workload``), the candidates at other GPU counts
(``Counts``), and which workloads' SLOs can repair a spec at all (``repairing_workloads``).
"""
from __future__ import annotations

import math
from dataclasses import replace

from trimtab.deployment.layouts import layouts
from trimtab.deployment.shape import CandidateSet
from trimtab.ir.model import ProblemIR
from trimtab.milp.candidates import build_candidates
from trimtab.milp.solve import solve_ir
from trimtab.solvers.base import Backend, SolveOptions, SolveResult


def precheck(ir: ProblemIR, cands: CandidateSet) -> list[str]:
    return [line for _, line in precheck_by_workload(ir, cands)]


def precheck_by_workload(ir: ProblemIR, cands: CandidateSet) -> list[tuple[str | None, str]]:
    """``precheck``'s lines, each with the workload it is about (None: the budget's), for the planners that
    set their own lines beside these (``RedundantPlanner.precheck``, ``adapter_precheck``)."""
    out: list[tuple[str | None, str]] = []
    mine: dict[str, list] = {}  # workload -> its unified candidates (not a scan of them all per bucket)
    for c in cands.unified:
        mine.setdefault(c.workload, []).append(c)
    served = set(mine)
    best = {(b.workload, b.bucket): b for b in cands.best}
    for w in ir.workloads:
        if w.name not in served and not any(k[0] == w.name for k in best):
            reasons = sorted({p.cause for p in cands.pruned if p.workload == w.name})
            gpus = ", ".join(f"{g.type} x{g.count}" for g in ir.gpus)
            # live KV beyond HBM is a way out only for memory, and only when the spec has not allowed it yet
            ways = ["Add larger or more GPUs", "use dtype fp8"]
            if "memory" in reasons and getattr(ir, "kv_tiers", "off") != "experimental-live":
                ways.append("let live KV exceed HBM with defaults.kv_tiers: experimental-live (host memory "
                            "or other instances' HBM; no engine flag realises it, docs/kv-tiers.md)")
            out.append((w.name, f"{w.name}: model {w.model} ({w.dtype}) fits no GPU in the spec at any "
                       f"tensor/pipeline parallelism ({gpus}); pruned for: "
                       f"{', '.join(reasons) or 'no candidates'}. {', '.join(ways[:-1])} or {ways[-1]}."))
            continue
        for b in w.buckets:
            if any(c.capacity(b.name) > 0 for c in mine.get(w.name, ())):
                continue
            bb = best.get((w.name, b.name))
            share = f"{b.prob:.0%} of requests, inputs {b.name}"
            if bb is None:
                out.append((w.name, f"{w.name}: no candidate can hold requests of bucket {b.name} "
                                    f"({share}) in its KV cache"))
            elif bb.ttft_ms > w.slo.ttft_ms:
                out.append((w.name, f"{w.name}: TTFT p{w.slo.percentile:g} {w.slo.ttft_ms:g} ms cannot be "
                           f"met for {share}; the fastest candidate ({bb.ttft_by}) reaches "
                           f"{math.ceil(bb.ttft_ms)} ms even at low load. "
                           f"Relax workloads[{w.index}].slo.ttft_ms to at least {math.ceil(bb.ttft_ms)}."))
            elif bb.tpot_ms > w.slo.tpot_ms:
                out.append((w.name, f"{w.name}: TPOT {w.slo.tpot_ms:g} ms cannot be met for {share}; the "
                           f"fastest candidate ({bb.tpot_by}) reaches {bb.tpot_ms:.1f} ms even at low load. "
                           f"Relax workloads[{w.index}].slo.tpot_ms to at least {math.ceil(bb.tpot_ms)}."))
            else:
                out.append((w.name, f"{w.name}: no candidate meets TTFT {w.slo.ttft_ms:g} ms and TPOT "
                           f"{w.slo.tpot_ms:g} ms together for {share} (best low-load TTFT "
                           f"{bb.ttft_ms:.0f} ms on {bb.ttft_by}, TPOT {bb.tpot_ms:.1f} ms on {bb.tpot_by})"))
    if not out and ir.budget_usd_per_hour is not None and ir.objective == "min_cost":
        floor = 0.0
        for w in ir.workloads:
            mine = [c.usd_per_hour for c in cands.unified if c.workload == w.name]
            floor += min(mine) if mine else 0.0
        if floor > ir.budget_usd_per_hour + 1e-9:
            # one number, rounded up to the cent (a budget of it passes this check), in both places: "below
            # 51.90 ... at least 51.91" read as two
            need = math.ceil(floor * 100) / 100
            out.append((None, f"budget_usd_per_hour {ir.budget_usd_per_hour:g} is below {need:.2f} $/h, one "
                       f"replica of the cheapest candidate of each of the {len(ir.workloads)} workload(s). "
                       f"raise budget_usd_per_hour from {ir.budget_usd_per_hour:g} to at least {need:.2f}"))
    return out


def min_cost(ir: ProblemIR, cands: CandidateSet, backend: Backend,
              options: SolveOptions) -> SolveResult | None:
    """The round-1 solve of ``plan`` (min cost), or None when pre-checks or the MILP say infeasible. Solved
    as the planner solves (``solve_ir``: split by workload on a large spec, certified to the MIP gap, else
    the whole MILP): the whole MILP of 100 workloads took 200 s to prove infeasible what the split's LP
    verdict proves in seconds."""
    if precheck(ir, cands):
        return None
    res = solve_ir(cost_ir(ir), cands, backend, options)
    return res if res.has_solution else None


def cost_ir(ir: ProblemIR) -> ProblemIR:
    """``ir`` with the objective explain asks about: the cheapest plan."""
    return ir if ir.objective == "min_cost" else replace(ir, objective="min_cost")


def with_workload(ir: ProblemIR, cands: CandidateSet, w_new) -> tuple[ProblemIR, CandidateSet]:
    """``ir`` with one workload replaced; only that workload's candidates are rebuilt."""
    ws = tuple(w_new if w.name == w_new.name else w for w in ir.workloads)
    ir2 = replace(ir, workloads=ws)
    own = build_candidates(replace(ir, workloads=(w_new,)))
    keep = tuple(c for c in cands.candidates if c.workload != w_new.name)
    return ir2, CandidateSet(tuple(sorted(keep + own.candidates, key=lambda c: c.id)),
                             tuple(sorted([p for p in cands.pruned if p.workload != w_new.name]
                                          + list(own.pruned), key=lambda p: p.id)),
                             tuple([b for b in cands.best if b.workload != w_new.name] + list(own.best)))


class Counts:
    """``build_candidates`` of ``ir`` with GPU counts changed (``at``), built only where a shape can appear or
    go. A pool's count enters the candidates in one place: a layout (``trimtab.deployment.layouts``, unified
    and P/D sides alike) of more GPUs than the pool has is pruned, its reason naming the count. So the set is
    the same for every count between two consecutive layout sizes but for those reasons, which ``at``
    rewrites: a bisection over a count of 4,096 GPUs whose largest shape has 64 builds nothing, where each of
    its steps cost a full build (6-12 s at 100 workloads). tests/unit/test_explain_scale.py compares it with
    the full build."""

    def __init__(self, ir: ProblemIR, cands: CandidateSet):
        self.ir = ir
        self.sizes: dict[str, tuple[int, ...]] = {}
        self.built: dict[tuple, tuple[ProblemIR, CandidateSet]] = {self._key(ir): (ir, cands)}

    def _sizes(self, pool) -> tuple[int, ...]:
        """The GPUs of every layout of any workload on ``pool``'s type, at any count."""
        if pool.type not in self.sizes:
            unbounded = replace(pool, count=1 << 40)
            self.sizes[pool.type] = tuple(sorted({tp * pp * dp for w in self.ir.workloads
                                                  for _, tp, pp, dp, _, _ in layouts(self.ir, w, unbounded)}))
        return self.sizes[pool.type]

    def _key(self, ir: ProblemIR) -> tuple:
        return tuple((p.type, sum(g <= p.count for g in self._sizes(p))) for p in ir.gpus)

    def count(self, gpu: str, count: int) -> tuple[ProblemIR, CandidateSet]:
        """``ir`` with ``gpu``'s count set, and its candidates."""
        return self.at(replace(self.ir, gpus=tuple(replace(g, count=count) if g.type == gpu else g
                                                   for g in self.ir.gpus)))

    def at(self, ir2: ProblemIR) -> tuple[ProblemIR, CandidateSet]:
        """``ir2`` (``ir`` with other GPU counts or budget: nothing else) and its candidates."""
        key = self._key(ir2)
        if key not in self.built:
            self.built[key] = (ir2, build_candidates(ir2))
        was, cands = self.built[key]
        moved = {p.type for p, q in zip(was.gpus, ir2.gpus) if p.count != q.count}
        if not moved:
            return ir2, cands
        # the same layouts are pruned (the key); their reasons, which name the count, as ``ir2``'s layouts say
        why = {cid: w for wl in ir2.workloads for pool in ir2.gpus if pool.type in moved
               for cid, _, _, _, _, w in layouts(ir2, wl, pool) if w}
        pruned = tuple(replace(p, reason=why[p.id], cause=why[p.id]) if p.id in why else p
                       for p in cands.pruned)
        return ir2, replace(cands, pruned=pruned)


def repairing_workloads(ir: ProblemIR, cands: CandidateSet, short: set[str],
                        bound: list | None) -> tuple[list[str], str]:
    """(the workloads whose SLO alone may repair the spec, those on ``short`` types first; a note on the
    rest). Without a budget the workloads and GPU types fall into parts that share nothing (a workload
    linked to the types of its candidates): a part whose inventory rows the LP relaxes (``short``) has no
    plan on its own, and an SLO of a workload outside it changes none of its candidates or rows, so it
    cannot repair the spec; and where two parts fall short, no one SLO repairs both. ``bound``: the LP
    relaxation's changes (``trimtab.planning.explain.lp_relaxation``; None: not even the LP has a plan)."""
    names = [w.name for w in ir.workloads]
    if ir.budget_usd_per_hour is not None or not short or bound is None:
        return names, ""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x
    direct: set[str] = set()
    for c in cands.candidates:
        parent[find("w:" + c.workload)] = find("g:" + c.gpu)
        if c.gpu in short:
            direct.add(c.workload)
    parts = {find("g:" + t) for t in short}
    types = ", ".join(sorted(short))
    if len(parts) > 1:
        return [], (f"no one SLO repairs the spec: the GPU types the LP relaxation raises ({types}) fall "
                    "in parts of the spec that share no workload, and an SLO changes one part")
    (part,) = parts
    mine = [n for n in names if find("w:" + n) == part]
    mine.sort(key=lambda n: n not in direct)  # (stable: spec order within each)
    if len(mine) == len(names):
        return mine, ""
    return mine, (f"{len(names) - len(mine)} workloads share no GPU type with {types}, the rows the LP "
                  "relaxation raises: no SLO of theirs repairs the spec (not tried)")
