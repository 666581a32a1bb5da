"""The independent verifier's LoRA and tenant checks (called from ``trimtab.gate.analytic.verify``).

Recomputed from the spec and the plan's routes, trusting nothing the plan states: every adapter a deployment
holds belongs to its base model and fits ``max_lora_rank``; ``max_loras`` / ``max_cpu_loras`` are consistent;
adapter routes go only to deployments holding the adapter and carry each adapter's traffic exactly once; the
workload routes agree with the adapter routes; no deployment serves two tenants that must not share (a
dedicated tenant shares with nobody, tenant-less traffic included).
"""
from __future__ import annotations

from trimtab.spec.lora import NO_TENANT

TOL = 1e-3


def verify_lora(plan, ir) -> list[str]:
    lo = getattr(ir, "lora", None)
    bad: list[str] = []
    deps = {d.name: d for d in plan.deployments}
    adapters = lo.adapters if lo is not None else {}
    for d in plan.deployments:
        if d.adapters and not d.max_loras:
            bad.append(f"deployment {d.name}: holds {len(d.adapters)} adapter(s) with max_loras 0 (LoRA "
                       "disabled)")
        if d.max_loras:
            # vLLM and SGLang take --enable-lora; TensorRT-LLM a lora_config in its extra options file
            if "--enable-lora" not in d.engine_args \
                    and not any("lora_config:" in t for t in d.engine_files.values()):
                bad.append(f"deployment {d.name}: max_loras {d.max_loras} without LoRA enabled in "
                           "engine_args")
            if d.max_cpu_loras < max(d.max_loras, len(d.adapters)):
                bad.append(f"deployment {d.name}: max_cpu_loras {d.max_cpu_loras} is below max_loras "
                           f"{d.max_loras} or the {len(d.adapters)} adapters it holds")
        for a in d.adapters:
            ad = adapters.get(a)
            if ad is None:
                bad.append(f"deployment {d.name}: adapter {a} is not in the spec")
            elif ad.model != d.model:
                bad.append(f"deployment {d.name}: adapter {a} is for {ad.model}, the deployment serves "
                           f"{d.model}")
            elif ad.rank > d.max_lora_rank:
                bad.append(f"deployment {d.name}: adapter {a} has rank {ad.rank} > max_lora_rank "
                           f"{d.max_lora_rank}")
    if lo is None:
        if plan.adapter_routes:
            bad.append("adapter_routes: the spec has no adapters")
        return bad
    # Adapter routes: to a deployment holding the adapter, shares summing to 1 per (workload, adapter).
    held = {d.name: set(d.adapters) for d in plan.deployments}
    got: dict[tuple[str, str], float] = {}
    per_dep: dict[tuple[str, str], float] = {}  # (workload, deployment) -> share of the workload's requests
    for r in plan.adapter_routes:
        wl = lo.workloads.get(r.workload)
        if wl is None:
            bad.append(f"adapter route {r.workload}/{r.adapter}: unknown workload")
            continue
        split = dict(wl.adapters)
        if r.adapter not in split:
            bad.append(f"adapter route {r.workload}/{r.adapter}: the workload's requests do not use adapter "
                       f"{r.adapter}")
            continue
        if r.deployment not in deps:
            bad.append(f"adapter route {r.workload}/{r.adapter}: unknown deployment {r.deployment}")
            continue
        if r.adapter not in held[r.deployment]:
            bad.append(f"adapter route {r.workload}/{r.adapter}: deployment {r.deployment} does not hold the "
                       "adapter")
        got[(r.workload, r.adapter)] = got.get((r.workload, r.adapter), 0.0) + r.share
        key = (r.workload, r.deployment)
        per_dep[key] = per_dep.get(key, 0.0) + r.share * split[r.adapter]
    served: dict[str, set[str]] = {}
    route_dep: dict[tuple[str, str], float] = {}
    for r in plan.routes:
        if r.deployment is None:
            continue
        key = (r.workload, r.deployment)
        route_dep[key] = route_dep.get(key, 0.0) + r.share
        if r.deployment in deps:
            wl = lo.workloads.get(r.workload)
            served.setdefault(r.deployment, set()).add(wl.tenant if wl else NO_TENANT)
    for name, wl in sorted(lo.workloads.items()):
        if all(a == "" for a, _ in wl.adapters):
            continue  # base-model traffic: workload routes alone
        for a, p in wl.adapters:
            if p <= 0:
                continue
            s = got.get((name, a), 0.0)
            if plan.goodput is None and abs(s - 1.0) > TOL:
                bad.append(f"adapter routing {name}: adapter {a} routes carry {s:.4f} of its requests, not 1")
        for key in sorted(set(route_dep) | {k for k in per_dep if k[0] == name}):
            if key[0] != name:
                continue
            if abs(route_dep.get(key, 0.0) - per_dep.get(key, 0.0)) > 10 * TOL:
                bad.append(f"adapter routing {name}: deployment {key[1]} gets {route_dep.get(key, 0.0):.4f} "
                           f"of the workload by its routes, {per_dep.get(key, 0.0):.4f} by its adapter "
                           "routes")
            d = deps.get(key[1])
            if d is not None and not d.max_loras and route_dep.get(key, 0.0) > 0:
                bad.append(f"route {name}: deployment {d.name} has LoRA disabled, the workload's requests "
                           "need adapters")
    # Tenant isolation, from the routes (not from what the plan states).
    for dname, ts in sorted(served.items()):
        tl = sorted(ts)
        for i, a in enumerate(tl):
            for b in tl[i + 1:]:
                if not lo.may_share(a, b):
                    why = "dedicated" if (a in lo.dedicated or b in lo.dedicated) else "must not share"
                    bad.append(f"isolation: deployment {dname} serves tenants {a or '(none)'} and "
                               f"{b or '(none)'} ({why})")
        stated = set(deps[dname].tenants)
        real = {t for t in ts if t != NO_TENANT}
        if deps[dname].tenants and stated != real:
            bad.append(f"deployment {dname}: states tenants {sorted(stated)}, its routes serve "
                       f"{sorted(real)}")
    return bad
