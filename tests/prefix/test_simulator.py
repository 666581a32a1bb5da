"""The simulator with prefix hits against the cost model (tolerances of
tests/sim/test_cost_model_agreement.py), and the measured validation: replaying a trace's block hashes through
each replica's LRU."""
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
    # 8 prefixes of 6 blocks are reused, suffixes never: after the first few requests 6/10 of the input is
    # cached
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
    # the planner reads the measured LRU curve at the reserve (uniform popularity would give ~reserve /
    # working set, a few per cent: popular prefixes are what an LRU keeps)
    assert hit == pytest.approx(prefix_hit(w, reserved))
    assert hit > 0.5 > 0.6 * reserved / w.prefix_working_set * 10


def test_shared_prompt_cache_starts_cold():
    """Shared system prompts (spec shared_prefix): a replica's cache finds a group's prefix, or with
    prompts_repeat a user's whole prompt, only once it has served it: hand-counted for 2 groups x 2 users."""
    from trimtab.sim.replica import PrefixCache, Request

    def req(w, row, isl=500):
        r = Request(0, w, 0, 0.0, isl, 10)
        r.row = row
        return r

    pc = PrefixCache(10_000, {0: 0.9, 1: 0.2}, sets={0: (2, 2, 100, True), 1: (2, 2, 100, False)})
    # repeating prompts (workload 0): rows are group x 2 + user
    assert [pc.cached(req(0, row)) for row in (0, 0, 1, 3, 1, 2)] == [0, 499, 100, 0, 499, 100]
    # a shared prefix alone (workload 1): only the group's 100 tokens, never the user's; a 60-token prompt
    # keeps its last token to compute
    assert [pc.cached(req(1, row)) for row in (2, 3, 2, 0)] == [0, 100, 100, 0]
    assert pc.cached(req(1, 1, isl=60)) == 59
    # a request of a workload without shared prompts keeps the planned hit rate
    assert PrefixCache(10_000, {0: 0.5}).cached(req(0, -1, isl=400)) == 200


def test_cold_prompts_are_measured_without_warmup(tmp_path):
    """With warmup=False every request counts, so the first request of each of the 4 repeated prompts, which
    prefills its whole prompt, is in the statistics and sets its TTFT tail; the rest hit the cache."""
    extra = ("    arrivals: constant\n    shared_prefix: {prefix_tokens: 1000, groups: 2, users_per_group: 2,"
             " prompts_repeat: true}\n")
    sp = write_spec(tmp_path, rate=2.0, isl="{fixed: 4000}", osl="{fixed: 8}", ttft=5000, extra=extra)
    spec = load_spec(sp)
    plan = one_deployment_plan(sp)
    ir = lower(spec)
    sim = Simulation(build_scenario(plan, spec, ir), seed=0, requests=200).run()
    cached = [r.cached for r in sim.requests]
    assert sorted(set(cached)) in ([0, 3999], [0, 1000, 3999])
    assert sum(c < 3999 for c in cached) == 4  # each of the 2 x 2 prompts computed once
    cold = simulate(plan, spec, ir=ir, requests=200, seed=0, warmup=False)
    warm = simulate(plan, spec, ir=ir, requests=200, seed=0)
    assert cold.workloads["w"].requests == 200 > warm.workloads["w"].requests
    assert cold.workloads["w"].ttft_ms["p99"] > 2 * warm.workloads["w"].ttft_ms["p99"]
