"""Same inputs and seed give the same run; a different seed a different one; simulations share no state."""
from __future__ import annotations

from trimtab.sim import simulate
from trimtab.sim.engine import Simulation
from trimtab.sim.metrics import summarise
from trimtab.sim.scenario import build_scenario
from trimtab.ir.lower import lower
from trimtab.spec.load import load_spec
from tests.sim.helpers import one_deployment_plan, write_spec


def _setup(tmp_path, rate=20.0):
    sp = write_spec(tmp_path, rate=rate, isl="{lognormal: {median: 800, p99: 6000}}",
                    osl="{uniform: {min: 16, max: 300}}", ttft=400, tpot=40, pct=90)
    return one_deployment_plan(sp, replicas=2), load_spec(sp)


def _strip(d: dict) -> dict:
    d = dict(d)
    d.pop("wall_s")
    return d


def test_same_seed_same_result_other_seed_differs(tmp_path):
    plan, spec = _setup(tmp_path)
    a = simulate(plan, spec, requests=3000, seed=11).to_dict()
    b = simulate(plan, spec, requests=3000, seed=11).to_dict()
    c = simulate(plan, spec, requests=3000, seed=12).to_dict()
    assert _strip(a) == _strip(b)
    assert _strip(a) != _strip(c)


def test_two_simulations_share_no_state(tmp_path):
    plan, spec = _setup(tmp_path)
    ir = lower(spec)
    s1 = Simulation(build_scenario(plan, spec, ir), seed=3, requests=2000)
    s2 = Simulation(build_scenario(plan, spec, ir), seed=4, requests=2000)
    s2.run()  # runs between s1's construction and its run
    r1 = summarise(s1.run()).to_dict()
    alone = summarise(Simulation(build_scenario(plan, spec, ir), seed=3, requests=2000).run()).to_dict()
    assert _strip(r1) == _strip(alone)
    # Event sequence numbers are per simulation: the same count of events gives the same next number.
    assert next(s1.events.seq) == next(Simulation(build_scenario(plan, spec, ir), seed=3,
                                                  requests=2000).run().events.seq)


def test_overload_preempts_and_misses(tmp_path):
    # A small KV cache (L4) under heavy load: requests wait or get preempted, and the SLO is missed.
    sp = write_spec(tmp_path, rate=40.0, isl="{fixed: 3000}", osl="{fixed: 400}", ttft=1000, tpot=60,
                    gpu="l4")
    plan = one_deployment_plan(sp, gpu="l4")
    res = simulate(plan, load_spec(sp), requests=1500, seed=0)
    w = res.workloads["w"]
    assert not w.passed and w.worst_deployment == "d"
    assert res.failures()[0].startswith("workload w: ") and "most misses: d" in res.failures()[0]
    assert res.deployments["d"].kv_max > 0.9
