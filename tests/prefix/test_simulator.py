"""The simulator with prefix hits against the cost model (tolerances of tests/sim/test_cost_model_agreement.py),
and the measured validation: replaying a trace's block hashes through each replica's LRU."""
from __future__ import annotations

import pytest

from trimtab.cost.factory import prefix_cache, prefix_hit, replica_model, traffic_class
from trimtab.ir.lower import lower
from trimtab.sim import simulate
from trimtab.sim.engine import Simulation
from trimtab.sim.scenario import build_scenario
from trimtab.spec.load import load_spec
from tests.prefix.helpers import shared_prefix_trace
from tests.sim.helpers import one_deployment_plan, write_spec

PREFIX = "    prefix: {hit_rate: 0.5, cached_tokens: 50000}\n"


def _model(sp, mbt=8192):
    ir = lower(load_spec(sp))
    return ir, replica_model(ir, "llama-3.1-8b", "h100-sxm", 1, 1, "bf16", 256, mbt)


def test_lone_request_prefills_only_uncached_tokens(tmp_path):
    sp = write_spec(tmp_path, rate=0.01, isl="{fixed: 6000}", osl="{fixed: 16}", ttft=5000, extra=PREFIX)
    res = simulate(one_deployment_plan(sp, mbt=2048), load_spec(sp), requests=100, seed=1)
    ir, rm = _model(sp, mbt=2048)
    reserved, hit = prefix_cache(ir.workloads[0], rm)
    assert (reserved, hit) == (50000, 0.5)
    expected = rm.request_overhead + rm.prefill_s(6000, 0, 0, 0.0, 3000)  # 3000 new tokens after 3000 cached
    assert res.workloads["w"].ttft_ms["p50"] == pytest.approx(expected * 1e3, rel=1e-6)
    assert expected < rm.request_overhead + rm.prefill_s(6000, 0, 0)


@pytest.mark.parametrize("rate", [6.0, 14.0])
def test_steady_state_with_hits_agrees_with_evaluate(tmp_path, rate):
    sp = write_spec(tmp_path, rate=rate, isl="{fixed: 2048}", osl="{fixed: 128}", extra=PREFIX)
    res = simulate(one_deployment_plan(sp), load_spec(sp), requests=15_000, seed=7)
    ir, rm = _model(sp)
    w = ir.workloads[0]
    st = rm.evaluate([traffic_class(w.buckets[0], rate, w, rm)], 90.0)
    sw, d = res.workloads["w"], res.deployments["d"]
    assert sw.tpot_ms["mean"] == pytest.approx(st.tpot_s * 1e3, rel=0.06)
    assert d.prefill_utilization == pytest.approx(st.utilization, rel=0.06)
    assert d.decode_batch == pytest.approx(st.decode_batch, rel=0.06)
    step = rm.iteration_s(st.decode_batch, 2048 + 64) * 1e3
    assert abs(sw.ttft_ms["mean"] - st.ttft_mean_s[0] * 1e3) <= 0.15 * st.ttft_mean_s[0] * 1e3 + step
    # and the hits are what makes it: without them the same load keeps the prefill server much busier
    plain = rm.evaluate([traffic_class(w.buckets[0], rate)], 90.0)
    assert plain.utilization > 1.4 * st.utilization


def test_trace_hits_are_replayed_per_replica(tmp_path):
    """from_trace: the planner's measured hit rate, and the simulator's LRU replay of the same hashes, agree
    when each replica's prefix cache holds the working set (one replica: it sees every request)."""
    shared_prefix_trace(tmp_path / "t.jsonl", n=3000, prompts=8, prefix_blocks=6, suffix_blocks=4, rate=4.0)
    sp = write_spec(tmp_path, rate=4.0, isl="{fixed: 5120}", osl="{fixed: 64}", ttft=3000,
                    extra="    trace: {path: t.jsonl, format: mooncake}\n    prefix: {from_trace: true}\n")
    sp.write_text(sp.read_text().replace("    rate_rps: 4.0\n", ""))
    spec = load_spec(sp)
    ir, rm = _model(sp)
    w = ir.workloads[0]
    # 8 prefixes of 6 blocks are reused, suffixes never: after the first few requests 6/10 of the input is cached
    assert w.prefix_source == "trace"
    assert w.prefix_hit_rate == pytest.approx(0.6, abs=0.01)
    assert w.prefix_working_set == (8 * 6 + 3000 * 4) * 512
    reserved, hit = prefix_cache(w, rm)
    plan = one_deployment_plan(sp)
    sim = Simulation(build_scenario(plan, spec, ir), seed=3, requests=3000).run()
    served = [r for r in sim.requests if r.t_done >= 0]
    replayed = sum(r.cached for r in served) / sum(r.isl for r in served)
    # The LRU holds the 48 shared blocks as long as the reserve is well above one request's suffixes
    assert reserved >= 20 * 512
    assert replayed == pytest.approx(0.6, abs=0.02)
    # the planner reads the measured LRU curve at the reserve (uniform popularity would give ~reserve / working
    # set, a few per cent: popular prefixes are what an LRU keeps)
    assert hit == pytest.approx(prefix_hit(w, reserved))
    assert hit > 0.5 > 0.6 * reserved / w.prefix_working_set * 10
