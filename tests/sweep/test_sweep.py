"""trimtab sweep: grid and scenario points, serial against Ray (local, 2 CPUs), robust planning, bad input.

Every point is planned by the real planner on a one-workload spec (tests/conftest.py SMALL_SPEC); grids run
analytic (``validate=False``) where the test is about the sweep machinery, and validated where it is about
plans.
"""
from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from trimtab.cli.main import app
from trimtab.gate.simulated import check_simulated
from trimtab.spec.load import load_spec
from trimtab.study.sweep import (SerialExecutor, grid_points, parse_sets, robust_plan, run_points,
                                 scenario_points)
from trimtab.spec.overrides import apply_overrides
from trimtab.errors import InputError
from tests.conftest import SMALL_SPEC

runner = CliRunner()


@pytest.fixture(scope="module")
def spec():
    return load_spec("small.yaml", text=SMALL_SPEC)


def test_grid_is_the_product_last_axis_fastest(spec):
    pts = grid_points(spec, parse_sets(["workloads.short.rate_rps=2,10", "gpus.l4.count=1,8"]))
    assert [p.overrides for p in pts] == [
        {"workloads.short.rate_rps": 2, "gpus.l4.count": 1},
        {"workloads.short.rate_rps": 2, "gpus.l4.count": 8},
        {"workloads.short.rate_rps": 10, "gpus.l4.count": 1},
        {"workloads.short.rate_rps": 10, "gpus.l4.count": 8}]


def test_grid_points_plan_like_what_if(spec):
    """Each point is exactly trimtab.api.what_if's plan: more traffic never costs less."""
    from trimtab.api import what_if

    pts = grid_points(spec, parse_sets(["workloads.short.rate_rps=2,10"]))
    res = run_points(spec, pts, validate=False)
    assert [r.status for r in res] == ["ok", "ok"]
    assert res[0].cost_usd_per_hour <= res[1].cost_usd_per_hour
    ref = what_if(spec, {"workloads.short.rate_rps": 10}, validate=False).plan
    assert res[1].cost_usd_per_hour == pytest.approx(ref.cost_usd_per_hour)
    assert res[1].gpus == ref.gpus


def test_infeasible_point_is_a_status_not_an_exception(spec):
    pts = grid_points(spec, parse_sets(["gpus.l4.count=0", "gpus.h100-sxm.count=0"]))
    (r,) = run_points(spec, pts, validate=False)
    assert r.status == "infeasible" and r.cost_usd_per_hour is None and r.message


def test_scenarios_are_seeded_per_index(spec):
    a = scenario_points(spec, 5, rate_cv=0.4, length_cv=0.3, input_cv=0.2, seed=3)
    b = scenario_points(spec, 3, rate_cv=0.4, length_cv=0.3, input_cv=0.2, seed=3)
    assert [p.overrides for p in a[:3]] == [p.overrides for p in b]  # scenario i does not depend on n
    assert a[0].overrides != scenario_points(spec, 1, rate_cv=0.4, length_cv=0.3, seed=4)[0].overrides
    rates = [p.overrides["workloads.short.rate_rps"] for p in scenario_points(spec, 400, rate_cv=0.5, seed=0)]
    mean = sum(rates) / len(rates)
    cv = math.sqrt(sum((r - mean) ** 2 for r in rates) / len(rates)) / mean
    assert mean == pytest.approx(5, rel=0.08) and cv == pytest.approx(0.5, rel=0.15)
    for p in a:  # every scenario is a valid spec with scaled lengths
        s = apply_overrides(spec, p.overrides)
        assert s.workloads[0].output_tokens.fixed == max(1, round(64 * p.multipliers["short"][1]))


def test_check_option_checks_each_point(spec):
    pts = grid_points(spec, parse_sets(["workloads.short.rate_rps=3"]))
    (r,) = run_points(spec, pts, check=True)
    assert r.status == "ok" and r.validated is True and r.checked is True
    assert r.attainment["short"] >= 0.9


