"""Schedules simulated over time (docs/online.md, "Transitions"): non-homogeneous arrivals, replicas that
serve only after their start-up, replicas that drain, one run of the one event loop across a boundary.

The tiny spec (tests/online/test_schedule.py) at 1 then 6 rps: the schedule runs one tp1 l4 replica (4.46 rps
at SLO) in window 0 and two in window 1. A tp1 replica of llama-3.1-8b starts in 8.03 B x 2 bytes / 2 GB/s +
60 s = 68 s (profiles/online.yaml).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from trimtab.api import plan
from trimtab.ir.lower import lower
from trimtab.gate.windows import check_transitions, rising
from trimtab.spec.rates import window_rates, window_spec
from trimtab.sim.metrics import summarise
from trimtab.sim.scenario import build_scenario
from trimtab.sim.schedule import ScaleEvent, ScheduleSimulation, Segment, scale_events
from trimtab.spec.load import load_spec
from tests.online.test_schedule import STARTUP_S, TINY, TP1

B = 300.0  # the boundary, in simulated seconds (check_transitions' BEFORE_S)


@pytest.fixture(scope="module")
def two():
    spec = load_spec("tiny.yaml", text=TINY.format(extra="").replace("[1, 4, 9, 2]", "[1, 6]"))
    p = plan(spec, validate=False).plan
    assert [w.replicas for w in p.schedule.windows] == [{TP1: 1}, {TP1: 2}]
    return spec, p


def run(spec, p, seed: int, lead: float, after_s: float = 900.0, counts=None):
    """One ScheduleSimulation of the boundary into window 1 (as check_transitions builds it)."""
    wr = window_rates(spec)
    held = p.model_copy(update={"schedule": None, "simulation": None})
    scs = [build_scenario(held.model_copy(update={"routes": list(p.schedule.windows[w].routes)}),
                          window_spec(spec, wr, w), lower(window_spec(spec, wr, w))) for w in (0, 1)]
    counts = counts or [[1], [2]]
    serving, events = scale_events(counts, [B], [STARTUP_S], [lead])
    segs = [Segment(0.0, B, scs[0]), Segment(B, B + after_s, scs[1])]
    return ScheduleSimulation(scs[1], segs, serving, events, seed).run()


def ttft_p90(sim, lo: float, hi: float) -> float:
    return summarise(sim, (lo, hi)).workloads["w"].ttft_at_target_ms


def test_scale_events_follow_the_counts():
    serving, ev = scale_events([[1, 3], [2, 1]], [100.0], [68.0, 30.0], [0.0, 30.0])
    assert serving == [[0], [0, 1, 2]]
    # deployment 0 adds replica 1, up 68 s after the boundary; deployment 1 drains replicas 1 and 2 at it; a
    # start issued ahead by its start-up time serves from the boundary
    assert ev == [ScaleEvent(100.0, 1, 1, False), ScaleEvent(100.0, 1, 2, False),
                  ScaleEvent(168.0, 0, 1, True)]
    _, ev = scale_events([[0], [1]], [100.0], [30.0], [30.0])
    assert ev == [ScaleEvent(100.0, 0, 0, True)]


def test_a_late_replica_serves_only_after_its_startup_and_ttft_rises_only_meanwhile(two):
    spec, p = two
    sim = run(spec, p, seed=11, lead=0.0)
    up = B + STARTUP_S
    second = [r for r in sim.requests if r.dep == 0 and r.rep == 1]
    # nothing reaches the new replica before its start-up ends; from then on it takes the new arrivals
    assert second and min(r.arrival for r in second) >= up and min(r.t_sched for r in second) >= up
    assert not [r for r in sim.requests if r.rep == 1 and r.arrival < up]
    # 6 rps on one replica that carries 4.46 at SLO: requests arriving during the start-up queue on it, so
    # TTFT p90 is over the 2 s SLO in the first minutes ...
    head = ttft_p90(sim, B, up)
    assert head > 2000
    # ... while after the start-up, once replica 0's backlog is served (it gets no new request while it has
    # more active requests than replica 1), the window runs at its steady-state TTFT, within the SLO
    tail = ttft_p90(sim, B + 600, B + 900)
    assert tail < 1000 and head > 3 * tail
    # with the start issued ahead by its start-up time (the plan's schedule), the same boundary shows no rise
    planned = run(spec, p, seed=11, lead=STARTUP_S)
    assert ttft_p90(planned, B, up) < 1000
    assert min(r.arrival for r in planned.requests if r.rep == 1) >= B  # (window 0's one replica before it)


def test_a_removed_replica_drains_and_takes_nothing_new(two):
    spec, p = two
    sim = run(spec, p, seed=12, lead=0.0, counts=[[2], [1]])
    on1 = [r for r in sim.requests if r.rep == 1]
    assert on1 and max(r.arrival for r in on1) < B
    assert all(r.t_done > 0 for r in on1)  # every request it held finished (drained, not dropped)
    assert any(r.t_done > B for r in on1)  # ... some after the boundary


def test_arrivals_per_window_match_the_rates():
    """Counts per segment are Poisson(rate x length): each within 4 standard deviations at two seeds, and the
    normalised deviations over 8 segments look like a standard normal's (chi-square, 8 dof, below its 99.9 %
    point 26.1)."""
    spec = load_spec("tiny.yaml", text=TINY.format(extra="").replace("[1, 4, 9, 2]", "[2, 7, 0.5, 4]"))
    p = plan(spec, validate=False).plan
    wr = window_rates(spec)
    held = p.model_copy(update={"schedule": None, "simulation": None})
    seg_s = 400.0
    scs = [build_scenario(held.model_copy(update={"routes": list(p.schedule.windows[w].routes)}),
                          window_spec(spec, wr, w), lower(window_spec(spec, wr, w))) for w in range(4)]
    segs = [Segment(k * seg_s, (k + 1) * seg_s, scs[k]) for k in range(4)]
    chi2 = 0.0
    for seed in (101, 202):
        counts = [[p.schedule.windows[w].replicas.get(d.view.name, 0) for d in scs[0].deployments]
                  for w in range(4)]
        serving, events = scale_events(counts, [seg_s * k for k in (1, 2, 3)],
                                       [0.0] * len(counts[0]), [0.0] * len(counts[0]))
        sim = ScheduleSimulation(scs[0], segs, serving, events, seed)
        t = sim.arrivals.t
        assert np.all(np.diff(t) >= 0)
        for k, rate in enumerate(wr.rates["w"]):
            n = int(((t >= k * seg_s) & (t < (k + 1) * seg_s)).sum())
            mu = rate * seg_s
            z = (n - mu) / math.sqrt(mu)
            assert abs(z) < 4, (seed, k, n, mu)
            chi2 += z * z
    assert chi2 < 26.1


def test_runs_are_deterministic(two):
    spec, p = two
    a, b, c = (run(spec, p, seed=s, lead=0.0, after_s=300.0) for s in (5, 5, 6))
    key = lambda sim: [(r.arrival, r.rep, r.t_first, r.t_done) for r in sim.requests]  # noqa: E731
    assert key(a) == key(b)
    assert key(a) != key(c)


def test_check_transitions_reports_the_boundary(two):
    spec, p = two
    assert rising(p) == [1]  # window 0 follows window 1 (cyclic) with fewer replicas: not a transition
    planned, late = (check_transitions(p, spec, seeds=3, lead_s=lead)[0] for lead in (None, 0.0))
    assert planned.window == 1 and planned.started == {TP1: 1} and planned.ready_s == {TP1: 0.0}
    assert late.ready_s == {TP1: pytest.approx(STARTUP_S, abs=0.1)}
    assert planned.ok, planned.violations
    # the late start's first 5 minutes: a miss the runs show (p90 target, about three quarters met)
    assert late.head.intervals["w"].mean < 0.85 < planned.head.intervals["w"].mean
    assert not late.ok and "first 300 s" in late.violations[0]


def test_cli_check_simulates_the_transitions(two, tmp_path):
    import json

    from typer.testing import CliRunner

    from trimtab.cli.main import app
    from trimtab.contract.write import emit

    spec, p = two
    sf, pf = tmp_path / "two.yaml", tmp_path / "plan.yaml"
    sf.write_text(TINY.format(extra="").replace("[1, 4, 9, 2]", "[1, 6]"))
    pf.write_text(emit(p))
    args = ["check", "--plan", str(pf), "--spec", str(sf), "--seeds", "2", "--requests", "1500",
            "--format", "json"]
    late = CliRunner().invoke(app, args + ["--start-lead", "0"])
    assert late.exit_code == 5, late.output
    data = json.loads(late.stdout)  # (progress goes to stderr)
    assert [t["window"] for t in data["transitions"]] == [1] and not data["transitions"][0]["ok"]
    assert data["transitions"][0]["ready_s"] == {TP1: pytest.approx(STARTUP_S, abs=0.1)}
    skipped = CliRunner().invoke(app, args + ["--start-lead", "0", "--no-transitions"])
    assert json.loads(skipped.stdout)["transitions"] == []
