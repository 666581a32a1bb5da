"""Issue 34: CUDA-graph steps, the fused-MoE rate by kernel shape, async scheduling, constant and staged
arrivals."""
from __future__ import annotations

import numpy as np
import pytest

import trimtab.sim.arrivals as arr
from trimtab.cost.model import ReplicaModel
from trimtab.profiles.loader import Q, load_profiles


def _engine(**upd):
    eng = load_profiles().engines["vllm"]
    return eng.model_copy(update=upd)


def test_steps_within_the_capture_size_use_the_graph_numbers_and_larger_ones_eager():
    p = load_profiles()
    gpu, model = p.gpus["h100-sxm"], p.models["llama-3.1-70b"]
    graph = ReplicaModel(model, gpu, _engine(), tp=4)
    eager = ReplicaModel(model, gpu, _engine(cuda_graph_max_tokens=None), tp=4)
    # A decode step inside the capture size: no host launch per kernel, custom all-reduce: faster.
    assert graph.iteration_s(64, 1000) < eager.iteration_s(64, 1000)
    # Beyond it the step is eager: the same arithmetic as without graphs.
    big = graph.graph_tokens + 1
    assert graph.iteration_s(0, 0, big) == eager.iteration_s(0, 0, big)


def test_graph_saving_is_the_kernels_and_all_reduces_it_replaces():
    p = load_profiles()
    # (the GEMMs' graph bandwidth set aside: the next test)
    gpu = p.gpus["h100-sxm"].model_copy(update={"graph_bandwidth_efficiency": None})
    model = p.models["llama-3.1-70b"]
    g = ReplicaModel(model, gpu, _engine(), tp=4)
    e = ReplicaModel(model, gpu, _engine(cuda_graph_max_tokens=None), tp=4)
    T, H, L = 8, model.hidden_size.value, model.num_layers.value
    ar = lambda lat, bus: 2 * (lat * 1e-6 + T * H * 2 * 2 * 3 / 4 / (bus * 1e9))  # two all-reduces a layer
    per_layer = (4 * (gpu.kernel_latency_us.value - gpu.graph_kernel_latency_us.value) * 1e-6
                 + ar(gpu.allreduce_latency_us.value, gpu.allreduce_bus_gbps.value)
                 - ar(gpu.graph_allreduce_latency_us.value, gpu.graph_allreduce_bus_gbps.value))
    head = (gpu.kernel_latency_us.value - gpu.graph_kernel_latency_us.value) * 1e-6
    assert e.iteration_s(T, 500) - g.iteration_s(T, 500) == pytest.approx(L * per_layer + head, rel=1e-9)


def test_graph_bandwidth_is_the_gemms_weights_and_inputs_only():
    """Inside a graph the GEMMs stream at the measured graph bandwidth; the KV reads and elementwise passes
    keep the profile's: the difference is the GEMMs' bytes (every layer's projections and MLP, the LM head,
    weights plus a decode batch's inputs and outputs) x (1 / eager bandwidth - 1 / graph bandwidth)."""
    p = load_profiles()
    model = p.models["llama-3.1-8b"]
    same = p.gpus["h100-sxm"].model_copy(update={"graph_bandwidth_efficiency": None})
    gpu = same.model_copy(update={"graph_bandwidth_efficiency": Q(value=0.9, source="calib_gemm")})
    a, b = ReplicaModel(model, gpu, _engine(), tp=1), ReplicaModel(model, same, _engine(), tp=1)
    T = 4
    H, L, V = model.hidden_size.value, model.num_layers.value, model.vocab_size.value
    heads, kvh = model.num_attention_heads.value, model.num_kv_heads.value
    hd, inter = model.head_dim.value, model.intermediate_size.value
    attn = H * (heads + 2 * kvh) * hd + heads * hd * H  # QKV and O projections
    mlp = 3 * H * inter
    io = T * 2 * ((heads + 2 * kvh) * hd + H + H + heads * hd) + T * 2 * (2 * inter + H + H + inter)
    nbytes = L * ((attn + mlp) * 2 + io) + V * H * 2 + (V + H) * T * 2
    hbm = gpu.hbm_bandwidth_gbps.value * 1e9
    saved = nbytes * (1 / (hbm * same.bandwidth_efficiency.value) - 1 / (hbm * 0.9))
    assert b.iteration_s(T, 700) - a.iteration_s(T, 700) == pytest.approx(saved, rel=1e-3)
    big = a.graph_tokens + 1  # an eager step: the profile's bandwidth, as without the field
    assert a.iteration_s(0, 0, big) == b.iteration_s(0, 0, big)


