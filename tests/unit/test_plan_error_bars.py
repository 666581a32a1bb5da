"""What a plan states about its own predictions (issue 34): each deployment's capacity at its SLO, each
workload's percentiles over its whole length mix beside its worst bucket's, the cost model's measured error
bar for the class of deployments serving it, and ``check --margin``, which fails a plan whose SLO headroom is
smaller than that error."""
from __future__ import annotations

import pytest

from tests.conftest import SMALL_SPEC, run_cli
from trimtab.api import check, load_spec, plan
from trimtab.deployment.shape import DeploymentSpecView, RouteView
from trimtab.ir.lower import lower
from trimtab.milp.assess import assess, capacity_at_slo, mix_percentile
from trimtab.profiles.error_bars import ErrorBars, Stat, error_bar, load_error_bars

MIXED = SMALL_SPEC.replace("input_tokens: {fixed: 512}", "input_tokens: {uniform: {min: 100, max: 6000}}")


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    d = tmp_path_factory.mktemp("bars")
    (d / "spec.yaml").write_text(MIXED)
    s = load_spec(d / "spec.yaml")
    return d, s, plan(s, validate=False).plan


def test_mixture_percentile_hand_computed():
    # one component: its own percentile, exactly
    assert mix_percentile([(1.0, [10.0, 20.0, 40.0])], [50.0, 90.0, 99.0], 90.0) == 20.0
    # Two equal halves, p50/p90/p99 at 10/20/21 ms and 30/40/41 ms. The mixture's p50 lies between 10 and 30;
    # there the first half's CDF is 0.5 + 0.04 (t - 10) (linear from p50 to p90) and the second's t / 60
    # (from 0 at t = 0 to 0.5 at its p50), and their mean is 0.5 where 0.1 + 0.04 t + t / 60 = 1:
    # t = 0.9 / (0.04 + 1/60) = 15.9 ms, below the second half's own p50 (30) and above the first's (10).
    got = mix_percentile([(1.0, [10.0, 20.0, 21.0]), (1.0, [30.0, 40.0, 41.0])], [50.0, 90.0, 99.0], 50.0)
    assert got == pytest.approx(0.9 / (0.04 + 1 / 60), rel=1e-3)


def test_plan_states_capacity_mix_and_error_bar(planned):
    d, s, p = planned
    ir = lower(s)
    pred = p.predictions["short"]
    # the mix of prompt lengths has a shorter tail than its longest bucket alone
    assert pred.ttft_ms <= pred.ttft_ms_worst_bucket and pred.tpot_ms <= pred.tpot_ms_worst_deployment
    assert pred.ttft_ms < pred.ttft_ms_worst_bucket  # (several buckets here)
    routes = [RouteView(r.workload, r.bucket, r.deployment, r.share) for r in p.routes]
    for dep in p.deployments:
        view = DeploymentSpecView.of_plan(dep)
        cap = dep.capacity_rps_per_replica
        assert cap is not None and cap >= dep.load_rps_per_replica * 0.99
        assert cap == pytest.approx(capacity_at_slo(ir, view, routes), rel=0.01)
        # 3 % over the capacity the cost model has a bucket miss its SLO (the search's tolerance is 1 %)
        over = [RouteView(r.workload, r.bucket, r.deployment, r.share * 1.03 * cap / dep.load_rps_per_replica)
                for r in routes if r.deployment == dep.name]
        assert not assess(ir, [view], over).workloads["short"].slo_met
    bar = pred.error_bar
    d0 = p.deployments[0]
    own = error_bar(load_error_bars(), d0.gpu, d0.tensor_parallel, False, "vllm", "ttft")
    assert bar is not None and own.cls in bar.classes and bar.ttft_pct >= own.stat.median_pct
    assert "benchmarks/accuracy_gpu.py" in bar.source


