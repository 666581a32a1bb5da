"""Schedules (docs/online.md): rate profiles, the schedule MILP with switching costs, per-window checks.

The tiny spec has one workload with fixed lengths (one bucket) on one GPU type at 1 $/GPU-h, so each window's
cheapest fleet can be worked out by hand from the candidates' capacities: tp1 (1 $/h) carries 4.46 rps, tp2
(2 $/h) 9.76 rps, tp4 (4 $/h) 13.4 rps, tp8 (8 $/h) 16.4 rps (asserted below, so a cost-model change shows
here first). Windows at 1, 4, 9, 2 rps then need tp1, tp1, tp2, tp1.
"""
from __future__ import annotations

import pytest

from trimtab.api import plan
from trimtab.gate.analytic import check
from trimtab.errors import InputError
from trimtab.deploy.autoscale import cron_triggers, min_replicas
from trimtab.gate.windows import check_windows, worst_window
from trimtab.spec.rates import servegen_shape, window_rates
from trimtab.spec.load import load_spec

TINY = """version: 1
name: tiny
gpus:
  - {{type: l4, count: 8, usd_per_hour: 1.0}}
models:
  - name: llama-3.1-8b
schedule: {{window_s: 3600{extra}}}
workloads:
  - name: w
    model: llama-3.1-8b
    rate_profile: {{rps: [1, 4, 9, 2]}}
    input_tokens: {{fixed: 500}}
    output_tokens: {{fixed: 100}}
    slo: {{ttft_ms: 2000, tpot_ms: 100, percentile: 90}}
"""
TP1, TP2 = "w-l4-tp1-t2k", "w-l4-tp2-t2k"
# 8.03 B parameters x 2 bytes (bf16) / 2 GB/s + 60 s warm-up (profiles/online.yaml); l4 nodes hold the tp2
# replica
STARTUP_S = 8.03 * 2 / 2.0 + 60


def tiny(extra: str = ""):
    return load_spec("tiny.yaml", text=TINY.format(extra=extra))


def replicas(p) -> list[dict[str, int]]:
    return [{k: v for k, v in w.replicas.items() if v} for w in p.schedule.windows]


def test_capacities_the_hand_oracle_rests_on():
    from trimtab.milp.candidates import build_candidates
    from trimtab.ir.lower import lower

    caps = {c.id: c.capacity_rps[0][1] for c in build_candidates(lower(tiny())).candidates}
    assert 4 < caps[TP1] < 9 / 2 and 9 < caps[TP2] < 2 * caps[TP1] + 9  # tp1 covers 1, 4, 2 rps; tp2 covers 9


def test_schedule_buys_each_window_what_it_needs():
    p = plan(tiny(), validate=False).plan
    assert replicas(p) == [{TP1: 1}, {TP1: 1}, {TP2: 1}, {TP1: 1}]
    assert [w.cost_usd_per_hour for w in p.schedule.windows] == [1.0, 1.0, 2.0, 1.0]
    # started: tp2 for window 2, tp1 again for window 3 (the period is cyclic: window 0 follows window 3)
    assert [(w.started, w.stopped) for w in p.schedule.windows] == [(0, 0), (0, 0), (1, 1), (1, 1)]
    startup_usd = (2.0 + 1.0) * STARTUP_S / 3600
    assert p.schedule.startup_usd_per_period == pytest.approx(startup_usd, abs=1e-3)
    assert p.schedule.cost_usd_per_hour_mean == pytest.approx((5.0 + startup_usd) / 4, abs=1e-3)
    assert p.schedule.startup_s[TP2] == pytest.approx(STARTUP_S, abs=0.1)
    # the fleet held (placed once) is the most each deployment runs at once; a static plan would pay 2 $/h all
    # day
    assert {d.name: d.replicas for d in p.deployments} == {TP1: 1, TP2: 1}
    assert p.schedule.cost_usd_per_hour_mean < 2.0
    assert_fleet_is_windows_max(p)


def assert_fleet_is_windows_max(p):
    """Every deployment the plan holds runs in some window, with as many replicas as its busiest window (the
    MILP's own held variable is only pushed down by an epsilon a solver may leave inside its gap)."""
    most = {}
    for w in p.schedule.windows:
        for name, n in w.replicas.items():
            most[name] = max(most.get(name, 0), n)
    assert {d.name: d.replicas for d in p.deployments} == {k: v for k, v in most.items() if v}


def test_min_lifetime_keeps_a_started_replica_two_windows():
    """Not cyclic: in a cycle tp2 at windows 1 and 2 (tp1 at 3 and 0) costs the same as at 2 and 3, a tie
    the solver may break either way. From a cold start the first costs a second tp1 start, and tp1 started
    at window 0 must run window 1 as well (1 + 3 + 2 + 1 $)."""
    p = plan(tiny(", min_lifetime_windows: 2, cyclic: false"), validate=False).plan
    # tp2 started for window 2 must also run window 3, where it alone carries 2 rps: 1 + 1 + 2 + 2 $
    assert replicas(p) == [{TP1: 1}, {TP1: 1}, {TP2: 1}, {TP2: 1}]
    assert [(w.started, w.stopped) for w in p.schedule.windows] == [(1, 0), (0, 0), (1, 1), (0, 0)]
    assert_fleet_is_windows_max(p)


