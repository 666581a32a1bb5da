"""One planning path for every command (issue 11): pareto's point at the spec's own SLOs is plan's plan, both
pass check; explain prices a feasible spec with plan's validated cost and labels its cost-model figures."""
from __future__ import annotations

from typer.testing import CliRunner

import trimtab as tt
from trimtab.gate.analytic import check as analytic_check
from trimtab.cli.main import app
from trimtab.study.pareto import pareto
from tests.conftest import SMALL_SPEC

SPEC = SMALL_SPEC.replace("rate_rps: 5", "rate_rps: 40")


def test_pareto_point_at_the_specs_slos_is_the_plan(tmp_path):
    (tmp_path / "s.yaml").write_text(SPEC)
    spec = tt.load_spec(tmp_path / "s.yaml")
    planned = tt.plan(spec).plan
    pts = pareto(spec, "ttft_p99", points=2)
    loosest = max(pts, key=lambda p: p.factor)
    assert loosest.factor == 1.0
    assert loosest.cost_usd_per_hour == planned.cost_usd_per_hour
    assert [(d.name, d.replicas) for d in loosest.plan.deployments] == [(d.name, d.replicas)
                                                                        for d in planned.deployments]
    for p in pts:  # every point is a validated plan that passes check against its own (tightened) spec
        assert p.plan.simulation is not None and p.plan.simulation.passed
        assert analytic_check(p.plan, p.spec).ok


def test_cli_labels_analytic_output(tmp_path):
    (tmp_path / "s.yaml").write_text(SPEC)
    r = CliRunner().invoke(app, ["pareto", str(tmp_path / "s.yaml"), "--points", "1", "--analytic",
                                 "--serial"])
    assert r.exit_code == 0 and "analytic: cost model only" in r.output
    r = CliRunner().invoke(app, ["explain", str(tmp_path / "s.yaml")])
    assert r.exit_code == 0, r.output
    planned = tt.plan(tt.load_spec(tmp_path / "s.yaml")).plan
    assert (f"trimtab plan's plan costs {planned.cost_usd_per_hour:.2f} $/h (validated by simulation)"
            in r.output)
    assert "analytic (cost model only, not validated)" in r.output
