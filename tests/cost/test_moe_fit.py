"""The terms issue 17's fit adds: the busiest expert-parallel rank, the fused-MoE GEMM efficiency, and the
streaming front end of a served burst (compiler/cost/moe.py, compiler/cost/predictions.py;
docs/cost-model.md)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from trimtab.cost.moe import MoeLayer, busiest_rank_factor, expected_max_normal
from trimtab.cost.predict import replica
from trimtab.profiles.loader import ProfileSet, Q, Source, load_profiles

P = load_profiles()


def test_expected_max_of_normals_closed_forms():
    """E[max] of 2 and 3 standard normals: 1/sqrt(pi) and 3/(2 sqrt(pi)) (David and Nagaraja, ex. 3.2)."""
    assert expected_max_normal(1) == 0.0
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-6)
    assert expected_max_normal(3) == pytest.approx(3 / (2 * math.sqrt(math.pi)), abs=1e-6)
    assert expected_max_normal(8) > expected_max_normal(4) > expected_max_normal(3)


@pytest.mark.parametrize("tokens,experts,topk,ep", [(256, 256, 8, 8), (1024, 128, 8, 4), (64, 128, 8, 8)])
def test_busiest_rank_matches_a_routing_simulation(tokens, experts, topk, ep):
    """Each token routed to k distinct experts uniformly, experts split evenly over the ranks: the expected
    busiest rank's assignments over the mean, against 2,000 simulated steps (within 2 %)."""
    rng = np.random.default_rng(7)
    trials = 2000
    # a token's k distinct experts fall on the ranks as a multivariate hypergeometric draw (E/ep experts each)
    per_token = rng.multivariate_hypergeometric([experts // ep] * ep, topk, size=(trials, tokens))
    loads = per_token.sum(axis=1)  # (trials, ep)
    simulated = loads.max(axis=1).mean() / (tokens * topk / ep)
    assert busiest_rank_factor(tokens, experts, topk, ep) == pytest.approx(simulated, rel=0.02)


def test_busiest_rank_is_one_without_expert_parallelism():
    assert busiest_rank_factor(1000, 256, 8, 1) == 1.0
    assert busiest_rank_factor(0, 256, 8, 8) == 1.0
    # the relative excess shrinks as 1/sqrt(tokens)
    assert busiest_rank_factor(100, 256, 8,
                               8) - 1 == pytest.approx((busiest_rank_factor(400, 256, 8, 8) - 1) * 2)


def _layer(ep: int, moe_eff: float) -> MoeLayer:
    return MoeLayer.of(P.models["deepseek-v3"], P.gpus["h200"], tp=1, dp=8, ep=ep, wbytes=1.0, bw=4e12,
                       flops=1e15, kernel_s=0.0, moe_eff=moe_eff)


def test_moe_gemm_efficiency_slows_the_compute_bound_step_only():
    """8,192 tokens (a prefill chunk) are FLOP-bound: half the efficiency doubles the experts' time; one token
    is bound by reading its experts' weights, which the efficiency does not touch."""
    full, half = _layer(8, 1.0), _layer(8, 0.5)
    assert half.compute_s(8192) == pytest.approx(2 * full.compute_s(8192), rel=1e-12)
    assert half.compute_s(1) == full.compute_s(1)


def test_expert_parallel_flops_follow_the_busiest_rank():
    """FLOP-bound, ep 8: the experts' time is the balanced one x busiest_rank_factor (hand: 2 T k P_e / G /
    F)."""
    m = P.models["deepseek-v3"]
    layer = _layer(8, 1.0)
    T = 8192
    p_e = 3 * m.hidden_size.value * m.moe_intermediate_size.value
    balanced = 2 * T * 8 * p_e / 8 / 1e15
    want = layer.share * balanced * busiest_rank_factor(T, 256, 8, 8)
    assert layer.compute_s(T) == pytest.approx(want, rel=1e-12)


def _with_stream(rate: float | None) -> ProfileSet:
    eng = P.engines["vllm"]
    src = dict(eng.sources)
    src["test"] = Source(kind="assumption", ref="test")
    q = Q(value=rate, source="test") if rate is not None else None
    new = eng.model_copy(update={"stream_tokens_per_s": q, "sources": src})
    return ProfileSet(P.gpus, P.models, {**P.engines, "vllm": new})


def test_streamed_burst_is_delivered_no_faster_than_the_front_end():
    """100 requests of 10 prompt tokens and 50 output tokens, front end 100 tokens/s, GPU steps of
    milliseconds: step 1 prefills every prompt and emits 100 first tokens (1 s), then 49 decode steps emit 100
    tokens each (1 s each): makespan 50 s, TPOT (50 - 1) / 49 = 1 s. Not streamed (offline), the GPU alone
    sets the pace."""
    slow = replica(_with_stream(100.0), "llama-3.1-8b", "h100-sxm", "vllm", dtype="bf16", max_num_seqs=256)
    b = slow.predict_burst([10.0] * 100, [50.0] * 100, streaming=True)
    assert b.makespan_s == pytest.approx(50.0, rel=1e-9)
    assert b.tpot_ms == pytest.approx(1000.0, rel=1e-9)
    offline = slow.predict_burst([10.0] * 100, [50.0] * 100)
    plain = replica(_with_stream(None), "llama-3.1-8b", "h100-sxm", "vllm", dtype="bf16", max_num_seqs=256)
    assert offline.makespan_s == plain.predict_burst([10.0] * 100, [50.0] * 100, streaming=True).makespan_s
    assert offline.makespan_s < 5.0


def test_engine_profile_rejects_unphysical_fit_values():
    eng = P.engines["vllm"]
    with pytest.raises(ValueError, match="moe_gemm_efficiency"):
        type(eng).model_validate({**eng.model_dump(),
                                  "moe_gemm_efficiency": {"value": 1.5, "source": "defaults"}})
    with pytest.raises(ValueError, match="stream_tokens_per_s"):
        type(eng).model_validate({**eng.model_dump(),
                                  "stream_tokens_per_s": {"value": 0, "source": "defaults"}})


def test_fit_picks_the_least_log_error_point_and_can_lift_the_stream_limit():
    """benchmarks/moe_fit.py: the grid point with the least summed |log(predicted / measured)| wins (1.1x
    beats 0.9x: |ln 1.1| < |ln 0.9|); a stream rate of 0 removes the profile's limit instead of keeping it."""
    from types import SimpleNamespace

    from benchmarks.moe_fit import pick, with_point

    rows = [SimpleNamespace(n=1, value=100.0)]
    table = {(1.0, 0.0): {1: 200.0}, (0.5, 0.0): {1: 110.0}, (0.3, 1e4): {1: 90.0}}
    assert pick(rows, table) == (0.5, 0.0)
    assert pick([], table) == (1.0, 0.0)
    ps = with_point(P, "vllm", (0.5, 0.0))
    assert ps.engines["vllm"].stream_tokens_per_s is None
    assert ps.engines["vllm"].moe_gemm_efficiency.value == 0.5
    assert with_point(P, "vllm", (0.3, 12000.0)).engines["vllm"].stream_tokens_per_s.value == 12000.0
