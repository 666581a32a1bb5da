"""Per-deployment event loops and their reuse across planning rounds (compiler/sim/reuse.py) give exactly the
result of the one event loop over all arrivals, on the real cost model and simulator."""
from __future__ import annotations

from pathlib import Path

import pytest

from trimtab.api import plan
from trimtab.sim import simulate
from trimtab.ir.lower import lower
from trimtab.sim.reuse import RunCache, join_ends
from trimtab.sim.scenario import build_scenario
from trimtab.spec.load import load_spec
from tests.conftest import planned

ROOT = Path(__file__).resolve().parents[2]


def _d(res) -> dict:
    d = res.to_dict()
    d.pop("wall_s")
    return d


def _whole(p, spec, **kw):
    """The one event loop over all arrivals (a ``progress`` callback keeps the run whole)."""
    return simulate(p, spec, progress=lambda f: None, **kw)


def _quickstart():
    spec = load_spec(ROOT / "examples" / "quickstart.yaml")
    return planned("quickstart", validate=False).plan, spec


def test_split_run_equals_the_whole_run_field_by_field():
    p, spec = _quickstart()
    assert len(p.deployments) >= 3
    for seed in (0, 7):
        whole = _whole(p, spec, seed=seed, requests=4000)
        split = simulate(p, spec, seed=seed, requests=4000)
        assert _d(split) == _d(whole)
        assert whole.steps > 4000  # a real run, not an empty one


def test_split_run_equals_the_whole_run_when_the_drain_limit_stops_it():
    """An overloaded plan (one replica per deployment at 16x the rate) still has work at the drain limit: the
    end of the run is the first step end beyond it, recovered from the per-deployment runs."""
    p, spec = _quickstart()
    spec = spec.model_copy(update={"workloads": [w.model_copy(update={"rate_rps": w.rate_rps * 16})
                                                 for w in spec.workloads]})
    small = p.model_copy(update={"deployments": [d.model_copy(update={"replicas": 1})
                                                 for d in p.deployments]})
    whole = _whole(small, spec, seed=1, requests=6000)
    split = simulate(small, spec, seed=1, requests=6000)
    assert whole.stopped_early
    assert _d(split) == _d(whole)


def test_reused_runs_give_the_fresh_result_and_only_changed_deployments_run_again():
    p, spec = _quickstart()
    cache = RunCache()
    first = simulate(p, spec, seed=2, requests=3000, timeline=False, cache=cache)
    n = cache.misses
    assert n >= 3 and cache.hits == 0
    again = simulate(p, spec, seed=2, requests=3000, timeline=False, cache=cache)
    assert (cache.hits, cache.misses) == (n, n)
    assert _d(again) == _d(first)
    # one more replica on one deployment: that deployment runs again, the others are taken as they were
    deps = list(p.deployments)
    k = max(range(len(deps)), key=lambda i: deps[i].replicas)
    deps[k] = deps[k].model_copy(update={"replicas": deps[k].replicas + 1})
    changed = p.model_copy(update={"deployments": deps})
    hits0 = cache.hits
    reused = simulate(changed, spec, seed=2, requests=3000, timeline=False, cache=cache)
    assert cache.misses == n + 1 and cache.hits == hits0 + n - 1
    fresh = _whole(changed, spec, seed=2, requests=3000, timeline=False)
    assert _d(reused) == _d(fresh)
    assert _d(reused) != _d(first)
    # another seed shares nothing with seed 2's runs
    simulate(p, spec, seed=3, requests=3000, timeline=False, cache=cache)
    assert cache.misses == 2 * n + 1


def test_reuse_survives_adapter_delays():
    """Adapter loads (trimtab.sim.lora) shift request timestamps after the run: a reused run must start from
    the run's own timestamps, not the shifted ones."""
    spec = load_spec(ROOT / "examples" / "multi-lora.yaml")
    p = plan(spec, validate=False).plan
    cache = RunCache()
    a = simulate(p, spec, seed=4, requests=3000, timeline=False, cache=cache)
    b = simulate(p, spec, seed=4, requests=3000, timeline=False, cache=cache)
    assert cache.hits == cache.misses > 0
    assert any("adapters:" in note for note in a.notes)
    assert _d(a) == _d(b) == _d(_whole(p, spec, seed=4, requests=3000, timeline=False))


def test_join_ends():
    assert join_ends(10.0, [(12.0, False), (15.0, False)]) == (15.0, False)
    assert join_ends(10.0, [(3.0, False)]) == (10.0, False)
    assert join_ends(10.0, [(300.0, True), (250.0, True), (400.0, False)]) == (250.0, True)


