"""The round policy (``trimtab.planning.policy.RoundPolicy``), the object the driver calls for the derates of
each round: the capacity prior is added once, on the first simulated miss, and dropped once where no plan
meets it; a planner that simulates its own way (schedules) gets neither the prior nor the searches after the
rounds; analytic corrections wait for the round's simulation only where that simulation would miss too.
On the quickstart's real candidates and the fitted prior table."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from trimtab.ir.lower import lower
from trimtab.planning.planners import UnifiedPlanner
from trimtab.planning.policy import RoundPolicy, cut
from trimtab.planning.rounds import DERATE, first_try_worth, prior_derates
from trimtab.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[2]


class OwnSimulation(UnifiedPlanner):
    """A planner with its own ``simulate``, as the schedule planner has."""

    def simulate(self, plan, spec, ir, seeds, requests, derate, fill, net):
        return SimpleNamespace(ok=True), {**derate, "mine": 0.5}


@pytest.fixture(scope="module")
def quickstart():
    ir = lower(load_spec(ROOT / "examples" / "quickstart.yaml"))
    planner = UnifiedPlanner()
    return ir, planner, planner.candidates(ir)


def test_prior_added_on_the_first_simulated_miss_and_dropped_once(quickstart):
    ir, planner, cands = quickstart
    assert first_try_worth(ir)  # a few workloads: the first solve is on the model's own capacities
    pol = RoundPolicy(ir, planner, cands, simulated=True)
    prior = prior_derates(ir, planner.peers(cands, fitted=True))
    assert prior and pol.derate == {} and pol.start == {}
    assert not pol.drop_prior()  # nothing to drop before it is added
    pol.missed_in_simulation(None, 3, {})
    assert pol.derate == prior
    assert pol.drop_prior() and pol.derate == {}
    assert not pol.drop_prior()
    pol.missed_in_simulation(None, 3, {})  # dropped: not added again
    assert pol.derate == {}
    assert pol.probes_worth() and pol.single_types_worth()
    assert not pol.goodput_search_worth()  # min_cost: probes by cost instead


def test_max_goodput_rounds_stop_at_the_first_confirmed_plan_then_search(quickstart):
    """max_goodput: corrected like any plan, but no probe by cost nor search per GPU type; after a simulated
    miss the search between the capacities confirmed and refuted (trimtab.planning.goodput)."""
    ir, planner, cands = quickstart
    pol = RoundPolicy(replace(ir, objective="max_goodput"), planner, cands, simulated=True)
    assert not pol.probes_worth() and not pol.single_types_worth()
    assert not pol.goodput_search_worth()  # nothing refuted yet
    refuted = {cands.candidates[0].id: 0.8}
    pol.missed_in_simulation(None, 3, refuted)
    assert pol.failed_with == refuted and pol.goodput_search_worth()
    assert not pol.probe({"x": 0.5}) and pol.derate == {"x": 0.5}  # the rounds stop at the confirmed plan


def test_a_planner_that_simulates_its_own_way_gets_no_prior(quickstart):
    ir, _, cands = quickstart
    pol = RoundPolicy(ir, OwnSimulation(), cands, simulated=True)
    pol.missed_in_simulation(None, 3, {})
    assert pol.derate == {}
    res = pol.simulate(None, None, (0,), 10, {}, {}, None, None)
    assert res.ok and pol.derate == {"mine": 0.5}  # its own corrections are the next solve's
    assert not pol.probes_worth() and not pol.single_types_worth()


def test_analytic_corrections_now_or_with_the_simulation(quickstart):
    ir, planner, cands = quickstart
    dep = cands.candidates[0].id
    miss = SimpleNamespace(worst_deployment=dep)
    now = RoundPolicy(ir, planner, cands, simulated=True)
    assert now.analytic([miss], {}) is None  # the quickstart's simulation may pass: re-solve on them first
    assert now.derate == {dep: DERATE} and now.measured == {dep: DERATE}
    later = RoundPolicy(ir, planner, cands, simulated=True)
    later.past_misses = True  # as for a spec of many workloads (simulate_past_misses)
    held = later.analytic([miss], {})
    assert held == {dep: DERATE} and later.derate == {}
    later.take(held)
    assert later.derate == {dep: DERATE}
    assert cut({dep: 0.9}, {dep: 0.5, "other": 0.1}, [dep]) == {dep: 0.5}
