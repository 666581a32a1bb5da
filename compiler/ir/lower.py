"""Lowering: ``Spec`` + ``ProfileSet`` -> ``ProblemIR``.

Resolves GPU and model names to profiles (or a local config.json), fills defaults (prices, dtype),
turns token distributions into prompt-length buckets fitted pair by pair into the model's context window
(``trimtab.spec.lengths.truncation``: prompts cut to the window, outputs only where prompt + output exceeds
it),
and computes the
input hash a plan records. Raises ``InputError`` naming the workload when its lengths cannot be served.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path


from trimtab.spec.lora import lora_ir, strip_unset
from trimtab.errors import InputError, Problem
from trimtab.engines.base import model_identities
from trimtab.ir.model import GpuPoolIR, ProblemIR, SloIR, WorkloadIR
from trimtab.spec.lengths import LengthError, cut_inputs, length_grids, make_buckets, truncation
from trimtab.profiles.loader import ProfileSet, model_from_hf_config
from trimtab.spec.load import kind_problems, spec_profiles
from trimtab.spec.schema import Spec, Workload
from trimtab.spec.traces import measured_prefix, read_trace


def spec_hash(spec: Spec, profiles: ProfileSet) -> str:
    """sha256 of the canonical spec JSON and the content of the profiles it uses (its GPU types, its models,
    its engine), so adding an unrelated profile does not change a plan's hash."""
    h = hashlib.sha256()
    data = strip_unset(spec.model_dump(mode="json"))
    # Specs without prefix reuse keep the hash they had before ``prefix`` existed.
    # Likewise without a schedule (docs/online.md): rate profiles and the schedule block left at None.
    # And without a KV precision set apart (workloads[].kv_dtype, docs/moe.md).
    # And without the load generator's traffic (arrivals, stages, shared_prefix).
    opt = ("prefix", "rate_profile", "kv_dtype", "arrivals", "stages", "shared_prefix")
    data["workloads"] = [{k: v for k, v in w.items() if not (k in opt and v is None)}
                         for w in data["workloads"]]
    if data.get("schedule", 0) is None:
        del data["schedule"]
    # Where the user's profiles live is not an input (the field or --profiles, any path to the same folder):
    # their content is, hashed with the bundled ones below.
    data.pop("profiles", None)
    if data["solver"].get("node_limit", 0) is None:  # specs without a node limit keep their hash
        del data["solver"]["node_limit"]
    # The wall-clock safety net never changes a plan (a solve it stops gives none: exit 4), so it is no input
    # of one: every spec hashes with the value that was the default when plans first kept a hash
    data["solver"]["time_limit_s"] = 60.0
    if data.get("redundancy") == "none":  # specs without redundancy keep the hash they had before it existed
        del data["redundancy"]
    tiers = spec.defaults.kv_tiers != "off"
    if not tiers:  # specs without KV tiers keep the hash they had before the switch existed
        data["defaults"] = {k: v for k, v in data["defaults"].items() if k != "kv_tiers"}
    h.update(json.dumps(data, sort_keys=True).encode())
    used = ([("gpus", g.type) for g in spec.gpus]
            + [("models", m.name) for m in spec.models if m.config is None])
    used.append(("engines", spec.defaults.engine))
    for kind, name in sorted(set(used)):
        prof = getattr(profiles, kind).get(name)
        h.update(f"{kind}/{name}".encode())
        # The host-side GPU fields matter only to KV tiers: without them they leave the hash as it was.
        host = {} if tiers or kind != "gpus" else {"host_memory_gib_per_node": True, "pcie_gbps": True,
                                                     "sources": {"host", "pcie"}}
        if kind == "gpus" and prof is not None and prof.fp32_tflops is None:  # as before fp32 existed
            host = {**host, "fp32_tflops": True}
        h.update(prof.model_dump_json(exclude=host).encode() if prof is not None else b"-")
    return "sha256:" + h.hexdigest()[:16]


