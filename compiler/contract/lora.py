"""Plan emission: the LoRA/tenant fields are left out of a plan that does not use them (byte-stable plans)."""
from __future__ import annotations

DEPLOYMENT_KEYS = {"adapters": [], "max_loras": 0, "max_lora_rank": 0, "max_cpu_loras": 0, "tenants": [],
                   "colocated_with": None, "group_replicas": 0}


def strip_lora_defaults(data: dict) -> dict:
    data["deployments"] = [{k: v for k, v in d.items()
                            if not (k in DEPLOYMENT_KEYS and v == DEPLOYMENT_KEYS[k])}
                           for d in data.get("deployments", [])]
    if not data.get("adapter_routes"):
        data.pop("adapter_routes", None)
    return data