UNDERSAMPLED = """\
version: 1
name: undersampled
gpus:
  - {type: h100-sxm, count: 8, usd_per_hour: 3.90}
models:
  - name: llama-3.1-8b
workloads:
  - name: busy
    model: llama-3.1-8b
    rate_rps: 20
    input_tokens: {fixed: 256}
    output_tokens: {fixed: 16}
    slo: {ttft_ms: 2000, tpot_ms: 200, percentile: 90}
  - name: rare
    model: llama-3.1-8b
    rate_rps: 0.02
    input_tokens: {fixed: 256}
    output_tokens: {fixed: 16}
    slo: {ttft_ms: 2000, tpot_ms: 200, percentile: 99}
"""


def test_a_workload_too_rare_to_demonstrate_is_accepted_on_attainment(tmp_path, monkeypatch):
    """A p99 workload with too few requests in the run (the total is capped) cannot show its bound at 99 %
    even at 100 % attainment, and no GPU added changes that. It is accepted on its pooled attainment at or
    above target and listed in plan.simulation.undersampled, and ``trimtab plan`` says so (before: the planner
    kept re-solving the same plan and ended with the plan marked as failing). The planner's later seeds give
    such a workload runs of its own length (``trimtab.sim.aim_counts``, tests/sim/test_rare_runs.py); here
    they are off (AIM_SHORT 0), as where even those runs are too short; with them, rare's bound
    reaches 99 %."""
    import trimtab.sim
    from typer.testing import CliRunner

    from trimtab.cli.main import app

    monkeypatch.setattr(trimtab.sim, "MAX_DEFAULT_REQUESTS", 3000)  # rare: ~3 requests
    p = tmp_path / "u.yaml"
    p.write_text(UNDERSAMPLED)
    own = plan(load_spec(p)).plan.simulation  # with runs of its own length: 2 x 2,000 requests
    assert own.passed and own.undersampled == [] and own.attainment_lower["rare"] >= 0.99
    monkeypatch.setattr(trimtab.sim, "AIM_SHORT", 0.0)
    r = plan(load_spec(p))
    sim = r.plan.simulation
    assert sim.passed and sim.undersampled == ["rare"] and sim.rounds == 0
    assert (sim.attainment["rare"] == 1.0
            and sim.attainment_lower["rare"] < 0.99 <= sim.attainment_lower["busy"])
    assert r.rounds == 1 and not r.plan.warnings
    out = CliRunner().invoke(app, ["plan", str(p), "-o", str(tmp_path / "plan.yaml")])
    assert out.exit_code == 0, out.output
    assert "too few simulated requests" in out.output and "rare" in out.output
    assert "undersampled:\n  - rare" in (tmp_path / "plan.yaml").read_text()


def test_pd_plans_run_their_pairs_together_and_reuse_the_other_deployments():
    """A plan with P/D pairs and unified deployments: the pairs' deployments hand requests to each other and
    run in one loop; the unified ones run alone; each is reused by the next simulation with the same inputs.
    Same result as the one loop over all arrivals."""
    from tests.sim.helpers import pd_spec

    spec = pd_spec(docs=False)
    p = plan(spec, validate=False).plan
    roles = {d.role for d in p.deployments}
    assert {"prefill", "decode", "unified"} <= roles
    whole = simulate(p, spec, seed=6, requests=3000, timeline=False)  # no cache: P/D plans run whole
    cache = RunCache()
    a = simulate(p, spec, seed=6, requests=3000, timeline=False, cache=cache)
    solo = sum(1 for d in p.deployments if d.role == "unified" and d.replicas)
    assert (cache.hits, cache.misses) == (0, solo + 1)  # each unified deployment, and the pairs together
    b = simulate(p, spec, seed=6, requests=3000, timeline=False, cache=cache)
    assert (cache.hits, cache.misses) == (solo + 1, solo + 1)  # the pairs' run reused too
    # the pairs' run is reused only with the same inputs: another hand-off time runs them again
    sc = build_scenario(p, spec, lower(spec))
    sc.pair_xfer_s_per_token = [x * 2 for x in sc.pair_xfer_s_per_token]
    c = simulate(p, spec, seed=6, requests=3000, timeline=False, cache=cache, scenario=sc)
    assert (cache.hits, cache.misses) == (2 * solo + 1, solo + 2)
    fresh = simulate(p, spec, seed=6, requests=3000, timeline=False, scenario=sc)
    assert _d(a) == _d(b) == _d(whole) and _d(c) == _d(fresh) != _d(a)


