"""Constraint provenance is typed (issue 12): every row of the real MILP names its origin as a ``SpecPath``; a
relaxable row's what-if path is one that ``apply_overrides`` accepts and that changes exactly the number the
row's right-hand side came from; ``from_whatif`` returns the same path."""
from __future__ import annotations

from trimtab.milp.candidates import build_candidates
from trimtab.milp.formulate import formulate
from trimtab.ir.lower import lower
from trimtab.spec.load import load_spec
from trimtab.spec.paths import SpecPath
from trimtab.spec.overrides import apply_overrides


def test_every_row_has_a_typed_origin_and_relaxable_rows_round_trip(small_spec_path):
    spec = load_spec(small_spec_path)
    ir = lower(spec)
    m = formulate(ir, build_candidates(ir, jobs=1))
    assert m.constraints and all(isinstance(c.origin, SpecPath) for c in m.constraints)
    relaxable = [c for c in m.constraints if c.relaxable]
    assert {c.family for c in relaxable} == {"inventory", "budget"}
    for c in relaxable:
        path = c.origin.whatif
        assert path is not None, c.name
        assert SpecPath.from_whatif(path, spec) == c.origin
        changed = lower(apply_overrides(spec, {path: int(c.rhs) + 7}))
        if c.family == "inventory":
            assert changed.gpu(c.origin.key).count == c.rhs + 7
            assert str(c.origin) == f"gpus[{c.origin.index}] ({c.origin.key}).count"
        else:
            assert changed.budget_usd_per_hour == c.rhs + 7 and str(c.origin) == "budget_usd_per_hour"


def test_display_and_whatif_forms():
    p = SpecPath("workloads", "chat", "slo.ttft_ms", 2)
    assert str(p) == "workloads[2] (chat).slo.ttft_ms" and p.whatif == "workloads.chat.slo.ttft_ms"
    note = SpecPath("gpus", "l4", index=1, note="nodes[].cpu_memory_gib")
    # a block, not a number
    assert str(note) == "gpus[1] (l4): nodes[].cpu_memory_gib" and note.whatif is None
    assert SpecPath("gpus", "l4").whatif is None
    assert SpecPath("network", field="inter_rack_gbps").whatif == "network.inter_rack_gbps"
