"""The wall-clock safety net (``--time-limit``) covers the whole planning run, validating simulations included
(issue 35, Deliver 1): once it expires the run stops at its next step (before a solve or a simulation, between
a schedule's windows), exits 4 naming the limit and what was not validated, and writes no plan, even with
``--allow-misses``. A run that ends within it writes the same bytes as ever.

The net's expiry is forced at a chosen step by ``TRIMTAB_TEST_NET_SAFE_POINTS``
(``trimtab.solvers.SafetyNet``: the steps it lets pass before it counts as expired), so these runs stop at the
same point on any machine; the planner, the simulator and the CLI run for real. One test expires the real
clock."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trimtab.cli.main import app
from trimtab.errors import ExitCode, SafetyNetError
from trimtab.solvers.base import NET_SAFE_POINTS_ENV
from tests.conftest import QUICKSTART, ROOT, SMALL_SPEC

GOLDEN = ROOT / "tests" / "golden" / "quickstart.plan.yaml"
# The quickstart's run passes the net 18 times: the rounds' solves and simulations (round 1 misses summarize,
# round 2's plan is confirmed), the probes below it, the search on each GPU type alone (its LP bounds, the
# MILP's where the LP does not decide, and drives), and the finish
QUICKSTART_STEPS = 18


def plan(*args, steps: int | None = None):
    """``trimtab plan ARGS`` with the net forced to expire after ``steps`` steps (None: the clock alone);
    returns the result and its output with rich's line wrapping undone."""
    env = {NET_SAFE_POINTS_ENV: None if steps is None else str(steps)}
    res = CliRunner().invoke(app, ["plan", *map(str, args)], env=env)
    assert "Traceback" not in res.output, res.output
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res, " ".join(res.output.split())


def test_expiry_between_validating_simulations_stops_without_a_plan(tmp_path):
    out = tmp_path / "plan.yaml"
    res, text = plan(QUICKSTART, "-o", out, "--allow-misses", steps=3)  # before round 2's simulation
    assert res.exit_code == ExitCode.NO_SOLUTION == 4, text
    assert ("planning stopped by the wall-clock time limit (--time-limit or "
            "solver.time_limit_s: 300 s, a safety "
            "net) after") in text
    assert "before round 2's simulation; 1 validating simulation(s) run" in text
    assert re.search(r"not validated: round 2's plan \([0-9.]+ \$/h\) was not simulated; the "
                     r"last plan simulated "
                     r"\(round 1\) did not confirm workloads summarize", text), text
    assert "no plan written" in text and "raise --time-limit" in text
    assert not out.exists() and "plan written to" not in text


def test_expiry_inside_a_schedules_validation_stops_between_windows(tmp_path):
    out = tmp_path / "plan.yaml"
    res, text = plan(ROOT / "examples" / "diurnal.yaml", "-o", out, steps=3)
    assert res.exit_code == ExitCode.NO_SOLUTION, text
    assert "in round 1's simulation (after 2 of its 24 windows); 0 validating simulation(s) run" in text
    assert re.search(r"round 1's plan \([0-9.]+ \$/h\) was simulated in part only; no workload validated",
                     text)
    assert not out.exists()


# The expiry at the last step plans the quickstart whole once more (5 s): in the slow suite; the quick suite
# keeps the net asked at every step (the golden bytes) and an expiry between validating simulations.
@pytest.mark.parametrize("steps", [pytest.param(QUICKSTART_STEPS - 1, marks=pytest.mark.slow),
                                   QUICKSTART_STEPS])
def test_a_run_within_the_net_is_unchanged_and_one_past_it_is_no_success(tmp_path, steps):
    """The net asked at every step changes nothing while it holds (the golden bytes); expired at the last step
    (the finish, after the plan was validated) it is exit 4 all the same: a run the net stopped is no
    success."""
    out = tmp_path / "plan.yaml"
    res, text = plan(QUICKSTART, "-o", out, steps=steps)
    if steps == QUICKSTART_STEPS:
        assert res.exit_code == 0, text
        assert out.read_bytes() == GOLDEN.read_bytes()
    else:
        assert res.exit_code == ExitCode.NO_SOLUTION, text
        assert "before placing the plan's replicas on nodes and its final checks" in text
        assert "was validated, but the run stopped before its answer was settled" in text
        assert not out.exists()


def test_the_real_clock_expires_the_net(tmp_path):
    # 10 ms: spent by the lowering, the candidates, the first solve or the first simulation, whichever (caches
    # warm in this process can make the first ones fast); where it stops is the machine's business
    spec = tmp_path / "spec.yaml"
    spec.write_text(SMALL_SPEC)
    res, text = plan(spec, "--time-limit", "0.01", "-o", tmp_path / "plan.yaml")
    assert res.exit_code == ExitCode.NO_SOLUTION, text
    assert "a safety net" in text and "raise --time-limit" in text
    assert not (tmp_path / "plan.yaml").exists()