def test_moe_rate_follows_the_kernel_shape_not_one_constant():
    p = load_profiles()
    gpu = p.gpus["h100-sxm"]
    shaped = _engine()
    flat = _engine(moe_rows_half=None, moe_cols_half=None)
    for name in ("mixtral-8x7b", "qwen3-30b-a3b"):
        m = p.models[name]
        a = ReplicaModel(m, gpu, shaped, tp=2).moe
        b = ReplicaModel(m, gpu, flat, tp=2).moe
        # compute-bound prompt step: the shaped rate is below the dense one, more so for small experts
        ratio = a.compute_s(8192) / b.compute_s(8192)
        assert ratio > 1
        if name == "mixtral-8x7b":
            big = ratio
    small = ReplicaModel(p.models["qwen3-30b-a3b"], gpu, shaped, tp=2).moe.compute_s(8192) / \
        ReplicaModel(p.models["qwen3-30b-a3b"], gpu, flat, tp=2).moe.compute_s(8192)
    assert big < 1.5 < small  # Mixtral's eight wide experts near the dense rate, 128 narrow ones far below


def test_moe_rate_formula():
    p = load_profiles()
    m = p.models["mixtral-8x7b"]
    # the engine's shape alone: the H100 profile's own fit (moe_rows_half / moe_cols_half) would replace it
    gpu = p.gpus["h100-sxm"].model_copy(update={"moe_rows_half": None, "moe_cols_half": None})
    rm = ReplicaModel(m, gpu, _engine(moe_rows_half=Q(value=100.0, source="moeshape"),
                                      moe_cols_half=Q(value=0.0, source="moeshape")), tp=1)
    flat = ReplicaModel(m, gpu, _engine(moe_rows_half=None, moe_cols_half=None), tp=1)
    T = 4096.0  # compute-bound, every expert touched: T k + 100 x 8 rows' FLOPs instead of T k
    assert rm.moe.compute_s(T) - rm.moe.share * 4 * rm.kernel_s == pytest.approx(
        (flat.moe.compute_s(T) - flat.moe.share * 4 * flat.kernel_s) * (1 + 800 / (T * 2)), rel=1e-9)


def test_constant_arrivals_are_fixed_intervals():
    t = arr.gamma(np.random.default_rng(0), 4.0, 0.0, n=5)
    assert np.allclose(t, [0.25, 0.5, 0.75, 1.0, 1.25])


def test_stages_run_in_turn_at_their_rates():
    t = arr.staged(np.random.default_rng(0), ((2.0, 10.0), (5.0, 10.0)), 0.0, duration_s=20.0)
    assert ((t < 10).sum(), (t >= 10).sum()) == (19, 50)
    again = arr.staged(np.random.default_rng(0), ((2.0, 10.0),), 0.0, n=30)  # past the end: from the first
    assert len(again) == 30 and again[-1] == pytest.approx(10.0 + 11 * 0.5)


def _replica(ahead: bool):
    from types import SimpleNamespace

    from trimtab.sim.replica import Replica
    from tests.sim.helpers import LinearModel

    model = LinearModel(per_token_s=0.001, decode_s=0.01, max_num_seqs=8)
    model.engine = SimpleNamespace(async_scheduling=ahead)
    return Replica(0, 0, model)


@pytest.mark.parametrize("ahead, admitted", [(False, 100), (True, 0)])
def test_async_scheduling_admits_a_request_one_step_later(ahead, admitted):
    from trimtab.sim.replica import Request

    rep = _replica(ahead)
    rep.enqueue(Request(0, 0, 0, 0.0, 100, 5))
    t = rep.start_step(0.0)  # an idle engine schedules at once
    assert rep.p_step == 100
    rep.enqueue(Request(1, 0, 0, t / 2, 100, 5))  # arrives while the first step runs
    rep.finish_step(t)
    t2 = rep.start_step(t)
    assert rep.p_step == admitted  # with async scheduling the next batch was formed before it came
    rep.finish_step(t2)
    rep.start_step(t2)
    assert rep.p_step == 100 - admitted  # ... and it is scheduled in the step after