@pytest.fixture(scope="module")
def ray_executor():
    ray = pytest.importorskip("ray")
    from trimtab.study.sweep import RayExecutor

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=100 * 1024 ** 2)
    ex = RayExecutor(workers=2)
    yield ex
    ray.shutdown()


# Starting a local Ray cluster costs 7-9 s on 2 cores: these run in the slow suite (.ci/run), beside the
# other tests that start a runtime of their own.
@pytest.mark.slow
def test_ray_grid_and_scenarios_equal_serial(spec, ray_executor):
    grid = grid_points(spec, parse_sets(["workloads.short.rate_rps=2,10", "gpus.l4.count=2,8"]))
    scen = scenario_points(spec, 4, rate_cv=0.5, length_cv=0.3, input_cv=0.2, seed=1)
    for pts in (grid, scen):
        serial = run_points(spec, pts, executor=SerialExecutor(), validate=False)
        done = []
        on_ray = run_points(spec, pts, executor=ray_executor, validate=False,
                            progress=lambda d, t: done.append(d))
        assert on_ray == serial  # everything but wall seconds
        assert sorted(done) == list(range(1, len(pts) + 1))
    assert len({r.cost_usd_per_hour for r in serial}) >= 1


@pytest.mark.slow
def test_pareto_points_on_ray_equal_serial(spec, ray_executor):
    """``trimtab pareto``'s points as Ray tasks (issue 16: pareto sweeps on Ray): the same frontier, plans and
    specs as planned one after another in this process, each planned (and simulated) as ``trimtab plan``
    plans."""
    from trimtab.study.pareto import pareto

    serial = pareto(spec, "ttft_p99", points=3)
    done = []
    on_ray = pareto(spec, "ttft_p99", points=3, executor=ray_executor, progress=lambda d, t: done.append(d))
    assert len(serial) >= 2 and sorted(done) == [1, 2, 3]
    assert [(p.factor, p.cost_usd_per_hour, p.metric_ms, p.slo_ms) for p in on_ray] == \
        [(p.factor, p.cost_usd_per_hour, p.metric_ms, p.slo_ms) for p in serial]
    assert ([p.plan for p in on_ray] == [p.plan for p in serial]
            and [p.spec for p in on_ray] == [p.spec for p in serial])
    assert all(p.plan.simulation is not None for p in on_ray)  # each point simulated, as trimtab plan does


@pytest.mark.slow
def test_cli_pareto_on_ray_prints_the_serial_frontier(small_spec_path, ray_executor):
    args = ["pareto", str(small_spec_path), "--points", "3", "--analytic", "--format", "json"]
    on_ray = runner.invoke(app, args + ["--workers", "2"])  # joins the Ray this module started
    serial = runner.invoke(app, args + ["--serial"])
    assert on_ray.exit_code == 0 and serial.exit_code == 0, on_ray.output + serial.output
    assert on_ray.stdout == serial.stdout and '"points"' in on_ray.stdout


@pytest.fixture(scope="module")
def robust_executor(request):
    """Ray when installed (its tasks are what the CLI runs), else serial: the guarantee is tested either
    way."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        return SerialExecutor()
    return request.getfixturevalue("ray_executor")


@pytest.mark.slow  # quick suite within 3 minutes; .ci/run runs the slow suite
def test_robust_plan_holds_in_q_of_its_scenarios(spec, robust_executor):
    """The chosen plan passes check in >= q of the scenarios, re-checked here one by one; it costs at least
    as much as the mean scenario's plan and is the cheapest candidate that passed."""
    q, n = 1.0, 4  # at this seed the mean scenario's plan misses in one scenario: the envelope must be chosen
    r = robust_plan(spec, q, n, rate_cv=0.8, seed=2, levels=(1.0,), executor=robust_executor)
    assert r.chosen_level == "q1.00" and r.mean_passed < n
    pts = scenario_points(spec, n, rate_cv=0.8, seed=2)
    ok = [check_simulated(r.plan, apply_overrides(spec, p.overrides), seeds=1)[0].ok for p in pts]
    assert r.per_scenario[r.chosen_level] == ok
    assert sum(ok) >= math.ceil(q * n) and r.passed == sum(ok)
    assert r.plan.cost_usd_per_hour >= r.mean_plan.cost_usd_per_hour - 1e-9
    cheaper = [c for c in r.candidates if c.cost_usd_per_hour is not None
               and c.cost_usd_per_hour < r.plan.cost_usd_per_hour - 1e-9]
    assert all(c.passed is not None and c.passed < math.ceil(q * n) for c in cheaper)


