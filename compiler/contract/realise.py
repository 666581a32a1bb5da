"""Plan -> the engine's real launch of every deployment (``engine_args``, ``command``, ``context_tokens``).

Entry points: ``realise(plan, ir) -> Plan`` (the last step of every planner, after placement, because a
replica spanning nodes needs a multi-node launch) and ``deployment_facts(plan, ir)`` (the engine-neutral facts
the emitters and ``trimtab emit`` read). The numbers come from the plan and the cost model's memory fit
(``trimtab.cost.factory.replica_model``); the emitters only spell them in their engine's names.
"""
from __future__ import annotations

import math
from dataclasses import replace

from trimtab.engines import sglang, trtllm, vllm
from trimtab.engines.base import DeploymentFacts, Launch, ModelIdentity, engine_table
from trimtab.contract.schema import EngineInfo
from trimtab.deployment.shape import DeploymentSpecView, replica_model_of

# Explicit, not registered at import time: a test enumerates it against profiles/engines/*.yaml.
EMITTERS = {"vllm": vllm.launch, "vllm-cpu": vllm.launch, "sglang": sglang.launch, "trt-llm": trtllm.launch}
GIB = 1024 ** 3


def plan_routes(plan) -> list:
    """Every route of ``plan``: its own and, with a schedule (docs/online.md), each window's. A deployment of
    a schedule may serve only in some windows, routed there and nowhere in the plan's own routes."""
    sched = getattr(plan, "schedule", None)
    return list(plan.routes) + [r for w in (sched.windows if sched is not None else ()) for r in w.routes]


def routed_context(plan, name: str) -> int:
    """Largest input_tokens_max + output_tokens_max over the buckets routed to deployment ``name`` in any
    route of the plan (``plan_routes``; 0: none)."""
    buckets = {(w, b.name): b for w, bs in plan.buckets.items() for b in bs}
    best = 0
    for r in plan_routes(plan):
        if name in (r.deployment, r.prefill, r.decode):
            b = buckets.get((r.workload, r.bucket))
            if b is not None:
                best = max(best, b.input_tokens_max + b.output_tokens_max)
    return best


def _nodes_per_replica(d) -> int:
    nodes: dict[int, set[str]] = {}
    for p in d.placement:
        nodes.setdefault(p.replica, set()).add(p.node)
    return max((len(v) for v in nodes.values()), default=1)


def live_kv_summary(kv) -> str:
    parts = [f"{kv.offload_gib:g} GiB of running requests' KV in host memory" if kv.offload_gib > 0 else "",
             f"{kv.borrowed_gib:g} GiB borrowed from "
             f"{', '.join(kv.borrowed_from)}" if kv.borrowed_gib > 0 else "",
             f"lends {kv.lent_gib:g} GiB of its HBM KV" if kv.lent_gib > 0 else ""]
    return "; ".join(p for p in parts if p)


def deployment_facts(plan, ir) -> list[tuple[DeploymentFacts, list[str]]]:
    """Per deployment (plan order): its facts and the warnings they raise (a routed request longer than the
    engine will admit)."""
    ids = getattr(ir, "identities", None) or {}
    out = []
    for d in plan.deployments:
        warns: list[str] = []
        window = int(ir.models[d.model].max_context_tokens.value)
        routed = routed_context(plan, d.name)
        # a request lives on one attention DP rank (MoE layouts)
        rank_kv = d.kv_cache_tokens // d.data_parallel
        ctx = min(routed or window, window, rank_kv)
        live = d.kv is not None and d.kv.live  # experimental live KV tier: no engine flag realises it
        if live:
            cut = (f"; routed requests reach {routed} tokens, its command admits {ctx} (the HBM KV)"
                   if routed > ctx else "")
            warns.append(f"experimental: {d.name} plans live KV beyond HBM (defaults.kv_tiers: "
                         f"experimental-live: {live_kv_summary(d.kv)}), which no engine flag realises{cut}; "
                         "trimtab emit refuses the plan unless --allow-experimental")
        elif routed > ctx:
            warns.append(f"{d.name}: the engine admits {ctx} tokens per request (its KV cache holds "
                         f"{rank_kv}); routed requests reach {routed}")
        shape = DeploymentSpecView.of_plan(d)
        rm = replica_model_of(ir, replace(shape, kv_lent_gib=0.0))
        mem = rm.memory
        # HBM left after weights and workspace: what TensorRT-LLM's share is of
        free = (ir.gpu(d.gpu).profile.memory_gib.value - mem.weights_gib_per_gpu - mem.activation_gib_per_gpu
                - mem.reserve_gib_per_gpu)
        planned = rank_kv * mem.kv_bytes_per_token_per_gpu / GIB  # each GPU holds its rank's tokens' KV
        frac = math.floor(1000 * planned / free) / 1000 if free > 0 else 0.0
        nodes = _nodes_per_replica(d)
        out.append((DeploymentFacts(
            shape=shape, model=ids.get(d.model) or ModelIdentity(d.model, d.model, "main", d.model),
            context_tokens=ctx, kv_cache_tokens=d.kv_cache_tokens,
            memory_fraction=ir.engine.gpu_memory_utilization.value, kv_free_fraction=min(frac, 1.0),
            prefix_caching=d.prefix_cache_tokens > 0, live_kv=live, adapters=tuple(d.adapters),
            max_cpu_loras=d.max_cpu_loras, nodes_per_replica=nodes,
            gpus_per_node=d.gpus_per_replica // nodes), warns))
    return out


def launches(plan, ir) -> list[tuple[DeploymentFacts, Launch, list[str]]]:
    emit = EMITTERS[ir.engine.name]
    out = []
    for f, w in deployment_facts(plan, ir):
        ln = emit(f)
        out.append((f, ln, w + list(ln.warnings)))
    return out


def realise(plan, ir):
    """The plan with ``engine`` set and every deployment's ``engine_args``, ``command``, ``worker_command``,
    ``engine_files`` and ``context_tokens`` filled for the spec's engine (``defaults.engine``)."""
    deps, warnings = [], list(plan.warnings)
    for d, (f, ln, w) in zip(plan.deployments, launches(plan, ir)):
        deps.append(d.model_copy(update={
            "engine_args": list(ln.engine_args), "command": list(ln.command),
            "worker_command": list(ln.worker_command), "engine_files": dict(sorted(ln.files.items())),
            "context_tokens": f.context_tokens}))
        warnings += [x for x in w if x not in warnings]
    info = EngineInfo(name=ir.engine.name, version=str(engine_table(ir.engine.name)["version"]))
    return plan.model_copy(update={"deployments": deps, "engine": info, "warnings": warnings})
