"""Every ``ReplicaModel`` the planner, ``check`` and the simulator use is made here from IR names, with the
traffic classes, prefix caches and KV tiers that go with it: the cost model's one entry point from the IR.
"""
from __future__ import annotations

from dataclasses import replace

from trimtab.cost.model import GIB, KvTier, ReplicaModel, TrafficClass
from trimtab.ir.model import ProblemIR, WorkloadIR
from trimtab.spec.lengths import LengthBucket
from trimtab.cost.lora import LoraReplicaModel


def replica_model(ir: ProblemIR, model: str, gpu: str, tp: int, pp: int, dtype: str, max_num_seqs: int,
                  max_batched_tokens: int, lora: dict | None = None, kv_offload_gib: float = 0.0,
                  kv_borrow_gib: float = 0.0, dp: int = 1, ep: int = 1,
                  kv_dtype: str | None = None) -> ReplicaModel:
    """The one place a ``ReplicaModel`` is made from IR names (planner and check share it). ``lora``: keyword
    arguments of ``trimtab.cost.lora.LoraReplicaModel`` (slots, rank, modules, swap_wait_s) for a LoRA
    replica. ``kv_offload_gib`` / ``kv_borrow_gib``: a KV tier of that many GiB per replica (``kv_tier``):
    host memory for the prefix cache's evicted blocks (``prefix_tier``), or, with ``kv_tiers:
    experimental-live``, live KV beyond HBM (offload or borrowing; docs/kv-tiers.md). ``dp`` / ``ep``: a
    mixture-of-experts layout (attention data-parallel ranks, expert-parallel degree; docs/moe.md), without
    tiers or LoRA. ``kv_dtype``: the KV cache precision when it is not the one ``dtype`` implies (an fp4 KV
    cache, ``WorkloadIR.kv_dtype``)."""
    pool = ir.gpu(gpu)
    if dp > 1 or ep > 1:
        return ReplicaModel(ir.models[model], pool.profile, ir.engine, tp, pp, dtype, max_num_seqs,
                            max_batched_tokens, kv_dtype, dp=dp, ep=ep)
    if kv_offload_gib > 0 and not live_tiers(ir):
        rm = ReplicaModel(ir.models[model], pool.profile, ir.engine, tp, pp, dtype, max_num_seqs,
                          max_batched_tokens, kv_dtype)
        return ReplicaModel(ir.models[model], pool.profile, ir.engine, tp, pp, dtype, max_num_seqs,
                            max_batched_tokens, kv_dtype,
                            prefix_tier=kv_tier(ir, gpu, rm, kv_offload_gib, 0.0, "prefix"))
    if kv_offload_gib > 0 or kv_borrow_gib > 0:
        rm = ReplicaModel(ir.models[model], pool.profile, ir.engine, tp, pp, dtype, max_num_seqs,
                          max_batched_tokens, kv_dtype)
        return ReplicaModel(ir.models[model], pool.profile, ir.engine, tp, pp, dtype, max_num_seqs,
                            max_batched_tokens, kv_dtype,
                            kv_tier=kv_tier(ir, gpu, rm, kv_offload_gib, kv_borrow_gib))
    if lora:
        return LoraReplicaModel(ir.models[model], pool.profile, ir.engine, tp, pp, dtype, max_num_seqs,
                                max_batched_tokens, kv_dtype, **lora)
    return ReplicaModel(ir.models[model], pool.profile, ir.engine, tp, pp, dtype, max_num_seqs,
                        max_batched_tokens, kv_dtype)


SHARED_LIMIT = 4096  # plain replica models ``shared_replica_model`` keeps (specgen's target spec 2: 666)
_SHARED: dict[tuple, tuple] = {}  # arguments -> (model, GPU and engine profiles it was made from, the model)


