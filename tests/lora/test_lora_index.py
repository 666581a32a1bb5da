"""The adapter planner on the shared deployment records (issue 37): its candidates are ``Candidate`` records
with their LoRA slots in ``lora`` and their group, colour and per-workload capacities in ``lora_group``, and
its MILP's variables come with a typed index (``trimtab.planning.lora.LoraIndex``) that extraction, fill,
explain and n+1 read the solution through, on the multi-LoRA example."""
from __future__ import annotations

from pathlib import Path

import pytest

from trimtab.deployment.shape import Candidate, DeploymentSpecView, replica_model_of
from trimtab.ir.lower import lower
from trimtab.planning.lora import LoraIndex, LoraPlanner, extract, formulate, solve
from trimtab.planning.lora_candidates import slots, usable
from trimtab.solvers import SolveOptions, get_backend
from trimtab.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def problem():
    ir = lower(load_spec(ROOT / "examples" / "multi-lora.yaml"))
    return ir, LoraPlanner().candidates(ir)


def test_shared_candidates_are_candidates_with_their_slots_and_group(problem):
    ir, prob = problem
    assert prob.cands and all(type(c) is Candidate and c.lora_group is not None for c in prob.cands)
    groups = {u.group for u in prob.units}
    for c in prob.cands:
        assert c.lora_group.name in groups and c.capacity_rps == ()
        assert all(v > 0 for _, v in c.lora_group.capacity_rps)
        # the slots ride on the shape: the view, and through it the cost model, see the same ones
        assert DeploymentSpecView.of_candidate(c, 2).lora == c.lora
        assert (slots(c) > 0) == (replica_model_of(ir, c).memory.kv_cache_tokens
                                  < replica_model_of(ir, DeploymentSpecView.of_candidate(c, 1, lora=None))
                                  .memory.kv_cache_tokens)
    assert {slots(c) for c in prob.cands} >= {0, 1}


def test_the_index_is_every_variable_of_the_model(problem):
    ir, prob = problem
    m, ix = formulate(ir, prob, {})
    routes = [r for rs in ix.routes.values() for r in rs]
    onto = [r for rs in ix.onto.values() for r in rs]
    assert len(onto) == len(routes) and set(onto) == set(routes)
    handles = set(ix.replicas.values()) | {r.x for r in routes} | {r.hold for r in routes if r.hold}
    assert handles == set(m.variables)
    assert all(m.variables[r.x].family == "route" for r in routes)
    for u in prob.units:
        assert [r.cand for r in ix.routes[u]] == [c for c in prob.cands if usable(u, c)]
    # each capacity row is keyed by its candidate and sums exactly the routes onto it
    rows = {con.key: con for con in m.constraints if con.family == "capacity"}
    for c in prob.cands:
        assert [v for v, _ in rows[c].expr] == [r.x for r in ix.onto[c]] + [ix.replicas[c]]


def test_extraction_and_fill_read_the_solution_through_the_index(problem):
    ir, prob = problem
    planner = LoraPlanner()
    res = solve(ir, prob, {}, get_backend("highs"), SolveOptions(60))
    ix = LoraIndex.of(prob)
    chosen, flows = extract(ir, prob, res.values)
    assert chosen == [(c, n) for c, n in ix.bought(res.values).items() if n > 0]
    per_unit = {u: sum(res.values.get(r.x, 0.0) for r in ix.routes[u]) for u in prob.units}
    assert all(v == pytest.approx(u.rate) for u, v in per_unit.items())
    # every unit's traffic lands on the deployments the index routes it to, adapters split or not
    served = sum(r for f in flows.values() for r in f.values())
    assert served == pytest.approx(sum(u.rate for u in prob.units))
    fill = planner.fill(prob, res, {})
    assert set(fill) == {c.id for c, _ in chosen}
    assert all(0 < f <= 1 + 1e-6 for f in fill.values())
