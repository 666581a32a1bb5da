"""``trimtab watch`` on a plan with a schedule (docs/online.md, "Watching a deployment", schedules): the
window the clock is in is the plan. The tiny schedule of tests/online/test_schedule.py (1, 4, 9, 2 rps in
hourly windows on tp1, tp1, tp2, tp1) served by ``benchmarks.watch`` synthetic engines over HTTP, parsed by
``prometheus_client``'s parser, the clock simulated: the planned step from 1 to 4 rps at a window boundary is
the schedule's, not drift; a step inside a window is proposed against that window's rate, as a static plan of
that window."""
from __future__ import annotations

import pytest

from benchmarks.watch import INTERVAL_S, Fleet, first_proposal, run
from tests.online.test_schedule import tiny
from tests.online.test_watch import watch_once
from trimtab.gate.windows import window_plan
from trimtab.spec.rates import window_rates, window_spec

BEFORE = 10  # intervals of window 0 before its end


@pytest.fixture
def scheduled(tmp_path):
    from trimtab.api import plan as make_plan
    from trimtab.online.schedule_watch import ScheduleWatcher
    from trimtab.online.watch import targets_for

    spec = tiny()
    plan = make_plan(spec, validate=False).plan
    wr = window_rates(spec)
    fleet = Fleet(plan, spec, 21)
    fleet.serve(window_plan(plan, 0), window_spec(spec, wr, 0))
    w = ScheduleWatcher(plan, spec, targets_for(plan, fleet.metrics()), out_dir=tmp_path / "out",
                        analytic=True, dead_after=2,
                        time_of_period=lambda now: wr.window_s - BEFORE * INTERVAL_S - 1 + now)
    yield plan, spec, wr, fleet, w
    fleet.stop()


def test_the_schedules_own_step_is_not_drift_and_a_step_within_a_window_is(scheduled):
    plan, spec, wr, fleet, w = scheduled
    obs0, t = run(fleet, w, BEFORE, 0.0)
    assert w.window == 0 and "schedule window 0" in obs0[0].notes[0]
    fleet.serve(window_plan(plan, 1), window_spec(spec, wr, 1))  # the cron trigger's replicas, 4 rps
    # beside it, a watcher of window 0's static plan on the same endpoints (a scrape changes nothing)
    from trimtab.online.watch import Watcher, targets_for

    p0 = window_plan(plan, 0)
    urls = [m for m in fleet.metrics() if m.startswith(p0.deployments[0].name)][:1]
    static = Watcher(p0, window_spec(spec, wr, 0), targets_for(p0, urls), out_dir=w.out_dir / "static",
                     analytic=True, dead_after=2)
    static.step(now=t)
    obs1, seen = [], []
    for _ in range(16):
        fleet.advance(INTERVAL_S)
        t += INTERVAL_S
        obs1.append(w.step(now=t))
        seen.append(static.step(now=t))
    assert any(g["rate_change"] for o in seen for g in o.groups.values())  # what the schedule watch avoids
    assert w.window == 1 and "schedule window 1" in obs1[0].notes[0]
    assert not any(o.proposal for o in obs0 + obs1)
    assert not any(g["rate_change"] for o in obs0 + obs1 for g in o.groups.values())
    assert obs1[-1].groups["w"]["reference_rps"] == pytest.approx(4.0)
    assert obs1[-1].groups["w"]["rate_rps"] == pytest.approx(4.0, rel=0.25)
    # only the window's replicas are scraped: the held ones it scales down are not failures
    assert not any(o.failed for o in obs0 + obs1)
    fleet.scale["w"] = 1.6
    obs2, _ = run(fleet, w, 4, t)
    at = first_proposal(obs2)
    assert at is not None and at <= 2
    p = obs2[at - 1].proposal
    assert p.rates_rps["w"] == pytest.approx(6.4, rel=0.2) and p.check_ok and p.number == 1
    assert w.proposals == [p]


def test_cli_watches_a_schedule(tmp_path):
    """The command takes a plan with a schedule (it was an input error): the window of the UTC clock."""
    import json


    from tests.online.test_schedule import TINY
    from trimtab.api import plan as make_plan
    from trimtab.contract.write import emit

    spec_path = tmp_path / "tiny.yaml"
    spec_path.write_text(TINY.format(extra=""))
    spec = tiny()
    plan = make_plan(spec, validate=False).plan
    plan_path = tmp_path / "plan.yaml"
    plan_path.write_text(emit(plan))
    fleet = Fleet(plan, spec, 22)
    try:
        res = watch_once(plan_path, spec_path, tmp_path / "p", fleet.metrics())
        assert res.exit_code == 0, res.output
        first = json.loads(res.stdout.splitlines()[0])
        assert first["notes"][0].startswith("schedule window ")
    finally:
        fleet.stop()
