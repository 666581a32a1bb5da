"""One price function (issue 37): a replica's $/h is ``trimtab.deployment.price.replica_usd_per_hour`` and
a fleet's ``fleet_usd_per_hour``, wherever a candidate is priced or a plan's cost is summed (candidates,
disaggregation, the adapter planner, extraction, explain, decomposition, schedules, the gates, the CLI's
table). This test greps for the arithmetic written out again beside them."""
from __future__ import annotations

import re

import pytest

from tests.architecture.grep import ROOT, matching_lines, offenders

OWNER = ROOT / "compiler" / "deployment" / "price.py"
IDIOMS = [
    re.compile(r"""usd_per_hour\s*\*\s*(tp|\w+\.gpus\w*|gpus)\b"""),  # a replica priced from its GPUs
    re.compile(r"""\bcost\s*\+=\s*\w+\s*\*"""),  # a fleet's cost summed by hand
    # (a start's cost, $/h x its startup seconds, is another quantity: ``startup_usd``, below)
    re.compile(r"""\bsum\((?!.*startup).*usd_per_hour\s*\*"""),
    re.compile(r"""\bsum\((?!.*startup).*\*\s*\w+(\.cand)?\.usd_per_hour\b"""),
    re.compile(r"""\w+\s*\*\s*\w+\.usd_per_hour\s*\+\s*\w+\s*\*\s*\w+\.usd_per_hour"""),
    # a replica start priced by hand: $/h x seconds / 3600 (``startup_usd``)
    re.compile(r"""usd_per_hour\s*\*\s*[^/\n]*/\s*3600"""),
]


def test_prices_and_costs_go_through_the_price_functions():
    files = (p for folder in ("compiler", "cli") for p in sorted((ROOT / folder).rglob("*.py")) if p != OWNER)
    assert offenders(files, IDIOMS) == []


def test_the_grep_sees_the_idioms():
    once = ["usd_per_hour=pool.usd_per_hour * tp * pp * dp, capacity_rps=tuple(caps)",
            "cost += n * c.usd_per_hour",
            "cost = sum(by_id[d].usd_per_hour * n for d, n in reps.items())",
            "usd = sum(round(parts[c.workload].values.get(n_var(c.id), 0.0)) * c.usd_per_hour for c in cs)",
            "usd = kp * p.usd_per_hour + kd * d.usd_per_hour",
            "price = r.ir.gpu(d.gpu).usd_per_hour * d.gpus_per_replica * d.replicas",
            "start_usd += up * c.usd_per_hour * st[c.id] / 3600.0",
            "su = c.usd_per_hour * startup_s.get(c.id, 0.0) / 3600.0"]
    assert [line for line in once if not matching_lines(line, IDIOMS)] == []


def test_candidates_are_priced_by_their_gpus():
    from trimtab.deployment.price import fleet_usd_per_hour, replica_usd_per_hour
    from trimtab.ir.lower import lower
    from trimtab.milp.candidates import build_candidates
    from trimtab.spec.load import load_spec

    ir = lower(load_spec(ROOT / "examples" / "disaggregated.yaml"))
    cands = build_candidates(ir)
    assert cands.disagg
    for c in cands.candidates:
        assert c.usd_per_hour == ir.gpu(c.gpu).usd_per_hour * c.gpus
        assert c.usd_per_hour == replica_usd_per_hour(ir.gpu(c.gpu).usd_per_hour, c.tp, c.pp, c.dp)
    assert fleet_usd_per_hour([(2, 3.9), (1, 2.2)]) == 2 * 3.9 + 2.2
    from trimtab.deployment.price import startup_usd

    assert startup_usd(7.2, 300.0, 2) == pytest.approx(1.2)  # two starts of 5 min at 7.20 $/h
