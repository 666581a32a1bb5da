"""A GPU type's candidates taken from the whole set are those its spec alone builds
(``trimtab.milp.candidates.for_one_type``, which ``single_types`` plans each type alone with)."""
from __future__ import annotations

from dataclasses import replace

import pytest

import trimtab
from tests.conftest import ROOT
from trimtab.ir.lower import lower
from trimtab.milp.candidates import build_candidates, for_one_type
from trimtab.spec.load import spec_profiles

# Examples whose sets differ between types in the ways that matter: P/D pairs offered on one type alone
# (quickstart's and robust's), KV-tier variants (long-context), several NVLink domains (disaggregated).
EXAMPLES = ["quickstart", "robust", "disaggregated", "long-context", "shared-prefix"]


def _alone(spec, gpu: str):
    return spec.model_copy(update={"gpus": [g for g in spec.gpus if g.type == gpu],
                                   "nodes": None if spec.nodes is None else
                                   [n for n in spec.nodes if n.gpu == gpu] or None})


@pytest.mark.parametrize("example", EXAMPLES)
def test_each_type_alone_gets_the_candidates_its_own_spec_builds(example):
    spec = trimtab.load_spec(ROOT / "examples" / f"{example}.yaml")
    profiles = spec_profiles(spec)
    ir = lower(spec, profiles)
    full = build_candidates(ir)
    compared = 0
    for g in spec.gpus:
        one = _alone(spec, g.type)
        if spec.nodes is not None and one.nodes is None:
            continue
        ir_one = lower(one, profiles)
        derived = for_one_type(full, ir, ir_one)
        built = build_candidates(ir_one)
        assert derived is not None, g.type
        assert derived.candidates == built.candidates, g.type
        assert derived.disagg == built.disagg, g.type
        compared += 1
    assert compared == len(spec.gpus)


def test_pairs_are_rebuilt_for_the_type_alone():
    """On the quickstart the L40S alone gets P/D pairs that the whole set never offers (a pair must beat the
    cheapest unified shape of any type offered): a filter of the whole set's pairs would miss them."""
    spec = trimtab.load_spec(ROOT / "examples" / "quickstart.yaml")
    profiles = spec_profiles(spec)
    ir = lower(spec, profiles)
    full = build_candidates(ir)
    derived = for_one_type(full, ir, lower(_alone(spec, "l40s"), profiles))
    assert derived.disagg
    assert not [c for c in full.disagg if c.gpu == "l40s"]


@pytest.mark.parametrize("example", ["quickstart", "disaggregated"])
def test_pairs_of_a_type_alone_reuse_the_sides_the_whole_set_made(example, monkeypatch):
    """The prefill and decode sides the whole set made on a type are those its spec alone makes
    (``CandidateSet.pd_memo``): with them the type's pairs take fewer capacity searches, and are the same."""
    import trimtab.cost.model as model

    spec = trimtab.load_spec(ROOT / "examples" / f"{example}.yaml")
    profiles = spec_profiles(spec)
    ir = lower(spec, profiles)
    full = build_candidates(ir)
    searches = []
    role = model.ReplicaModel.capacity_rps_role
    monkeypatch.setattr(model.ReplicaModel, "capacity_rps_role",
                        lambda self, *a, **k: searches.append(1) or role(self, *a, **k))
    fewer = 0
    for g in spec.gpus:
        ir_one = lower(_alone(spec, g.type), profiles)
        searches.clear()
        reused = for_one_type(replace(full, pd_memo=dict(full.pd_memo)), ir, ir_one)
        n_reused = len(searches)
        searches.clear()
        rebuilt = for_one_type(replace(full, pd_memo={}), ir, ir_one)
        assert reused.disagg == rebuilt.disagg, g.type
        assert n_reused <= len(searches), g.type
        fewer += n_reused < len(searches)
    assert fewer


def test_a_type_lowered_differently_is_built_not_derived():
    spec = trimtab.load_spec(ROOT / "examples" / "quickstart.yaml")
    profiles = spec_profiles(spec)
    ir = lower(spec, profiles)
    one = lower(_alone(spec, "l4"), profiles)
    moved = replace(one, gpus=(replace(one.gpus[0], usd_per_hour=one.gpus[0].usd_per_hour / 2),))
    assert for_one_type(build_candidates(ir), ir, moved) is None
    assert for_one_type(build_candidates(ir), ir, replace(one, workloads=one.workloads[:1])) is None
    assert for_one_type(build_candidates(ir), ir, one) is not None


@pytest.mark.parametrize("example", ["quickstart", "robust", "disaggregated", "long-context"])
def test_the_floor_is_below_the_first_solve_of_each_type_alone(example):
    """``one_type_floor`` lets ``single_types`` skip a type without building its pairs: it must never exceed
    the optimum of the type's own first solve (on its own candidates, pairs included), which no later round
    undercuts; and it must bound something (above zero) for the skip to be worth having."""
    from trimtab.milp.candidates import one_type_floor
    from trimtab.planning.planners import UnifiedPlanner
    from trimtab.solvers import get_backend
    from trimtab.solvers.base import SolveOptions

    spec = trimtab.load_spec(ROOT / "examples" / f"{example}.yaml")
    profiles = spec_profiles(spec)
    ir = lower(spec, profiles)
    full = build_candidates(ir)
    planner = UnifiedPlanner()
    for g in spec.gpus:
        ir_one = lower(_alone(spec, g.type), profiles)
        floor = one_type_floor(full, ir, ir_one)
        res = planner.solve(ir_one, build_candidates(ir_one), {}, get_backend("highs"), SolveOptions())
        assert 0 < floor
        if res.has_solution:
            assert floor <= res.objective + 1e-9, (g.type, floor, res.objective)


