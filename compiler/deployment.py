"""What a deployment is, for every stage: the shapes a model may take on a GPU pool, the candidate records the
planners build and solve over, and the views assessment takes of a deployment and a route (from a candidate or
from a plan file). Below candidates, disaggregation, formulation and assessment, so each imports it and none of
them imports another to get a record.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from compiler.ir import GpuPoolIR, ProblemIR, WorkloadIR

TP_OPTIONS = (1, 2, 4, 8)


PP_OPTIONS = (1, 2, 4)


TOKEN_BUDGETS = (2048, 8192)  # max_num_batched_tokens: smaller keeps TPOT flat, larger shortens long prefills


@dataclass(frozen=True, slots=True)
class Candidate:
    id: str  # also the deployment name if chosen
    workload: str
    model: str
    gpu: str
    tp: int
    pp: int
    dtype: str
    max_num_seqs: int
    max_batched_tokens: int
    kv_cache_tokens: int
    usd_per_hour: float  # per replica
    capacity_rps: tuple[tuple[str, float], ...]  # (bucket name, per-replica rate at SLO), only > 0
    role: str = "unified"  # or "prefill" / "decode" (compiler.disagg)
    # KV tiers (docs/kv-tiers.md), GiB per replica: host memory it offloads KV to, spare HBM KV it borrows from
    # other instances on its node, and spare HBM KV it can lend at its planned operating point (HBM-only shapes)
    kv_offload_gib: float = 0.0
    kv_borrow_gib: float = 0.0
    kv_spare_gib: float = 0.0
    # Mixture-of-experts layouts (compiler/layouts.py): attention data-parallel ranks, expert-parallel degree
    dp: int = 1
    ep: int = 1

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    def capacity(self, bucket: str) -> float:
        return dict(self.capacity_rps).get(bucket, 0.0)


@dataclass(frozen=True, slots=True)
class Pruned:
    id: str
    reason: str


@dataclass(frozen=True, slots=True)
class BucketBest:
    """Best zero-load latency any candidate reaches for a bucket (for infeasibility messages)."""

    workload: str
    bucket: str
    ttft_ms: float
    ttft_by: str
    tpot_ms: float
    tpot_by: str


@dataclass(frozen=True)
class CandidateSet:
    candidates: tuple[Candidate, ...]
    pruned: tuple[Pruned, ...]
    best: tuple[BucketBest, ...] = field(default=())
    disagg: tuple[Candidate, ...] = field(default=())  # prefill and decode candidates (compiler.disagg)

    def by_id(self) -> dict[str, Candidate]:
        return {c.id: c for c in self.candidates}


def candidate_id(workload: str, gpu: str, tp: int, pp: int, mbt: int, dp: int = 1, ep: int = 1) -> str:
    return (f"{workload}-{gpu}-tp{tp}" + (f"-pp{pp}" if pp > 1 else "") + (f"-dp{dp}" if dp > 1 else "")
            + (f"-ep{ep}" if ep > 1 else "") + f"-t{mbt // 1024}k")


def shapes(ir: ProblemIR, w: WorkloadIR, pool: GpuPoolIR):
    arch = ir.models[w.model]
    heads, kv = int(arch.num_attention_heads.value), int(arch.num_kv_heads.value)
    per_node = int(pool.profile.gpus_per_node.value)
    layers = int(arch.num_layers.value)
    weights_gib = arch.params_billion.value * 1e9 * {"fp8": 1.0, "fp4": 0.5625}.get(w.dtype, 2.0) / 1024**3
    fits_in_node = weights_gib < ir.engine.gpu_memory_utilization.value * pool.profile.memory_gib.value * per_node
    if w.dtype == "fp4" and pool.profile.fp4_tflops is None:  # docs/moe.md: FP4 weights need FP4 tensor cores
        yield (candidate_id(w.name, pool.type, 1, 1, TOKEN_BUDGETS[0]), 1, 1,
               f"{pool.type} has no FP4 tensor cores (no fp4_tflops in its profile): dtype fp4 needs a GPU with them")
        return
    for tp in TP_OPTIONS:
        for pp in PP_OPTIONS:
            cid = candidate_id(w.name, pool.type, tp, pp, TOKEN_BUDGETS[0])
            if tp > pool.tp_limit:
                continue  # TP groups stay inside one NVLink domain (one node unless the spec says)
            if heads % tp or (kv % tp and tp % kv):
                yield cid, tp, pp, f"tp{tp} does not divide {heads} attention heads / {kv} KV heads"
                continue
            if pp > 1 and (tp < per_node or fits_in_node):
                continue  # pipeline across nodes only when one node's memory cannot hold the model
            if layers % pp:
                yield cid, tp, pp, f"pp{pp} does not divide {layers} layers"
                continue
            if tp * pp > pool.count:
                yield cid, tp, pp, f"needs {tp * pp} GPUs, the spec has {pool.count} {pool.type}"
                continue
            yield cid, tp, pp, ""


@dataclass(frozen=True, slots=True)
class DeploymentSpecView:
    """What assessment needs of a deployment (from a candidate or from a plan file)."""

    name: str
    model: str
    gpu: str
    tp: int
    pp: int
    dtype: str
    max_num_seqs: int
    max_batched_tokens: int
    replicas: int
    role: str = "unified"
    lora: tuple = ()  # (max_loras, max_lora_rank, adapters held) of a LoRA deployment (compiler.lora.model)
    kv_offload_gib: float = 0.0  # KV tier per replica (docs/kv-tiers.md)
    kv_borrow_gib: float = 0.0
    colocated_with: str = ""  # co-located P/D pair: the other side (hand-off over NVLink, compiler.disagg)
    dp: int = 1  # attention data-parallel ranks (MoE layouts)
    ep: int = 1  # expert-parallel degree


@dataclass(frozen=True, slots=True)
class RouteView:
    workload: str
    bucket: str
    deployment: str  # "" for a prefill/decode pair
    share: float  # of the workload's requests
    prefill: str = ""
    decode: str = ""


@dataclass(frozen=True, slots=True)
class DeploymentLoad:
    name: str
    rate_rps_per_replica: float
    utilization: float
    decode_batch: float
    kv_tokens_used: float
    kv_cache_tokens: int
    tpot_ms: float
    stable: bool
    reason: str
    prefix_cache_tokens: int = 0  # KV tokens each replica keeps for prefix reuse (docs/prefix-caching.md)