def workload_rate(w: Workload, base_dir: str = ".") -> float:
    """rate_rps, or the peak of the rate profile (a schedule's static sizing; docs/online.md), or the trace's
    mean arrival rate x rate_scale."""
    if w.rate_rps is not None:
        return float(w.rate_rps)
    if w.stages is not None:  # sized for the busiest stage, as a schedule's static sizing takes its peak
        return float(max(s.rate_rps for s in w.stages))
    if w.rate_profile is not None:
        p = w.rate_profile
        return float(max(p.rps)) if p.rps is not None else float(p.peak_rps)

    tr = read_trace(Path(base_dir) / w.trace.path, w.trace.format)
    if tr.rate_rps <= 0:
        raise LengthError(f"trace {w.trace.path}: every request arrives at the same time; give rate_rps")
    return tr.rate_rps * (w.trace.rate_scale or 1.0)


def workload_prefix(w: Workload,
                    base_dir: str = ".") -> tuple[float, int, tuple[tuple[int, float], ...], str]:
    """(hit rate, working set tokens, LRU curve, source) of a workload's prefix reuse: declared, or measured
    from its Mooncake trace's hash_ids (docs/prefix-caching.md). Raises InputError for a malformed trace."""
    p = w.prefix
    if p is None:
        return 0.0, 0, (), ""
    if not p.from_trace:
        return float(p.hit_rate), int(p.cached_tokens), (), "declared"

    path = Path(base_dir) / w.trace.path
    try:
        st = path.stat()
    except OSError as exc:
        raise InputError([Problem("", f"cannot read trace: {exc.strerror}", str(path))], "trace") from None
    stats, curve = measured_prefix(str(path), st.st_mtime_ns, st.st_size)
    return stats.hit_rate, stats.working_set_tokens, curve, "trace"


def shared_prefix_reuse(w: Workload, isl) -> tuple[float, int, tuple, str]:
    """(hit rate, working set, LRU curve, source) of shared system prompts: once warm, every request finds its
    group's prefix cached (a group's first request, once per run, is the only miss), so the share of input
    tokens served from the cache is prefix / mean prompt (capped at the prompt less the one token an engine
    always computes), and the cache must hold every group's prefix. When the users' prompts repeat (a load
    generator's fixed prompt set) the whole prompt but that token is found, and the cache holds every
    prompt."""
    sp = w.shared_prefix
    mean_isl = float(sum(isl) / len(isl))
    if sp.prompts_repeat:  # a fixed set of groups x users prompts: each whole prompt cached after its first
        return max((mean_isl - 1) / mean_isl, 0.0), int(sp.groups * sp.users_per_group * mean_isl), (), \
            "shared_prefix"
    hit = min(sp.prefix_tokens, mean_isl - 1) / mean_isl
    return max(hit, 0.0), sp.groups * sp.prefix_tokens, (), "shared_prefix"


def _min_nic(spec: Spec, gpu: str) -> float:
    """Narrowest NIC (GB/s) among the spec's nodes of this GPU type that give one (0: the profile's)."""
    return min((n.nic_gbps for n in spec.nodes or () if n.gpu == gpu and n.nic_gbps), default=0.0)


def _max_tp(spec: Spec, gpu: str) -> int:
    """Largest NVLink domain among the spec's nodes of this GPU type (0 when the spec has no nodes)."""
    if not spec.nodes:
        return 0
    return max((n.nvlink_domain or n.gpus_per_node or 0 for n in spec.nodes if n.gpu == gpu), default=0)


def _host(spec: Spec, gpu: str, count: int, prof) -> tuple[float, float, float]:
    """(CPU memory of the type's nodes in GiB, of its smallest node, narrowest PCIe GB/s) for the KV offload
    tier: spec nodes[] where they give them, else the GPU profile's host memory per node (pro rata for a
    part-filled derived node) and PCIe bandwidth; 0 where neither says."""
    host = prof.host_memory_gib_per_node.value if prof.host_memory_gib_per_node is not None else 0.0
    pcie = prof.pcie_gbps.value if prof.pcie_gbps is not None else 0.0
    per = int(prof.gpus_per_node.value)
    groups = [n for n in spec.nodes or () if n.gpu == gpu]
    if not groups:
        full, part = divmod(count, per)
        sizes = [per] * full + ([part] if part else [])
        return host * count / per, min((host * k / per for k in sizes), default=0.0), pcie
    mem = [(n.cpu_memory_gib if n.cpu_memory_gib is not None else host, n.count) for n in groups]
    pcies = [n.pcie_gbps if n.pcie_gbps is not None else pcie for n in groups]
    return sum(m * c for m, c in mem), min(m for m, _ in mem), min(pcies)


