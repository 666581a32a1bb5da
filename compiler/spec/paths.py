"""Spec paths: what a MILP row's ``origin`` is (trimtab.solvers.model.Constraint), typed, converting both
ways.

A ``SpecPath`` names the part of the spec a row comes from: a top-level number (``budget_usd_per_hour``), a
field of a list item (``gpus[0] (h100-sxm).count``), or a block plus a note
(``gpus[0] (h100-sxm): nodes[].cpu_memory_gib``). ``str(path)`` is its display form, as errors name fields;
``path.whatif`` its dotted what-if form (``gpus.h100-sxm.count``, ``trimtab.spec.overrides.apply_overrides``),
None when it names no single number; ``SpecPath.from_whatif`` goes back. ``explain`` reads a relaxable row's
origin to say which number of the spec to change and offers it as a what-if path, so the model's rows, not
retyped strings, decide what is named.
"""
from __future__ import annotations

from dataclasses import dataclass

ITEM_SECTIONS = ("gpus", "workloads")  # list sections whose items what-if paths name by type / name


@dataclass(frozen=True, slots=True)
class SpecPath:
    section: str  # top-level key: "gpus", "workloads", "budget_usd_per_hour", "network", "objective", ...
    key: str = ""  # a list item's type or name ("h100-sxm", "chat"); "" for the section itself
    field: str = ""  # the item's (or section's) field, dotted ("count", "slo", "rate_rps")
    index: int | None = None  # the item's position in the spec's list, when known
    note: str = ""  # what of the item, when no single field says it ("nodes[].cpu_memory_gib")

    @classmethod
    def gpu(cls, pool, field: str = "", note: str = "") -> SpecPath:
        """A field of a GPU pool (``trimtab.ir.model.GpuPoolIR``: its ``type`` and ``index`` in the spec)."""
        return cls("gpus", pool.type, field, pool.index, note)

    @classmethod
    def workload(cls, w, field: str = "", note: str = "") -> SpecPath:
        """A field of a workload (``trimtab.ir.model.WorkloadIR``: its ``name`` and ``index`` in the spec)."""
        return cls("workloads", w.name, field, w.index, note)

    def __str__(self) -> str:
        s = (self.section + (f"[{self.index}]" if self.index is not None else "")
             + (f" ({self.key})" if self.key else ""))
        return s + (f".{self.field}" if self.field else "") + (f": {self.note}" if self.note else "")

    @property
    def whatif(self) -> str | None:
        """The dotted what-if path of the one number this names; None for a block or a note."""
        if self.note:
            return None
        if self.section in ITEM_SECTIONS:
            return f"{self.section}.{self.key}.{self.field}" if self.key and self.field else None
        return ".".join(p for p in (self.section, self.field) if p)

    @classmethod
    def from_whatif(cls, path: str, spec) -> SpecPath:
        """The path of a what-if override against ``spec`` (which gives list items their index)."""
        head, _, rest = path.partition(".")
        if head in ITEM_SECTIONS:
            key, _, field = rest.partition(".")
            items = spec.gpus if head == "gpus" else spec.workloads
            for i, it in enumerate(items):
                if (it.type if head == "gpus" else it.name) == key:
                    return cls(head, key, field, i)
            raise KeyError(f"{path}: no {head[:-1]} named {key!r}")
        return cls(head, field=rest)
