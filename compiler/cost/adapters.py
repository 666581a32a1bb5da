"""From a deployment's LoRA settings to the cost model's ``LoraReplicaModel`` arguments (planner, assess,
check and simulator share this, so all four price a LoRA replica the same way)."""
from __future__ import annotations

from trimtab.cost.lora import swap_s
from trimtab.spec.lora import DEFAULT_MODULES

ORDER = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def modules_of(ir, model: str) -> tuple[str, ...]:
    """Target modules a LoRA deployment of ``model`` preallocates: the union over the model's adapters."""
    lo = getattr(ir, "lora", None)
    mods: set[str] = set()
    if lo is not None:
        for n in lo.by_model.get(model, ()):
            mods.update(lo.adapters[n].modules)
    return tuple(m for m in ORDER if m in mods) or DEFAULT_MODULES


def lora_kwargs(ir, model: str, max_loras: int, max_lora_rank: int, n_adapters: int) -> dict | None:
    """Keyword arguments of ``replica_model(..., lora=...)``; None for a deployment without LoRA. More
    adapters than GPU slots: every request is charged one swap-in (see trimtab.cost.lora)."""
    if max_loras <= 0:
        return None
    mods = modules_of(ir, model)
    wait = swap_s(ir.models[model], max_lora_rank, mods) if n_adapters > max_loras else 0.0
    return {"slots": max_loras, "rank": max_lora_rank, "modules": mods, "swap_wait_s": wait}