def _cli(*args):
    res = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in res.output, res.output
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res


@pytest.mark.parametrize("args, field", [
    (["--set", "workloads.short.rate_rps=2,abc"], "workloads[0] (short).rate_rps"),
    (["--set", "workloads.nope.rate_rps=2"], "workloads.nope.rate_rps"),
    (["--set", "gpus.l4.count=-1"], "count"),
    (["--set", "rate_rps"], "--set"),
    (["--set", "workloads.short.rate_rps="], "--set"),
    (["--set", "gpus.l4.count=1", "--scenarios", "3"], "--set/--scenarios"),
    (["--scenarios", "3", "--robust", "0.9", "--input-cv", "0.2"], "--input-cv"),
    (["--robust", "0.9"], "--robust"),
    (["--scenarios", "3", "--robust", "1.5"], "--robust"),
    (["--scenarios", "3", "--robust", "0.9", "--csv", "x.csv"], "--robust"),
    ([], "--set"),
])
def test_bad_input_exit_1_naming_the_field(small_spec_path, args, field):
    res = _cli("sweep", small_spec_path, "--serial", *args)
    assert res.exit_code == 1, res.output
    assert "error (invalid input)" in res.output and field in res.output


def test_cli_grid_writes_table_csv_and_plot(small_spec_path, tmp_path):
    csv_path, png = tmp_path / "out.csv", tmp_path / "out.png"
    res = _cli("sweep", small_spec_path, "--serial", "--analytic", "--set", "workloads.short.rate_rps=2,10",
               "--csv", csv_path, "--plot", png)
    assert res.exit_code == 0, res.output
    assert "sweep of small (serial, 2 points)" in res.output
    rows = csv_path.read_text().splitlines()
    assert rows[0].startswith("index,label,status,cost_usd_per_hour")
    assert rows[0].endswith("set:workloads.short.rate_rps")
    assert len(rows) == 3 and rows[2].endswith(",10")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_grid_error_before_any_planning(spec):
    with pytest.raises(InputError) as e:
        grid_points(spec, parse_sets(["workloads.short.rate_rps=2,0"]))
    assert "--set workloads[0] (short).rate_rps" in str(e.value)


def test_progress_callback_takes_a_label_on_and_off_a_terminal():
    """run_points calls progress(done, total), robust_plan progress(done, total, stage): both shapes work."""
    import io

    from rich.console import Console

    from trimtab.cli.sweep_report import progress_bar

    for term in (False, True):
        con = Console(file=io.StringIO(), force_terminal=term)
        with progress_bar(con, "planning") as progress:
            progress(1, 2)
            progress(1, 3, "check mean")


def test_robust_without_a_passing_candidate_is_infeasible(spec):
    """Only the mean scenario's plan as candidate, and it misses in one of the four scenarios: exit 3 naming
    each candidate's cost and share, not a plan that does not hold."""
    from trimtab.errors import InfeasibleError

    with pytest.raises(InfeasibleError) as e:
        robust_plan(spec, 1.0, 4, rate_cv=0.8, seed=2, levels=(), executor=SerialExecutor())
    assert "no candidate plan met its SLOs in 4 of 4 scenarios" in str(e.value)
    assert "mean: 1.60 $/h, passed 3/4" in str(e.value)
