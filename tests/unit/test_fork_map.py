"""``trimtab.util.jobs.fork_map``: the same values in the same order in forked processes as in this one, and
the plan's figures it computes (``with_capacities``, ``mix_predictions``) the same whichever way they ran."""
from __future__ import annotations

import os

import trimtab.milp.assess as assess_mod
import trimtab.milp.extract as extract_mod
import trimtab.util.jobs as jobs
from trimtab.deployment.shape import DeploymentSpecView, RouteView
from tests.conftest import planned


def test_forked_calls_return_what_calls_here_return_in_order(monkeypatch):
    monkeypatch.setenv("TRIMTAB_JOBS", "2")
    pids = jobs.fork_map(lambda _: os.getpid(), list(range(8)), 0)
    assert set(pids) != {os.getpid()}  # it forked
    items = [x / 7 for x in range(50)]
    assert jobs.fork_map(lambda x: (x * 3.1) ** 0.5, items, 0) == [(x * 3.1) ** 0.5 for x in items]
    assert jobs.fork_map(lambda _: os.getpid(), list(range(8)), 9) == [os.getpid()] * 8  # too few to fork
    monkeypatch.setenv("TRIMTAB_JOBS", "1")
    assert jobs.fork_map(lambda _: os.getpid(), list(range(8)), 0) == [os.getpid()] * 8


def test_capacities_and_mix_predictions_are_the_same_forked(monkeypatch):
    p = planned("quickstart", validate=False)
    plan, ir = p.plan, p.ir
    views = [DeploymentSpecView.of_plan(d) for d in plan.deployments]
    routes = [RouteView(r.workload, r.bucket, r.deployment or "", r.share, r.prefill or "", r.decode or "")
              for r in plan.routes]
    monkeypatch.setenv("TRIMTAB_JOBS", "1")
    here = (extract_mod.with_capacities(plan, ir), assess_mod.mix_predictions(ir, views, routes))
    monkeypatch.setenv("TRIMTAB_JOBS", "2")
    monkeypatch.setattr(assess_mod, "FORK_DEPLOYMENTS", 0)
    monkeypatch.setattr(extract_mod, "FORK_DEPLOYMENTS", 0)
    forked = (extract_mod.with_capacities(plan, ir), assess_mod.mix_predictions(ir, views, routes))
    assert forked == here
    assert any(d.capacity_rps_per_replica for d in here[0].deployments) and here[1]
