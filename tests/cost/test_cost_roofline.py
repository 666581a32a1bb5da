"""Hand-computed roofline cases for a one-layer model, and monotonicity of the cost model."""
from __future__ import annotations

import math

import pytest

from trimtab.cost.model import ReplicaModel, TrafficClass
from trimtab.profiles.loader import EngineProfile, GpuProfile, ModelProfile, load_profiles

GIB = 1024**3


def _q(v, s="x"):
    return {"value": v, "source": s}


# One layer, hidden 1024, 8 heads x 128 (MHA), MLP 2048 (gated), vocab 1000, untied embeddings:
#   attention projections 4 x 1024^2 = 4,194,304; MLP 3 x 1024 x 2048 = 6,291,456; embeddings 2 x 1000 x 1024
#   = 2,048,000; total 12,533,760 parameters.
TINY = ModelProfile.model_validate({
    "name": "tiny", "sources": {"x": {"kind": "assumption", "ref": "test"}},
    "num_layers": _q(1), "hidden_size": _q(1024), "num_attention_heads": _q(8), "num_kv_heads": _q(8),
    "head_dim": _q(128), "intermediate_size": _q(2048), "vocab_size": _q(1000),
    "params_billion": _q(0.01253376),
    "active_params_billion": _q(0.01253376), "max_context_tokens": _q(4096), "num_experts": _q(1),
    "experts_per_token": _q(1)})
# 100 TFLOP/s, 1000 GB/s, efficiencies 1, no kernel latency or elementwise traffic, 1 GiB.
GPU = GpuProfile.model_validate({
    "name": "unit", "description": "round numbers", "sources": {"x": {"kind": "assumption", "ref": "test"}},
    "memory_gib": _q(1), "hbm_bandwidth_gbps": _q(1000), "bf16_tflops": _q(100), "fp8_tflops": _q(200),
    "interconnect": "nvlink", "link_bandwidth_gbps": _q(100), "gpus_per_node": _q(8), "usd_per_hour": _q(1),
    "compute_efficiency": _q(1), "bandwidth_efficiency": _q(1), "allreduce_latency_us": _q(10),
    "allreduce_bus_gbps": _q(100), "node_network_gbps": _q(100)})
ENGINE = EngineProfile.model_validate({
    "name": "unit", "description": "no overheads", "sources": {"x": {"kind": "assumption", "ref": "test"}},
    "gpu_memory_utilization": _q(1.0), "max_num_seqs": _q(256), "step_overhead_ms": _q(0),
    "runtime_reserve_gib": _q(0)})


def rm(**kw) -> ReplicaModel:
    return ReplicaModel(TINY, GPU, ENGINE, max_batched_tokens=kw.pop("mbt", 1024), **kw)


def test_memory_by_hand():
    m = rm().memory
    weights = 12_533_760 * 2
    # activations of a 1024-token step: hidden x 4 + QKV (3 x 1024) + 2 x MLP (2 x 2048), 2 bytes each
    act = 1024 * (4 * 1024 + 3 * 1024 + 2 * 2048) * 2
    kv_per_token = 2 * 1 * 8 * 128 * 2  # K and V, one layer, 8 heads of 128, bf16
    assert m.kv_bytes_per_token_per_gpu == kv_per_token
    assert m.weights_gib_per_gpu * GIB == pytest.approx(weights)
    assert m.kv_cache_tokens == (GIB - weights - act) // kv_per_token == 250_392


def test_fp8_halves_weights_and_kv():
    bf, f8 = rm().memory, rm(dtype="fp8").memory
    assert f8.weights_gib_per_gpu == pytest.approx(bf.weights_gib_per_gpu / 2)
    assert f8.kv_bytes_per_token_per_gpu == bf.kv_bytes_per_token_per_gpu / 2
    assert rm(dtype="fp8", kv_dtype="bf16").memory.kv_bytes_per_token_per_gpu == bf.kv_bytes_per_token_per_gpu


def test_decode_step_by_hand():
    # One decoding token, empty context: every GEMM is bandwidth-bound (weights + activations in and out).
    attn = (4 * 1024**2 * 2 + (3072 + 1024 + 1024 + 1024) * 2) / 1e12
    mlp = (6_291_456 * 2 + (2 * 2048 + 1024 + 1024 + 2048) * 2) / 1e12
    head = (1000 * 1024 * 2 + (1000 + 1024) * 2) / 1e12
    assert rm().iteration_s(1, 0) == pytest.approx(attn + mlp + head, rel=1e-9)
    # KV of 1000 cached tokens adds its read time (bandwidth-bound attention).
    assert rm().iteration_s(1, 1000) - rm().iteration_s(1, 0) == pytest.approx(1000 * 4096 / 1e12, rel=1e-9)