def test_an_engine_release_brings_its_own_front_end_and_scheduling():
    eng = load_profiles().engines["vllm"]
    old, new = eng.at("0.11.0"), eng.at("0.15")
    assert new is eng and eng.at(None) is eng
    assert old.async_scheduling is False and old.request_overhead_ms.value != eng.request_overhead_ms.value
    assert eng.at("0.6").request_overhead_ms == old.request_overhead_ms


def test_a_release_must_name_a_declared_source():
    from pydantic import ValidationError

    eng = load_profiles().engines["vllm"]
    data = eng.model_dump()
    data["releases"] = [{"until": "0.11", "request_overhead_ms": {"value": 40.0, "source": "nowhere"}}]
    with pytest.raises(ValidationError, match="nowhere"):
        type(eng).model_validate(data)


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_step_time_never_falls_as_tokens_grow_past_the_capture_size(tp):
    """Large messages go to NCCL when it is faster than the custom all-reduce, so a captured step is never
    slower than the eager one of a token more (a falling step time would give the steady state two fixed
    points)."""
    p = load_profiles()
    rm = ReplicaModel(p.models["llama-3.1-8b"], p.gpus["h100-sxm"], _engine(), tp=tp, max_batched_tokens=2048)
    times = [rm.iteration_s(t, 600) for t in range(480, 560, 4)]
    assert all(a <= b for a, b in zip(times, times[1:]))


def test_gpu_moe_shape_replaces_the_engines():
    """A GPU profile's own fused-MoE shape fit (calibrate --from aiconfigurator) wins over the engine's H100
    fit, for engines that have a shape fit; engines without one keep their flat rate."""
    p = load_profiles()
    m, gpu = p.models["mixtral-8x7b"], p.gpus["l40s"]
    moe = ReplicaModel(m, gpu, _engine(), tp=4).moe
    assert (moe.rows_half, moe.cols_half) == (gpu.moe_rows_half.value, gpu.moe_cols_half.value)
    flat = ReplicaModel(m, gpu, _engine(moe_rows_half=None, moe_cols_half=None), tp=4).moe
    assert (flat.rows_half, flat.cols_half) == (0.0, 0.0)


def test_graph_allreduce_per_gpu_count():
    """PCIe GPUs: a TP size with its own all-reduce fit takes it inside graphs, exactly as a GPU whose one
    graph fit were those numbers (the engine still hands a message to NCCL where that is faster); a count
    without its own fit takes the joint fit."""
    p = load_profiles()
    m, gpu, eng = p.models["llama-3.1-8b"], p.gpus["l40s"], _engine()
    for tp in (2, 4):
        fit = gpu.graph_allreduce_by_gpus[tp]
        own = gpu.model_copy(update={"graph_allreduce_by_gpus": None,
                                     "graph_allreduce_latency_us": fit.latency_us,
                                     "graph_allreduce_bus_gbps": fit.bus_gbps})
        for tokens in (1, 64, 256):
            assert ReplicaModel(m, gpu, eng, tp=tp).iteration_s(tokens, 0) == pytest.approx(
                ReplicaModel(m, own, eng, tp=tp).iteration_s(tokens, 0), rel=1e-12)
    assert gpu.allreduce_at(3, graph=True) == (gpu.graph_allreduce_latency_us.value * 1e-6,
                                               gpu.graph_allreduce_bus_gbps.value * 1e9)


def test_eager_allreduce_per_gpu_count():
    """The eager (NCCL) all-reduce: a count with its own fit takes it, others (here 3) the joint one."""
    gpu = load_profiles().gpus["l40s"]
    fit = gpu.allreduce_by_gpus[4]
    assert gpu.allreduce_at(4) == (fit.latency_us.value * 1e-6, fit.bus_gbps.value * 1e9)
    assert gpu.allreduce_at(3) == (gpu.allreduce_latency_us.value * 1e-6, gpu.allreduce_bus_gbps.value * 1e9)
    rm = ReplicaModel(load_profiles().models["llama-3.1-8b"], gpu, _engine(), tp=4)
    assert rm.ar_bw == fit.bus_gbps.value * 1e9