@pytest.mark.parametrize("example", ["quickstart", "robust", "disaggregated", "long-context"])
@pytest.mark.parametrize("scale", [1.0, 0.25])
def test_the_lp_bound_never_cuts_a_type_alone_below_its_solves(example, scale):
    """``may_plan_below`` lets ``single_types`` skip a type by its MILP's LP relaxation: the relaxation's
    optimum must never exceed the optimum of any of the type's solves (at no derates or at the capacity
    prior's, which only lower capacities), and an infeasible relaxation must mean infeasible solves. With a
    quarter of the GPUs, some types cannot hold the traffic: their relaxations must say so, or bound."""
    from trimtab.milp.decompose import lp_floor
    from trimtab.planning.planners import UnifiedPlanner
    from trimtab.planning.rounds import prior_derates
    from trimtab.solvers import get_backend
    from trimtab.solvers.base import SolveOptions

    spec = trimtab.load_spec(ROOT / "examples" / f"{example}.yaml")
    spec = spec.model_copy(update={"gpus": [g.model_copy(update={"count": max(1, int(g.count * scale))})
                                            for g in spec.gpus]})
    profiles = spec_profiles(spec)
    planner, be = UnifiedPlanner(), get_backend("highs")
    for g in spec.gpus:
        ir_one = lower(_alone(spec, g.type), profiles)
        cands = build_candidates(ir_one)
        if planner.precheck(ir_one, cands):
            continue
        low = lp_floor(ir_one, cands, be, SolveOptions())
        for derate in ({}, prior_derates(ir_one, planner.peers(cands, fitted=True))):
            res = planner.solve(ir_one, cands, derate, be, SolveOptions())
            if low is None:
                assert not res.has_solution, (g.type, derate)
            elif res.has_solution:
                assert low <= res.objective * (1 + 1e-9), (g.type, low, res.objective)
                assert planner.may_plan_below(ir_one, cands, res.objective * 1.01, be, SolveOptions())
        if low is not None:
            assert not planner.may_plan_below(ir_one, cands, low * 0.99, be, SolveOptions())
        else:
            assert not planner.may_plan_below(ir_one, cands, 1e12, be, SolveOptions())


@pytest.mark.parametrize("example", ["quickstart", "robust"])
def test_where_the_milp_bound_cuts_a_type_alone_its_drive_plans_nothing_below(example):
    """Between the LP relaxation's optimum and the bound of the MILP at the cost model's capacities,
    ``may_plan_below`` says no from the MILP (the LP alone would let the drive run), and the drive of that
    type, run with the same ``above``, indeed ends without a plan: every one of its solves is at these
    capacities or lower. Some type of each example has such a gap (a replica is whole in the MILP)."""
    from trimtab.milp.decompose import lp_floor
    from trimtab.planning.driver import drive
    from trimtab.planning.planners import UnifiedPlanner
    from trimtab.solvers import get_backend
    from trimtab.solvers.base import SolveOptions

    spec = trimtab.load_spec(ROOT / "examples" / f"{example}.yaml")
    profiles = spec_profiles(spec)
    be = get_backend("highs")
    gaps = 0
    for g in spec.gpus:
        one = _alone(spec, g.type)
        ir_one = lower(one, profiles)
        cands = build_candidates(ir_one)
        planner = UnifiedPlanner()
        if planner.precheck(ir_one, cands):
            continue
        low = lp_floor(ir_one, cands, be, SolveOptions())
        res = planner.solve(ir_one, cands, {}, be, SolveOptions())
        if low is None or not res.has_solution or res.bound <= low * 1.01:
            continue
        gaps += 1
        cost = (low + res.bound) / 2
        assert not planner.may_plan_below(ir_one, cands, cost, be, SolveOptions()), g.type
        assert drive(UnifiedPlanner(), one, ir_one, backend="highs", cands=cands, above=cost) is None, g.type
    assert gaps, "no type with a gap between its LP and its MILP: nothing was tested"


@pytest.mark.parametrize("example", ["quickstart", "robust", "disaggregated"])
def test_a_type_refused_before_its_pairs_is_one_the_precheck_refuses(example):
    """``single_types`` skips a type whose derived set the precheck would refuse without building its pairs
    (``one_type_refused``): the same verdict as the precheck of the set ``for_one_type`` builds, with and
    without a budget one replica of each workload's cheapest shape already breaks on some types."""
    from trimtab.planning.explain import precheck
    from trimtab.planning.planners import UnifiedPlanner

    spec = trimtab.load_spec(ROOT / "examples" / f"{example}.yaml")
    profiles = spec_profiles(spec)
    planner = UnifiedPlanner()
    verdicts = []
    for budget in (None, "tight"):
        ir = lower(spec, profiles)
        full = build_candidates(ir)
        if budget == "tight":  # between the cheapest type's one-replica floor and the dearest's
            floors = sorted(sum(min(c.usd_per_hour for c in full.candidates if c.workload == w.name
                                    and c.gpu == g.type) for w in ir.workloads)
                            for g in ir.gpus if all(any(c.workload == w.name and c.gpu == g.type
                                                        for c in full.candidates) for w in ir.workloads))
            spec_b = spec.model_copy(update={"budget_usd_per_hour": (floors[0] + floors[-1]) / 2})
            ir = lower(spec_b, profiles)
            full = build_candidates(ir)
        else:
            spec_b = spec
        for g in spec.gpus:
            one = _alone(spec_b, g.type)
            if spec.nodes is not None and one.nodes is None:
                continue
            ir_one = lower(one, profiles)
            refused = planner.one_type_refused(full, ir, ir_one)
            assert refused == bool(precheck(ir_one, for_one_type(full, ir, ir_one))), (g.type, budget)
            verdicts.append(refused)
    assert True in verdicts and False in verdicts