def test_the_api_raises_the_nets_error(monkeypatch):
    import trimtab as tt

    monkeypatch.setenv(NET_SAFE_POINTS_ENV, "1")
    with pytest.raises(SafetyNetError) as err:
        tt.plan(tt.load_spec(Path("small.yaml"), text=SMALL_SPEC))
    assert err.value.exit_code == ExitCode.NO_SOLUTION
    assert err.value.where == "before round 1's simulation" and err.value.sims == 0


def _starved(tmp_path) -> Path:
    """The quickstart with 2 GPUs of each type: infeasible past the precheck (the MILP finds it), so the run
    solves relaxations to say what to raise."""
    spec = tmp_path / "starved.yaml"
    spec.write_text(QUICKSTART.read_text().replace("count: 16,", "count: 2,").replace("count: 32,",
                                                                                      "count: 2,"))
    return spec


def test_the_relaxations_of_an_infeasible_spec_are_under_the_net(tmp_path):
    """After the infeasible solve the run solves the elastic model to say what to relax: each of those solves
    is a step of the net (asked before it, given what is left of it), so an expiry there is exit 4, not lines
    worded by whichever relaxation solves the clock let finish."""
    spec = _starved(tmp_path)
    res, text = plan(spec, "-o", tmp_path / "plan.yaml")
    assert res.exit_code == ExitCode.INFEASIBLE == 3, text
    assert "raise gpus[0] (h100-sxm).count from 2 to at least" in text
    res, text = plan(spec, "-o", tmp_path / "plan.yaml", steps=1)  # round 1's solve, then the relaxations
    assert res.exit_code == ExitCode.NO_SOLUTION, text
    assert "after round 1's infeasible solve, before a solve of the relaxations" in text
    assert "raise gpus" not in text and "raise --time-limit" in text


# The infeasible spec solves every relaxation tried twice (8 s): in the slow suite; the quick suite keeps
# the feasible one, whose solves are under the same net.
@pytest.mark.parametrize("what", ["feasible", pytest.param("infeasible", marks=pytest.mark.slow)])
def test_explain_runs_its_solves_under_one_net(tmp_path, what):
    """``explain`` solves once per binding row or relaxation tried, all under one net (before: each solve had
    the whole --time-limit, so an explanation could run for many times it, and a solve the clock stopped read
    as "no plan" there)."""
    spec = QUICKSTART if what == "feasible" else _starved(tmp_path)
    env = {NET_SAFE_POINTS_ENV: None}
    done = CliRunner().invoke(app, ["explain", str(spec), "--analytic"], env=env)
    assert done.exit_code == 0 and "Traceback" not in done.output, done.output
    env = {NET_SAFE_POINTS_ENV: "1"}  # the first solve, then the net expires
    res = CliRunner().invoke(app, ["explain", str(spec), "--analytic"], env=env)
    text = " ".join(res.output.split())
    assert res.exit_code == ExitCode.NO_SOLUTION, text
    assert ("explain stopped by the wall-clock time limit (--time-limit or "
            "solver.time_limit_s: 300 s, a safety "
            "net) after") in text
    assert "before a solve of the explanation" in text and "raise --time-limit" in text
    assert "Traceback" not in res.output


def test_a_solve_the_net_stopped_is_no_answer():
    """``NettedBackend``: a solve that ends on the wall-clock limit raises ``NetExpired`` (its caller stops,
    exit 4), and each solve is given what is left of the net."""
    from trimtab.solvers import NetExpired, NettedBackend, SafetyNet, SolveOptions, SolveResult, Status, \
        Termination

    class Clock:
        name = "clock"

        def __init__(self, termination):
            self.termination, self.limits = termination, []

        def solve(self, model, options):
            self.limits.append(options.time_limit_s)
            return SolveResult(Status.NO_SOLUTION, self.termination, seconds=0.5)

    net = SafetyNet(100.0)
    ok = NettedBackend(Clock(Termination.WORK_LIMIT), net, "a test")
    assert ok.solve(None, SolveOptions(time_limit_s=1000.0)).termination == Termination.WORK_LIMIT
    assert ok.name == "clock" and 0 < ok.backend.limits[0] <= 100.0
    with pytest.raises(NetExpired, match="in a solve of a test, stopped after 0.5 s"):
        NettedBackend(Clock(Termination.TIME_LIMIT), net, "a test").solve(None, SolveOptions())
