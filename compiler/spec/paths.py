"""Spec paths, both ways: the display form a constraint's ``origin`` carries (``gpus[0] (h100-sxm).count``, as
errors name fields) and the dotted what-if form (``gpus.h100-sxm.count``, ``compiler.whatif.apply_overrides``).

``explain`` reads a relaxable constraint's origin to say which number of the spec to change and offers it as a
what-if path, so the model's rows, not retyped strings, decide what is named.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_ITEM = re.compile(r"^(gpus|workloads)\[(\d+)\] \(([^)]+)\)\.(.+)$")


@dataclass(frozen=True)
class SpecPath:
    where: str  # display form, e.g. "gpus[0] (h100-sxm).count"
    whatif: str  # dotted form, e.g. "gpus.h100-sxm.count"

    @classmethod
    def from_origin(cls, origin: str) -> "SpecPath | None":
        """The path of a constraint origin; None when it names no single number of the spec."""
        m = _ITEM.match(origin)
        if m:
            return cls(origin, f"{m.group(1)}.{m.group(3)}.{m.group(4)}")
        if re.fullmatch(r"[a-z_]+", origin):
            return cls(origin, origin)
        return None

    @classmethod
    def from_whatif(cls, path: str, spec) -> "SpecPath":
        """The display form of a what-if path against ``spec`` (its list indices)."""
        head, _, rest = path.partition(".")
        if head in ("gpus", "workloads"):
            key, _, field = rest.partition(".")
            items = spec.gpus if head == "gpus" else spec.workloads
            for i, it in enumerate(items):
                if (it.type if head == "gpus" else it.name) == key:
                    return cls(f"{head}[{i}] ({key}).{field}", path)
            raise KeyError(f"{path}: no {head[:-1]} named {key!r}")
        return cls(path, path)

    @staticmethod
    def origin(kind: str, index: int, key: str, field: str) -> str:
        """The origin string of a list item's field: what formulations write."""
        return f"{kind}[{index}] ({key}).{field}"
