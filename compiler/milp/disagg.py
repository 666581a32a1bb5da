"""Prefill/decode disaggregation: the candidates and MILP rows of P/D deployments (their routes and assessment
after the solve: ``trimtab.milp.pair_routes``).

A bucket is served by unified replicas, or by a prefill deployment paired with a decode deployment (possibly
on different GPU types). The prefill side computes the prompt and the first token, then hands the prompt's KV
(input tokens x ``ReplicaModel.kv_bytes_per_token``) to the decode side over the network; the hand-off time is
added to TTFT. The decode side only decodes, so its TPOT has no prefill interference.

Notation (added to ``trimtab.milp.formulate``'s):
    P, D: prefill and decode candidates (workload, GPU type, TP, PP); capP[b,p], capD[b,d] per replica
    xp[b,p], xd[b,d] >= 0: rate of bucket b prefilled on p / decoded on d
    bytes[b] = isl_mean[b] x kv_bytes_per_token: KV moved per request of bucket b
    nic[c] = tp x pp x node NIC / GPUs per node (bytes/s), LINK_UTIL: share of a link the hand-offs may use
Constraints:
    sum_c x[b,c] + sum_p xp[b,p] == rate[b]                      (demand[w/b], extended)
    sum_p xp[b,p] - sum_d xd[b,d] == 0                           for b        (pd_balance[w/b])
    sum_b xp[b,p] / capP[b,p] <= n[p];  same for d               (capacity[c])
    sum_b xp[b,p] bytes[b] <= LINK_UTIL nic[p] n[p]; same for d  (kv_link[c])
    sum_{b,p} xp[b,p] bytes[b] <= LINK_UTIL inter_rack           (kv_link[inter-rack], when the spec gives it)
Prefill capacities assume the hand-off runs at the narrowest NIC share among the workload's decode candidates,
so any pairing the solver makes meets TTFT.

Co-located pairs (``-local-`` candidates, offered only where the network cannot carry the KV, ``_heavy_kv``):
a group L = kp prefill replicas of tp_p GPUs + kd decode replicas of tp_d GPUs of one GPU type, pp = 1, inside
one NVLink domain (kp tp_p + kd tp_d <= domain). Its hand-off runs over the GPUs' own links (NVLink, or PCIe
where the GPU has none): nvl[L] = min(kp tp_p, kd tp_d) x link_bandwidth_gbps. Per group, an integer g[L]:
    n[Pl] == kp g[L];  n[Dl] == kd g[L]                 (colocate[L])
    xp[b,Pl] - xd[b,Dl] == 0                            for b (pd_local[L/b]: decoded where prefilled)
    sum_b xp[b,Pl] bytes[b] <= LINK_UTIL nvl[L] g[L]    (kv_link[Pl], no NIC row, no inter-rack term)
Inter-rack (when ``network.inter_rack_gbps`` is given): ``pair_routes`` pairs each bucket's flows of the same
GPU type first (co-located pairs with their own partner only), so the flow that must change GPU type, hence
rack in a derived topology, is exactly sum_g max(0, P[b,g] - D[b,g]) (P, D: cross-node prefill and decode flow
of bucket b on GPU type g). With e[b,g] >= 0:
    e[b,g] >= sum_{p on g} xp[b,p] - sum_{d on g} xd[b,d]                         (kv_cross[w/b/g])
    sum_{b,g} e[b,g] bytes[b] <= LINK_UTIL inter_rack                              (kv_link[inter-rack])
Same-type pairs that would still cross racks (nodes of one type in several racks) are kept in one rack by the
placement (``trimtab.milp.placement``, rack affinity) or the plan is refused naming the link.
"""
from __future__ import annotations

import math
from dataclasses import replace

from trimtab.cost.factory import shared_replica_model, traffic_class
from trimtab.cost.transfer import kv_bytes_per_token, local_bytes_per_s, nic_bytes_per_s
from trimtab.deployment.shape import Candidate, PdGroup
from trimtab.ir.model import GpuPoolIR, ProblemIR, WorkloadIR
from trimtab.deployment.layouts import layouts
from trimtab.deployment.price import fleet_usd_per_hour, replica_usd_per_hour
from trimtab.spec.paths import SpecPath
from trimtab.ir.topology import LINK_UTIL
from trimtab.cost.model import TrafficClass
from trimtab.cost.search import bisect_max
from trimtab.solvers.model import Constraint

