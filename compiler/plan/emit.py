"""Plan -> canonical YAML or JSON text (byte-stable: fixed key order, sorted lists, rounded floats)."""
from __future__ import annotations

import json
import math
from typing import Any

from compiler.plan.schema import Plan
from compiler.yamlio import dump_canonical


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
    return _round(plan.model_dump(mode="python"))


def emit(plan: Plan, fmt: str = "yaml") -> str:
    data = plan_to_data(plan)
    if fmt == "json":
        return json.dumps(data, indent=2) + "\n"
    return dump_canonical(data)