def test_plans_with_reuse_are_the_plans_of_full_simulations(monkeypatch):
    """A generated spec whose second round keeps some deployments: planned with reuse and with every round
    simulated in full (a cache that never hands a run back), the plan files are the same bytes."""
    import json

    import trimtab.sim
    from benchmarks.specgen import family, parse_size
    from trimtab.contract.write import plan_to_data

    monkeypatch.setattr(trimtab.sim, "MAX_DEFAULT_REQUESTS", 20_000)  # keeps the test to seconds
    # seed 15: two rounds, four runs reused (seed 5, the spec before the H100 refit, now passes in one round)
    name, text = family(parse_size("small"), 1, 15)[0]
    spec = load_spec(f"{name}.yaml", text=text)
    reused = plan(spec)
    assert reused.rounds >= 2 and reused.sim_runs[0] > 0
    assert reused.sim_runs[1] >= len(reused.plan.deployments)  # each of them simulated in some round
    monkeypatch.setattr(RunCache, "begin", lambda self, seed: ({}, {}))
    full = plan(spec)
    assert full.sim_runs[0] == 0
    assert json.dumps(plan_to_data(reused.plan), sort_keys=True) == json.dumps(plan_to_data(full.plan),
                                                                               sort_keys=True)


def test_closure_of_workloads_over_shared_deployments():
    """Hand case: a -> d1; b -> d1 and d2; c -> d3; e -> P/D pair (p1, q1); f -> q1 alone is not a route
    shape, so f -> d4. {a} pulls in d1, then b (shares d1), then d2; {e} takes both sides of its pair."""
    from types import SimpleNamespace as R

    from trimtab.sim import closure

    routes = [R(workload="a", deployment="d1", prefill=None, decode=None, share=1.0),
              R(workload="b", deployment="d1", prefill=None, decode=None, share=0.5),
              R(workload="b", deployment="d2", prefill=None, decode=None, share=0.5),
              R(workload="c", deployment="d3", prefill=None, decode=None, share=1.0),
              R(workload="c", deployment="d1", prefill=None, decode=None, share=0.0),  # no traffic: no link
              R(workload="e", deployment=None, prefill="p1", decode="q1", share=1.0),
              R(workload="f", deployment="d4", prefill=None, decode=None, share=1.0)]
    p = R(routes=routes)
    assert closure(p, {"a"}) == (frozenset({"a", "b"}), frozenset({"d1", "d2"}))
    assert closure(p, {"b"}) == (frozenset({"a", "b"}), frozenset({"d1", "d2"}))
    assert closure(p, {"e", "c"}) == (frozenset({"c", "e"}), frozenset({"d3", "p1", "q1"}))
    assert closure(p, set()) == (frozenset(), frozenset())


def test_a_run_of_some_workloads_reports_them_exactly_as_the_whole_run():
    """``simulate(only_workloads=...)`` runs only their deployments; what it reports of them is the whole
    run's, field by field, and the others are not reported (the planner's selective seeds,
    trimtab.sim.validate)."""
    p, spec = _quickstart()
    routed = {r.workload for r in p.routes}
    assert len(routed) >= 2
    for name in sorted(routed):
        from trimtab.sim import closure

        keep, deps = closure(p, {name})
        assert keep < routed or len(routed) == len(keep)
        whole = simulate(p, spec, seed=3, requests=4000)
        part = simulate(p, spec, seed=3, requests=4000, only_workloads=frozenset({name}))
        assert set(part.workloads) == set(keep) and set(part.deployments) == set(deps)
        dw, dp = _d(whole), _d(part)
        for k in keep:
            assert dp["workloads"][k] == dw["workloads"][k]
        for k in deps:  # (utilisation and KV shares are over the run's end, which the skipped runs can move)
            same = ("replicas", "requests", "attainment", "decode_batch", "preemptions", "steps",
                    "queue_ms_mean")
            assert {f: dp["deployments"][k][f] for f in same} == {f: dw["deployments"][k][f] for f in same}
        assert part.steps < whole.steps or keep == routed  # the others' deployments did not run