def lower(spec: Spec, profiles: ProfileSet | None = None) -> ProblemIR:
    profiles = profiles or spec_profiles(spec)
    problems: list[Problem] = []
    for m in spec.models:
        if m.config is not None:
            profiles = profiles.with_model(model_from_hf_config(Path(spec.base_dir) / m.config, m.name))
    models = {m.name: profiles.models[m.name] for m in spec.models}
    gpus = tuple(sorted(
        (GpuPoolIR(g.type, g.count,
                   g.usd_per_hour if g.usd_per_hour is not None else profiles.gpus[g.type].usd_per_hour.value,
                   profiles.gpus[g.type], i, _max_tp(spec, g.type), _min_nic(spec, g.type),
                   *_host(spec, g.type, g.count, profiles.gpus[g.type])) for i, g in enumerate(spec.gpus)),
        key=lambda g: g.type))
    warnings: list[str] = []
    workloads = []
    for i, w in enumerate(spec.workloads):
        where = f"workloads[{i}] ({w.name})"
        ctx = int(models[w.model].max_context_tokens.value)
        try:
            isl, osl = length_grids(w, spec.base_dir)
            rate = workload_rate(w, spec.base_dir)
            hit, working_set, curve, source = workload_prefix(w, spec.base_dir)
        except LengthError as exc:
            problems.append(Problem(where, str(exc)))
            continue
        except InputError as exc:  # a malformed trace: its rows with line numbers
            problems.extend(exc.problems)
            continue
        if w.shared_prefix is not None:
            hit, working_set, curve, source = shared_prefix_reuse(w, isl)
            mean_isl = float(sum(isl) / len(isl))
            sp = w.shared_prefix
            if not sp.prompts_repeat and sp.prefix_tokens > mean_isl - 1:
                # the cap of shared_prefix_reuse, said: a prefix longer than the prompts that start with it is
                # a spec that means something else (specgen_mix probe, issue 35)
                warnings.append(f"{w.name}: shared_prefix.prefix_tokens {sp.prefix_tokens} is not shorter "
                                f"than the mean prompt ({mean_isl:.0f} tokens): the hit rate is capped at "
                                f"{hit:.0%} (the prompt less the token an engine always computes) and the "
                                "cache still holds groups x prefix_tokens")
        if isl[0] >= ctx:
            problems.append(Problem(f"{where}.input_tokens",
                                    f"every input length is at or beyond {w.model}'s "
                                    f"context window of {ctx} tokens"))
            continue
        cut = truncation(isl, osl, ctx)
        if cut.requests > 0:
            warnings.append(f"{w.name}: {cut.requests:.1%} of requests ({cut.tokens:.1%} of their tokens) "
                            f"exceed {w.model}'s {ctx}-token context: prompts are cut to the window, outputs "
                            "where prompt + output exceeds it")
        workloads.append(WorkloadIR(
            name=w.name, model=w.model, rate_rps=rate,
            slo=SloIR(w.slo.ttft_ms, w.slo.tpot_ms, w.slo.percentile),
            dtype=w.dtype or spec.defaults.dtype,
            buckets=make_buckets(cut_inputs(isl, ctx), osl, w.slo.percentile, ctx),
            truncated_share=cut.requests, index=i, prefix_hit_rate=hit, prefix_working_set=working_set,
            prefix_curve=curve, prefix_source=source, kv_dtype=w.kv_dtype,
        ))
    problems += [Problem(where, msg) for _, where, msg in kind_problems(spec)]
    if problems:
        raise InputError(problems, "spec")
    return ProblemIR(
        name=spec.name, objective=spec.objective, budget_usd_per_hour=spec.budget_usd_per_hour, gpus=gpus,
        models=models, workloads=tuple(sorted(workloads, key=lambda w: w.name)),
        engine=profiles.engines[spec.defaults.engine], input_hash=spec_hash(spec, profiles),
        warnings=tuple(warnings), inter_rack_gbps=spec.network.inter_rack_gbps, lora=lora_ir(spec),
        kv_tiers=spec.defaults.kv_tiers, identities=model_identities(spec, models),
        redundancy=spec.redundancy,
    )
