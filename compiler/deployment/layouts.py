"""Layouts of a mixture-of-experts model on a GPU pool: tensor x attention-data x expert parallelism (and the
pipeline shapes of ``trimtab.deployment.shape.shapes``) as the candidates stage enumerates them (docs/moe.md).

Entry point: ``layouts(ir, w, pool)`` yields ``(candidate id, tp, pp, dp, ep, why not)`` (``why`` empty for a
shape worth sizing): every ``shapes`` entry with dp = ep = 1 (TP shards the experts, as for a dense model),
and for an MoE model also
  * tp x 1 x ep=tp: the experts divided among the TP ranks (vLLM --enable-expert-parallel with DP 1);
  * tp x dp x ep=tp x dp, dp > 1: attention data parallelism with the experts divided among all GPUs of the
    replica (vLLM --data-parallel-size with --enable-expert-parallel; SGLang --enable-dp-attention --ep-size).
An expert group stays inside one NVLink domain (``pool.tp_limit``) unless one node cannot hold the model's
weights (``fits_one_node``): then also groups of 2 and 4 whole domains (tp x dp = 2 or 4 x the domain, each
domain holding dp / k ranks; ``trimtab.deployment.shape.stage_parts``), whose all-to-all crosses the NICs
every MoE
layer (the cost model's off-node share; docs/moe.md). Where a node holds the model, that costs more than it
saves.
"""
from __future__ import annotations

from trimtab.deployment.shape import TP_OPTIONS, candidate_id, fits_one_node, shapes
from trimtab.ir.model import GpuPoolIR, ProblemIR, WorkloadIR

DP_OPTIONS = (2, 4, 8)
CROSS_NODE_DOMAINS = (2, 4)  # an expert group across nodes spans this many NVLink domains


def layouts(ir: ProblemIR, w: WorkloadIR, pool: GpuPoolIR):
    for cid, tp, pp, why in shapes(ir, w, pool):
        yield cid, tp, pp, 1, 1, why
    arch = ir.models[w.model]
    experts = int(arch.num_experts.value)
    if experts <= 1:
        return
    if "fp4" in (w.dtype, w.kv_dtype) and pool.profile.fp4_tflops is None:
        return  # shapes gave the reason
    heads, kv = int(arch.num_attention_heads.value), int(arch.num_kv_heads.value)
    # Expert groups of 2 or 4 whole NVLink domains, only where one node cannot hold the weights (as for
    # pipeline stages across nodes): the all-to-all then crosses the NICs every MoE layer.
    cross = () if fits_one_node(ir, w, pool) else tuple(k * pool.tp_limit for k in CROSS_NODE_DOMAINS)
    for tp in TP_OPTIONS:
        if heads % tp or (kv % tp and tp % kv) or tp > pool.tp_limit:
            continue  # reported by shapes
        for dp in dict.fromkeys((1,) + DP_OPTIONS + tuple(g // tp for g in cross if g % tp == 0)):
            g = tp * dp
            if g == 1:
                continue
            cid = candidate_id(w.name, pool.type, tp, 1, 2048, dp, g)
            if g > pool.tp_limit and g not in cross:
                continue  # the expert group stays inside one NVLink domain
            if g > experts:
                yield cid, tp, 1, dp, g, f"ep{g} exceeds {experts} experts"
                continue
            if g > pool.count:
                yield cid, tp, 1, dp, g, f"needs {g} GPUs, the spec has {pool.count} {pool.type}"
                continue
            yield cid, tp, 1, dp, g, ""
