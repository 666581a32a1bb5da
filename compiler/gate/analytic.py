"""``check(plan, spec)``: the CI gate. Re-derives everything from the spec and the cost model.

Nothing stored in the plan is trusted: the verifier recomputes GPU counts, cost, budget, routing sums,
memory fit and every workload's TTFT/TPOT at its percentile (``trimtab.milp.assess``), and lists each
violation on one line naming the workload or deployment at fault.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from trimtab.milp.assess import NO_ROUTE, Assessment, assess
from trimtab.deployment.price import fleet_usd_per_hour
from trimtab.deployment.shape import DeploymentSpecView, RouteView, replica_model_of, stage_parts
from trimtab.errors import InputError, Problem
from trimtab.ir.model import ProblemIR
from trimtab.deployment.kvtiers import verify_kv
from trimtab.gate.lora import verify_lora
from trimtab.ir.lower import lower
from trimtab.contract.schema import Plan
from trimtab.profiles.loader import ProfileSet
from trimtab.spec.schema import Spec
from trimtab.ir.topology import LINK_UTIL, Topology, build_topology, kv_link_loads
from trimtab.util.validation import validate
from trimtab.util.yamlio import read_yaml_file
from trimtab.cost.physics import breaches
from trimtab.cost.transfer import is_local_pair, local_bytes_per_s, nic_bytes_per_s

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
    """Verify ``plan`` against ``spec``. A plan that names GPU types, models, workloads or length buckets the
    spec lacks was made from another spec: InputError (exit 1) with the plan's field path, not a failed
    check."""
    ir = lower(spec, profiles)
    foreign = plan_references(plan, ir)
    if foreign:
        raise InputError(foreign, "plan")
    return verify(plan, ir, build_topology(spec, ir))


def verify(plan: Plan, ir: ProblemIR, topo: Topology | None = None, slo: bool = True) -> CheckReport:
    """``slo=False`` leaves out the analytic SLO lines (``trimtab.gate.simulated`` judges SLOs by
    simulation)."""
    bad: list[str] = []
    notes: list[str] = []
    if plan.input_hash != ir.input_hash:
        notes.append(f"plan was made from different input ({plan.input_hash}, spec now {ir.input_hash}); "
                     "checking it against the spec as it is now")
    deps: list[DeploymentSpecView] = []
    used: dict[str, int] = {}
    priced: list[tuple[int, float]] = []  # (GPUs, $/h of one) per deployment
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
        n = d.replicas * d.gpus_per_replica
        used[d.gpu] = used.get(d.gpu, 0) + n
        priced.append((n, pool.usd_per_hour))
        view = DeploymentSpecView.of_plan(d)
        try:
            # the HBM the plan claims, before lending
            rm = replica_model_of(ir, replace(view, kv_lent_gib=0.0))
        except ValueError as exc:
            bad.append(f"deployment {d.name}: {exc}")
            continue
        mem = rm.memory
        if mem.kv_cache_tokens <= 0:
            bad.append(f"deployment {d.name}: {d.model} does not fit "
                       f"{d.gpus_per_replica} x "
                       f"{d.gpu} ({mem.weights_gib_per_gpu:.1f} GiB weights per GPU, "
                       f"{mem.usable_gib_per_gpu:.1f} usable)")
            continue
        if d.kv_cache_tokens > mem.kv_cache_tokens * 1.001:
            bad.append(f"deployment {d.name}: claims {d.kv_cache_tokens} KV tokens, only "
                       f"{mem.kv_cache_tokens} fit")
        deps.append(view)
    cost = fleet_usd_per_hour(priced)
    for g, n in sorted(used.items()):
        pool = ir.gpu(g)
        if n > pool.count:
            bad.append(f"inventory: plan uses {n} {g}, spec allows {pool.count}")
    if ir.budget_usd_per_hour is not None and cost > ir.budget_usd_per_hour + 1e-6:
        bad.append(f"budget: plan costs {cost:.2f} $/h, spec allows {ir.budget_usd_per_hour:g}")
    if abs(cost - plan.cost_usd_per_hour) > 0.01 * max(cost, 1.0):
        bad.append(f"cost: plan states {plan.cost_usd_per_hour:g} $/h, its GPUs at the spec's prices cost "
                   f"{cost:.2f}")

    bad += [f"physics: {b.line()}" for b in breaches(plan, ir)]
    names = {d.name: d for d in plan.deployments}
    routes: list[RouteView] = []
    per_bucket: dict[tuple[str, str], float] = {}
    for r in plan.routes:
        w = ir.workload(r.workload)
        if w is None:
            bad.append(f"route: workload {r.workload} is not in the spec")
            continue
        if r.deployment is None or r.prefill is not None or r.decode is not None:
            # lazy: keeps import trimtab light (milp.disagg is the planner's)
            from trimtab.milp.pair_routes import verify_pair_route

            why = verify_pair_route(r, names, w)
            if why:
                bad.append(why)
                continue
        elif r.deployment not in names:
            bad.append(f"route {r.workload}/{r.bucket}: unknown deployment {r.deployment}")
            continue
        elif names[r.deployment].role != "unified":
            bad.append(f"route {r.workload}/{r.bucket}: deployment {r.deployment} is a "
                       f"{names[r.deployment].role} "
                       "deployment; a route to it must name a prefill/decode pair")
            continue
        if w.bucket(r.bucket) is None:
            bad.append(f"route {r.workload}/{r.bucket}: no such length bucket in the spec's {r.workload} "
                       f"(buckets: {', '.join(b.name for b in w.buckets)}); was the plan made from another "
                       "spec?")
            continue
        if r.deployment is not None and names[r.deployment].model != w.model:
            bad.append(f"route {r.workload}: deployment {r.deployment} serves {names[r.deployment].model}, "
                       f"the workload needs {w.model}")
            continue
        per_bucket[(w.name, r.bucket)] = per_bucket.get((w.name, r.bucket), 0.0) + r.share
        routes.append(RouteView(r.workload, r.bucket, r.deployment or "", r.share, r.prefill or "",
                                r.decode or ""))
    for w in ir.workloads:
        for b in w.buckets:
            got = per_bucket.get((w.name, b.name), 0.0)
            if ir.objective == "max_goodput":  # a bucket may be served in part, never beyond its share
                if got > b.prob + SHARE_TOL:
                    bad.append(f"routing {w.name}: bucket {b.name} holds {b.prob:.4f} of requests, routes "
                               f"carry {got:.4f}")
                continue
            if abs(got - b.prob) > SHARE_TOL:
                bad.append(f"routing {w.name}: bucket {b.name} holds {b.prob:.4f} of requests, routes carry "
                           f"{got:.4f}")

    if ir.objective == "max_goodput":
        served = sum(per_bucket.values()) and sum(ir.workload(k[0]).rate_rps * v
                                                  for k, v in per_bucket.items())
        stated = plan.goodput.served_rps if plan.goodput is not None else None
        if stated is None or abs(stated - served) > 1e-3 * max(served, 1.0):
            bad.append(f"goodput: plan states {stated} rps served, its routes carry {served:.4f}")
    if topo is not None:
        bad += verify_placement(plan, topo)
        bad += verify_kv_links(plan, ir, topo)
    bad += verify_lora(plan, ir)
    a = assess(ir, deps, routes)
    # KV tiers: offload, borrow and lend limits (trimtab.deployment.kvtiers)
    bad += verify_kv(plan, ir, a, topo)
    for w in ir.workloads:
        p = a.workloads[w.name]
        if p.slo_met or not slo:
            continue
        if ir.objective == "max_goodput" and p.reason == NO_ROUTE:
            continue  # unserved (within budget), stated in plan.goodput

        at = f" (deployment {p.worst_deployment})" if p.worst_deployment else ""
        if not math.isfinite(p.ttft_ms) or not math.isfinite(p.tpot_ms):
            bad.append(f"workload {w.name}: overloaded{at}: {p.reason}")
        elif p.ttft_ms > w.slo.ttft_ms:
            bad.append(f"workload {w.name}: TTFT p{w.slo.percentile:g} {p.ttft_ms:.0f} ms > SLO "
                       f"{w.slo.ttft_ms:g} ms{at}")
        else:
            bad.append(f"workload {w.name}: TPOT {p.tpot_ms:.1f} ms > SLO {w.slo.tpot_ms:g} ms{at}")
    return CheckReport(not bad, bad, notes, a)


def plan_references(plan: Plan, ir: ProblemIR) -> list[Problem]:
    """Names in the plan the spec does not have, each with the plan's field path."""
    out = []
    hint = "; was the plan made from another spec?"
    for i, d in enumerate(plan.deployments):
        if ir.gpu(d.gpu) is None:
            out.append(Problem(f"deployments[{i}] ({d.name}).gpu", f"GPU type {d.gpu!r} is not in the spec "
                               f"(gpus: {', '.join(g.type for g in ir.gpus)}){hint}"))
        if d.model not in ir.models:
            out.append(Problem(f"deployments[{i}] ({d.name}).model", f"model {d.model!r} is not in the spec "
                               f"(models: {', '.join(sorted(ir.models))}){hint}"))
    for i, r in enumerate(plan.routes):
        w = ir.workload(r.workload)
        if w is None:
            out.append(Problem(f"routes[{i}].workload", f"workload {r.workload!r} is not in the spec "
                               f"(workloads: {', '.join(w.name for w in ir.workloads)}){hint}"))
        elif w.bucket(r.bucket) is None:
            out.append(Problem(f"routes[{i}].bucket", f"length bucket {r.bucket!r} is not in the spec's "
                               f"workload {r.workload} (buckets: "
                               f"{', '.join(b.name for b in w.buckets)}){hint}"))
    return out