@pytest.mark.slow
def test_planner_seeds_after_the_first_run_only_what_it_did_not_show_clearly(monkeypatch):
    """``simulate_seeds(fail_fast=True)`` (the planner): a workload the first seed shows ``clearly`` keeps
    that run; the other seeds run the rest (with their closure), and each is pooled over the runs that report
    it; those pooled intervals are the ones every seed whole would give for them. (chat at p99.8 aims at more
    requests a run than the capped run gives it: the runs of its own length, ``trimtab.sim.aim_counts``, are
    off here, tests/sim/test_rare_runs.py tests them.)"""
    import yaml

    import trimtab.sim

    monkeypatch.setattr(trimtab.sim, "AIM_SHORT", 0.0)

    from trimtab.ir.lower import lower
    from trimtab.contract.schema import Plan
    from trimtab.sim import closure, default_requests
    from trimtab.sim.validate import clearly, combine, simulate_seeds

    # The quickstart's golden plan with chat held to p99.8 and summarize's latencies loosened: at seed 0 every
    # workload meets its SLO, chat without the margin ``clearly`` asks, the other two clearly (the golden plan
    # of the measured profiles runs chat on one replica and summarize near its p90, so the percentile and the
    # loosening are what put chat, and chat alone, between a miss and a clear pass).
    text = (ROOT / "examples" / "quickstart.yaml").read_text()
    text = text.replace("slo: {ttft_ms: 2000, tpot_ms: 60, percentile: 99}",
                        "slo: {ttft_ms: 2000, tpot_ms: 60, percentile: 99.8}")
    text = text.replace("slo: {ttft_ms: 3000, tpot_ms: 100, percentile: 90}",
                        "slo: {ttft_ms: 6000, tpot_ms: 200, percentile: 90}")
    spec = load_spec("quickstart.yaml", text=text)
    p = Plan.model_validate(yaml.safe_load((ROOT / "tests" / "golden" / "quickstart.plan.yaml").read_text()))
    ir = lower(spec)
    n = default_requests(ir)
    seeds = (0, 1, 2)
    res = simulate_seeds(p, spec, ir, seeds, n, fail_fast=True)
    assert len(res.runs) == 3  # neither a miss nor a clear pass on seed 0 (the golden plan needed 3 seeds)
    first = combine(seeds[:1], res.runs[:1])
    pending = {w for w in first.intervals if not clearly(first, w)}
    keep, _ = closure(p, pending)
    assert pending == {"chat"} and set(res.intervals) == set(first.intervals)
    for w in res.intervals:
        assert len(res.runs_of(w)) == (3 if w in keep else 1)
    whole = simulate_seeds(p, spec, ir, seeds, n)  # every seed whole (what check does)
    for w in keep:
        assert res.intervals[w] == whole.intervals[w]
    for w in set(res.intervals) - keep:
        assert res.intervals[w] == first.intervals[w] and res.demonstrated(w)


def test_a_plans_seeds_share_one_scenario_and_give_what_a_scenario_per_run_gives(monkeypatch):
    """``simulate_seeds`` builds the scenario once for every run of the plan (``simulate(scenario=...)``): one
    build for three seeds, and each seed's result is the one ``simulate`` gives building its own."""
    import trimtab.sim.validate as validate_mod
    from trimtab.ir.lower import lower
    from trimtab.sim.validate import simulate_seeds

    p, spec = _quickstart()
    ir = lower(spec)
    builds = []
    real = validate_mod.build_scenario
    monkeypatch.setattr(validate_mod, "build_scenario", lambda *a, **k: builds.append(1) or real(*a, **k))
    monkeypatch.setenv("TRIMTAB_JOBS", "1")
    res = simulate_seeds(p, spec, ir, (0, 1, 2), 3000)
    assert len(builds) == 1 and len(res.runs) == 3
    for seed, run in zip((0, 1, 2), res.runs):
        assert _d(run) == _d(simulate(p, spec, ir=ir, seed=seed, requests=3000, timeline=False))


def test_replicas_of_one_cost_model_share_its_decode_step_table():
    """The decode-step lines (``Replica._linear``) are a function of the cost model alone: its replicas share
    one table, filled once; another model gets its own."""
    from trimtab.cost.factory import replica_model
    from trimtab.ir.lower import lower
    from trimtab.sim.replica import Replica

    ir = lower(_quickstart()[1])
    m = replica_model(ir, "llama-3.1-8b", "h100-sxm", 1, 1, "bf16", 256, 8192)
    other = replica_model(ir, "llama-3.1-8b", "h100-sxm", 1, 1, "bf16", 256, 8192)
    a, b, c = Replica(0, 0, m), Replica(0, 1, m), Replica(1, 0, other)
    assert a.lin is b.lin and a.lin is not c.lin
    a.lin[4] = a._linear(4)
    assert b.lin[4] == c._linear(4)  # the same line, computed once for both replicas of m


