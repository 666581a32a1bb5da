"""``check(plan, spec)``: the CI gate. Re-derives everything from the spec and the cost model.

Nothing stored in the plan is trusted: the verifier recomputes GPU counts, cost, budget, routing sums,
memory fit and every workload's TTFT/TPOT at its percentile (``compiler.assess``), and lists each
violation on one line naming the workload or deployment at fault.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from compiler.assess import Assessment, DeploymentSpecView, RouteView, assess
from compiler.candidates import replica_model
from compiler.ir import ProblemIR
from compiler.lower import lower
from compiler.plan.schema import Plan
from compiler.profiles import ProfileSet
from compiler.spec.schema import Spec
from compiler.validation import validate
from compiler.yamlio import read_yaml_file

SHARE_TOL = 1e-3


@dataclass(frozen=True)
class CheckReport:
    ok: bool
    violations: list[str]
    notes: list[str] = field(default_factory=list)
    assessment: Assessment | None = None


def load_plan(path: str | Path) -> Plan:
    """Read a plan file (YAML or JSON, which YAML also parses); InputError on any problem."""
    data, lines = read_yaml_file(path)
    return validate(Plan, data, lines, str(path), "plan")


def check(plan: Plan, spec: Spec, profiles: ProfileSet | None = None) -> CheckReport:
    ir = lower(spec, profiles)
    return verify(plan, ir)


def verify(plan: Plan, ir: ProblemIR) -> CheckReport:
    bad: list[str] = []
    notes: list[str] = []
    if plan.input_hash != ir.input_hash:
        notes.append(f"plan was made from different input ({plan.input_hash}, spec now {ir.input_hash}); "
                     "checking it against the spec as it is now")
    deps: list[DeploymentSpecView] = []
    used: dict[str, int] = {}
    cost = 0.0
    seen = set()
    for d in plan.deployments:
        if d.name in seen:
            bad.append(f"deployment {d.name}: duplicate name")
            continue
        seen.add(d.name)
        pool = ir.gpu(d.gpu)
        if pool is None:
            bad.append(f"deployment {d.name}: GPU type {d.gpu} is not in the spec")
            continue
        if d.model not in ir.models:
            bad.append(f"deployment {d.name}: model {d.model} is not in the spec")
            continue
        n = d.replicas * d.tensor_parallel * d.pipeline_parallel
        used[d.gpu] = used.get(d.gpu, 0) + n
        cost += n * pool.usd_per_hour
        try:
            rm = replica_model(ir, d.model, d.gpu, d.tensor_parallel, d.pipeline_parallel, d.dtype, d.max_batch_size,
                               d.max_num_batched_tokens)
        except ValueError as exc:
            bad.append(f"deployment {d.name}: {exc}")
            continue
        mem = rm.memory
        if mem.kv_cache_tokens <= 0:
            bad.append(f"deployment {d.name}: {d.model} does not fit {d.tensor_parallel * d.pipeline_parallel} x "
                       f"{d.gpu} ({mem.weights_gib_per_gpu:.1f} GiB weights per GPU, {mem.usable_gib_per_gpu:.1f} usable)")
            continue
        if d.kv_cache_tokens > mem.kv_cache_tokens * 1.001:
            bad.append(f"deployment {d.name}: claims {d.kv_cache_tokens} KV tokens, only {mem.kv_cache_tokens} fit")
        deps.append(DeploymentSpecView(d.name, d.model, d.gpu, d.tensor_parallel, d.pipeline_parallel, d.dtype,
                                       d.max_batch_size, d.max_num_batched_tokens, d.replicas))
    for g, n in sorted(used.items()):
        pool = ir.gpu(g)
        if n > pool.count:
            bad.append(f"inventory: plan uses {n} {g}, spec allows {pool.count}")
    if ir.budget_usd_per_hour is not None and cost > ir.budget_usd_per_hour + 1e-6:
        bad.append(f"budget: plan costs {cost:.2f} $/h, spec allows {ir.budget_usd_per_hour:g}")
    if abs(cost - plan.cost_usd_per_hour) > 0.01 * max(cost, 1.0):
        bad.append(f"cost: plan states {plan.cost_usd_per_hour:g} $/h, its GPUs at the spec's prices cost {cost:.2f}")

    names = {d.name: d for d in plan.deployments}
    routes: list[RouteView] = []
    per_bucket: dict[tuple[str, str], float] = {}
    for r in plan.routes:
        w = ir.workload(r.workload)
        if w is None:
            bad.append(f"route: workload {r.workload} is not in the spec")
            continue
        if r.deployment not in names:
            bad.append(f"route {r.workload}/{r.bucket}: unknown deployment {r.deployment}")
            continue
        if w.bucket(r.bucket) is None:
            bad.append(f"route {r.workload}/{r.bucket}: no such length bucket in the spec's {r.workload} "
                       f"(buckets: {', '.join(b.name for b in w.buckets)}); was the plan made from another spec?")
            continue
        if names[r.deployment].model != w.model:
            bad.append(f"route {r.workload}: deployment {r.deployment} serves {names[r.deployment].model}, "
                       f"the workload needs {w.model}")
            continue
        per_bucket[(w.name, r.bucket)] = per_bucket.get((w.name, r.bucket), 0.0) + r.share
        routes.append(RouteView(r.workload, r.bucket, r.deployment, r.share))
    for w in ir.workloads:
        for b in w.buckets:
            got = per_bucket.get((w.name, b.name), 0.0)
            if abs(got - b.prob) > SHARE_TOL:
                bad.append(f"routing {w.name}: bucket {b.name} holds {b.prob:.4f} of requests, routes carry {got:.4f}")

    a = assess(ir, deps, routes)
    for w in ir.workloads:
        p = a.workloads[w.name]
        if p.slo_met:
            continue
        at = f" (deployment {p.worst_deployment})" if p.worst_deployment else ""
        if not math.isfinite(p.ttft_ms) or not math.isfinite(p.tpot_ms):
            bad.append(f"workload {w.name}: overloaded{at}: {p.reason}")
        elif p.ttft_ms > w.slo.ttft_ms:
            bad.append(f"workload {w.name}: TTFT p{w.slo.percentile:g} {p.ttft_ms:.0f} ms > SLO {w.slo.ttft_ms:g} ms{at}")
        else:
            bad.append(f"workload {w.name}: TPOT {p.tpot_ms:.1f} ms > SLO {w.slo.tpot_ms:g} ms{at}")
    return CheckReport(not bad, bad, notes, a)