def verify_placement(plan: Plan, topo: Topology) -> list[str]:
    """Every replica stage on an existing node of the right GPU type, its TP group inside one NVLink domain,
    no GPU used twice. Plans without placements (written by hand) are only checked for counts above."""
    bad = []
    nodes = {n.name: n for n in topo.nodes}
    taken: dict[tuple[str, int], tuple[str, int, int]] = {}
    for d in plan.deployments:
        if not d.placement:
            continue
        # one stage: its TP group x its DP ranks in one NVLink domain, or whole domains of an expert group
        # spanning nodes (``stage_parts``: each part a placement entry of its own)
        parts, stage_gpus = stage_parts(d.tensor_parallel, d.data_parallel, topo.max_domain(d.gpu))
        want = {(r, s) for r in range(d.replicas) for s in range(d.pipeline_parallel * parts)}
        got = [(p.replica, p.stage) for p in d.placement]
        if sorted(got) != sorted(want):
            what = f"{d.pipeline_parallel} stages" + (f" x {parts} NVLink domains" if parts > 1 else "")
            bad.append(f"placement {d.name}: places {len(got)} stage(s), needs {len(want)} "
                       f"({d.replicas} replicas x {what}, each exactly once)")
        for p in d.placement:
            n = nodes.get(p.node)
            if n is None:
                bad.append(f"placement {d.name}: unknown node {p.node}")
                continue
            if n.gpu != d.gpu:
                bad.append(f"placement {d.name}: node {p.node} has {n.gpu}, not {d.gpu}")
            if len(p.gpus) != stage_gpus or any(g < 0 or g >= n.gpus for g in p.gpus):
                bad.append(f"placement {d.name} replica {p.replica}: GPUs {p.gpus} are not {stage_gpus} "
                           f"indices of {p.node} (0..{n.gpus - 1})")
                continue
            if len({g // n.nvlink_domain for g in p.gpus}) > 1:
                bad.append(f"placement {d.name} replica {p.replica}: TP group {p.gpus} spans NVLink domains "
                           f"of {p.node}")
            for g in p.gpus:
                me = (d.name, p.replica, p.stage)
                other = taken.setdefault((p.node, g), me)
                if other != me:
                    bad.append(f"placement: GPU {g} of {p.node} is used by {other[0]} replica {other[1]} and "
                               f"{d.name} replica {p.replica}")
    return sorted(set(bad))


def verify_kv_links(plan: Plan, ir: ProblemIR, topo: Topology) -> list[str]:
    """P/D hand-offs against the links of the placement the plan states (independent of the solver):
    co-located pairs name each other, form whole groups and keep each group in one NVLink domain, and their KV
    flow per group fits LINK_UTIL of the group's NVLink; the KV of cross-node pairs fits LINK_UTIL of every
    node NIC and inter-rack link it crosses (``trimtab.ir.topology.kv_link_loads``). Deployments without
    placement (plans written by hand) are checked against their NIC share instead. One line per fault: route,
    link, load vs capacity."""
    # lazy: keeps import trimtab light (milp.disagg is the planner's)
    from trimtab.milp.pair_routes import pair_flows

    bad: list[str] = []
    by = {d.name: d for d in plan.deployments}
    nodes = {n.name: n for n in topo.nodes}
    for d in plan.deployments:
        if not d.colocated_with:
            continue
        o = by.get(d.colocated_with)
        if o is None or not is_local_pair(d, o) or {d.role, o.role} != {"prefill", "decode"}:
            bad.append(f"co-located pair {d.name}: its partner {d.colocated_with} is not a {d.gpu} "
                       "deployment of the other role naming it back")
            continue
        if d.role != "prefill":
            continue
        kp, kd = d.group_replicas, o.group_replicas
        if kp < 1 or kd < 1 or d.pipeline_parallel != 1 or o.pipeline_parallel != 1 \
                or d.replicas * kd != o.replicas * kp or d.replicas % kp:
            bad.append(f"co-located pair {d.name} + {o.name}: {d.replicas} + {o.replicas} replicas do not "
                       f"form whole groups of {kp} + {kd} (pipeline parallel 1)")
            continue
        if d.placement and o.placement:
            per: dict[tuple[str, int], list[int]] = {}
            for side, k in ((d, 0), (o, 1)):
                for s in side.placement:
                    n = nodes.get(s.node)
                    if n is None or not s.gpus:
                        continue
                    per.setdefault((s.node, s.gpus[0] // n.nvlink_domain), [0, 0])[k] += 1
            for (node, dom), (np_, nd) in sorted(per.items()):
                if np_ * kd != nd * kp or np_ % kp:
                    bad.append(f"co-located pair {d.name} + {o.name}: NVLink domain {dom} of {node} holds "
                               f"{np_} prefill and {nd} decode replicas, not whole groups of {kp} + {kd}; "
                               "the hand-off would leave the node")
    flows = pair_flows(plan, ir)
    for p, d, f, local in flows:
        dp, dd = by[p], by[d]
        if dp.colocated_with and not local:
            bad.append(f"route {p} -> {d}: {p} is co-located with {dp.colocated_with}; its KV may only go "
                       "there")
            continue
        if local:
            groups = dp.replicas // max(dp.group_replicas, 1)
            if groups <= 0 or ir.gpu(dp.gpu) is None:
                continue
            cap = local_bytes_per_s(ir.gpu(dp.gpu), dp.group_replicas * dp.tensor_parallel,
                                    dd.group_replicas * dd.tensor_parallel)
            if f / groups > LINK_UTIL * cap * (1 + 1e-6):
                bad.append(f"route {p} -> {d}: KV hand-off {f / groups / 1e9:.2f} GB/s per group over the "
                           f"NVLink of its group, more than {LINK_UTIL:.0%} of {cap / 1e9:g} GB/s")
            continue
        for side in (dp, dd):
            if not side.placement and side.replicas and ir.gpu(side.gpu) is not None:
                cap = nic_bytes_per_s(ir.gpu(side.gpu),
                                      side.tensor_parallel * side.pipeline_parallel * side.data_parallel)
                if f / side.replicas > LINK_UTIL * cap * (1 + 1e-6):
                    bad.append(f"route {p} -> {d}: KV {f / side.replicas / 1e9:.2f} GB/s per replica of "
                               f"{side.name} over its NIC share, more than {LINK_UTIL:.0%} of {cap / 1e9:g} "
                               "GB/s")
    stages = {d.name: [(s.node, 0) for s in d.placement] for d in plan.deployments if d.placement}
    cross = [(p, d, f) for p, d, f, local in flows if not local and p in stages and d in stages]
    for link, (load, cap, routes) in sorted(kv_link_loads(topo, stages, cross).items()):
        if load > LINK_UTIL * cap * (1 + 1e-6):
            bad.append(f"route {', '.join(routes)}: link {link} carries {load / 1e9:.2f} GB/s of KV, more "
                       f"than {LINK_UTIL:.0%} of its {cap / 1e9:g} GB/s")
    return bad
