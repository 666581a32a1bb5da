"""Candidate deployments and their per-replica capacity at SLO (the planner's cost map).

Entry point: ``build_candidates(ir) -> CandidateSet``.

A candidate is one way to serve one workload: (workload, GPU type, TP, PP, token budget) with the model's
dtype, role ``unified``. Its capacity for each of the workload's length buckets is the highest per-replica
request rate at which the bucket still meets the workload's TTFT and TPOT SLOs at its percentile, including
queueing (``ReplicaModel.capacity_rps``). Candidates that cannot serve any bucket are pruned with a reason.

KV tiers (``defaults.kv_tiers``, docs/kv-tiers.md): where a shape does not fit the longest request or its
capacity is bound by HBM KV, variants with a CPU offload tier (``-off``) or borrowed HBM (``-kvb``) are added
when they raise some bucket's capacity; HBM-only shapes record the spare HBM KV they can lend (``kv_spare_gib``).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from compiler.cost.model import GIB, KvTier, ReplicaModel, TrafficClass
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
    # KV tiers (docs/kv-tiers.md), GiB per replica: host memory it offloads KV to, spare HBM KV it borrows from
    # other instances on its node, and spare HBM KV it can lend at its planned operating point (HBM-only shapes)
    kv_offload_gib: float = 0.0
    kv_borrow_gib: float = 0.0
    kv_spare_gib: float = 0.0

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
                  max_batched_tokens: int, lora: dict | None = None, kv_offload_gib: float = 0.0,
                  kv_borrow_gib: float = 0.0) -> ReplicaModel:
    """The one place a ``ReplicaModel`` is made from IR names (planner and check share it). ``lora``: keyword
    arguments of ``compiler.cost.lora.LoraReplicaModel`` (slots, rank, modules, swap_wait_s) for a LoRA replica.
    ``kv_offload_gib`` / ``kv_borrow_gib``: a KV tier of that many GiB per replica (``kv_tier``)."""
    pool = ir.gpu(gpu)
    if kv_offload_gib > 0 or kv_borrow_gib > 0:
        rm = ReplicaModel(ir.models[model], pool.profile, ir.engine, tp, pp, dtype, max_num_seqs, max_batched_tokens)
        return ReplicaModel(ir.models[model], pool.profile, ir.engine, tp, pp, dtype, max_num_seqs,
                            max_batched_tokens, kv_tier=kv_tier(ir, gpu, rm, kv_offload_gib, kv_borrow_gib))
    if lora:
        from compiler.cost.lora import LoraReplicaModel
        return LoraReplicaModel(ir.models[model], pool.profile, ir.engine, tp, pp, dtype, max_num_seqs,
                                max_batched_tokens, **lora)
    return ReplicaModel(ir.models[model], pool.profile, ir.engine, tp, pp, dtype, max_num_seqs, max_batched_tokens)


def traffic_class(b: LengthBucket, rate_rps: float, w: WorkloadIR | None = None,
                  rm: ReplicaModel | None = None) -> TrafficClass:
    """The cost model's class for bucket ``b`` at a per-replica rate; with the workload ``w`` and the replica
    ``rm``, its prefix reuse (``prefix_cache``): cached tokens per request and the replica's reserve."""
    if w is None or rm is None or not w.prefix_hit_rate:
        return TrafficClass(rate_rps, b.isl_mean, b.osl_mean, b.isl_tail, b.isl_cv2, osl_points=b.osl_points)
    reserved, hit = prefix_cache(w, rm)
    return TrafficClass(rate_rps, b.isl_mean, b.osl_mean, b.isl_tail, b.isl_cv2, hit * b.isl_mean, float(reserved),
                        b.osl_points)


PREFIX_RESERVE_SHARES = (1.0, 0.5, 0.25, 0.125)  # of min(working set, spare HBM KV) tried for the prefix cache


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
    """(KV tokens reserved for ``w``'s prefix cache on one replica of ``rm``, hit rate it gets). The cache can take
    what the HBM KV spares after the workload's longest request, at most the working set; of the shares
    ``PREFIX_RESERVE_SHARES`` of that, the one with the highest capacity for the workload's mean request at its
    SLO (a bigger cache saves more prefill but leaves less KV for running requests). Once per replica model."""
    memo = rm.__dict__.setdefault("_prefix_cache", {})
    key = (w.name, w.prefix_hit_rate, w.prefix_working_set, w.prefix_curve, w.buckets, w.slo)
    if key in memo:
        return memo[key]
    longest = max(b.isl_max + b.osl_max for b in w.buckets)
    full = min(w.prefix_working_set, max(rm.memory.kv_cache_tokens - longest, 0))
    best = (0, 0.0)
    if full > 0:
        isl = sum(b.prob * b.isl_mean for b in w.buckets)
        osl = sum(b.prob * b.osl_mean for b in w.buckets)
        best_cap = -1.0
        for share in PREFIX_RESERVE_SHARES:
            tokens = int(full * share)
            hit = prefix_hit(w, tokens)
            cap = rm.capacity_rps(TrafficClass(0.0, isl, osl, None, 0.0, hit * isl, float(tokens)),
                                  w.slo.ttft_ms, w.slo.tpot_ms, w.slo.percentile)
            if cap > best_cap * (1 + 1e-9):  # ties: the larger cache (tried first)
                best, best_cap = (tokens, hit), cap
    memo[key] = best
    return best


