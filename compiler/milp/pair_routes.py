"""A plan's prefill/decode pairs after the solve: the routes that match each bucket's prefill flows to its
decode flows (``pair_routes``), the cost model's assessment of the paired deployments (``assess_pairs``), the
gate's check of a route naming a pair (``verify_pair_route``) and the KV each pair moves (``pair_flows``). The
candidates and the MILP rows of the pairs are ``trimtab.milp.disagg``'s.
"""
from __future__ import annotations

import math

from trimtab.cost.factory import replica_model, traffic_class
from trimtab.cost.transfer import is_local_pair, kv_bytes_per_token, transfer_s
from trimtab.deployment.shape import Candidate, DeploymentLoad, RouteView
from trimtab.ir.model import ProblemIR
from trimtab.milp.disagg import ROLES, local_group


def pair_routes(ir: ProblemIR, flows: dict[tuple[str, str], tuple[list, list]], cands: dict[str, Candidate]):
    """Per bucket, match prefill flows to decode flows (candidate ids with their rates; ``cands`` by id): a
    route per (prefill, decode) pair with the share of the workload's requests it carries. Co-located sides
    only with their own partner; then each GPU type's flows among themselves (they need not change racks),
    then the rest; each step north-west corner, sorted by name."""
    out = []
    for (wn, bn), (pre, dec) in sorted(flows.items()):
        w = ir.workload(wn)
        pre = sorted(pre)
        dec = sorted(dec)
        tp, td = sum(x for _, x in pre), sum(x for _, x in dec)
        if tp <= 0 or td <= 0:
            continue
        dec = [(d, x * tp / td) for d, x in dec]  # exact balance after solver noise
        left = dict(pre + dec)

        def match(ps, ds):
            i = j = 0
            while i < len(ps) and j < len(ds):
                x = min(left[ps[i]], left[ds[j]])
                if x > 1e-12:
                    out.append(RouteView(wn, bn, "", x / w.rate_rps, prefill=ps[i], decode=ds[j]))
                left[ps[i]] -= x
                left[ds[j]] -= x
                if left[ps[i]] <= 1e-12:
                    i += 1
                if j < len(ds) and left[ds[j]] <= 1e-12:
                    j += 1

        for p, _ in pre:
            grp = local_group(cands[p])
            if grp is not None and grp.partner in left:
                match([p], [grp.partner])
        ps = [p for p, _ in pre if local_group(cands[p]) is None]
        ds = [d for d, _ in dec if local_group(cands[d]) is None]
        for g in sorted({cands[c].gpu for c in ps}):
            match([p for p in ps if cands[p].gpu == g], [d for d in ds if cands[d].gpu == g])
        match([p for p in ps if left[p] > 1e-12], [d for d in ds if left[d] > 1e-12])
    return out


def assess_pairs(ir: ProblemIR, deps: dict, routes, loads: dict, ttft: dict, dep_tpot: dict) -> None:
    """Fill ``assess``'s tables for the P/D routes: TTFT = prefill TTFT at the percentile + KV hand-off of the
    bucket's tail input; TPOT from the decode deployment's decode-only steady state."""
    pairs = [r for r in routes if r.prefill and r.decode and r.prefill in deps and r.decode in deps]
    for role in ROLES:
        for name in sorted({getattr(r, role) for r in pairs}):
            d = deps[name]
            rm = replica_model(ir, d.model, d.gpu, d.tp, d.pp, d.dtype, d.max_num_seqs, d.max_batched_tokens,
                               dp=d.dp, ep=d.ep, kv_dtype=d.kv_dtype)
            mine = [r for r in pairs if getattr(r, role) == name]
            reps = max(d.replicas, 0)
            classes, keys = [], []
            for r in mine:
                w = ir.workload(r.workload)
                b = w.bucket(r.bucket)
                classes.append(traffic_class(b, w.rate_rps * r.share / reps if reps else math.inf))
                keys.append(r)
            if not reps:
                loads[name] = DeploymentLoad(name, math.inf, 1.0, 0.0, 0.0, rm.memory.kv_cache_tokens,
                                             math.inf, False,
                                             "traffic routed to a deployment with 0 replicas")
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
                    x = transfer_s(ir, d.model, d.dtype, b.isl_tail, d.gpu, d.tp * d.pp * d.dp, dd.gpu,
                                   dd.tp * dd.pp * dd.dp,
                                   local=is_local_pair(d, dd), kv_dtype=d.kv_dtype)
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
                                         st.kv_tokens_used, rm.memory.kv_cache_tokens, st.tpot_s * 1e3,
                                         st.stable, st.reason)


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


def pair_flows(plan, ir: ProblemIR) -> list[tuple[str, str, float, bool]]:
    """(prefill, decode, KV bytes/s, co-located) of each pair the plan's routes name: sum over its routes of
    share x rate x mean input tokens of the bucket x ``kv_bytes_per_token``."""
    by = {d.name: d for d in plan.deployments}
    acc: dict[tuple[str, str], float] = {}
    for r in plan.routes:
        if not (r.prefill and r.decode) or r.prefill not in by or r.decode not in by:
            continue
        w = ir.workload(r.workload)
        b = w.bucket(r.bucket) if w is not None else None
        p = by[r.prefill]
        if b is None or ir.gpu(p.gpu) is None:
            continue
        kvb = kv_bytes_per_token(ir, p.model, p.gpu, p.dtype, p.kv_dtype)
        acc[(r.prefill, r.decode)] = (acc.get((r.prefill, r.decode), 0.0)
                                      + r.share * w.rate_rps * b.isl_mean * kvb)
    return [(p, d, f, is_local_pair(by[p], by[d])) for (p, d), f in sorted(acc.items())]


