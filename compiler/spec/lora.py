"""Adapters and tenants of a spec, resolved: the LoRA part of the IR (``LoraIR``) and its cross-checks.

``lora_ir(spec)`` is None for a spec without adapters or tenants, so such specs plan exactly as before.
Adapter populations (``adapters_from``) are expanded here: adapter i (from 1) of a Zipf(s) population gets
the share i^-s / sum_j j^-s of the traffic of a workload that names ``adapter: '*'``.
"""
from __future__ import annotations

from dataclasses import dataclass


DEFAULT_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
NO_TENANT = ""  # tenant of workloads that name none


@dataclass(frozen=True, slots=True)
class AdapterIR:
    name: str
    model: str
    rank: int
    modules: tuple[str, ...]
    weight: float  # share of the model's '*' traffic (normalised over the model's adapters)


@dataclass(frozen=True, slots=True)
class WorkloadLora:
    """Traffic of one workload by adapter: ((adapter name or '' for the base model, share of the
    workload))."""

    workload: str
    tenant: str
    adapters: tuple[tuple[str, float], ...]


@dataclass(frozen=True)
class LoraIR:
    adapters: dict[str, AdapterIR]  # by name (names are unique over the spec)
    by_model: dict[str, tuple[str, ...]]  # model -> its adapter names
    workloads: dict[str, WorkloadLora]
    dedicated: frozenset[str]
    conflicts: frozenset[frozenset[str]]  # tenant pairs that must not share a deployment

    def may_share(self, a: str, b: str) -> bool:
        if a == b:
            return True
        if a in self.dedicated or b in self.dedicated:
            return False
        return frozenset((a, b)) not in self.conflicts


def active(spec) -> bool:
    return bool(spec.tenants) or any(m.adapters or m.adapters_from for m in spec.models) or any(
        w.adapter or w.tenant for w in spec.workloads)


def _population(m) -> list[AdapterIR]:
    out = []
    mods = tuple(DEFAULT_MODULES)
    for a in m.adapters or ():
        out.append(AdapterIR(a.name, m.name, a.rank, tuple(a.target_modules or mods), a.weight))
    pop = m.adapters_from
    if pop is not None:
        prefix = pop.prefix if pop.prefix is not None else f"{m.name}-lora-"
        width = len(str(pop.count))
        s = pop.traffic.zipf.s if pop.traffic is not None else 0.0
        for i in range(1, pop.count + 1):
            out.append(AdapterIR(f"{prefix}{i:0{width}d}", m.name, pop.rank,
                                 tuple(pop.target_modules or mods), i ** -s))
    return out


def lora_ir(spec) -> LoraIR | None:
    if not active(spec):
        return None
    adapters: dict[str, AdapterIR] = {}
    by_model: dict[str, tuple[str, ...]] = {}
    for m in spec.models:
        pop = _population(m)
        # '*' traffic: the generated population when there is one (explicit adapters then get no '*' share)
        star = [a for a in pop
                if m.adapters_from is not None and a.name not in {x.name for x in m.adapters or ()}]
        star = star or pop
        total = sum(a.weight for a in star) or 1.0
        for a in pop:
            w = a.weight / total if a in star else 0.0
            adapters[a.name] = AdapterIR(a.name, a.model, a.rank, a.modules, w)
        by_model[m.name] = tuple(a.name for a in pop)
    wl = {}
    for w in spec.workloads:
        if w.adapter == "*":
            split = tuple((n, adapters[n].weight) for n in by_model.get(w.model, ())
                          if adapters[n].weight > 0)
        else:
            split = ((w.adapter or "", 1.0),)
        wl[w.name] = WorkloadLora(w.name, w.tenant or NO_TENANT, split)
    dedicated = frozenset(t.name for t in spec.tenants or () if t.dedicated)
    conflicts = frozenset(frozenset((t.name, o)) for t in spec.tenants or ()
                          for o in t.not_shared_with if o != t.name)
    return LoraIR(adapters, by_model, wl, dedicated, conflicts)


def cross_check(spec, bad) -> None:
    """Adapter and tenant references; ``bad(loc, where, message)`` records a problem (trimtab.spec.load)."""
    models = {m.name: m for m in spec.models}
    seen: dict[str, str] = {}
    for i, m in enumerate(spec.models):
        for j, a in enumerate(m.adapters or ()):
            if a.name in seen:
                bad(("models", i, "adapters", j, "name"), f"models[{i}] ({m.name}).adapters[{j}].name",
                    f"duplicate adapter name {a.name!r} (also on {seen[a.name]})")
            seen.setdefault(a.name, m.name)
        if m.adapters_from is not None:
            names = [a.name for a in _population(m)][len(m.adapters or ()):]
            clash = next((n for n in names if n in seen), None)
            if clash:
                bad(("models", i, "adapters_from"), f"models[{i}] ({m.name}).adapters_from",
                    f"generated adapter name {clash!r} is already used (on "
                    f"{seen[clash]}); set a different prefix")
            for n in names:
                seen.setdefault(n, m.name)
    tenants = {t.name for t in spec.tenants or ()}
    used_tenants = tenants | {w.tenant for w in spec.workloads if w.tenant}
    for i, w in enumerate(spec.workloads):
        m = models.get(w.model)
        if w.adapter is None or m is None:
            continue
        own = {a.name for a in _population(m)}
        if w.adapter == "*":
            if not own:
                bad(("workloads", i, "adapter"), f"workloads[{i}] ({w.name}).adapter",
                    f"'*' spreads traffic over {w.model}'s adapters, and it has none (give "
                    "models[].adapters or adapters_from)")
        elif w.adapter not in own:
            sample = ", ".join(sorted(own)[:5]) + (", ..." if len(own) > 5 else "")
            bad(("workloads", i, "adapter"), f"workloads[{i}] ({w.name}).adapter",
                f"adapter {w.adapter!r} is not one of {w.model}'s adapters ({sample or 'none'})")
    first: dict[str, int] = {}
    for i, t in enumerate(spec.tenants or ()):
        if t.name in first:
            bad(("tenants", i, "name"), f"tenants[{i}].name", f"duplicate tenant {t.name!r} (also "
                                                              f"tenants[{first[t.name]}])")
        first.setdefault(t.name, i)
        for j, o in enumerate(t.not_shared_with):
            if o == t.name:  # was dropped without a word (``lora_ir``): a rule that says nothing is a mistake
                bad(("tenants", i, "not_shared_with", j), f"tenants[{i}] ({t.name}).not_shared_with[{j}]",
                    f"tenant {o!r} names itself; list the other tenants it must not share GPUs with (its own "
                    "workloads always may share), or give dedicated: true to serve nobody else")
            elif o not in used_tenants:
                bad(("tenants", i, "not_shared_with", j), f"tenants[{i}] ({t.name}).not_shared_with[{j}]",
                    f"unknown tenant {o!r} (tenants: {', '.join(sorted(used_tenants)) or 'none'})")


LORA_KEYS = {"models": ("adapters", "adapters_from"), "workloads": ("adapter", "tenant")}


def strip_unset(data: dict) -> dict:
    """The spec's JSON without the LoRA/tenant keys left at None, so specs that use none of them keep the
    input hash they had before these keys existed."""
    out = {k: v for k, v in data.items() if not (k == "tenants" and v is None)}
    for section, keys in LORA_KEYS.items():
        if isinstance(out.get(section), list):
            out[section] = [{k: v for k, v in it.items() if not (k in keys and v is None)}
                            if isinstance(it, dict) else it for it in out[section]]
    return out
