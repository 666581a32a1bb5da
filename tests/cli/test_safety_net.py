"""The wall-clock safety net (``--time-limit``) covers the whole planning run, validating simulations included
(issue 35, Deliver 1): once it expires the run stops at its next step (before a solve or a simulation, between
a schedule's windows), exits 4 naming the limit and what was not validated, and writes no plan, even with
``--allow-misses``. A run that ends within it writes the same bytes as ever.

The net's expiry is forced at a chosen step by ``TRIMTAB_TEST_NET_SAFE_POINTS`` (``trimtab.solvers.SafetyNet``:
the steps it lets pass before it counts as expired), so these runs stop at the same point on any machine; the
planner, the simulator and the CLI run for real. One test expires the real clock."""
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
# The quickstart's run passes the net 15 times: the rounds' solves and simulations (round 1 misses summarize,
# round 2's plan is confirmed), the probes below it, the search on each GPU type alone, and the finish
QUICKSTART_STEPS = 15


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
    assert ("planning stopped by the wall-clock time limit (--time-limit or solver.time_limit_s: 300 s, a safety "
            "net) after") in text
    assert "before round 2's simulation; 1 validating simulation(s) run" in text
    assert re.search(r"not validated: round 2's plan \([0-9.]+ \$/h\) was not simulated; the last plan simulated "
                     r"\(round 1\) did not confirm workloads summarize", text), text
    assert "no plan written" in text and "raise --time-limit" in text
    assert not out.exists() and "plan written to" not in text


def test_expiry_inside_a_schedules_validation_stops_between_windows(tmp_path):
    out = tmp_path / "plan.yaml"
    res, text = plan(ROOT / "examples" / "diurnal.yaml", "-o", out, steps=3)
    assert res.exit_code == ExitCode.NO_SOLUTION, text
    assert "in round 1's simulation (after 2 of its 24 windows); 0 validating simulation(s) run" in text
    assert re.search(r"round 1's plan \([0-9.]+ \$/h\) was simulated in part only; no workload validated", text)
    assert not out.exists()


@pytest.mark.parametrize("steps", [QUICKSTART_STEPS - 1, QUICKSTART_STEPS])
def test_a_run_within_the_net_is_unchanged_and_one_past_it_is_no_success(tmp_path, steps):
    """The net asked at every step changes nothing while it holds (the golden bytes); expired at the last step
    (the finish, after the plan was validated) it is exit 4 all the same: a run the net stopped is no success."""
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
