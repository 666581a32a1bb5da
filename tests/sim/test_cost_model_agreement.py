"""The simulator against the cost model it takes its step times from.

* One request at a time (low load): TTFT is exactly the cost model's prefill time (plus its per-request
  overhead) and TPOT the mean of its decode steps, within 2 % of ``zero_load``.
* Steady state at moderate load: mean TPOT, prefill utilisation and decode batch within 6 % of
  ``ReplicaModel.evaluate``; mean TTFT within 15 % plus one decode step (a request that arrives during a
  decode step waits for it to end, which the analytic M/G/1 prefill queue leaves out; with async scheduling,
  vLLM's, ``evaluate`` adds half a mean step for it and a mean step for the one formed ahead).
  docs/simulator.md states these.
"""
from __future__ import annotations

import pytest

from trimtab.cost.factory import replica_model
from trimtab.cost.model import TrafficClass
from trimtab.ir.lower import lower
from trimtab.sim import simulate
from trimtab.spec.load import load_spec
from tests.sim.helpers import one_deployment_plan, write_spec


def _model(spec_path, mbt=8192):
    ir = lower(load_spec(spec_path))
    return replica_model(ir, "llama-3.1-8b", "h100-sxm", 1, 1, "bf16", 256, mbt)


def test_single_replica_low_load_matches_cost_model(tmp_path):
    sp = write_spec(tmp_path, rate=0.02, isl="{fixed: 1024}", osl="{fixed: 128}")
    res = simulate(one_deployment_plan(sp), load_spec(sp), requests=300, seed=5)
    rm = _model(sp)
    w = res.workloads["w"]
    ttft0, tpot0 = rm.zero_load(TrafficClass(0.0, 1024, 128))
    # The median request found the replica idle.
    assert w.ttft_ms["p50"] == pytest.approx(ttft0, rel=1e-6)
    assert w.tpot_ms["p50"] == pytest.approx(tpot0, rel=0.02)
    assert res.deployments["d"].preemptions == 0


def test_chunked_prefill_of_a_long_prompt_alone(tmp_path):
    sp = write_spec(tmp_path, rate=0.01, isl="{fixed: 6000}", osl="{fixed: 16}", ttft=5000)
    res = simulate(one_deployment_plan(sp, mbt=2048), load_spec(sp), requests=100, seed=1)
    rm = _model(sp, mbt=2048)
    expected = getattr(rm, "request_overhead", 0.0) + rm.prefill_s(6000, 0, 0)  # 3 chunks of <= 2048 tokens
    assert res.workloads["w"].ttft_ms["p50"] == pytest.approx(expected * 1e3, rel=1e-6)


@pytest.mark.parametrize("rate", [5.0, 12.0])
def test_steady_state_agrees_with_evaluate(tmp_path, rate):
    sp = write_spec(tmp_path, rate=rate, isl="{fixed: 1024}", osl="{fixed: 128}")
    res = simulate(one_deployment_plan(sp), load_spec(sp), requests=15_000, seed=7)
    rm = _model(sp)
    st = rm.evaluate([TrafficClass(rate, 1024, 128)], 90.0)
    w, d = res.workloads["w"], res.deployments["d"]
    assert w.tpot_ms["mean"] == pytest.approx(st.tpot_s * 1e3, rel=0.06)
    assert d.prefill_utilization == pytest.approx(st.utilization, rel=0.06)
    assert d.decode_batch == pytest.approx(st.decode_batch, rel=0.06)
    step = rm.iteration_s(st.decode_batch, 1024 + 64) * 1e3
    assert abs(w.ttft_ms["mean"] - st.ttft_mean_s[0] * 1e3) <= 0.15 * st.ttft_mean_s[0] * 1e3 + step
