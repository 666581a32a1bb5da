"""Candidate deployments and their per-replica capacity at SLO (the planner's cost map).

Entry point: ``build_candidates(ir) -> CandidateSet``.

A candidate is one way to serve one workload: (workload, GPU type, TP, PP, token budget) with the model's
dtype, role ``unified``. Its capacity for each of the workload's length buckets is the highest per-replica
request rate at which the bucket still meets the workload's TTFT and TPOT SLOs at its percentile, including
queueing (``ReplicaModel.capacity_rps``). Candidates that cannot serve any bucket are pruned with a reason.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from compiler.cost.model import ReplicaModel, TrafficClass
from compiler.ir import GpuPoolIR, ProblemIR, WorkloadIR
from compiler.lengths import LengthBucket

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

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

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


def replica_model(ir: ProblemIR, model: str, gpu: str, tp: int, pp: int, dtype: str, max_num_seqs: int,
                  max_batched_tokens: int, lora: dict | None = None) -> ReplicaModel:
    """The one place a ``ReplicaModel`` is made from IR names (planner and check share it). ``lora``: keyword
    arguments of ``compiler.cost.lora.LoraReplicaModel`` (slots, rank, modules, swap_wait_s) for a LoRA replica."""
    pool = ir.gpu(gpu)
    if lora:
        from compiler.cost.lora import LoraReplicaModel
        return LoraReplicaModel(ir.models[model], pool.profile, ir.engine, tp, pp, dtype, max_num_seqs,
                                max_batched_tokens, **lora)
    return ReplicaModel(ir.models[model], pool.profile, ir.engine, tp, pp, dtype, max_num_seqs, max_batched_tokens)


def traffic_class(b: LengthBucket, rate_rps: float) -> TrafficClass:
    return TrafficClass(rate_rps, b.isl_mean, b.osl_mean, b.isl_tail, b.isl_cv2)


def candidate_id(workload: str, gpu: str, tp: int, pp: int, mbt: int) -> str:
    return f"{workload}-{gpu}-tp{tp}" + (f"-pp{pp}" if pp > 1 else "") + f"-t{mbt // 1024}k"


def _shapes(ir: ProblemIR, w: WorkloadIR, pool: GpuPoolIR):
    arch = ir.models[w.model]
    heads, kv = int(arch.num_attention_heads.value), int(arch.num_kv_heads.value)
    per_node = int(pool.profile.gpus_per_node.value)
    layers = int(arch.num_layers.value)
    weights_gib = arch.params_billion.value * 1e9 * (1 if w.dtype == "fp8" else 2) / 1024**3
    fits_in_node = weights_gib < ir.engine.gpu_memory_utilization.value * pool.profile.memory_gib.value * per_node
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


def build_candidates(ir: ProblemIR, jobs: int | None = None) -> CandidateSet:
    """``jobs``: processes (default ``TRIMTAB_JOBS`` or the CPUs; large specs only, see ``compiler.fanout``);
    the result is the same for any number."""
    from compiler.fanout import build_split

    split = build_split(ir, lambda sub: build_candidates(sub, jobs=1), jobs)
    if split is not None:
        return split
    cands: list[Candidate] = []
    pruned: list[Pruned] = []
    best: list[BucketBest] = []
    max_num_seqs = int(ir.engine.max_num_seqs.value)
    for w in ir.workloads:
        zero: dict[str, list[tuple[float, str, float, str]]] = {b.name: [] for b in w.buckets}
        longest = max(b.isl_max + b.osl_max for b in w.buckets)
        for pool in ir.gpus:
            fitted_once = False
            for cid0, tp, pp, why in _shapes(ir, w, pool):
                if why:
                    pruned.append(Pruned(cid0, why))
                    continue
                sibling: dict[str, float] = {}  # capacity per bucket at the previous token budget: a search guess
                for mbt in TOKEN_BUDGETS:
                    cid = candidate_id(w.name, pool.type, tp, pp, mbt)
                    rm = replica_model(ir, w.model, pool.type, tp, pp, w.dtype, max_num_seqs, mbt)
                    mem = rm.memory
                    if mem.kv_cache_tokens < longest:
                        pruned.append(Pruned(cid, f"memory: {mem.weights_gib_per_gpu:.1f} GiB of weights per GPU leave "
                                                  f"KV room for {mem.kv_cache_tokens} tokens, the longest request needs "
                                                  f"{longest:.0f}"))
                        continue
                    fitted_once = True
                    caps = []
                    for b in w.buckets:
                        cls = traffic_class(b, 0.0)
                        t0, d0 = rm.zero_load(cls)
                        zero[b.name].append((t0, f"{pool.type} tp{tp}" + (f" pp{pp}" if pp > 1 else ""), d0, cid))
                        cap = rm.capacity_rps(cls, w.slo.ttft_ms, w.slo.tpot_ms, w.slo.percentile,
                                              guess=sibling.get(b.name))
                        if cap > 0:
                            caps.append((b.name, cap))
                            sibling[b.name] = cap
                    if not caps:
                        pruned.append(Pruned(cid, "meets the SLO for no length bucket even at low load"))
                        continue
                    cands.append(Candidate(
                        id=cid, workload=w.name, model=w.model, gpu=pool.type, tp=tp, pp=pp, dtype=w.dtype,
                        max_num_seqs=max_num_seqs, max_batched_tokens=mbt, kv_cache_tokens=mem.kv_cache_tokens,
                        usd_per_hour=pool.usd_per_hour * tp * pp, capacity_rps=tuple(caps)))
            del fitted_once
        for b in w.buckets:
            z = zero[b.name]
            if z:
                t = min(z, key=lambda r: (r[0], r[3]))
                d = min(z, key=lambda r: (r[2], r[3]))
                best.append(BucketBest(w.name, b.name, t[0], t[1], d[2], d[1]))
    cands.sort(key=lambda c: c.id)
    pruned.sort(key=lambda p: p.id)
    from compiler.disagg import build_pd_candidates

    kept = tuple(_drop_dominated(cands, pruned))
    return CandidateSet(kept, tuple(pruned), tuple(best), build_pd_candidates(ir, kept))


def _drop_dominated(cands: list[Candidate], pruned: list[Pruned]) -> list[Candidate]:
    """Drop a candidate when another for the same workload costs no more per replica, uses no more GPUs
    and has at least its capacity on every bucket (strictly better somewhere, or an earlier id on ties)."""
    keep = []
    group: dict[tuple[str, str], list[Candidate]] = {}  # (workload, GPU type): the only ones compared
    for c in cands:
        group.setdefault((c.workload, c.gpu), []).append(c)
    for c in cands:
        dom = None
        for o in group[(c.workload, c.gpu)]:
            if o is c or o.workload != c.workload or o.usd_per_hour > c.usd_per_hour or o.gpus > c.gpus:
                continue
            if o.gpu != c.gpu:
                continue  # different pools have separate inventories: never dominated across GPU types
            if all(o.capacity(b) >= cap for b, cap in c.capacity_rps):
                strictly = (o.usd_per_hour < c.usd_per_hour or o.gpus < c.gpus
                            or any(o.capacity(b) > cap for b, cap in c.capacity_rps))
                if strictly or o.id < c.id:
                    dom = o
                    break
        if dom is None:
            keep.append(c)
        else:
            pruned.append(Pruned(c.id, f"dominated by {dom.id} (no more cost, at least its capacity on every bucket)"))
    pruned.sort(key=lambda p: p.id)
    return keep