def test_remembered_draws_are_the_draws_whatever_the_routes():
    """``RunCache.drawn`` hands a seed's draws to every later run of it (the draws do not depend on the
    routes): a run of a re-routed plan gets the arrivals, and the generator state, drawing gives it, for whole
    runs and for runs of some workloads' own length (``counts``)."""
    import numpy as np

    from trimtab.sim.engine import Simulation, draw_arrivals, draw_counts
    from trimtab.sim.scenario import build_scenario

    p, spec = _quickstart()
    ir = planned("quickstart", validate=False).ir
    # the same plan with the first route of each workload moved to its last deployment: other routes
    routes = list(p.routes)
    routes[0] = routes[0].model_copy(update={"deployment": routes[-1].deployment})
    moved = p.model_copy(update={"routes": routes})
    cache = RunCache()
    for plan_ in (p, moved, p):
        sc = build_scenario(plan_, spec, ir)
        for kw in ({"requests": 3000}, {"counts": {0: 500, 1: 300}}):
            sim = Simulation(sc, 5, timeline=False, cache=cache, **kw)
            rng = np.random.default_rng(5)
            fresh = (draw_arrivals(sc, rng, 3000, None) if "requests" in kw
                     else draw_counts(sc, 5, kw["counts"]))
            for col in ("t", "w", "isl", "osl", "dep", "row"):
                assert np.array_equal(getattr(sim.arrivals, col), getattr(fresh, col)), col
            if "requests" in kw:
                assert sim.rng.bit_generator.state == rng.bit_generator.state
    assert len(cache.draws) == 2
    # routes changed what the moved plan's requests go to, not what was drawn
    a = Simulation(build_scenario(p, spec, ir), 5, requests=3000, timeline=False, cache=cache).arrivals
    b = Simulation(build_scenario(moved, spec, ir), 5, requests=3000, timeline=False, cache=cache).arrivals
    assert not np.array_equal(a.dep, b.dep) and np.array_equal(a.t, b.t)


def test_pair_groups_run_apart_and_each_is_reused_alone():
    """Two groups of P/D pairs that share no deployment run in loops of their own, the same result as the
    one loop over all arrivals; a changed hand-off time on one group runs that group again and reuses the
    other."""
    from tests.sim.helpers import two_pair_groups

    p, spec = two_pair_groups()
    sc = build_scenario(p, spec, lower(spec))
    groups = sc.pair_groups()
    assert len(groups) == 2 and not set(groups[0][0]) & set(groups[1][0])
    whole = _whole(p, spec, seed=3, requests=4000, timeline=False)
    cache = RunCache()
    a = simulate(p, spec, seed=3, requests=4000, timeline=False, cache=cache, scenario=sc)
    solo = sum(1 for d in p.deployments if d.role == "unified" and d.replicas)
    assert (cache.hits, cache.misses) == (0, solo + 2)
    assert _d(a) == _d(whole)
    slower = build_scenario(p, spec, lower(spec))
    slower.pair_xfer_s_per_token[groups[1][1][0]] *= 4  # the second group's hand-off only
    b = simulate(p, spec, seed=3, requests=4000, timeline=False, cache=cache, scenario=slower)
    assert (cache.hits, cache.misses) == (solo + 1, solo + 3)  # the first group reused, the second run again
    fresh = _whole(p, spec, seed=3, requests=4000, timeline=False, scenario=slower)
    assert _d(b) == _d(fresh) != _d(a)


def test_pair_groups_stopped_at_the_drain_limit_equal_the_whole_run():
    """An overloaded plan with two groups of P/D pairs (one replica per deployment at 8x the rates): the end
    of the run is the earliest stopped unit's, as the one loop over all arrivals has it."""
    from tests.sim.helpers import two_pair_groups

    p, spec = two_pair_groups()
    spec = spec.model_copy(update={"workloads": [w.model_copy(update={"rate_rps": w.rate_rps * 8})
                                                 for w in spec.workloads]})
    small = p.model_copy(update={"deployments": [d.model_copy(update={"replicas": 1})
                                                 for d in p.deployments]})
    whole = _whole(small, spec, seed=1, requests=3000, timeline=False)
    split = simulate(small, spec, seed=1, requests=3000, timeline=False, cache=RunCache())
    assert whole.stopped_early
    assert _d(split) == _d(whole)


def test_pair_groups_join_pairs_that_share_a_deployment():
    from trimtab.sim.scenario import Scenario

    sc = Scenario([], [], [], pairs=[(4, 7), (0, 2), (1, 3), (1, 2), (5, 6)])
    assert sc.pair_groups() == [((0, 1, 2, 3), (1, 2, 3)), ((4, 7), (0,)), ((5, 6), (4,))]
    assert Scenario([], [], []).pair_groups() == []