def test_max_changes_per_window_bounds_every_boundary():
    p = plan(tiny(", max_changes_per_window: 1"), validate=False).plan
    ws = p.schedule.windows
    assert all(w.started + w.stopped <= 1 for w in ws)
    # swapping tp1 for tp2 at window 2 takes two changes: tp1 stays beside tp2 (1 + 1 + 3 + 1 $)
    assert replicas(p) == [{TP1: 1}, {TP1: 1}, {TP1: 1, TP2: 1}, {TP1: 1}]
    # every window still serves its rate within the cost model's capacities
    assert sum(w.cost_usd_per_hour for w in ws) == pytest.approx(6.0)


def test_plan_is_byte_stable_and_passes_static_check():
    from trimtab.contract.write import emit

    a, b = plan(tiny(), validate=False).plan, plan(tiny(), validate=False).plan
    assert emit(a) == emit(b)
    assert check(a, tiny()).ok  # the held fleet at each workload's peak: the static, analytic check


def test_validated_schedule_passes_every_window_and_check_names_the_worst():
    spec = tiny(", validate_windows: 2")
    # validated by simulation on its fullest windows (the analytic one misses at 4 and 9 rps)
    p = plan(spec).plan
    assert all(w.attainment_lower for w in p.schedule.windows)  # every window simulated, not only the fullest
    cs = check_windows(p, spec, seeds=1, requests=1500)
    assert [c.window for c in cs] == [0, 1, 2, 3] and all(c.report.ok for c in cs), \
        [c.report.violations for c in cs]
    # window 2 (9 rps) left on one tp1 replica (4.5 rps at SLO): overloaded, the check must fail it
    wins = list(p.schedule.windows)
    wins[2] = wins[2].model_copy(update={"replicas": {d.name: int(d.name == TP1) for d in p.deployments},
                                         "cost_usd_per_hour": 1.0, "routes": [
        r.model_copy(update={"deployment": TP1}) for r in wins[2].routes]})
    bad = p.model_copy(update={"schedule": p.schedule.model_copy(update={"windows": wins})})
    cs = check_windows(bad, spec, seeds=1, requests=1500, windows=[1, 2])
    assert [c.report.ok for c in cs] == [True, False]
    assert worst_window(cs).window == 2


def test_validation_covers_a_window_less_full_than_the_fullest():
    """4, 12 and 1 rps: the cost model puts window 0 on one tp1 replica (4 of its 4.46 rps) and window 1 on
    three (12 of 13.4), the same fill. Three replicas behind a least-loaded router pool their queues; one
    alone misses at that fill (the plan that validated only the fullest window, 1, failed window 0 at check).
    Every window is validated now: window 0's own miss buys it a second replica, and each window passes check
    at unused seeds."""
    spec = load_spec("t.yaml", text=TINY.format(extra=", validate_windows: 1").replace("[1, 4, 9, 2]",
                                                                                       "[4, 12, 1]"))
    p = plan(spec).plan
    assert all(w.attainment_lower for w in p.schedule.windows)
    assert replicas(p)[0] == {TP1: 2} and replicas(p)[2] == {TP1: 1}
    cs = check_windows(p, spec, seeds=2, requests=3000)
    assert all(c.report.ok for c in cs), [c.report.violations for c in cs]
    # the single replica at 4 rps is what misses: the window as the cost model alone planned it fails check
    one = p.schedule.windows[0].model_copy(update={"replicas": {TP1: 1}, "cost_usd_per_hour": 1.0})
    bad = p.model_copy(update={"schedule": p.schedule.model_copy(update={"windows": [one]
                                                                         + p.schedule.windows[1:]})})
    assert not check_windows(bad, spec, seeds=2, requests=3000, windows=[0])[0].report.ok


