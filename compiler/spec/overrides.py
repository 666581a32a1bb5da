"""Dotted-path overrides of a spec: ``workloads.chat.rate_rps``, ``gpus.h100-sxm.count``,
``budget_usd_per_hour``.

List entries are addressed by their name (workloads, models) or type (gpus), or by index. The result is
validated again, so an override cannot produce an invalid spec silently.
"""
from __future__ import annotations

from trimtab.errors import InputError, Problem
from trimtab.spec.schema import Spec
from trimtab.util.validation import validate


def apply_overrides(spec: Spec, overrides: dict[str, object]) -> Spec:
    data = spec.model_dump(mode="python", exclude_none=True)
    for path, value in sorted(overrides.items()):
        parts = path.split(".")
        node = data
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if isinstance(node, list):
                idx = next((j for j, it in enumerate(node) if isinstance(it, dict)
                            and part in (it.get("name"), it.get("type"))), None)
                if idx is None and part.isdigit() and int(part) < len(node):
                    idx = int(part)
                if idx is None:
                    raise InputError([Problem(path, f"no entry named {part!r}")], "override")
                if last:
                    node[idx] = value
                else:
                    node = node[idx]
            elif isinstance(node, dict):
                if last:
                    node[part] = value
                elif part not in node:
                    raise InputError([Problem(path, f"no field {part!r}")], "override")
                else:
                    node = node[part]
            else:
                raise InputError([Problem(path, f"{parts[i - 1]!r} is not a mapping or list")], "override")
    out = validate(Spec, data, {}, "<what-if>", "spec")
    out._base_dir = spec.base_dir
    return out