def test_error_bar_falls_back_to_the_pooled_figure_and_says_why():
    pooled = Stat(median_pct=10.0, p90_pct=30.0, runs=40)
    bars = ErrorBars(benchmark="b", data=["d"], date="2026-12-06", min_runs=3,
                     measured={"ttft": "x", "tpot": "y"},
                     pooled={"ttft": pooled, "tpot": pooled}, classes=[
                         {"gpu": "h100", "tp": "1", "moe": False, "engine": "vllm",
                          "ttft": {"median_pct": 5.0, "p90_pct": 9.0, "runs": 4},
                          "tpot": {"median_pct": 50.0, "p90_pct": 90.0, "runs": 2}}])
    own = error_bar(bars, "h100-sxm", 1, False, "vllm", "ttft")
    assert own.stat.median_pct == 5.0 and own.note == ""
    few = error_bar(bars, "h100-sxm", 1, False, "vllm", "tpot")
    assert few.stat == pooled and "2 run(s) of h100 tp1 dense vllm (fewer than 3)" in few.note
    none = error_bar(bars, "h100-pcie", 2, True, "vllm", "ttft")
    assert none.stat == pooled and none.cls == "h100 tp>1 moe vllm" and "no measured run" in none.note


def test_check_margin_fails_a_plan_within_its_error_bar(planned, tmp_path):
    d, s, p = planned
    rep = check(p, s, analytic=True)
    assert rep.ok
    a = rep.assessment.workloads["short"]
    bar = p.predictions["short"].error_bar
    # the spec's own SLOs: the margin holds exactly when both worst-bucket figures clear it by the error
    want = a.ttft_ms / (1 - bar.ttft_pct / 100) <= 1000 and a.tpot_ms / (1 - bar.tpot_pct / 100) <= 100
    assert check(p, s, analytic=True, margin="median").ok == want
    # an SLO between the prediction and the prediction plus half its error: met, but by less than the model's
    # error (value / (1 - error) is over it)
    tight = MIXED.replace("ttft_ms: 1000", f"ttft_ms: {a.ttft_ms * (1 + bar.ttft_pct / 200):.1f}")
    (tmp_path / "tight.yaml").write_text(tight)
    st = load_spec(tmp_path / "tight.yaml")
    assert check(p, st, analytic=True).ok
    rep = check(p, st, analytic=True, margin="median")
    assert not rep.ok and any("TTFT" in v and "less headroom than the cost model's median error" in v
                              for v in rep.violations)
    from trimtab.contract.write import emit

    (tmp_path / "plan.yaml").write_text(emit(p))
    res = run_cli("check", "--plan", tmp_path / "plan.yaml", "--spec", tmp_path / "tight.yaml", "--analytic",
                  "--margin")
    assert res.exit_code == 5 and "error bars" in res.stdout.lower()
    res = run_cli("check", "--plan", tmp_path / "plan.yaml", "--spec", tmp_path / "tight.yaml", "--analytic")
    assert res.exit_code == 0, res.output


def test_bundled_error_bars_carry_their_provenance():
    bars = load_error_bars()
    assert bars.min_runs >= 2 and bars.date and "accuracy" in bars.benchmark and len(bars.data) == 3
    assert all(s.runs >= bars.min_runs for s in bars.pooled.values())


def test_check_margin_by_simulation_holds_the_worst_seed_against_the_error(planned):
    from trimtab.gate.simulated import check_simulated

    d, s, p = planned
    rep0, res = check_simulated(p, s, seeds=2, requests=1500)
    rep, _ = check_simulated(p, s, seeds=2, requests=1500, margin="p90")
    bar = p.predictions["short"].error_bar
    t = max(r.workloads["short"].ttft_at_target_ms for r in res.runs)
    tp = max(r.workloads["short"].tpot_at_target_ms for r in res.runs)
    misses = [m for m, v, slo, e in (("TTFT", t, 1000, bar.ttft_p90_pct), ("TPOT", tp, 100, bar.tpot_p90_pct))
              if not (e < 100 and v / (1 - e / 100) <= slo)]
    extra = [v for v in rep.violations if v not in rep0.violations]
    assert sorted(v.split(" ")[2] for v in extra) == sorted(misses)
    assert rep.ok == (rep0.ok and not misses)
