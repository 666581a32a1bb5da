"""The adapter planner's candidates and traffic units (``trimtab.planning.lora``'s module docstring has
the notation): shared candidates per group (base model, dtype, KV cache precision) and tenant colour, each
priced with the LoRA cost model over every workload of its group, and the traffic units (base traffic, hot
adapters, classes of cold adapters) the MILP routes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from trimtab.cost.adapters import lora_kwargs
from trimtab.cost.factory import replica_model, traffic_class
from trimtab.cost.lora import vllm_rank
from trimtab.cost.search import bisect_max
from trimtab.deployment.price import replica_usd_per_hour
from trimtab.deployment.shape import TOKEN_BUDGETS, Candidate, LoraGroup, LoraSlots, shapes

SLOT_OPTIONS = (1, 8, 32)  # --max-loras of the candidates (capped at the group's adapter count)
MAX_CPU_LORAS = 1024  # adapters one deployment may hold in CPU memory (--max-cpu-loras)
EXACT_MAX = 48  # groups with at most this many adapters get an exact binary per adapter and candidate
HOT_MAX = 16  # otherwise: at most this many hot adapters (exact binaries) ...
HOT_SHARE = 0.02  # ... each with at least this share of the group's adapter traffic
COLD_BANDS = 4  # cold adapters of a workload are split into this many classes by rate


@dataclass(frozen=True)
class Unit:
    id: str
    workload: str
    group: str
    color: int
    kind: str  # base | hot | class
    rate: float
    adapter: str = ""  # hot: the adapter
    members: tuple[tuple[str, float], ...] = ()  # class: (adapter, rate)

    @property
    def rmax(self) -> float:
        return max((r for _, r in self.members), default=self.rate)


@dataclass
class LoraProblem:
    cands: list[Candidate]  # each with ``lora`` (None: LoRA off) and ``lora_group`` set
    units: list[Unit]
    colors: dict[str, dict[str, int]]  # group -> tenant -> colour
    pruned: list[str] = field(default_factory=list)


def slots(c: Candidate) -> int:
    """--max-loras of a shared candidate (0: LoRA off)."""
    return c.lora.max_loras if c.lora else 0


def usable(u: Unit, c: Candidate) -> bool:
    """Whether traffic unit ``u`` may be routed to shared candidate ``c``: same group and tenant colour, a
    capacity for u's workload, and a slot for an adapter (one for a hot adapter, several for a class that
    spreads over many): the one rule formulation, extraction, prechecks and n+1 share."""
    g = c.lora_group
    if g.name != u.group or g.color != u.color or g.capacity(u.workload) <= 0:
        return False
    if u.kind == "hot":
        return slots(c) >= 1
    if u.kind == "class":
        return slots(c) >= 2
    return True


def _colors(lo, tenants: list[str]) -> dict[str, int]:
    """Greedy colouring in name order (tenant-less traffic first, dedicated tenants last): conflicting tenants
    never share a colour."""
    out: dict[str, int] = {}
    for t in sorted(tenants, key=lambda t: (t in lo.dedicated, t)):
        taken = {out[o] for o in out if not lo.may_share(t, o)}
        out[t] = next(k for k in range(len(tenants) + 1) if k not in taken)
    return out


def build(ir) -> LoraProblem:
    lo = ir.lora
    # a replica has one KV cache precision (an engine flag), so workloads of different kv_dtype never share
    groups: dict[tuple[str, str, str], list] = {}
    for w in ir.workloads:
        groups.setdefault((w.model, w.dtype, w.kv_dtype or ""), []).append(w)
    dtypes: dict[str, set[str]] = {}
    for m, d, _ in groups:
        dtypes.setdefault(m, set()).add(d)
    mns = int(ir.engine.max_num_seqs.value)
    prob = LoraProblem([], [], {})
    for (model, dtype, kv), ws in sorted(groups.items()):
        gname = model + (f"-{dtype}" if len(dtypes[model]) > 1 else "") + (f"-kv{kv}" if kv else "")
        wl = {w.name: lo.workloads[w.name] for w in ws}
        names = sorted({a for x in wl.values() for a, p in x.adapters if a and p > 0})
        has_base = any(a == "" for x in wl.values() for a, _ in x.adapters)
        rank = vllm_rank(max((lo.adapters[a].rank for a in names), default=0)) if names else 0
        slots = sorted({min(s, len(names)) for s in SLOT_OPTIONS}) if names else []
        if has_base or not names:
            slots = [0] + slots
        colors = _colors(lo, sorted({x.tenant for x in wl.values()}))
        prob.colors[gname] = colors
        ncol = max(colors.values()) + 1
        # colour 0 (tenant-less traffic and every tenant free to share) keeps the plain name
        label = {k: ("" if k == 0 else "-" + min(t for t, c in colors.items() if c == k))
                 for k in range(ncol)}
        longest = max(b.isl_max + b.osl_max for w in ws for b in w.buckets)
        for pool in ir.gpus:
            for _cid, tp, pp, why in shapes(ir, ws[0], pool):
                if why:
                    continue
                for mbt in TOKEN_BUDGETS:
                    prev: dict[str, float] = {}
                    for L in slots:
                        slot = LoraSlots(L, rank, len(names) if L > 1 else 1) if L else None
                        lk = lora_kwargs(ir, model, L, rank, slot.adapters) if slot else None
                        rm = replica_model(ir, model, pool.type, tp, pp, dtype, mns, mbt, lora=lk,
                                           kv_dtype=kv or None)
                        if rm.memory.kv_cache_tokens < longest:
                            continue
                        cap = {}
                        for w in ws:
                            cw = mix_capacity(rm, w, below=prev.get(w.name) if L > 1 else None)
                            if cw > 0:
                                cap[w.name] = cw
                        prev = cap
                        if not cap:
                            continue
                        shape = f"{pool.type}-tp{tp}" + (f"-pp{pp}" if pp > 1 else "") + f"-t{mbt // 1024}k"
                        for k in range(ncol):
                            cid = f"{gname}{label[k]}-{shape}" + (f"-l{L}" if L else "")
                            group = LoraGroup(gname, k, tuple(sorted(t for t, c in colors.items() if c == k)),
                                              (L if L == len(names) or L <= 1 else MAX_CPU_LORAS) if L else 0,
                                              tuple(cap.items()))
                            # .workload: the group's first workload (for fidelity warnings); capacities
                            # are per workload, in lora_group
                            prob.cands.append(Candidate(
                                id=cid, workload=ws[0].name, model=model, gpu=pool.type, tp=tp, pp=pp,
                                dtype=dtype, max_num_seqs=mns, max_batched_tokens=mbt,
                                kv_cache_tokens=rm.memory.kv_cache_tokens,
                                usd_per_hour=replica_usd_per_hour(pool.usd_per_hour, tp, pp), capacity_rps=(),
                                kv_dtype=kv or None, lora=slot, lora_group=group))
        # Traffic units: base traffic, hot adapters (exact), cold classes.
        arate: dict[str, float] = {}
        for w in ws:
            for a, p in wl[w.name].adapters:
                if a:
                    arate[a] = arate.get(a, 0.0) + w.rate_rps * p
        total = sum(arate.values()) or 1.0
        if len(names) <= EXACT_MAX:
            hot = set(names)
        else:
            top = sorted(names, key=lambda a: (-arate[a], a))[:HOT_MAX]
            hot = {a for a in top if arate[a] >= HOT_SHARE * total}
        for w in sorted(ws, key=lambda w: w.name):
            x = wl[w.name]
            col = colors[x.tenant]
            cold = []
            for a, p in x.adapters:
                r = w.rate_rps * p
                if r <= 0:
                    continue
                if a == "":
                    prob.units.append(Unit(f"{w.name}/base", w.name, gname, col, "base", r))
                elif a in hot:
                    prob.units.append(Unit(f"{w.name}/{a}", w.name, gname, col, "hot", r, a))
                else:
                    cold.append((a, r))
            cold.sort(key=lambda t: (-t[1], t[0]))
            size = math.ceil(len(cold) / COLD_BANDS) if cold else 0
            for i in range(0, len(cold), size or 1):
                mem = tuple(cold[i:i + size])
                prob.units.append(Unit(f"{w.name}/cold{i // size}", w.name, gname, col, "class",
                                       sum(r for _, r in mem), members=mem))
    prob.cands = _prune(sorted(prob.cands, key=lambda c: c.id))
    return prob


def mix_capacity(rm, w, rel_tol: float = 0.01, below: float | None = None) -> float:
    """Highest per-replica rate of workload ``w``'s whole length mix (buckets at their shares, served
    together) at which every bucket meets w's TTFT and TPOT at its percentile; 0 if none. One bisection per
    workload. ``below``: a known upper bound (the capacity with fewer adapter slots), which narrows the
    search."""
    def ok(rate: float) -> bool:
        return rm.meets(rm.evaluate([traffic_class(b, rate * b.prob) for b in w.buckets], w.slo.percentile),
                        w.slo.ttft_ms, w.slo.tpot_ms)

    if below is not None and below > 0:
        lo, hi = below * 0.85, below * (1 + rel_tol)
        if ok(lo):
            return bisect_max(ok, lo, hi, rel_tol)
    if not ok(1e-9):
        return 0.0
    lo, hi = 0.0, 1.0
    while ok(hi):
        lo, hi = hi, hi * 4
        if hi > 1e6:
            return lo
    return bisect_max(ok, lo, hi, rel_tol)


def _prune(cands: list[Candidate]) -> list[Candidate]:
    """Drop a candidate when another of the same group, colour and GPU type costs no more, has at least its
    capacity for every workload and can hold at least as much (same kind of slots: none, one, several)."""
    def kind(c):
        return 0 if slots(c) == 0 else 1 if slots(c) == 1 else 2

    keep = []
    for c in cands:
        cg = c.lora_group
        dom = False
        for o in cands:
            og = o.lora_group
            if o is c or og.name != cg.name or og.color != cg.color or o.gpu != c.gpu:
                continue
            if kind(o) != kind(c) or og.cpu_slots < cg.cpu_slots or o.usd_per_hour > c.usd_per_hour:
                continue
            if o.gpus > c.gpus or any(og.capacity(w) < v for w, v in cg.capacity_rps):
                continue
            better = (o.usd_per_hour < c.usd_per_hour or o.gpus < c.gpus
                      or any(og.capacity(w) > v for w, v in cg.capacity_rps))
            if better or (slots(o), o.id) < (slots(c), c.id):
                dom = True
                break
        if not dom:
            keep.append(c)
    return keep