def test_cron_triggers_realise_a_daily_schedule():
    p = plan(tiny(", window_s: 21600").replace("{window_s: 3600, window_s: 21600}", "{window_s: 21600}")
             if False else load_spec("t.yaml", text=TINY.format(extra="").replace("window_s: 3600",
                                                                                  "window_s: 21600")),
             validate=False).plan
    assert p.schedule.window_s * len(p.schedule.windows) == 86400
    assert min_replicas(p.schedule, TP2) == 0 and min_replicas(p.schedule, TP1) == 0
    lead = -(-STARTUP_S // 60)  # minutes ahead of the window
    trig = cron_triggers(p.schedule, TP2, p.schedule.startup_s[TP2])
    assert trig == [{"type": "cron", "metadata": {"timezone": "Etc/UTC",
                                                  "start": f"{int(60 - lead)} 11 * * *",
                                                  "end": "0 18 * * *", "desiredReplicas": "1"}}]
    hourly = plan(tiny(), validate=False).plan
    assert cron_triggers(hourly.schedule, TP2, 60.0) is None  # 4 hourly windows are not a day: no daily cron


def test_servegen_shape_by_hand(tmp_path):
    # two days of 10-minute rows
    rates = [1, 2, 3, 4, 5, 6] * 4 + [0] * 6 * 20 + [6, 6, 6, 6, 6, 6] + [0] * 6 * 23
    assert servegen_shape(rates, 3600, "none")[:2] == [3.5, 3.5]
    day = servegen_shape(rates, 3600, "day")
    assert len(day) == 24 and day[0] == 6.0 and day[1] == 3.5 and day[4] == 0.0
    f = tmp_path / "r.csv"
    f.write_text("window_start_s,total_rate_rps\n" + "".join(f"{i * 600},{r}\n" for i, r in enumerate(rates)))
    spec = load_spec(tmp_path / "s.yaml", text=TINY.format(extra="").replace(
        "rps: [1, 4, 9, 2]", f"servegen: {f}, peak_rps: 12"))
    wr = window_rates(spec)
    assert wr.n == 24 and wr.rates["w"][0] == 12.0 and wr.rates["w"][1] == 7.0
    assert wr.rates["w"][4] == pytest.approx(0.12)  # an empty window: 1 % of the peak


@pytest.mark.parametrize("change,field,msg", [
    ("schedule: {window_s: 3600}\n", "rate_profile", "needs a schedule"),
    ("rps: [1, 4, 9, 2]}", "rate_profile", "not both"),
    ("rps: [1, 4, 9, 2]", "cv", "cv has 3 values"),
])
def test_bad_profiles_name_the_field_and_line(change, field, msg):
    text = TINY.format(extra="")
    if change.startswith("schedule"):
        text = text.replace(change, "")
    elif change.endswith("}"):
        text = text.replace(change, change + "\n    rate_rps: 3")
    else:
        text = text.replace(change, change + ", cv: [1, 1, 2]")
    with pytest.raises(InputError) as e:
        load_spec("bad.yaml", text=text)
    s = str(e.value)
    assert field in s and msg in s and "bad.yaml:" in s


def test_max_goodput_with_a_schedule_is_refused_with_its_line():
    """The diurnal example with objective max_goodput and a budget (issue 35) was planned as a schedule that
    served nothing at 0.00 $/h, written with exit 0; once max_goodput plans were simulated it crashed in the
    windows' validation. The schedule planner sizes every window to its whole rate, so the pair is refused,
    naming the field and line."""
    text = "objective: max_goodput\nbudget_usd_per_hour: 2\n" + TINY.format(extra="")
    with pytest.raises(InputError) as e:
        load_spec("tiny.yaml", text=text)
    assert e.value.lines[0].startswith("tiny.yaml:1: objective: max_goodput is not supported with a schedule")


def test_profiles_of_different_lengths_are_an_error():
    text = TINY.format(extra="") + """  - name: v
    model: llama-3.1-8b
    rate_profile: {rps: [1, 2]}
    input_tokens: {fixed: 500}
    output_tokens: {fixed: 100}
    slo: {ttft_ms: 2000, tpot_ms: 100, percentile: 90}
"""
    with pytest.raises(InputError, match=r"workloads\[0\] \(w\)\.rate_profile.*4 windows.*has 2"):
        load_spec("bad.yaml", text=text)


def test_window_plan_counts_every_gpu_of_a_data_parallel_replica():
    # A window's static plan states its GPUs: tensor x pipeline x data parallel per replica (the MoE golden's
    # deployment spans tp x dp GPUs; counting tp x pp alone under-stated it by the dp factor).
    import yaml

    from trimtab.gate.windows import window_plan
    from trimtab.contract.schema import Plan, PlanSchedule, ScheduleWindow

    p = Plan.model_validate(yaml.safe_load(open("tests/golden/moe.plan.yaml")))
    d = p.deployments[0]
    assert d.data_parallel > 1
    w = ScheduleWindow(start_s=0, rates={}, replicas={d.name: 1}, started=0, stopped=0, cost_usd_per_hour=0.0,
                       routes=list(p.routes))
    sched = PlanSchedule(window_s=3600, cyclic=False, min_lifetime_windows=1, max_changes_per_window=None,
                         startup_s={}, startup_source="test", cost_usd_per_hour_mean=0.0,
                         startup_usd_per_period=0.0, windows=[w])
    wp = window_plan(p.model_copy(update={"schedule": sched}), 0)
    assert wp.gpus == {d.gpu: d.tensor_parallel * d.pipeline_parallel * d.data_parallel}
