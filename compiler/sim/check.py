"""``check`` by simulation: the plan's structure is verified as in ``compiler.check.verify`` (inventory, budget,
cost, memory, routing), and its SLOs by simulating it under the spec's traffic.

A workload fails when its simulated SLO attainment (share of requests meeting both TTFT and TPOT) is below its
percentile; the line names the workload, the metric at the percentile against its target, the attainment and
the deployment with the most misses. By default the seed and request count are those the plan was validated
with (``plan.simulation``), so a plan ``trimtab plan`` emitted passes ``check`` against the same spec.
"""
from __future__ import annotations

from compiler.check import CheckReport, verify
from compiler.lower import lower
from compiler.plan.schema import Plan
from compiler.profiles import ProfileSet
from compiler.sim import DEFAULT_SEED, SimResult, simulate
from compiler.spec.schema import Spec
from compiler.traces import Trace


def check_simulated(plan: Plan, spec: Spec, *, profiles: ProfileSet | None = None, seed: int | None = None,
                    requests: int | None = None, duration_s: float | None = None, trace: Trace | None = None,
                    arrival_cv: float | None = None, progress=None) -> tuple[CheckReport, SimResult]:
    from compiler.topology import build_topology

    ir = lower(spec, profiles)
    rep = verify(plan, ir, build_topology(spec, ir), slo=False)
    recorded = plan.simulation
    if seed is None:
        seed = recorded.seed if recorded else DEFAULT_SEED
    if requests is None and duration_s is None and recorded is not None:
        requests = recorded.requests
    res = simulate(plan, spec, ir=ir, seed=seed, requests=requests, duration_s=duration_s, trace=trace,
                   arrival_cv=arrival_cv, timeline=False, progress=progress)
    bad = list(rep.violations) + res.failures()
    return CheckReport(not bad, bad, list(rep.notes) + res.notes, rep.assessment), res
