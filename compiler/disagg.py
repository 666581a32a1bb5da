"""Prefill/decode disaggregation: candidates, MILP rows, pairing and assessment of P/D deployments.

A bucket is served by unified replicas, or by a prefill deployment paired with a decode deployment (possibly on
different GPU types). The prefill side computes the prompt and the first token, then hands the prompt's KV
(input tokens x ``ReplicaModel.kv_bytes_per_token``) to the decode side over the network; the hand-off time is
added to TTFT. The decode side only decodes, so its TPOT has no prefill interference.

Notation (added to ``compiler.formulate``'s):
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
"""
from __future__ import annotations

import math
from dataclasses import replace

from compiler.candidates import Candidate, _shapes, replica_model, traffic_class
from compiler.ir import GpuPoolIR, ProblemIR, WorkloadIR

ROLES = ("prefill", "decode")
ENABLED = True  # False: unified candidates only (for comparisons: benchmarks, tests)
PD_MARGIN = 0.15  # a P/D pair must beat unified serving by this share of the cost per request/s to be offered
LINK_UTIL = 0.5  # share of a NIC (or the inter-rack links) the KV hand-offs may use at the planned load
PD_TOKEN_BUDGET = 8192  # prefill side: whole prompts per step; decode side: small budget, more KV room
DECODE_TOKEN_BUDGET = 2048


def pd_id(workload: str, gpu: str, tp: int, pp: int, role: str) -> str:
    return f"{workload}-{gpu}-tp{tp}" + (f"-pp{pp}" if pp > 1 else "") + f"-{role}"


def xp_var(workload: str, bucket: str, cid: str) -> str:
    return f"route[{workload}/{bucket},{cid}]"


def nic_bytes_per_s(pool: GpuPoolIR, gpus: int) -> float:
    """Share of its node's NIC a replica of ``gpus`` GPUs of ``pool`` has (bytes/s)."""
    per_node = pool.nic_gbps or pool.profile.node_network_gbps.value
    return per_node * 1e9 * gpus / pool.profile.gpus_per_node.value


def transfer_s(ir: ProblemIR, model: str, dtype: str, tokens: float, p_gpu: str, p_gpus: int, d_gpu: str,
               d_gpus: int) -> float:
    """Seconds to move ``tokens`` tokens of KV from a prefill replica to a decode replica over the network
    (the narrower of the two NIC shares, and the inter-rack bandwidth when the two GPU types differ)."""
    rm = replica_model(ir, model, p_gpu, 1, 1, dtype, 1, DECODE_TOKEN_BUDGET)
    bw = min(nic_bytes_per_s(ir.gpu(p_gpu), p_gpus), nic_bytes_per_s(ir.gpu(d_gpu), d_gpus))
    if ir.inter_rack_gbps and p_gpu != d_gpu:
        bw = min(bw, ir.inter_rack_gbps * 1e9)
    return tokens * rm.kv_bytes_per_token / bw


def _role_candidates(ir: ProblemIR, w: WorkloadIR, role: str, transfer_bw: float | None) -> list[Candidate]:
    out = []
    mns = int(ir.engine.max_num_seqs.value)
    mbt = PD_TOKEN_BUDGET if role == "prefill" else DECODE_TOKEN_BUDGET
    for pool in ir.gpus:
        for _cid, tp, pp, why in _shapes(ir, w, pool):
            if why:
                continue
            rm = replica_model(ir, w.model, pool.type, tp, pp, w.dtype, mns, mbt)
            if rm.memory.kv_cache_tokens <= 0:
                continue
            bw = nic_bytes_per_s(pool, tp * pp)
            if transfer_bw is not None:
                bw = min(bw, transfer_bw)
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
                out.append(Candidate(
                    id=pd_id(w.name, pool.type, tp, pp, role), workload=w.name, model=w.model, gpu=pool.type,
                    tp=tp, pp=pp, dtype=w.dtype, max_num_seqs=mns, max_batched_tokens=mbt,
                    kv_cache_tokens=rm.memory.kv_cache_tokens, usd_per_hour=pool.usd_per_hour * tp * pp,
                    capacity_rps=tuple(caps), role=role))
    return out