def shared_replica_model(ir: ProblemIR, model: str, gpu: str, tp: int, pp: int, dtype: str, max_num_seqs: int,
                         max_batched_tokens: int, dp: int = 1, ep: int = 1,
                         kv_dtype: str | None = None) -> ReplicaModel:
    """``replica_model`` of a plain replica (no KV tier, no adapters), one object per arguments and profiles
    in this process. Why: candidate building makes a shape's model for its capacities, again for its P/D sides
    and their cost floor, and again for every workload of the same model (a fan-out worker builds many): on
    specgen's target spec 2, 21,000 models of which 666 differ, each made and its step terms folded
    (``ReplicaModel._step``) anew. The model is the same whoever asks: its caches (memory fit, step terms,
    prefix cache) are functions of its inputs. Read-only: whatever changes a model (``lend``) makes its own
    with ``replica_model``."""
    key = (model, gpu, tp, pp, dtype, max_num_seqs, max_batched_tokens, dp, ep, kv_dtype)
    made = _SHARED.get(key)
    prof, pool, engine = ir.models[model], ir.gpu(gpu).profile, ir.engine
    if made is not None and made[0] is prof and made[1] is pool and made[2] is engine:
        return made[3]
    if len(_SHARED) >= SHARED_LIMIT:
        _SHARED.clear()
    rm = replica_model(ir, model, gpu, tp, pp, dtype, max_num_seqs, max_batched_tokens, dp=dp, ep=ep,
                       kv_dtype=kv_dtype)
    _SHARED[key] = (prof, pool, engine, rm)
    return rm


def lend(rm: ReplicaModel, lent_gib: float) -> ReplicaModel:
    """``rm`` with its HBM KV reduced by the ``lent_gib`` GiB per replica it lends to instances on its node
    (docs/kv-tiers.md); ``rm`` itself when it lends none."""
    if lent_gib <= 0:
        return rm
    mem = rm.memory
    lent = int(lent_gib * GIB / (rm.tp * rm.pp) / mem.kv_bytes_per_token_per_gpu + 0.5)
    rm.__dict__["memory"] = replace(mem, kv_cache_tokens=max(mem.kv_cache_tokens - lent, 0))
    rm.__dict__.pop("kv_capacity_tokens", None)
    return rm


def live_tiers(ir: ProblemIR) -> bool:
    """Whether the spec's KV tiers hold live KV (``kv_tiers: experimental-live``: offload and borrowing of
    running requests' KV, realised by no engine flag) rather than the prefix cache's host tier
    (docs/kv-tiers.md)."""
    return getattr(ir, "kv_tiers", "off") == "experimental-live"


def traffic_class(b: LengthBucket, rate_rps: float, w: WorkloadIR | None = None,
                  rm: ReplicaModel | None = None) -> TrafficClass:
    """The cost model's class for bucket ``b`` at a per-replica rate; with the workload ``w`` and the replica
    ``rm``, its prefix reuse (``prefix_hits``): cached tokens per request (of which from the host tier) and
    the replica's reserve."""
    if w is None or rm is None or not w.prefix_hit_rate:
        return TrafficClass(rate_rps, b.isl_mean, b.osl_mean, b.isl_tail, b.isl_cv2, osl_points=b.osl_points)
    reserved, hbm, hit = prefix_hits(w, rm)
    return TrafficClass(rate_rps, b.isl_mean, b.osl_mean, b.isl_tail, b.isl_cv2, hit * b.isl_mean,
                        float(reserved), b.osl_points, (hit - hbm) * b.isl_mean)


# Shares of min(working set, spare HBM KV) tried for the prefix cache
PREFIX_RESERVE_SHARES = (1.0, 0.5, 0.25, 0.125)


def prefix_hit(w: WorkloadIR, tokens: float) -> float:
    """Share of ``w``'s input tokens a prefix cache of ``tokens`` serves: the trace's measured LRU curve
    (linear between its sizes, from 0 at an empty cache), else LRU under uniform popularity, the declared hit
    rate x the share of the working set held (docs/prefix-caching.md)."""
    if not w.prefix_hit_rate or tokens <= 0:
        return 0.0
    if tokens >= w.prefix_working_set:
        return w.prefix_hit_rate
    if not w.prefix_curve:
        return w.prefix_hit_rate * tokens / w.prefix_working_set
    x0, y0 = 0.0, 0.0
    for x1, y1 in w.prefix_curve:
        if tokens <= x1:
            return y0 + (y1 - y0) * (tokens - x0) / (x1 - x0) if x1 > x0 else y1
        x0, y0 = x1, y1
    return w.prefix_hit_rate


def prefix_cache(w: WorkloadIR, rm: ReplicaModel) -> tuple[int, float]:
    """(KV tokens reserved for ``w``'s prefix cache on one replica of ``rm``, hit rate it gets, HBM and host
    tier together): ``prefix_hits`` without the split."""
    reserved, _, hit = prefix_hits(w, rm)
    return reserved, hit


