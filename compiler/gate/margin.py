"""``check --margin``: an SLO is only as safe as the prediction under it. A plan passes when, for each
workload, its TTFT and TPOT at the SLO percentile (simulated: the worst seed; ``--analytic``: the cost model's
worst bucket) leave at least the cost model's measured error for the workload's deployments as headroom to the
SLO: value / (1 - error) <= SLO, the error being the median (or p90) absolute % error of its class in
profiles/error_bars.yaml (``trimtab.milp.extract.error_bar_of``, the same figures the plan states). The error
is |predicted / measured - 1|, so a prediction ``error`` under the measurement is value / (1 - error): the
bound takes the unfavourable side (an error of 100 % or more leaves no headroom that would do). A CI gate that
passes a plan 5 % under its SLO on a model known to be 15 % off passes a coin toss."""
from __future__ import annotations

import math

from trimtab.contract.schema import Plan
from trimtab.deployment.shape import DeploymentSpecView
from trimtab.ir.model import ProblemIR
from trimtab.milp.extract import error_bar_of

STATS = ("median", "p90")


def margin_violations(plan: Plan, ir: ProblemIR, observed: dict[str, tuple[float, float]],
                      stat: str = "median") -> list[str]:
    """One line per workload and metric whose headroom ``observed`` (workload -> TTFT ms, TPOT ms at its SLO
    percentile) leaves is smaller than the error bar (``stat``: median or p90) of its deployments' class."""
    by = {d.name: DeploymentSpecView.of_plan(d) for d in plan.deployments}
    out = []
    for w in ir.workloads:
        if w.name not in observed:
            continue
        serving = [by[n] for r in plan.routes if r.workload == w.name
                   for n in (r.deployment, r.prefill, r.decode) if n in by]
        if not serving:
            continue
        bar = error_bar_of(ir, serving)
        t, d = observed[w.name]
        for metric, value, slo, med, p90, runs in (
                ("TTFT", t, w.slo.ttft_ms, bar.ttft_pct, bar.ttft_p90_pct, bar.ttft_runs),
                ("TPOT", d, w.slo.tpot_ms, bar.tpot_pct, bar.tpot_p90_pct, bar.tpot_runs)):
            err = med if stat == "median" else p90
            if math.isfinite(value) and err < 100 and value / (1 - err / 100) <= slo:
                continue
            under = math.isfinite(value) and value <= slo
            room = f"leaves {(slo / value - 1) * 100:.0f} % headroom to" if under else "is over"
            out.append(f"workload {w.name}: {metric} p{w.slo.percentile:g} {value:.1f} ms {room} its SLO "
                       f"{slo:g} ms, less headroom than the cost model's {stat} error for "
                       f"{', '.join(bar.classes)}: {err:g} % over {runs} measured runs (docs/fidelity.md, "
                       "\"Error bars\")")
    return out