ROLES = ("prefill", "decode")
ENABLED = True  # False: unified candidates only (for comparisons: benchmarks, tests)
PD_MARGIN = 0.15  # a P/D pair must beat unified serving by this share of the cost per request/s to be offered
PD_TOKEN_BUDGET = 8192  # prefill side: whole prompts per step; decode side: small budget, more KV room
DECODE_TOKEN_BUDGET = 2048


def pd_id(workload: str, gpu: str, tp: int, pp: int, role: str, dp: int = 1, ep: int = 1) -> str:
    return (f"{workload}-{gpu}-tp{tp}" + (f"-pp{pp}" if pp > 1 else "") + (f"-dp{dp}" if dp > 1 else "")
            + (f"-ep{ep}" if ep > 1 else "") + f"-{role}")


def local_group_name(workload: str, gpu: str, tp_p: int, kp: int, tp_d: int, kd: int) -> str:
    """A co-located group: ``kp`` prefill replicas of ``tp_p`` GPUs and ``kd`` decode replicas of ``tp_d``
    GPUs share one NVLink domain. Its sides' ids are the name and the role."""
    return f"{workload}-{gpu}-local-p{kp}xtp{tp_p}-d{kd}xtp{tp_d}"


def local_group(c: Candidate) -> PdGroup | None:
    """The co-located group of a P/D side, else None."""
    return c.pd_group


def colocation(c: Candidate) -> dict:
    """The plan's co-location fields of a deployment made from candidate ``c`` (empty when not co-located)."""
    g = c.pd_group
    return {} if g is None else {"colocated_with": g.partner, "group_replicas": g.per_group}


def group_var(g: PdGroup) -> str:
    return f"groups[{g.name}]"


def xp_var(workload: str, bucket: str, cid: str) -> str:
    return f"route[{workload}/{bucket},{cid}]"


def _role_candidates(ir: ProblemIR, w: WorkloadIR, role: str, transfer_bw: float | None,
                     local_d: dict[str, int] | None = None, memo: dict | None = None) -> list[Candidate]:
    """``local_d``: prefill sides of co-located pairs (pp = 1), the hand-off over the GPUs' links to a decode
    replica of at least ``local_d[gpu type]`` GPUs. ``memo``: sides already made for this IR (``side``)."""
    out, memo = [], {} if memo is None else memo
    for pool, layout, bw in _role_layouts(ir, w, transfer_bw, local_d):
        if (c := side(ir, w, pool, role, layout, bw, memo)) is not None:
            out.append(c)
    return out


def _role_layouts(ir: ProblemIR, w: WorkloadIR, transfer_bw: float | None, local_d: dict[str, int] | None):
    """(pool, (tp, pp, dp, ep), hand-off bytes/s) of each side ``_role_candidates`` makes."""
    for pool in ir.gpus:
        if local_d is not None and pool.type not in local_d:
            continue
        # MoE models: each phase over its own tp x dp x ep layouts (compiler/deployment/layouts.py);
        # co-located pairs dense-style
        for _cid, tp, pp, dp, ep, why in layouts(ir, w, pool):
            if why or (local_d is not None and (pp > 1 or dp > 1 or ep > 1)):
                continue
            bw = (local_bytes_per_s(pool, tp, local_d[pool.type]) if local_d is not None
                  else nic_bytes_per_s(pool, tp * pp * dp))
            yield pool, (tp, pp, dp, ep), bw if transfer_bw is None else min(bw, transfer_bw)


