"""A speed-of-light guard: no deployment may promise more tokens per second than physics allows.

The cost model is fitted and can be wrong; this bound uses nothing of it, only spec-sheet numbers (the GPU's
peak HBM bandwidth and peak dense FLOP/s, the model's parameter count and KV geometry), so a plan that breaks
it is a bug in trimtab, not a property of the traffic (``check`` fails; ``plan`` re-solves a plan over it
within it, ``trimtab.planning.rounds.derate_breaches``, and raises ``InternalError`` for one still over it
when its rounds run out).

Per replica of a deployment that decodes (unified or decode role), with the load-weighted mean prompt ``i``
and output ``o`` of the requests routed to it and the batch ``B`` its KV cache holds
(``min(max_batch_size, kv_cache_tokens / (i + o))``):

    step   >= (active weight bytes + B (i + o/2) KV bytes per token) / (HBM bandwidth x GPUs)
    request >= o step / B  +  2 x active params x i / (peak FLOP/s x GPUs)
                (the prefill term: unified only, and not where prefixes are reused)
    output tokens/s <= o / request x B / B  =  o / request

A prefill deployment's prompt tokens/s are at most peak FLOP/s x GPUs / (2 x active params). Every term is a
lower bound on time (all weights and all live KV read once per step at peak bandwidth; prefill at peak
FLOP/s, attention FLOPs ignored), so the rates are upper bounds. Mixture-of-experts models count their active
parameters only (at a large batch more experts are read: still a lower bound on time); a replica's GPUs are
tp x pp x dp; MLA models' KV is the latent (kv_lora_rank + qk_rope_head_dim per layer); fp4 counts 4 bits a
weight (scales left out) at the GPU's fp4 peak.
"""
from __future__ import annotations

from dataclasses import dataclass

# fp4: the 4-bit values alone (scales left out: a lower bound)
BYTES = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5, "fp32": 4.0}


@dataclass(frozen=True)
class Breach:
    deployment: str
    promised: float  # tokens/s the plan routes to it
    bound: float  # tokens/s physics allows
    unit: str  # "output" or "prompt"

    def line(self) -> str:
        return (f"deployment {self.deployment}: promises {self.promised:,.0f} {self.unit} tokens/s, above "
                f"its speed-of-light bound of {self.bound:,.0f} (peak HBM bandwidth and FLOP/s of its GPUs)")


def _kv_bytes_per_token(model, dtype: str) -> float:
    # MLA: one latent of kv_lora_rank + qk_rope_head_dim per token and layer
    if model.kv_lora_rank is not None:
        rope = model.qk_rope_head_dim.value if model.qk_rope_head_dim is not None else 0.0
        return model.num_layers.value * (model.kv_lora_rank.value + rope) * BYTES[dtype]
    return (2 * model.num_layers.value * model.num_kv_heads.value * model.head_dim.value * BYTES[dtype])


def _peak_flops(gpu, dtype: str) -> float:
    q = {"fp8": gpu.fp8_tflops, "fp4": gpu.fp4_tflops, "fp32": gpu.fp32_tflops}.get(dtype) or gpu.bf16_tflops
    return q.value * 1e12


def decode_bound(model, gpu, gpus: int, dtype: str, batch: float, isl: float, osl: float,
                 prefill: bool, kv_dtype: str | None = None) -> float:
    """Output tokens/s one replica can deliver at most (see the module docstring); ``kv_dtype``: the KV
    cache's precision where the plan sets it apart from ``dtype``."""
    params = model.active_params_billion.value * 1e9
    step = ((params * BYTES[dtype] + batch * (isl + osl / 2) * _kv_bytes_per_token(model, kv_dtype or dtype))
            / (gpu.hbm_bandwidth_gbps.value * 1e9 * gpus))
    flops = _peak_flops(gpu, dtype) * gpus
    per_request = osl * step / batch + (2 * params * isl / flops if prefill else 0.0)
    return osl / per_request


def prompt_bound(model, gpu, gpus: int, dtype: str) -> float:
    flops = _peak_flops(gpu, dtype) * gpus
    return flops / (2 * model.active_params_billion.value * 1e9)


def breaches(plan, ir) -> list[Breach]:
    """Deployments of ``plan`` whose routed traffic exceeds their speed-of-light bound."""
    load: dict[str, list[float]] = {}  # deployment -> [rps, prompt tokens/s, output tokens/s]
    prefix: set[str] = set()
    for r in plan.routes:
        w = ir.workload(r.workload)
        b = w.bucket(r.bucket) if w is not None else None
        if b is None:
            continue
        rps = w.rate_rps * r.share
        for name, toks in ((r.deployment, (b.isl_mean, b.osl_mean)), (r.prefill, (b.isl_mean, 0.0)),
                           (r.decode, (b.isl_mean, b.osl_mean))):
            if name:
                acc = load.setdefault(name, [0.0, 0.0, 0.0])
                acc[0] += rps
                acc[1] += rps * toks[0]
                acc[2] += rps * toks[1]
                if w.prefix_hit_rate:
                    prefix.add(name)
    out = []
    for d in plan.deployments:
        if d.name not in load or d.model not in ir.models or ir.gpu(d.gpu) is None or d.replicas <= 0:
            continue
        rps, ptoks, otoks = load[d.name]
        model, gpu = ir.models[d.model], ir.gpu(d.gpu).profile
        gpus = d.gpus_per_replica
        if d.role == "prefill":
            bound = d.replicas * prompt_bound(model, gpu, gpus, d.dtype)
            if ptoks > bound:
                out.append(Breach(d.name, ptoks, bound, "prompt"))
            continue
        if otoks <= 0:
            continue
        isl, osl = ptoks / rps, otoks / rps
        kv = d.kv_cache_tokens
        # KV beyond HBM holds more requests (read here at HBM speed: still an upper bound)
        if d.kv is not None:
            kv += ((d.kv.offload_gib + d.kv.borrowed_gib) * 2**30
                   / _kv_bytes_per_token(model, d.kv_dtype or d.dtype))
        batch = max(1.0, min(float(d.max_batch_size), kv / (isl + osl)))
        bound = d.replicas * decode_bound(model, gpu, gpus, d.dtype, batch, isl, osl,
                                          prefill=d.role == "unified" and d.name not in prefix,
                                          kv_dtype=d.kv_dtype)
        if otoks > bound:
            out.append(Breach(d.name, otoks, bound, "output"))
    return out