HOST_KV_SHARE = 0.5  # share of a node's CPU memory the KV offload tier may use (assumption, docs/kv-tiers.md)
KV_TIER_MODES = {"auto": ("offload", "borrow"), "offload": ("offload",), "borrow": ("borrow",), "off": ()}
KV_LIMITED = 0.95  # a bucket's capacity is KV-bound when the KV in use at it reaches this share of HBM KV
TIER_REQUESTS = 4  # a KV tier holds this many of the workload's longest requests (docs/kv-tiers.md)
MIN_LEND = 0.05  # a shape lends spare HBM KV only when at least this share of it is spare


def kv_tier(ir: ProblemIR, gpu: str, rm: ReplicaModel, offload_gib: float, borrow_gib: float) -> KvTier:
    """The ``KvTier`` of a replica of ``rm``'s shape with ``offload_gib`` of host memory or ``borrow_gib`` of
    borrowed HBM (GiB per replica, one tier). Offload runs over each GPU's PCIe link (spec nodes[].pcie_gbps, else
    the GPU profile's); borrowing over NVLink (the profile's link bandwidth), or PCIe where the GPU has none."""
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
        bw = prof.link_bandwidth_gbps.value if prof.interconnect != "pcie" else (pcie or prof.link_bandwidth_gbps.value)
    if not bw > 0:
        raise ValueError(f"{gpu}: no PCIe bandwidth known for a KV offload tier; give nodes[].pcie_gbps")
    return KvTier("offload" if offload_gib > 0 else "borrow", tokens, float(bw))


def tier_gib(rm: ReplicaModel, tokens: float) -> float:
    """GiB per replica of ``tokens`` KV tokens of ``rm``'s shape (all its GPUs)."""
    return tokens * rm.memory.kv_bytes_per_token_per_gpu * rm.tp * rm.pp / GIB


def _kv_bound(rm: ReplicaModel, w: WorkloadIR, caps: list[tuple[str, float]]) -> tuple[bool, float]:
    """(whether some bucket's capacity is bound by HBM KV, most HBM KV tokens in use over the buckets, each alone
    at its capacity: the lender's planned operating point, conservatively the worst bucket)."""
    hbm = rm.memory.kv_cache_tokens
    K = rm.max_batched_tokens
    bound, worst = False, 0.0
    for name, cap in caps:
        b = w.bucket(name)
        ctx = b.isl_mean + b.osl_mean / 2
        if rm.max_num_seqs * ctx + K <= KV_LIMITED * hbm:  # even a full batch leaves KV room: not KV-bound
            worst = max(worst, rm.max_num_seqs * ctx + K)
            continue
        st = rm.evaluate([traffic_class(b, cap, w, rm)], w.slo.percentile)
        used = st.kv_tokens_used if st.stable else float(hbm)
        worst = max(worst, used)
        bound = bound or used >= KV_LIMITED * hbm
    return bound, min(worst, float(hbm))


