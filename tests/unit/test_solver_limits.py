"""Solver limits (issue 35): what may stop a solve short of its gap is a deterministic work limit (HiGHS and
CBC nodes, CP-SAT deterministic time), so the answer is a function of the model; the wall-clock time limit is
a safety net whose expiry is reported as such, with no solution, whatever incumbent the solver held."""
from __future__ import annotations

import random

import pytest

from trimtab.solvers import SolveOptions, Status, Termination, get_backend
from trimtab.solvers.model import Constraint, MilpModel


def market_split(m: int = 4, n: int = 30, seed: int = 0) -> MilpModel:
    """Cornuéjols-Dawande market split: a few equality rows over binaries, hard for branch and bound (minutes
    for any of the three solvers), so a short limit always stops it."""
    rnd = random.Random(seed)
    model = MilpModel("market-split", {}, [], (), "min")
    xs = [model.add_var(f"x{i}", "integer", 0, 1) for i in range(n)]
    for k in range(m):
        a = [rnd.randint(0, 99) for _ in range(n)]
        model.add(Constraint(f"split{k}", "demand", tuple(zip(xs, map(float, a))), "==", float(sum(a) // 2)))
    model.objective = tuple((x, 1.0) for x in xs)
    return model


@pytest.mark.parametrize("backend", ["highs", "cbc", "cpsat"])
def test_wall_clock_limit_is_a_safety_net_without_an_answer(backend):
    res = get_backend(backend).solve(market_split(), SolveOptions(time_limit_s=0.2))
    assert res.status == Status.NO_SOLUTION and res.termination == Termination.TIME_LIMIT
    assert not res.values and "safety net" in res.message


@pytest.mark.parametrize("backend,options", [("highs", SolveOptions(node_limit=0)),
                                             ("cpsat", SolveOptions(deterministic_time=0.001))])
def test_work_limit_stops_without_a_solution_with_the_reason(backend, options):
    res = get_backend(backend).solve(market_split(), options)
    assert res.status == Status.NO_SOLUTION and res.termination == Termination.WORK_LIMIT, res
    assert res.message


def test_work_limit_answers_the_same_twice():
    # A node limit that stops the search: the same incumbent (or none) both times, whatever the clock did.
    be = get_backend("highs")
    a, b = (be.solve(market_split(m=2, n=24, seed=3), SolveOptions(node_limit=200)) for _ in range(2))
    assert a.termination == b.termination and a.status == b.status and a.values == b.values


def test_the_safety_net_is_no_input_of_a_plan():
    """The wall-clock limit never changes a plan (a solve it stops gives none), so a spec's input hash is the
    same whatever limit it sets, and the quickstart's is still its golden plan's."""
    from trimtab.ir.lower import lower
    from trimtab.spec.load import load_spec
    from tests.conftest import QUICKSTART

    text = QUICKSTART.read_text()
    hashes = {lower(load_spec(QUICKSTART)).input_hash}
    for limit in (5, 60, 900):
        spec = load_spec(QUICKSTART, text=text + f"\nsolver:\n  time_limit_s: {limit}\n")
        assert spec.solver.time_limit_s == limit
        hashes.add(lower(spec).input_hash)
    assert len(hashes) == 1
    golden = (QUICKSTART.parent.parent / "tests" / "golden" / "quickstart.plan.yaml").read_text()
    assert f"input_hash: {hashes.pop()}\n" in golden


def cover(m: int = 12, n: int = 40, seed: int = 0) -> MilpModel:
    """A random covering MILP (small integers, fractional costs) that HiGHS stops at its first node with an
    incumbent and a gap."""
    rnd = random.Random(seed)
    model = MilpModel("cover", {}, [], (), "min")
    xs = [model.add_var(f"x{i}", "integer", 0, 3) for i in range(n)]
    for k in range(m):
        a = [float(rnd.randint(0, 9)) for _ in range(n)]
        model.add(Constraint(f"cover{k}", "demand", tuple(zip(xs, a)), ">=", float(rnd.randint(40, 90))))
    model.objective = tuple((x, float(rnd.randint(10, 40)) + rnd.random()) for x in xs)
    return model


@pytest.mark.parametrize("seed", [0, 1])
def test_a_solve_stopped_short_states_a_bound_below_the_optimum(seed):
    """The bound a plan states (``solver.bound``) is the solver's: below the true optimum, which a solve run
    to the end finds, and as far below the incumbent as the gap says."""
    stopped = get_backend("highs").solve(cover(seed=seed), SolveOptions(node_limit=1))
    assert stopped.status == Status.FEASIBLE and stopped.gap > 1e-3, stopped
    best = get_backend("highs").solve(cover(seed=seed), SolveOptions(mip_rel_gap=1e-9))
    assert best.status == Status.OPTIMAL
    assert stopped.bound <= best.objective + 1e-9 <= stopped.objective + 2e-9
    assert stopped.objective - stopped.bound == pytest.approx(stopped.gap * stopped.objective, rel=1e-6)


@pytest.mark.parametrize("backend", ["highs", "cbc", "cpsat"])
def test_every_backend_bounds_the_optimum_from_below(backend):
    best = get_backend("highs").solve(cover(seed=2), SolveOptions(mip_rel_gap=1e-9)).objective
    res = get_backend(backend).solve(cover(seed=2), SolveOptions())
    assert res.status == Status.OPTIMAL and res.bound is not None
    assert best * (1 - 2e-4) <= res.bound <= best + 1e-6