def host_tier_tokens(rm: ReplicaModel) -> int:
    """KV tokens the replica's host-memory prefix tier holds (0 without one)."""
    tier = getattr(rm, "prefix_tier", None)
    return tier.tokens if tier is not None else 0


def prefix_hits(w: WorkloadIR, rm: ReplicaModel) -> tuple[int, float, float]:
    """(KV tokens reserved for ``w``'s prefix cache on one replica of ``rm``, hit rate of that HBM cache, hit
    rate with the host tier). The cache can take what the HBM KV spares after the workload's longest request,
    at most the working set; of the shares ``PREFIX_RESERVE_SHARES`` of that, the one with the highest
    capacity for the workload's mean request at its SLO (a bigger cache saves more prefill but leaves less KV
    for running requests). Host tier (``rm.prefix_tier``, docs/kv-tiers.md): every computed block is also
    stored in host memory (vLLM's offloading connector writes through), so the two levels hit like one LRU of
    max(reserve, host tokens); the hits beyond the HBM cache's are reloaded over PCIe. Once per replica
    model."""
    memo = rm.__dict__.setdefault("_prefix_cache", {})
    key = (w.name, w.prefix_hit_rate, w.prefix_working_set, w.prefix_curve, w.buckets, w.slo)
    if key in memo:
        return memo[key]
    longest = max(b.isl_max + b.osl_max for b in w.buckets)
    full = min(w.prefix_working_set, max(rm.memory.kv_cache_tokens - longest, 0))
    host = host_tier_tokens(rm)
    best = (0, 0.0, 0.0)
    if full > 0:
        isl = sum(b.prob * b.isl_mean for b in w.buckets)
        osl = sum(b.prob * b.osl_mean for b in w.buckets)
        best_cap = -1.0
        for share in PREFIX_RESERVE_SHARES:
            tokens = int(full * share)
            hbm = prefix_hit(w, tokens)
            hit = prefix_hit(w, max(tokens, host)) if host else hbm
            cap = rm.capacity_rps(TrafficClass(0.0, isl, osl, None, 0.0, hit * isl, float(tokens), (),
                                               (hit - hbm) * isl),
                                  w.slo.ttft_ms, w.slo.tpot_ms, w.slo.percentile)
            if cap > best_cap * (1 + 1e-9):  # ties: the larger cache (tried first)
                best, best_cap = (tokens, hbm, hit), cap
    memo[key] = best
    return best


HOST_KV_SHARE = 0.5  # share of a node's CPU memory the KV offload tier may use (assumption, docs/kv-tiers.md)


def kv_tier(ir: ProblemIR, gpu: str, rm: ReplicaModel, offload_gib: float, borrow_gib: float,
            kind: str | None = None) -> KvTier:
    """The ``KvTier`` of a replica of ``rm``'s shape with ``offload_gib`` of host memory or ``borrow_gib`` of
    borrowed HBM (GiB per replica, one tier). Offload runs over each GPU's PCIe link (spec nodes[].pcie_gbps,
    else the GPU profile's); borrowing over NVLink (the profile's link bandwidth), or PCIe where the GPU has
    none. ``kind``: ``prefix`` for the prefix cache's host tier; default live ``offload`` / ``borrow``."""
    if offload_gib > 0 and borrow_gib > 0:
        raise ValueError("a replica has one KV tier: offload or borrow, not both")
    pool = ir.gpu(gpu)
    prof = pool.profile
    gib = offload_gib or borrow_gib
    per_gpu_bytes = rm.memory.kv_bytes_per_token_per_gpu
    tokens = int(gib * GIB / (rm.tp * rm.pp) // per_gpu_bytes)
    pcie = pool.pcie_gbps or (prof.pcie_gbps.value if prof.pcie_gbps is not None else 0.0)
    if offload_gib > 0:
        bw = pcie
    else:
        bw = (prof.link_bandwidth_gbps.value if prof.interconnect != "pcie"
              else (pcie or prof.link_bandwidth_gbps.value))
    if not bw > 0:
        raise ValueError(f"{gpu}: no PCIe bandwidth known for a KV offload tier; give nodes[].pcie_gbps")
    return KvTier(kind or ("offload" if offload_gib > 0 else "borrow"), tokens, float(bw))


def tier_gib(rm: ReplicaModel, tokens: float) -> float:
    """GiB per replica of ``tokens`` KV tokens of ``rm``'s shape (all its GPUs)."""
    return tokens * rm.memory.kv_bytes_per_token_per_gpu * rm.tp * rm.pp / GIB
