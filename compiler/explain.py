"""Why a spec is infeasible, said in the spec's own terms and with the numbers to change.

* ``precheck(ir, cands)``: before solving, workloads or length buckets no candidate can serve at all
  (the model fits no GPU; an SLO below what the fastest candidate reaches even at low load).
* ``relaxations(ir, cands, backend, options)``: after an infeasible solve, an elastic copy of the model
  with a slack on each relaxable constraint (GPU counts, budget) says which to raise and to what.
"""
from __future__ import annotations

import math

from compiler.candidates import CandidateSet
from compiler.formulate import formulate, slack_var
from compiler.ir import ProblemIR
from solvers.base import Backend, SolveOptions


def precheck(ir: ProblemIR, cands: CandidateSet) -> list[str]:
    out = []
    served = {c.workload for c in cands.candidates}
    best = {(b.workload, b.bucket): b for b in cands.best}
    for w in ir.workloads:
        if w.name not in served and not any(k[0] == w.name for k in best):
            reasons = sorted({p.reason.split(":")[0] for p in cands.pruned if p.id.startswith(w.name + "-")})
            gpus = ", ".join(f"{g.type} x{g.count}" for g in ir.gpus)
            out.append(f"{w.name}: model {w.model} ({w.dtype}) fits no GPU in the spec at any tensor/pipeline "
                       f"parallelism ({gpus}); pruned for: {', '.join(reasons) or 'no candidates'}. "
                       f"Add larger or more GPUs, or use dtype fp8.")
            continue
        for b in w.buckets:
            if any(c.workload == w.name and c.capacity(b.name) > 0 for c in cands.candidates):
                continue
            bb = best.get((w.name, b.name))
            share = f"{b.prob:.0%} of requests, inputs {b.name}"
            if bb is None:
                out.append(f"{w.name}: no candidate can hold requests of bucket {b.name} ({share}) in its KV cache")
            elif bb.ttft_ms > w.slo.ttft_ms:
                out.append(f"{w.name}: TTFT p{w.slo.percentile:g} {w.slo.ttft_ms:g} ms cannot be met for {share}; "
                           f"the fastest candidate ({bb.ttft_by}) reaches {math.ceil(bb.ttft_ms)} ms even at low load. "
                           f"Relax workloads[{w.index}].slo.ttft_ms to at least {math.ceil(bb.ttft_ms)}.")
            elif bb.tpot_ms > w.slo.tpot_ms:
                out.append(f"{w.name}: TPOT {w.slo.tpot_ms:g} ms cannot be met for {share}; the fastest candidate "
                           f"({bb.tpot_by}) reaches {bb.tpot_ms:.1f} ms even at low load. "
                           f"Relax workloads[{w.index}].slo.tpot_ms to at least {math.ceil(bb.tpot_ms)}.")
            else:
                out.append(f"{w.name}: no candidate meets TTFT {w.slo.ttft_ms:g} ms and TPOT {w.slo.tpot_ms:g} ms "
                           f"together for {share} (best low-load TTFT {bb.ttft_ms:.0f} ms on {bb.ttft_by}, "
                           f"TPOT {bb.tpot_ms:.1f} ms on {bb.tpot_by})")
    return out


def relaxations(ir: ProblemIR, cands: CandidateSet, backend: Backend, options: SolveOptions,
                derate: dict[str, float] | None = None) -> list[str]:
    """'raise X from A to at least B' lines, from the smallest relaxation of GPU counts and budget."""
    model = formulate(ir, cands, derate, elastic=True)
    res = backend.solve(model, options)
    if not res.has_solution:
        return ["the spec is infeasible and no relaxation of GPU counts or budget repairs it"]
    out = []
    for pool in ir.gpus:
        s = res.values.get(slack_var(f"inventory[{pool.type}]"), 0.0)
        if s > 0.5:
            out.append(f"raise gpus[{pool.index}] ({pool.type}).count from {pool.count} to at least "
                       f"{pool.count + int(round(s))}")
    if ir.budget_usd_per_hour is not None:
        s = res.values.get(slack_var("budget"), 0.0)
        if s > 1e-6:
            need = math.ceil((ir.budget_usd_per_hour + s) * 100) / 100
            out.append(f"raise budget_usd_per_hour from {ir.budget_usd_per_hour:g} to at least {need:.2f}")
    if not out:
        out.append("the solver reports infeasibility but the elastic model needs no relaxation (numerical issue)")
    return out