def _usd_per_rps(cands, workload: str, bucket: str, role: str) -> float:
    return min((c.usd_per_hour / c.capacity(bucket) for c in cands
                if c.workload == workload and c.role == role and c.capacity(bucket) > 0), default=math.inf)


def _may_pay(ir: ProblemIR, w: WorkloadIR, unified: tuple[Candidate, ...]) -> bool:
    """A cheap bound before any bisection: per bucket, the prefill side costs at least usd x (prompt service
    time at full utilisation) and the decode side at least usd x (osl - 1) x T_d(n) / n per request/s, n the
    largest batch max_num_seqs and the KV cache allow; P/D can only pay where their sum is PD_MARGIN below the best unified cost."""
    if not unified:
        return True
    mns = int(ir.engine.max_num_seqs.value)
    pre = {b.name: math.inf for b in w.buckets}
    dec = dict(pre)
    for pool in ir.gpus:
        for _cid, tp, pp, why in _shapes(ir, w, pool):
            if why:
                continue
            usd = pool.usd_per_hour * tp * pp
            rp = replica_model(ir, w.model, pool.type, tp, pp, w.dtype, mns, PD_TOKEN_BUDGET)
            rd = replica_model(ir, w.model, pool.type, tp, pp, w.dtype, mns, DECODE_TOKEN_BUDGET)
            for b in w.buckets:
                step = min(b.isl_mean, PD_TOKEN_BUDGET)
                s = b.isl_mean / step * rp.iteration_s(0, 0, step, (b.isl_mean - step) / 2)
                pre[b.name] = min(pre[b.name], usd * s)
                ctx = b.isl_mean + b.osl_mean / 2
                nb = min(mns, rd.memory.kv_cache_tokens // ctx)  # batch / step time grows with the batch
                if b.osl_mean > 1 and nb >= 1:
                    dec[b.name] = min(dec[b.name], usd * (b.osl_mean - 1) * rd.iteration_s(nb, ctx) / nb)
    return any(pre[b.name] + dec[b.name] < (1 - PD_MARGIN) * _usd_per_rps(unified, w.name, b.name, "unified")
               for b in w.buckets)


def _mix_capped(rm, w: WorkloadIR, caps: list, bw: float) -> list:
    """Prefill capacities safe when the replica serves its buckets mixed (long prompts lengthen the short ones'
    wait): the highest utilisation rho_mix at which the workload's own mix of these buckets still meets TTFT
    (hand-off included) for every bucket; a bucket's capacity is then at most rho_mix / its service time, so the
    capacity row sum_b x[b] / cap[b] <= n keeps the utilisation of any mix under rho_mix."""
    from compiler.cost.model import TrafficClass, bisect_max

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


def build_pd_candidates(ir: ProblemIR, unified: tuple[Candidate, ...] = ()) -> tuple[Candidate, ...]:
    """Prefill and decode candidates of every workload, for the buckets where a P/D pair pays: the cheapest
    prefill plus the cheapest decode cost per request/s at least PD_MARGIN below the cheapest unified
    candidate's (a fluid bound; the MILP then decides with whole replicas). Decode candidates first: the
    narrowest NIC share among them bounds the hand-off time every prefill candidate plans for."""
    out: list[Candidate] = []
    if not ENABLED:
        return ()
    for w in ir.workloads:
        if not _may_pay(ir, w, unified):
            continue
        dec = _role_candidates(ir, w, "decode", None)
        if not dec:
            continue
        narrow = min(nic_bytes_per_s(ir.gpu(c.gpu), c.gpus) for c in dec)
        if ir.inter_rack_gbps:
            narrow = min(narrow, ir.inter_rack_gbps * 1e9)
        pre = _role_candidates(ir, w, "prefill", narrow)
        pre_b = {b for c in pre for b, _ in c.capacity_rps}
        dec_b = {b for c in dec for b, _ in c.capacity_rps}
        both = {b for b in pre_b & dec_b
                if _usd_per_rps(pre, w.name, b, "prefill") + _usd_per_rps(dec, w.name, b, "decode")
                < (1 - PD_MARGIN) * _usd_per_rps(unified, w.name, b, "unified")}
        for c in pre + dec:
            caps = tuple((b, v) for b, v in c.capacity_rps if b in both)
            if caps:
                out.append(replace(c, capacity_rps=caps))
    out.sort(key=lambda c: c.id)
    return tuple(_drop_dominated_role(out))


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
    return replica_model(ir, c.model, c.gpu, 1, 1, c.dtype, 1, DECODE_TOKEN_BUDGET).kv_bytes_per_token


def add_rows(m, ir: ProblemIR, pd: tuple[Candidate, ...], derate: dict[str, float], n_var, cname_origin) -> None:
    """The P/D rows (balance, capacity, links) of ``formulate``; demand terms are added there."""
    from solvers.model import Constraint

    inter: list[tuple[str, float]] = []
    for w in ir.workloads:
        for b in w.buckets:
            terms = []
            for c in pd:
                if c.workload == w.name and c.capacity(b.name) > 0:
                    terms.append((xp_var(w.name, b.name, c.id), 1.0 if c.role == "prefill" else -1.0))
            if terms and {a > 0 for _, a in terms} == {True, False}:
                m.add(Constraint(f"pd_balance[{w.name}/{b.name}]", "pd_balance", tuple(terms), "==", 0.0,
                                 origin=f"workloads[{w.index}] ({w.name})"))
    for c in pd:
        f = derate.get(c.id, 1.0)
        w = ir.workload(c.workload)
        expr = [(xp_var(c.workload, b, c.id), 1.0 / (cap * f)) for b, cap in c.capacity_rps]
        expr.append((n_var(c.id), -1.0))
        m.add(Constraint(f"capacity[{c.id}]", "capacity", tuple(expr), "<=", 0.0, origin=cname_origin(c)))
        kvb = kv_bytes(ir, c)
        link = [(xp_var(c.workload, b, c.id), w.bucket(b).isl_mean * kvb / 1e9) for b, _ in c.capacity_rps]
        link.append((n_var(c.id), -LINK_UTIL * nic_bytes_per_s(ir.gpu(c.gpu), c.gpus) / 1e9))
        m.add(Constraint(f"kv_link[{c.id}]", "kv_link", tuple(link), "<=", 0.0, origin=f"gpus ({c.gpu}) network"))
        if c.role == "prefill":
            inter += link[:-1]
    if ir.inter_rack_gbps and inter:
        m.add(Constraint("kv_link[inter-rack]", "kv_link", tuple(inter), "<=", LINK_UTIL * ir.inter_rack_gbps,
                         origin="network.inter_rack_gbps"))


def pair_routes(ir: ProblemIR, flows: dict[tuple[str, str], tuple[list, list]]):
    """Per bucket, match prefill flows to decode flows (both sorted by name, north-west corner): a route per
    (prefill, decode) pair with the share of the workload's requests it carries."""
    from compiler.assess import RouteView

    out = []
    for (wn, bn), (pre, dec) in sorted(flows.items()):
        w = ir.workload(wn)
        pre = sorted(pre)
        dec = sorted(dec)
        tp, td = sum(x for _, x in pre), sum(x for _, x in dec)
        if tp <= 0 or td <= 0:
            continue
        dec = [(d, x * tp / td) for d, x in dec]  # exact balance after solver noise
        i = j = 0
        left_p, left_d = pre[0][1], dec[0][1]
        while i < len(pre) and j < len(dec):
            x = min(left_p, left_d)
            if x > 0:
                out.append(RouteView(wn, bn, "", x / w.rate_rps, prefill=pre[i][0], decode=dec[j][0]))
            left_p -= x
            left_d -= x
            if left_p <= 1e-12:
                i += 1
                left_p = pre[i][1] if i < len(pre) else 0.0
            if left_d <= 1e-12:
                j += 1
                left_d = dec[j][1] if j < len(dec) else 0.0
    return out


def assess_pairs(ir: ProblemIR, deps: dict, routes, loads: dict, ttft: dict, dep_tpot: dict) -> None:
    """Fill ``assess``'s tables for the P/D routes: TTFT = prefill TTFT at the percentile + KV hand-off of the
    bucket's tail input; TPOT from the decode deployment's decode-only steady state."""
    from compiler.assess import DeploymentLoad

    pairs = [r for r in routes if r.prefill and r.decode and r.prefill in deps and r.decode in deps]
    for role in ROLES:
        for name in sorted({getattr(r, role) for r in pairs}):
            d = deps[name]
            rm = replica_model(ir, d.model, d.gpu, d.tp, d.pp, d.dtype, d.max_num_seqs, d.max_batched_tokens)
            mine = [r for r in pairs if getattr(r, role) == name]
            reps = max(d.replicas, 0)
            classes, keys = [], []
            for r in mine:
                w = ir.workload(r.workload)
                b = w.bucket(r.bucket)
                classes.append(traffic_class(b, w.rate_rps * r.share / reps if reps else math.inf))
                keys.append(r)
            if not reps:
                loads[name] = DeploymentLoad(name, math.inf, 1.0, 0.0, 0.0, rm.memory.kv_cache_tokens, math.inf,
                                             False, "traffic routed to a deployment with 0 replicas")
                dep_tpot[name] = math.inf
                for r in keys:
                    ttft[(r.workload, r.bucket, name)] = math.inf
                continue
            # merge routes of the same bucket (several pairs) into one class
            merged: dict[tuple[str, str], float] = {}
            for r, c in zip(keys, classes):
                merged[(r.workload, r.bucket)] = merged.get((r.workload, r.bucket), 0.0) + c.rate_rps
            mk = sorted(merged)
            mcls = [traffic_class(ir.workload(k[0]).bucket(k[1]), merged[k]) for k in mk]
            pct = max(ir.workload(k[0]).slo.percentile for k in mk)
            if role == "prefill":
                st = rm.evaluate_prefill(mcls, pct)
                t_of = dict(zip(mk, st.ttft_s))
                for r in keys:
                    dd = deps[r.decode]
                    b = ir.workload(r.workload).bucket(r.bucket)
                    x = transfer_s(ir, d.model, d.dtype, b.isl_tail, d.gpu, d.tp * d.pp, dd.gpu, dd.tp * dd.pp)
                    t = (t_of[(r.workload, r.bucket)] + x) * 1e3
                    k = (r.workload, r.bucket, name)
                    ttft[k] = max(ttft.get(k, 0.0), t)
                    # the decode side joins the workload's deployments (TPOT) without owning its TTFT
                    ttft.setdefault((r.workload, r.bucket, r.decode), 0.0)
                dep_tpot[name] = 0.0
            else:
                st = rm.evaluate_decode(mcls, pct)
                dep_tpot[name] = st.tpot_s * 1e3
            loads[name] = DeploymentLoad(name, sum(merged.values()), st.utilization, st.decode_batch,
                                         st.kv_tokens_used, rm.memory.kv_cache_tokens, st.tpot_s * 1e3, st.stable,
                                         st.reason)


def verify_pair_route(r, names: dict, w) -> str:
    """``check``: a route naming a prefill/decode pair is well formed (one line when it is not, else "")."""
    at = f"route {r.workload}/{r.bucket}"
    if r.deployment is not None:
        return f"{at}: names a deployment and a prefill/decode pair; give one or the other"
    if r.prefill is None or r.decode is None:
        return f"{at}: a disaggregated route needs both prefill and decode"
    for role in ROLES:
        n = getattr(r, role)
        if n not in names:
            return f"{at}: unknown {role} deployment {n}"
        if names[n].role != role:
            return f"{at}: {role} deployment {n} has role {names[n].role}"
        if names[n].model != w.model:
            return f"{at}: {role} deployment {n} serves {names[n].model}, the workload needs {w.model}"
    return ""