def _tier_variants(ir: ProblemIR, w: WorkloadIR, pool: GpuPoolIR, tp: int, pp: int, mbt: int, cid: str,
                   base: ReplicaModel, base_caps: dict[str, float], longest: float, zero: dict,
                   kinds: tuple[str, ...] = ("offload",), borrow_cap_gib: float = 0.0) -> list[Candidate]:
    """Copies of a shape with a KV tier (``-off``: host memory over PCIe; ``-kvb``: HBM borrowed on the node),
    kept only where the tier raises the capacity of some bucket above the HBM-only shape's (or makes it fit).
    Tier size: max(HBM KV, TIER_REQUESTS x longest request) tokens (room for several long requests at once: the
    steady-state KV check sees only the mean in use, and a request waits for KV room at admission); offload at
    most ``HOST_KV_SHARE`` of one node's CPU memory; borrowing at most ``borrow_cap_gib`` (the most one lender
    replica that fits on the node beside it can spare: placement pairs each borrower with lenders on its node)."""
    hbm = base.memory.kv_cache_tokens
    if hbm <= 0:
        return []
    tokens = max(hbm, int(TIER_REQUESTS * longest))
    gib = tier_gib(base, tokens)
    out = []
    for kind in kinds:
        if kind == "borrow":
            bor = min(gib, borrow_cap_gib)
            if bor < tier_gib(base, max(longest - hbm, 1)):
                continue  # no lender on the node can spare what the longest request needs beyond HBM
        if kind == "offload":
            room = pool.cpu_memory_gib_per_node * HOST_KV_SHARE
            if room < tier_gib(base, max(longest - hbm, 1)) or not (pool.pcie_gbps or pool.profile.pcie_gbps):
                continue  # the node's host memory cannot hold what the longest request needs beyond HBM
            off, bor, suffix = min(gib, room), 0.0, "-off"
        else:
            off, suffix = 0.0, "-kvb"
        off, bor = round(off, 3), round(bor, 3)  # as the plan states them: assess, check and the simulator agree
        rm = replica_model(ir, w.model, pool.type, tp, pp, w.dtype, base.max_num_seqs, mbt, kv_offload_gib=off,
                           kv_borrow_gib=bor)
        caps = []
        for b in w.buckets:
            cls = traffic_class(b, 0.0, w, rm)
            cap = rm.capacity_rps(cls, w.slo.ttft_ms, w.slo.tpot_ms, w.slo.percentile, guess=base_caps.get(b.name))
            if cap > 0:
                caps.append((b.name, cap))
        if not any(cap > base_caps.get(name, 0.0) * 1.01 for name, cap in caps):
            continue  # the tier does not pay on any bucket
        if not base_caps:
            for b in w.buckets:
                t0, d0 = rm.zero_load(traffic_class(b, 0.0, w, rm))
                zero[b.name].append((t0, f"{pool.type} tp{tp}" + (f" pp{pp}" if pp > 1 else "") + f" {suffix[1:]}",
                                     d0, cid + suffix))
        out.append(Candidate(
            id=cid + suffix, workload=w.name, model=w.model, gpu=pool.type, tp=tp, pp=pp, dtype=w.dtype,
            max_num_seqs=base.max_num_seqs, max_batched_tokens=mbt, kv_cache_tokens=hbm,
            usd_per_hour=pool.usd_per_hour * tp * pp, capacity_rps=tuple(caps), kv_offload_gib=off,
            kv_borrow_gib=bor))
    return out


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
    modes = KV_TIER_MODES.get(ir.kv_tiers, ())
    tiers = bool(modes) and ir.lora is None
    offload = tuple(k for k in modes if k == "offload")
    later: list[tuple] = []  # shapes that may borrow KV: sized once every lender's spare is known
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
                        if tiers:
                            cands += _tier_variants(ir, w, pool, tp, pp, mbt, cid, rm, {}, longest, zero, offload)
                            later.append((w, pool, tp, pp, mbt, cid, rm, {}, longest, zero))
                        continue
                    fitted_once = True
                    caps = []
                    for b in w.buckets:
                        cls = traffic_class(b, 0.0, w, rm)
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
                    spare = 0.0
                    if tiers:
                        bound, worst = _kv_bound(rm, w, caps)
                        if "borrow" in modes and worst < (1 - MIN_LEND) * mem.kv_cache_tokens:
                            spare = round(tier_gib(rm, mem.kv_cache_tokens - worst), 3)
                        if bound:
                            cands += _tier_variants(ir, w, pool, tp, pp, mbt, cid, rm, dict(caps), longest, zero,
                                                    offload)
                            later.append((w, pool, tp, pp, mbt, cid, rm, dict(caps), longest, zero))
                    cands.append(Candidate(
                        id=cid, workload=w.name, model=w.model, gpu=pool.type, tp=tp, pp=pp, dtype=w.dtype,
                        max_num_seqs=max_num_seqs, max_batched_tokens=mbt, kv_cache_tokens=mem.kv_cache_tokens,
                        usd_per_hour=pool.usd_per_hour * tp * pp, capacity_rps=tuple(caps), kv_spare_gib=spare))
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

    if "borrow" in modes:
        for args in later:
            w, pool, tp = args[0], args[1], args[2]
            per_node = int(pool.profile.gpus_per_node.value)
            need = tier_gib(args[6], max(args[8] - args[6].memory.kv_cache_tokens, 1))
            # the smallest spare that still covers the longest request: as many lenders as possible qualify
            cap = min((c.kv_spare_gib for c in cands if c.gpu == pool.type and c.kv_spare_gib >= need
                       and c.gpus + tp * args[3] <= per_node), default=0.0)
            if cap > 0:
                cands += _tier_variants(ir, *args, kinds=("borrow",), borrow_cap_gib=cap)
        borrowing = {c.gpu for c in cands if c.kv_borrow_gib > 0}
        # spare HBM KV is worth something (in dominance and the kv_borrow rows) only where some shape borrows
        cands = [c if c.gpu in borrowing or not c.kv_spare_gib else replace(c, kv_spare_gib=0.0) for c in cands]
        cands.sort(key=lambda c: c.id)
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
            if o.kv_offload_gib > c.kv_offload_gib or o.kv_borrow_gib > c.kv_borrow_gib or o.kv_spare_gib < c.kv_spare_gib:
                continue  # a KV tier takes host memory or lenders' HBM; lending spare HBM is worth something
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
