"""``diff_plans(a, b)``: what changed between two plans, as readable lines (for what-if questions)."""
from __future__ import annotations

from trimtab.contract.schema import Plan


def diff_plans(a: Plan, b: Plan) -> list[str]:
    out = []
    if a.cost_usd_per_hour != b.cost_usd_per_hour:
        d = b.cost_usd_per_hour - a.cost_usd_per_hour
        out.append(f"cost_usd_per_hour: {a.cost_usd_per_hour:g} -> {b.cost_usd_per_hour:g} ({d:+.2f})")
    for g in sorted(set(a.gpus) | set(b.gpus)):
        x, y = a.gpus.get(g, 0), b.gpus.get(g, 0)
        if x != y:
            out.append(f"gpus.{g}: {x} -> {y}")
    da = {d.name: d for d in a.deployments}
    db = {d.name: d for d in b.deployments}
    for n in sorted(set(da) | set(db)):
        if n not in db:
            out.append(f"deployment {n}: removed ({da[n].replicas} replicas)")
        elif n not in da:
            out.append(f"deployment {n}: added ({db[n].replicas} replicas)")
        elif da[n].replicas != db[n].replicas:
            out.append(f"deployment {n}: replicas {da[n].replicas} -> {db[n].replicas}")
    for w in sorted(set(a.predictions) | set(b.predictions)):
        pa, pb = a.predictions.get(w), b.predictions.get(w)
        if pa and pb and pa.slo_met != pb.slo_met:
            out.append(f"workload {w}: slo_met {pa.slo_met} -> {pb.slo_met}")
    return out