def _prefill_may_matter(ir: ProblemIR, w: WorkloadIR, dec: list[Candidate], unified: tuple[Candidate, ...],
                        narrow: float) -> bool:
    """Whether ``w``'s prefill sides (hand-off over ``narrow``) may change what ``build_pd_candidates``
    offers: put a bucket into its pairs (the cheapest prefill side plus the cheapest of ``dec`` at least
    PD_MARGIN below the best of ``unified``) or make ``_heavy_kv`` hold. False only where neither can be:
    every side misses its TTFT at the least rate at which it would do either (its capacity search's own
    predicate, ``prefill_meets``, which holds below some rate and fails above it, so the search would
    return less). One evaluation per side and bucket instead of a search each; the mix cap
    (``_mix_capped``) only lowers capacities. Why: the fluid floor (``_may_pay``) lets the sides of about
    half of a target spec's workloads be searched, and a pair pays on a few of them."""
    heavy = _heavy_kv(ir, w, [], dec, narrow)
    kvb = kv_bytes(ir, dec[0])
    budget: dict[str, float] = {}  # per bucket, the most a prefill side may cost per request/s to pay
    for b in w.buckets:
        d = _usd_per_rps(dec, w.name, b.name, "decode")
        u = _usd_per_rps(unified, w.name, b.name, "unified")
        if d < math.inf and u == math.inf:
            return True  # no unified serving of the bucket to beat
        budget[b.name] = (1 - PD_MARGIN) * u - d if d < math.inf else -math.inf
    mns = int(ir.engine.max_num_seqs.value)
    classes = [(b, traffic_class(b, 0.0)) for b in w.buckets]
    for pool, (tp, pp, dp, ep), bw in _role_layouts(ir, w, narrow, None):
        rm = shared_replica_model(ir, w.model, pool.type, tp, pp, w.dtype, mns, PD_TOKEN_BUDGET, dp=dp, ep=ep,
                                  kv_dtype=w.kv_dtype)
        usd = replica_usd_per_hour(pool.usd_per_hour, tp, pp, dp)
        nic = nic_bytes_per_s(pool, tp * pp * dp)
        for b, cls in classes:
            rates = [usd / budget[b.name]] if budget[b.name] > 0 else []
            if not heavy:  # the rate whose KV flow would take LINK_UTIL of the side's NIC share
                rates.append(LINK_UTIL * nic / (b.isl_mean * kvb))
            xfer = b.isl_tail * rm.kv_bytes_per_token / bw  # the hand-off, as ``side`` adds it
            if rates and rm.memory.kv_cache_tokens >= cls.tail and rm.prefill_meets(
                    cls, min(rates), w.slo.ttft_ms, w.slo.percentile, xfer):
                return True
    return False


def side(ir: ProblemIR, w: WorkloadIR, pool: GpuPoolIR, role: str, layout: tuple[int, int, int, int],
         bw: float, memo: dict) -> Candidate | None:
    """The ``role`` side of ``w`` on one (tp, pp, dp, ep) layout of ``pool``, its prefill hand-off at ``bw``
    bytes/s (None: it serves no bucket). A function of the workload, pool, engine and model (and a prefill
    side's ``bw``) only: ``memo``, by workload, GPU type, layout, role and bandwidth, serves every IR with the
    same of those, the whole spec's and each GPU type's alone (``trimtab.milp.candidates.for_one_type``)."""
    key = ("side", w.name, pool.type, layout, role, bw if role == "prefill" else None)
    if key in memo:
        return memo[key]
    tp, pp, dp, ep = layout
    mns = int(ir.engine.max_num_seqs.value)
    mbt = PD_TOKEN_BUDGET if role == "prefill" else DECODE_TOKEN_BUDGET
    rm = shared_replica_model(ir, w.model, pool.type, tp, pp, w.dtype, mns, mbt, dp=dp, ep=ep,
                              kv_dtype=w.kv_dtype)
    c = None
    if rm.memory.kv_cache_tokens > 0:
        caps = []
        for b in w.buckets:
            xfer = b.isl_tail * rm.kv_bytes_per_token / bw if role == "prefill" else 0.0
            cap = rm.capacity_rps_role(role, traffic_class(b, 0.0), w.slo.ttft_ms, w.slo.tpot_ms,
                                       w.slo.percentile, xfer)
            if cap > 0:
                caps.append((b.name, cap))
        if role == "prefill" and len(caps) > 1:
            caps = _mix_capped(rm, w, caps, bw)
        if caps:
            c = Candidate(
                id=pd_id(w.name, pool.type, tp, pp, role, dp, ep), workload=w.name, model=w.model,
                gpu=pool.type, tp=tp, pp=pp, dtype=w.dtype, max_num_seqs=mns, max_batched_tokens=mbt,
                kv_cache_tokens=rm.memory.kv_cache_tokens,
                usd_per_hour=replica_usd_per_hour(pool.usd_per_hour, tp, pp, dp),
                capacity_rps=tuple(caps), role=role, dp=dp, ep=ep, kv_dtype=w.kv_dtype)
    memo[key] = c
    return c


