"""Cost vs latency frontier: ``pareto(spec, metric) -> list[ParetoPoint]`` (``trimtab pareto``).

The frontier is over ``min_cost`` plans (a ``max_goodput`` spec is planned as ``min_cost`` here). Each
point tightens the chosen SLO of the chosen workloads by a common factor ``f <= 1`` of the spec's
value and plans the cheapest deployment for it (``trimtab.api.plan``, validated by simulation as ``trimtab
plan`` validates, so the point at factor 1 is ``plan``'s own plan; ``validate=False``: cost model only). The
factors run geometrically from 1 down to just above the best zero-load latency any candidate reaches (below it
no plan exists). Points that are infeasible are dropped, and so are dominated ones (costlier and no faster),
so the list runs from cheapest-and-slowest to fastest-and-costliest. Every point carries its plan and the
tightened spec, so it can be written out and checked (``trimtab check point.yaml --spec point.spec.yaml``).

The metric of a point is the plan's own prediction: the worst (highest) predicted TTFT (at each workload's
SLO percentile; ``ttft_p99`` names the usual case) or TPOT among the chosen workloads, in ms.

The points are independent plans: they run as tasks of a ``trimtab.study.sweep`` executor (``executor``:
serial in
this process by default; ``trimtab pareto`` uses Ray when it is installed, as ``trimtab sweep`` does), each
the same ``trimtab.api.plan`` call in a Ray worker as here, so the frontier is the same (docs/scale.md).
"""
from __future__ import annotations

from dataclasses import dataclass

from trimtab.errors import InputError, InternalError, Problem
from trimtab.contract.schema import Plan
from trimtab.spec.schema import Spec
from trimtab.ir.lower import lower
from trimtab.milp.candidates import build_candidates
from trimtab.spec.overrides import apply_overrides
from trimtab.study.sweep import SerialExecutor

METRICS = {"ttft_p99": "ttft_ms", "ttft": "ttft_ms", "tpot": "tpot_ms"}


@dataclass(frozen=True)
class ParetoPoint:
    factor: float  # SLO multiplier against the spec
    cost_usd_per_hour: float
    metric_ms: float  # worst predicted value among the chosen workloads
    slo_ms: dict[str, float]  # the tightened SLO per chosen workload
    plan: Plan
    spec: Spec


def pareto(spec: Spec, metric: str = "ttft_p99", workloads: list[str] | None = None, points: int = 8,
           backend: str | None = None, time_limit_s: float | None = None, validate: bool = True,
           executor=None, progress=None) -> list[ParetoPoint]:
    """The frontier (see the module docstring). ``executor``: a ``trimtab.study.sweep`` executor for the
    points' plans (default: serial); ``progress(done, total)`` as they finish. A point no plan meets is
    dropped; any other error of a point's plan is raised (``InternalError`` naming the point)."""
    if metric not in METRICS:
        raise InputError([Problem("--metric",
                                  f"unknown metric {metric!r}; choose from {', '.join(METRICS)}")])
    key = METRICS[metric]
    names = workloads or [w.name for w in spec.workloads]
    known = {w.name: w for w in spec.workloads}
    bad = [n for n in names if n not in known]
    if bad:
        raise InputError([Problem("--workload", f"no workload named {n!r}; the spec has {', '.join(known)}")
                          for n in bad])
    ir = lower(spec)
    cands = build_candidates(ir)
    # The lowest factor worth trying: no candidate beats its zero-load latency.
    f_min = 0.0
    for b in cands.best:
        if b.workload in names:
            best = b.ttft_ms if key == "ttft_ms" else b.tpot_ms
            f_min = max(f_min, best / getattr(known[b.workload].slo, key))
    f_min = min(max(f_min * 1.02, 1e-3), 1.0)
    n = max(points, 1)
    factors = [1.0] if n == 1 else [f_min ** (i / (n - 1)) for i in range(n)]
    slos = [{w: round(getattr(known[w].slo, key) * f, 3) for w in names} for f in factors]
    overrides = [{"objective": "min_cost",
                  **{f"workloads.{w}.slo.{key}": v for w, v in slo.items()}} for slo in slos]
    opts = {"backend": backend, "time_limit_s": time_limit_s, "validate": validate, "seed": 0}
    ex = executor or SerialExecutor()
    planned = ex.map("plan_spec", [(spec, f"{f:.6g}", ov, opts) for f, ov in zip(factors, overrides)],
                     progress)
    out: list[ParetoPoint] = []
    for f, slo, ov, (label, p, msg, status) in zip(factors, slos, overrides, planned):
        if p is None:
            if status in ("infeasible", "no_solution"):
                continue  # no plan meets this SLO level: not on the frontier
            raise InternalError([f"pareto point at SLO factor {label}: {msg}"])
        vals = [getattr(p.predictions[w], key) for w in names]
        worst = max((v for v in vals if v is not None), default=float("inf"))
        out.append(ParetoPoint(f, p.cost_usd_per_hour, worst, slo, p, apply_overrides(spec, ov)))
    return frontier(out)


def frontier(pts: list[ParetoPoint]) -> list[ParetoPoint]:
    """Non-dominated points by (cost, metric), cheapest first."""
    keep: list[ParetoPoint] = []
    for p in sorted(pts, key=lambda p: (p.cost_usd_per_hour, p.metric_ms, -p.factor)):
        if not keep or p.metric_ms < keep[-1].metric_ms - 1e-9:
            keep.append(p)
    return keep
