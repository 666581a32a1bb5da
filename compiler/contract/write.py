"""Plan -> canonical YAML or JSON text (byte-stable: fixed key order, sorted lists, rounded floats)."""
from __future__ import annotations

import json
import math
from typing import Any

from trimtab.contract.lora import strip_lora_defaults
from trimtab.contract.schema import Plan
from trimtab.util.yamlio import dump_canonical


def _round(x: Any) -> Any:
    if isinstance(x, float):
        if not math.isfinite(x):
            return None
        return float(f"{x:.6g}")
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_round(v) for v in x]
    return x


def plan_to_data(plan: Plan) -> dict:
    data = _round(plan.model_dump(mode="python"))
    # Routes name either ``deployment`` or a ``prefill``/``decode`` pair; keys that are null are left out.
    data["routes"] = [{k: v for k, v in r.items() if v is not None or k == "share"} for r in data["routes"]]
    for d in data["deployments"]:  # KV tiers: only in plans of specs that enable them
        if d.get("kv", 0) is None:
            del d["kv"]
        elif not d["kv"].get("live"):  # experimental-live plans only (docs/kv-tiers.md)
            d["kv"].pop("live", None)
    # Prefix reuse (docs/prefix-caching.md): left out when there is none, so such plans keep their bytes.
    if not data.get("prefix"):
        data.pop("prefix", None)
    for d in data["deployments"]:
        if d.get("prefix_cache_tokens") == 0:
            del d["prefix_cache_tokens"]
        for k in ("data_parallel", "expert_parallel"):  # MoE layouts only (docs/moe.md)
            if d.get(k) == 1:
                del d[k]
        if d.get("kv_dtype") is None:  # a KV precision set apart from dtype's only (docs/moe.md, FP4)
            d.pop("kv_dtype", None)
        for k in ("worker_command", "engine_files"):  # multi-node replicas / TensorRT-LLM only
            if not d.get(k):
                d.pop(k, None)
    if not data.get("misses"):  # a plan its own validation found missing only (plan --allow-misses)
        data.pop("misses", None)
    data["solver"].pop("seconds", None)  # wall time: not reproducible, never written (plan/schema.SolverInfo)
    if data.get("simulation") and not data["simulation"].get("undersampled"):  # rare workloads only
        data["simulation"].pop("undersampled", None)
    if data.get("redundancy") is None:  # spec redundancy n+1 only
        data.pop("redundancy", None)
    if data.get("schedule") is None:  # schedules (docs/online.md) only in plans of specs that have one
        data.pop("schedule", None)
    else:
        for w in data["schedule"]["windows"]:
            w["routes"] = [{k: v for k, v in r.items() if v is not None or k == "share"} for r in w["routes"]]
            if not w.get("attainment_lower"):
                w.pop("attainment_lower", None)
    return strip_lora_defaults(data)


def emit(plan: Plan, fmt: str = "yaml") -> str:
    data = plan_to_data(plan)
    if fmt == "json":
        return json.dumps(data, indent=2) + "\n"
    return dump_canonical(data)