def _usd_per_rps(cands, workload: str, bucket: str, role: str) -> float:
    return min((c.usd_per_hour / cap for c in cands
                if c.workload == workload and c.role == role and (cap := c.capacity(bucket)) > 0),
               default=math.inf)


def pd_floor(ir: ProblemIR, w: WorkloadIR, memo: dict | None = None) -> tuple[dict[str, float], float]:
    """(per bucket, the least a prefill/decode pair of ``ir``'s GPUs can cost per request/s of it; the price
    of the cheapest replica of any layout that fits). A bound before any bisection: the prefill side costs at
    least usd x (prompt service time at full utilisation), the decode side at least
    usd x (osl - 1) x T_d(n) / n, n the largest batch max_num_seqs and the KV cache allow. The least over the
    GPU types of each type's own (``_pool_floor``; ``memo`` as ``side``'s)."""
    floors = [_pool_floor(ir, w, pool, {} if memo is None else memo) for pool in ir.gpus]
    return ({b.name: min((f[0][b.name] for f in floors), default=math.inf)
             + min((f[1][b.name] for f in floors), default=math.inf) for b in w.buckets},
            min((f[2] for f in floors), default=math.inf))


def _pool_floor(ir: ProblemIR, w: WorkloadIR, pool: GpuPoolIR,
                memo: dict) -> tuple[dict[str, float], dict[str, float], float]:
    """``pd_floor``'s terms on one GPU type: (per bucket the prefill side's least cost per request/s, the
    decode side's, the cheapest replica), each the least over the type's layouts (inf: none)."""
    key = ("floor", w.name, pool.type)
    if key in memo:
        return memo[key]
    mns = int(ir.engine.max_num_seqs.value)
    pre = {b.name: math.inf for b in w.buckets}
    dec = dict(pre)
    cheapest = math.inf
    for _cid, tp, pp, dp, ep, why in layouts(ir, w, pool):
        if why:
            continue
        usd = replica_usd_per_hour(pool.usd_per_hour, tp, pp, dp)
        cheapest = min(cheapest, usd)
        rp = shared_replica_model(ir, w.model, pool.type, tp, pp, w.dtype, mns, PD_TOKEN_BUDGET, dp=dp,
                                  ep=ep, kv_dtype=w.kv_dtype)
        rd = shared_replica_model(ir, w.model, pool.type, tp, pp, w.dtype, mns, DECODE_TOKEN_BUDGET, dp=dp,
                                  ep=ep, kv_dtype=w.kv_dtype)
        for b in w.buckets:
            step = min(b.isl_mean, PD_TOKEN_BUDGET)
            s = b.isl_mean / step * rp.iteration_s(0, 0, step, (b.isl_mean - step) / 2)
            pre[b.name] = min(pre[b.name], usd * s)
            ctx = b.isl_mean + b.osl_mean / 2
            nb = min(mns, rd.memory.kv_cache_tokens // ctx)  # batch / step time grows with the batch
            if b.osl_mean > 1 and nb >= 1:
                dec[b.name] = min(dec[b.name], usd * (b.osl_mean - 1) * rd.iteration_s(nb, ctx) / nb)
    memo[key] = (pre, dec, cheapest)
    return pre, dec, cheapest


def _may_pay(ir: ProblemIR, w: WorkloadIR, unified: tuple[Candidate, ...], memo: dict | None = None) -> bool:
    """P/D can only pay where its floor (``pd_floor``) is PD_MARGIN below the best unified cost per request/s
    (``unified``: this workload's unified candidates): checked before any bisection."""
    floor, _ = pd_floor(ir, w, memo)
    return any(floor[b.name] < (1 - PD_MARGIN) * _usd_per_rps(unified, w.name, b.name, "unified")
               for b in w.buckets)


def cost_floor(ir: ProblemIR, unified: tuple[Candidate, ...], memo: dict | None = None) -> float:
    """A lower bound on the cost of any plan of ``ir`` whose unified candidates are ``unified`` (inf: some
    bucket has no way to be served). Per workload, every bucket's traffic at the least cost per request/s of a
    unified candidate or of a P/D pair (``pd_floor``; a pair is offered only below the unified cost) and at
    least one replica. The planner's rounds only lower capacities, so no plan they make is cheaper.
    ``trimtab.planning.driver.single_types`` skips a GPU type whose floor alone is no cheaper than the plan
    in hand, before building its P/D pairs. ``memo``: as ``side``'s."""
    by_workload: dict[str, list[Candidate]] = {}
    for c in unified:
        by_workload.setdefault(c.workload, []).append(c)
    total = 0.0
    for w in ir.workloads:
        if w.rate_rps <= 0:
            continue  # (no traffic: no replica needed)
        mine = by_workload.get(w.name, [])
        pd, one = pd_floor(ir, w, memo) if ENABLED else ({}, math.inf)
        fluid = 0.0
        for b in w.buckets:
            best = min(_usd_per_rps(mine, w.name, b.name, "unified"), pd.get(b.name, math.inf))
            if best == math.inf:
                return math.inf
            fluid += w.rate_rps * b.prob * best
        total += max(fluid, min(one, min((c.usd_per_hour for c in mine), default=math.inf)))
    return total


def _mix_capped(rm, w: WorkloadIR, caps: list, bw: float) -> list:
    """Prefill capacities safe when the replica serves its buckets mixed (long prompts lengthen the short
    ones' wait): the highest utilisation rho_mix at which the workload's own mix of these buckets still meets
    TTFT (hand-off included) for every bucket; a bucket's capacity is then at most rho_mix / its service time,
    so the capacity row sum_b x[b] / cap[b] <= n keeps the utilisation of any mix under rho_mix."""
    bs = [w.bucket(n) for n, _ in caps]
    tot = sum(b.prob for b in bs)
    svc = []
    for b in bs:
        step = min(b.isl_mean, rm.max_batched_tokens)
        svc.append(b.isl_mean / step * rm.iteration_s(0, 0, step, (b.isl_mean - step) / 2))
    xfer = [b.isl_tail * rm.kv_bytes_per_token / bw for b in bs]

    def ok(lam: float) -> bool:
        cls = [TrafficClass(lam * b.prob / tot, b.isl_mean, 1.0, b.isl_tail, b.isl_cv2) for b in bs]
        st = rm.evaluate_prefill(cls, w.slo.percentile)
        return st.stable and all((t + x) * 1e3 <= w.slo.ttft_ms for t, x in zip(st.ttft_s, xfer))

    mean_s = sum(b.prob / tot * s for b, s in zip(bs, svc))
    if not ok(1e-9):
        return caps
    rho = bisect_max(ok, 0.0, 1.0 / mean_s, 0.005) * mean_s
    return [(n, min(c, rho / s)) for (n, c), s in zip(caps, svc)]


def build_pd_candidates(ir: ProblemIR, unified: tuple[Candidate, ...] = (),
                        memo: dict | None = None) -> tuple[Candidate, ...]:
    """Prefill and decode candidates of every workload, for the buckets where a P/D pair pays: the cheapest
    prefill plus the cheapest decode cost per request/s at least PD_MARGIN below the cheapest unified
    candidate's (a fluid bound; the MILP then decides with whole replicas). Decode candidates first: the
    narrowest NIC share among them bounds the hand-off time every prefill candidate plans for. ``memo``: the
    sides and floors made so far for IRs with these workloads, engine and models (``side``); filled here."""
    out: list[Candidate] = []
    local: list[Candidate] = []
    if not ENABLED:
        return ()
    by_workload: dict[str, list[Candidate]] = {}
    for c in unified:
        by_workload.setdefault(c.workload, []).append(c)
    for w in ir.workloads:
        mine = tuple(by_workload.get(w.name, ()))  # the comparisons below are per workload: scan its own only
        if unified and not _may_pay(ir, w, mine, memo):  # (no unified candidate at all: nothing to beat)
            continue
        dec = _role_candidates(ir, w, "decode", None, memo=memo)
        if not dec:
            continue
        narrow = min(nic_bytes_per_s(ir.gpu(c.gpu), c.gpus) for c in dec)
        if ir.inter_rack_gbps:
            narrow = min(narrow, ir.inter_rack_gbps * 1e9)
        pre = (_role_candidates(ir, w, "prefill", narrow, memo=memo)
               if not unified or _prefill_may_matter(ir, w, dec, mine, narrow) else [])
        pre_b = {b for c in pre for b, _ in c.capacity_rps}
        dec_b = {b for c in dec for b, _ in c.capacity_rps}
        both = {b for b in pre_b & dec_b
                if _usd_per_rps(pre, w.name, b, "prefill") + _usd_per_rps(dec, w.name, b, "decode")
                < (1 - PD_MARGIN) * _usd_per_rps(mine, w.name, b, "unified")}
        for c in pre + dec:
            caps = tuple((b, v) for b, v in c.capacity_rps if b in both)
            if caps:
                out.append(replace(c, capacity_rps=caps))
        if _heavy_kv(ir, w, pre, dec, narrow):
            local += _local_candidates(ir, w, dec, mine, memo)
    out.sort(key=lambda c: c.id)
    local.sort(key=lambda c: c.id)
    return tuple(sorted(_drop_dominated_role(out) + local, key=lambda c: c.id))


HANDOFF_SHARE = 0.1  # a hand-off over the network taking more than this share of TTFT counts as heavy KV


def _heavy_kv(ir: ProblemIR, w: WorkloadIR, pre: list[Candidate], dec: list[Candidate],
              narrow: float) -> bool:
    """The network cannot carry the workload's KV (co-located pairs are offered only then; elsewhere nothing
    changes): some P/D candidate's KV flow at its capacity exceeds LINK_UTIL of its NIC share, or the
    workload's whole KV flow exceeds LINK_UTIL of ``network.inter_rack_gbps``, or the hand-off of a bucket's
    tail input over the narrowest NIC share takes more than HANDOFF_SHARE of the TTFT SLO."""
    if not dec:
        return False
    kvb = kv_bytes(ir, dec[0])
    for c in pre + dec:
        nic = nic_bytes_per_s(ir.gpu(c.gpu), c.gpus)
        if any(cap * w.bucket(b).isl_mean * kvb > LINK_UTIL * nic for b, cap in c.capacity_rps):
            return True
    flow = w.rate_rps * sum(b.prob * b.isl_mean for b in w.buckets) * kvb
    if ir.inter_rack_gbps and flow > LINK_UTIL * ir.inter_rack_gbps * 1e9:
        return True
    return any(b.isl_tail * kvb / narrow * 1e3 > HANDOFF_SHARE * w.slo.ttft_ms for b in w.buckets)


def _local_candidates(ir: ProblemIR, w: WorkloadIR, dec: list[Candidate], unified,
                      memo: dict | None = None) -> list[Candidate]:
    """Both sides of every co-located group (kp x prefill tp_p + kd x decode tp_d in one NVLink domain, one
    GPU type, pp = 1) that beats the best unified candidate by PD_MARGIN on some bucket, with those buckets.
    Dense-style on both sides, as ``_role_candidates`` makes the prefill side: a mixture-of-experts decode
    layout with attention-DP or expert parallelism is left out (its id, ``local_group_name``, would not
    tell it from the plain one)."""
    dec = [c for c in dec if c.pp == 1 and c.dp == 1 and c.ep == 1]
    dmin: dict[str, int] = {}
    for c in dec:
        dmin[c.gpu] = min(dmin.get(c.gpu, c.gpus), c.gpus)
    out = []
    # the best unified cost per bucket, once per bucket, not per (pair, kp, kd): each is a scan of ``unified``
    unified_usd = {b.name: _usd_per_rps(unified, w.name, b.name, "unified") for b in w.buckets}
    for p in _role_candidates(ir, w, "prefill", None, dmin, memo):
        dom = ir.gpu(p.gpu).tp_limit
        for d in (c for c in dec if c.gpu == p.gpu):
            common = [b for b, _ in p.capacity_rps if d.capacity(b) > 0]
            for kp in range(1, dom // p.tp + 1):
                for kd in range(1, (dom - kp * p.tp) // d.tp + 1):
                    usd = fleet_usd_per_hour(((kp, p.usd_per_hour), (kd, d.usd_per_hour)))
                    keep = tuple(b for b in common if usd / min(kp * p.capacity(b), kd * d.capacity(b))
                                 < (1 - PD_MARGIN) * unified_usd[b])
                    if not keep:
                        continue
                    group = local_group_name(w.name, p.gpu, p.tp, kp, d.tp, kd)
                    ids = {r: f"{group}-{r}" for r in ("prefill", "decode")}
                    sides = ((p, "prefill", "decode", kp, kd), (d, "decode", "prefill", kd, kp))
                    for c, role, other, k, ko in sides:
                        out.append(replace(c, id=ids[role],
                                           capacity_rps=tuple((b, c.capacity(b)) for b in keep),
                                           pd_group=PdGroup(group, ids[other], k, ko)))
    return out


def _drop_dominated_role(cands: list[Candidate]) -> list[Candidate]:
    keep = []
    for c in cands:
        dom = any(o is not c and o.workload == c.workload and o.role == c.role and o.gpu == c.gpu
                  and o.usd_per_hour <= c.usd_per_hour and o.gpus <= c.gpus
                  and all(o.capacity(b) >= v for b, v in c.capacity_rps)
                  and (o.usd_per_hour < c.usd_per_hour or any(o.capacity(b) > v for b, v in c.capacity_rps)
                       or o.id < c.id)
                  for o in cands)
        if not dom:
            keep.append(c)
    return keep


def kv_bytes(ir: ProblemIR, c: Candidate) -> float:
    return kv_bytes_per_token(ir, c.model, c.gpu, c.dtype, c.kv_dtype)


def add_rows(m, ir: ProblemIR, pd: tuple[Candidate, ...], derate: dict[str, float], n_var) -> None:
    """The P/D rows (balance, capacity, links) of ``formulate``; demand terms are added there."""
    inter: list[tuple[str, float]] = []
    for w in ir.workloads:
        for b in w.buckets:
            terms = []
            for c in pd:
                if c.workload == w.name and c.capacity(b.name) > 0:
                    terms.append((xp_var(w.name, b.name, c.id), 1.0 if c.role == "prefill" else -1.0))
            if terms and {a > 0 for _, a in terms} == {True, False}:
                m.add(Constraint(f"pd_balance[{w.name}/{b.name}]", "pd_balance", tuple(terms), "==", 0.0,
                                 origin=SpecPath.workload(w)))
    ids = {c.id: c for c in pd}
    for c in pd:
        f = derate.get(c.id, 1.0)
        w = ir.workload(c.workload)
        expr = [(xp_var(c.workload, b, c.id), 1.0 / (cap * f)) for b, cap in c.capacity_rps]
        expr.append((n_var(c.id), -1.0))
        m.add(Constraint(f"capacity[{c.id}]", "capacity", tuple(expr), "<=", 0.0,
                         origin=SpecPath.workload(w, "slo"), key=c))
        kvb = kv_bytes(ir, c)
        link = [(xp_var(c.workload, b, c.id), w.bucket(b).isl_mean * kvb / 1e9) for b, _ in c.capacity_rps]
        grp = local_group(c)
        if grp is not None:  # co-located pair: NVLink inside the group, no NIC or inter-rack load
            if c.role == "prefill" and grp.partner in ids:
                _add_group_rows(m, ir, c, ids[grp.partner], grp, link, n_var)
            continue
        link.append((n_var(c.id), -LINK_UTIL * nic_bytes_per_s(ir.gpu(c.gpu), c.gpus) / 1e9))
        m.add(Constraint(f"kv_link[{c.id}]", "kv_link", tuple(link), "<=", 0.0,
                         origin=SpecPath.gpu(ir.gpu(c.gpu), note="NIC bandwidth (nodes[].nic_gbps)")))
        inter.append((c, link[:-1]))
    if ir.inter_rack_gbps and inter:
        _add_inter_rack_rows(m, ir, inter)


def _add_group_rows(m, ir: ProblemIR, p: Candidate, d: Candidate, grp: PdGroup, link: list, n_var) -> None:
    """Rows of one co-located group (module docstring): replicas in the group's ratio, every request decoded
    in the group it was prefilled in, and the hand-off under LINK_UTIL of the group's NVLink."""
    kp, kd = grp.per_group, grp.partner_per_group
    g = group_var(grp)
    ub = min(m.variables[n_var(p.id)].ub // kp, m.variables[n_var(d.id)].ub // kd)
    m.add_var(g, "integer", 0, ub)
    origin = SpecPath.gpu(ir.gpu(p.gpu), note="one NVLink domain per co-located group")
    for c, k in ((p, kp), (d, kd)):
        m.add(Constraint(f"colocate[{c.id}]", "colocate", ((n_var(c.id), 1.0), (g, -float(k))), "==", 0.0,
                         origin=origin))
    w = ir.workload(p.workload)
    for b, _ in p.capacity_rps:
        if d.capacity(b) > 0:
            m.add(Constraint(f"pd_local[{p.id}/{b}]", "pd_balance",
                             ((xp_var(w.name, b, p.id), 1.0), (xp_var(w.name, b, d.id), -1.0)), "==", 0.0,
                             origin=SpecPath.workload(w)))
        else:
            m.add(Constraint(f"pd_local[{p.id}/{b}]", "pd_balance", ((xp_var(w.name, b, p.id), 1.0),), "==",
                             0.0, origin=SpecPath.workload(w)))
    nvl = local_bytes_per_s(ir.gpu(p.gpu), kp * p.gpus, kd * d.gpus)
    m.add(Constraint(f"kv_link[{p.id}]", "kv_link", tuple(link) + ((g, -LINK_UTIL * nvl / 1e9),), "<=", 0.0,
                     origin=SpecPath.gpu(ir.gpu(p.gpu), note="NVLink bandwidth (GPU profile)")))


def _add_inter_rack_rows(m, ir: ProblemIR, inter: list) -> None:
    """e[b,g] >= P[b,g] - D[b,g] and sum e[b,g] bytes[b] <= LINK_UTIL inter_rack (module docstring)."""
    net: dict[tuple[str, str, str], list] = {}
    for c, _ in inter:
        for b, _cap in c.capacity_rps:
            net.setdefault((c.workload, b, c.gpu), []).append(
                (xp_var(c.workload, b, c.id), 1.0 if c.role == "prefill" else -1.0))
    total = []
    for (wn, b, g), terms in sorted(net.items()):
        if not any(a > 0 for _, a in terms):
            continue  # no prefill flow of this type to leave it
        w = ir.workload(wn)
        bk = w.bucket(b)
        e = m.add_var(f"kv_cross[{wn}/{b}/{g}]", "continuous", 0.0, w.rate_rps * bk.prob)
        m.add(Constraint(f"kv_cross[{wn}/{b}/{g}]", "kv_link", tuple(terms) + ((e, -1.0),), "<=", 0.0,
                         origin=SpecPath("network", field="inter_rack_gbps")))
        kvb = kv_bytes(ir, next(c for c, _ in inter if c.workload == wn))
        total.append((e, bk.isl_mean * kvb / 1e9))
    if total:
        m.add(Constraint("kv_link[inter-rack]", "kv_link", tuple(total), "<=", LINK_UTIL * ir.inter_rack_gbps,
                         origin=SpecPath("network", field="inter_rack_gbps")))
