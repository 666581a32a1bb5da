"""Adapter loads and evictions in simulation (multi-LoRA plans).

After the event loop, each request of a workload that uses adapters is given one, drawn (own random stream,
so the arrivals and lengths are those of the plan without adapters) from the adapters the plan routes that
workload to its deployment, in proportion to their traffic. Each replica keeps ``max_loras`` adapters resident
in GPU slots, least recently used evicted first; a request admitted while its adapter is not resident waits
for it to be copied from CPU memory (``trimtab.cost.lora.swap_s``, the planner's figure): its first token and
all later ones come that much later. The load is charged to the request alone (vLLM loads adapters at the
start of the step that admits the request, which also delays the batch's other requests by as much; at ~1-10
ms per load against steps of ~10-30 ms this is noted, not modelled).
"""
from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict

import numpy as np

from trimtab.cost.lora import swap_s
from trimtab.cost.adapters import modules_of
from trimtab.sim.reuse import own

SEED_SALT = 0x10A


def apply_adapters(sim, plan, ir, seed: int) -> list[str]:
    """Draw adapters, replay each replica's LRU of slots, delay the requests that miss; -> notes."""
    lo = getattr(ir, "lora", None)
    if lo is None or not plan.adapter_routes:
        return []
    deps = sim.sc.deployments
    names = [d.view.name for d in deps]
    pdeps = {d.name: d for d in plan.deployments}
    wnames = [w.name for w in sim.sc.workloads]
    # p(adapter | workload, deployment) from the adapter routes
    dist: dict[tuple[int, int], tuple[list[str], np.ndarray]] = {}
    acc: dict[tuple[str, str], dict[str, float]] = {}
    for r in plan.adapter_routes:
        wl = lo.workloads.get(r.workload)
        if wl is None:
            continue
        p = dict(wl.adapters).get(r.adapter, 0.0)
        acc.setdefault((r.workload, r.deployment), {})[r.adapter] = p * r.share
    for (w, d), m in acc.items():
        if w in wnames and d in names and sum(m.values()) > 0:
            keys = sorted(m)
            pr = np.array([m[k] for k in keys], float)
            dist[(wnames.index(w), names.index(d))] = (keys, np.cumsum(pr / pr.sum()).tolist())
    rng = np.random.default_rng([seed, SEED_SALT])
    by_rep: dict[tuple[int, int], list] = {}
    for r in sim.requests:
        if r.dep < 0 or r.rep < 0 or r.t_sched < 0 or (r.w, r.dep) not in dist:
            continue
        by_rep.setdefault((r.dep, r.rep), []).append(r)
    replay = []  # (the deployment, its replica's requests in admission order), replicas in order
    for (di, _ri), reqs in sorted(by_rep.items(), key=lambda kv: kv[0]):
        pd = pdeps.get(names[di])
        if pd is not None and pd.max_loras:
            reqs.sort(key=lambda r: (r.t_sched, r.rid))
            replay.append((pd, reqs))
    # one draw per request in the order they are replayed, drawn at once (``Generator.random(n)`` gives the n
    # numbers n calls give); the adapter drawn is the first whose cumulative share exceeds it
    draws = iter(rng.random(sum(len(reqs) for _, reqs in replay)).tolist())
    loads = evictions = 0
    load_s = 0.0
    for pd, reqs in replay:
        slots = pd.max_loras
        lru: OrderedDict[str, None] = OrderedDict()
        cost: dict[str, float] = {}
        for r in reqs:
            keys, cum = dist[(r.w, r.dep)]
            a = keys[min(bisect_right(cum, next(draws)), len(keys) - 1)]
            if a in lru:
                lru.move_to_end(a)
                continue
            if len(lru) >= slots:
                lru.popitem(last=False)
                evictions += 1
            lru[a] = None
            if a not in cost:
                ad = lo.adapters.get(a)
                cost[a] = swap_s(ir.models[pd.model], ad.rank if ad else pd.max_lora_rank,
                                 modules_of(ir, pd.model)) if ad else 0.0
            dt = cost[a]
            loads += 1
            load_s += dt
            r = own(sim.requests, r)  # a run the planner reuses keeps its own timestamps (trimtab.sim.reuse)
            if r.t_first >= 0:
                r.t_first += dt
            if r.t_done >= 0:
                r.t_done += dt
    if not loads:
        return []
    return [f"adapters: {loads} loads into GPU slots ({evictions} evictions), {load_s / loads * 1e3:.2f} ms "
            "each on average, added to the TTFT of the requests that waited"]