def test_prefill_step_by_hand():
    # 1000 prompt tokens: the GEMMs are compute-bound at 100 TFLOP/s; causal attention is 4 x p x p/2 x 1024
    # FLOPs; the LM head runs for the prompt's last token only (bandwidth-bound).
    gemm = 2 * 1000 * (4 * 1024**2 + 6_291_456) / 1e14
    attn = 4 * 1000 * 500 * 1024 / 1e14
    head = (1000 * 1024 * 2 + (1000 + 1024) * 2) / 1e12
    assert rm().iteration_s(0, 0, 1000, 0) == pytest.approx(gemm + attn + head, rel=1e-9)


def test_fp8_compute_uses_fp8_peak():
    t16 = rm().iteration_s(0, 0, 1000, 0)
    t8 = rm(dtype="fp8").iteration_s(0, 0, 1000, 0)
    gemm16 = 2 * 1000 * (4 * 1024**2 + 6_291_456) / 1e14
    head_saving = 1000 * 1024 * (2 - 1) / 1e12  # the (bandwidth-bound) LM head reads 1-byte weights
    assert t16 - t8 == pytest.approx(gemm16 / 2 + head_saving, rel=1e-6)  # fp8 peak is twice bf16 here


def test_tensor_parallel_adds_allreduce():
    one = rm().iteration_s(1, 0)
    two = ReplicaModel(TINY, GPU, ENGINE, tp=2, max_batched_tokens=1024).iteration_s(1, 0)
    ar = 2 * (10e-6 + 1024 * 2 * 2 * 1 / 2 / 100e9)  # 2 all-reduces of one token's activations per layer
    assert two == pytest.approx(one / 2 + ar, rel=0.02)  # weights halve (activations do not, hence rel)


def test_static_batch_by_hand():
    p = rm(mbt=4096).predict_static_batch(isl=100, osl=11, batch=4)
    t_pre = rm(mbt=4096).iteration_s(0, 0, 400, 0, 4)
    t_dec = rm(mbt=4096).iteration_s(4, 100 + 11 / 2)
    assert p.ttft_ms == pytest.approx(t_pre * 1e3)
    assert p.e2e_ms == pytest.approx((t_pre + 10 * t_dec) * 1e3)
    assert p.output_tokens_per_s == pytest.approx(4 * 11 / (p.e2e_ms / 1e3))


@pytest.fixture(scope="module")
def real():
    p = load_profiles()
    return ReplicaModel(p.models["llama-3.1-8b"], p.gpus["h100-sxm"], p.engines["vllm"])


def test_monotone_in_batch_and_length(real):
    steps = [real.iteration_s(b, 1000) for b in (1, 2, 8, 32, 128, 256)]
    assert steps == sorted(steps)
    ctx = [real.iteration_s(16, c) for c in (0, 100, 1000, 10_000, 100_000)]
    assert ctx == sorted(ctx)
    pre = [real.iteration_s(0, 0, p, 0) for p in (1, 16, 256, 2048, 8192)]
    assert pre == sorted(pre)
    ttft = [real.prefill_s(isl, 0, 0) for isl in (10, 100, 1000, 10_000, 50_000)]
    assert ttft == sorted(ttft)
    e2e = [real.predict_static_batch(512, osl, 8).e2e_ms for osl in (1, 10, 100, 1000)]
    assert e2e == sorted(e2e)


def test_monotone_in_load(real):
    tpot = []
    for rate in (0.5, 2, 8, 16):
        st = real.evaluate([TrafficClass(rate, 1000, 200)], 99)
        assert st.stable
        tpot.append(st.tpot_s)
    assert tpot == sorted(tpot)
    closed = [real.predict_closed_loop(1000, 200, c) for c in (1, 4, 16, 64)]
    assert [c.tpot_ms for c in closed] == sorted(c.tpot_ms for c in closed)
    assert [c.output_tokens_per_s for c in closed] == sorted(c.output_tokens_per_s for c in closed)


def test_burst_drain(real):
    fixed = real.predict_burst([500.0] * 50, [100.0] * 50)
    assert fixed.requests == 50 and fixed.makespan_s > 0
    # the same output tokens spread unevenly drain slower (long requests finish alone)
    skew = real.predict_burst([500.0] * 50, [10.0] * 45 + [910.0] * 5)
    assert skew.makespan_s > fixed.makespan_s
    assert math.isclose(fixed.total_tokens_per_s, 50 * 600 / fixed.makespan_s)
