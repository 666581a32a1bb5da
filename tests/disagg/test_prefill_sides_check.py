"""The prefill sides are searched only where they may change what ``build_pd_candidates`` offers
(``_prefill_may_matter``, one evaluation per side and bucket): checked against the sides searched in full, and
against the candidates built with the check switched off."""
from __future__ import annotations

from pathlib import Path

import pytest

import trimtab.milp.disagg as disagg
from trimtab.api import load_spec
from trimtab.cost.transfer import nic_bytes_per_s
from trimtab.ir.lower import lower
from trimtab.milp.candidates import build_candidates

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ("quickstart", "disaggregated", "long-context", "diurnal")


def _cases():
    """(ir, workload, its decode sides, its unified candidates, the narrowest NIC share) wherever
    ``build_pd_candidates`` reaches the prefill sides."""
    for name in EXAMPLES:
        ir = lower(load_spec(ROOT / "examples" / f"{name}.yaml"))
        built = build_candidates(ir, jobs=1)
        for w in ir.workloads:
            mine = tuple(c for c in built.unified if c.workload == w.name)
            if not disagg._may_pay(ir, w, mine, {}):
                continue
            dec = disagg._role_candidates(ir, w, "decode", None, memo={})
            if dec:
                yield ir, w, dec, mine, min(nic_bytes_per_s(ir.gpu(c.gpu), c.gpus) for c in dec)


def _paying(w, pre, dec, mine) -> set[str]:
    """The buckets a pair is offered for (build_pd_candidates' rule, with the sides searched in full)."""
    served = {b for c in pre for b, _ in c.capacity_rps} & {b for c in dec for b, _ in c.capacity_rps}
    return {b for b in served
            if disagg._usd_per_rps(pre, w.name, b, "prefill") + disagg._usd_per_rps(dec, w.name, b, "decode")
            < (1 - disagg.PD_MARGIN) * disagg._usd_per_rps(mine, w.name, b, "unified")}


def test_prefill_sides_skipped_only_where_they_change_nothing():
    said = []
    for ir, w, dec, mine, narrow in _cases():
        may = disagg._prefill_may_matter(ir, w, dec, mine, narrow)
        said.append(may)
        if may:
            continue
        pre = disagg._role_candidates(ir, w, "prefill", narrow, memo={})
        assert pre, "a skipped workload whose prefill sides serve nothing does not test the bound"
        assert not _paying(w, pre, dec, mine), w.name
        assert disagg._heavy_kv(ir, w, pre, dec, narrow) == disagg._heavy_kv(ir, w, [], dec, narrow), w.name
    assert True in said and False in said, said  # both answers occur, so each branch above is exercised


@pytest.mark.parametrize("name", ["quickstart", "disaggregated"])
def test_the_candidates_are_those_built_with_every_prefill_side_searched(name, monkeypatch):
    ir = lower(load_spec(ROOT / "examples" / f"{name}.yaml"))
    fast = build_candidates(ir, jobs=1)
    monkeypatch.setattr(disagg, "_prefill_may_matter", lambda *args: True)
    full = build_candidates(ir, jobs=1)
    assert fast.candidates == full.candidates and fast.pruned == full.pruned and fast.best == full.best
