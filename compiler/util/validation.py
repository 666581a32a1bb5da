"""Turn pydantic validation errors into one ``Problem`` per error, with the field path and YAML line."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from trimtab.errors import InputError, Problem
from trimtab.util.yamlio import LineMap, line_for


def human_path(loc: tuple, data: Any) -> str:
    """``("workloads", 0, "rate_rps")`` -> ``workloads[0] (chat).rate_rps``: the name helps in long files."""
    out = ""
    node = data
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            if isinstance(node, list) and 0 <= part < len(node):
                node = node[part]
                if isinstance(node, dict) and isinstance(node.get("name") or node.get("type"), str):
                    out += f" ({node.get('name') or node.get('type')})"
            else:
                node = None
        else:
            out += ("." if out else "") + str(part)
            node = node.get(part) if isinstance(node, dict) else None
    return out


def _clean_loc(loc: tuple) -> tuple:
    # pydantic inserts union-member tags and "function-after[...]" steps into loc; drop them.
    return tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p.startswith("function-"))))


def validate(model: type[BaseModel], data: Any, lines: LineMap, source: str, what: str) -> Any:
    """Validate ``data`` as ``model``; on failure raise InputError listing every problem."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = []
        seen = set()
        for err in exc.errors(include_url=False):
            loc = _clean_loc(tuple(err["loc"]))
            msg = err["msg"]
            if err["type"] == "extra_forbidden":
                msg = "unknown field (not part of the schema; check the spelling)"
            elif err["type"] == "missing":
                msg = "required field is missing"
            key = (loc, msg)
            if key in seen:
                continue
            seen.add(key)
            problems.append(Problem(human_path(loc, data), msg, source, line_for(lines, loc)))
        raise InputError(problems, what) from None
