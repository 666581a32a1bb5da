"""The burst simulator's step policy (``ReplicaPredictions.predict_burst``; docs/cost-model.md, "Bursts"): a
step carries prompt chunks only while admitted prompts have tokens left to prefill; ``prefill_schedule`` says
whether the running requests decode in those steps (``mixed``: vLLM, TensorRT-LLM) or wait for a prefill-only
step to end (``prefill_first``: SGLang); TPOT is the benchmark's mean over requests of (e2e - TTFT) / (osl -
1). Every expectation is written out step by step from ``iteration_s``."""
from __future__ import annotations

import pytest

from trimtab.cost.predict import replica
from trimtab.profiles.loader import ProfileSet, load_profiles

P = load_profiles()


def _rm(schedule: str | None, budget: int = 8192):
    eng = P.engines["vllm"].model_copy(update={"prefill_schedule": schedule, "stream_tokens_per_s": None})
    ps = ProfileSet(P.gpus, P.models, {**P.engines, "vllm": eng})
    return replica(ps, "llama-3.1-8b", "h100-sxm", "vllm", dtype="bf16", max_num_seqs=256,
                   max_batched_tokens=budget)


def test_bundled_engines_state_their_schedule():
    assert P.engines["sglang"].prefill_schedule == "prefill_first"
    assert P.engines["vllm"].prefill_schedule in (None, "mixed")
    assert P.engines["trt-llm"].prefill_schedule in (None, "mixed")


@pytest.mark.parametrize("schedule", [None, "mixed", "prefill_first"])
def test_once_every_prompt_is_prefilled_the_steps_are_pure_decode(schedule):
    """Two 100-token prompts, 3 output tokens each, budget 8,192: step 1 prefills both (and emits both first
    tokens), steps 2 and 3 decode both with no chunk (context 101, then 102), whichever the schedule."""
    rm = _rm(schedule)
    t1 = rm.iteration_s(0, 0.0, 200.0, 0.0, 2)
    t2, t3 = rm.iteration_s(2, 101.0), rm.iteration_s(2, 102.0)
    b = rm.predict_burst([100.0, 100.0], [3.0, 3.0])
    assert b.makespan_s == pytest.approx(t1 + t2 + t3, rel=1e-12)
    assert b.ttft_ms == pytest.approx(1e3 * t1, rel=1e-12)
    assert b.tpot_ms == pytest.approx(1e3 * (t2 + t3) / 2, rel=1e-12)


def test_mixed_schedule_decodes_alongside_the_chunk():
    """Budget 150: step 1 prefills prompt A (100) and 50 tokens of B; step 2 decodes A (context 101) with B's
    last 50 tokens (50 of prior context) in the same step; step 3 decodes both (mean context (102 + 101) / 2);
    step 4 decodes B alone (102). TPOT: A (t2 + t3) / 2, B (t3 + t4) / 2, mean of the two."""
    rm = _rm("mixed", budget=150)
    t1 = rm.iteration_s(0, 0.0, 150.0, 0.0, 2)
    t2 = rm.iteration_s(1, 101.0, 50.0, 50.0, 1)
    t3, t4 = rm.iteration_s(2, 101.5), rm.iteration_s(1, 102.0)
    b = rm.predict_burst([100.0, 100.0], [3.0, 3.0])
    assert b.makespan_s == pytest.approx(t1 + t2 + t3 + t4, rel=1e-12)
    assert b.ttft_ms == pytest.approx(1e3 * (t1 + (t1 + t2)) / 2, rel=1e-12)
    assert b.tpot_ms == pytest.approx(1e3 * ((t2 + t3) / 2 + (t3 + t4) / 2) / 2, rel=1e-12)


def test_prefill_first_schedule_runs_the_chunk_alone_and_the_decodes_wait():
    """The same burst under SGLang's policy: step 2 prefills B's last 50 tokens alone (A, already decoding,
    gets no token), then steps 3 and 4 decode both (contexts 101 and 102). TPOT: A (t2 + t3 + t4) / 2, B (t3 +
    t4) / 2."""
    rm = _rm("prefill_first", budget=150)
    t1 = rm.iteration_s(0, 0.0, 150.0, 0.0, 2)
    t2 = rm.iteration_s(0, 0.0, 50.0, 50.0, 1)
    t3, t4 = rm.iteration_s(2, 101.0), rm.iteration_s(2, 102.0)
    b = rm.predict_burst([100.0, 100.0], [3.0, 3.0])
    assert b.makespan_s == pytest.approx(t1 + t2 + t3 + t4, rel=1e-12)
    assert b.ttft_ms == pytest.approx(1e3 * (t1 + (t1 + t2)) / 2, rel=1e-12)
    assert b.tpot_ms == pytest.approx(1e3 * ((t2 + t3 + t4) / 2 + (t3 + t4) / 2) / 2, rel=1e-12)
    mixed = _rm("mixed", budget=150).predict_burst([100.0, 100.0], [3.0, 3.0])
    assert b.tpot_ms != pytest.approx(mixed.tpot_ms, rel=1e-3)


def test_tpot_is_the_benchmarks_mean_over_requests_with_more_than_one_token():
    """vllm bench serve: per request (e2e - TTFT) / (output tokens - 1), averaged over requests with more than
    one output token. A 1-token request has no TPOT and does not dilute the mean: prompts 100 and 100, outputs
    1 and 3, budget 8,192: step 1 prefills both (A finishes), steps 2 and 3 decode B alone (context 101,
    102)."""
    rm = _rm(None)
    t2, t3 = rm.iteration_s(1, 101.0), rm.iteration_s(1, 102.0)
    b = rm.predict_burst([100.0, 100.0], [1.0, 3.0])
    assert b.tpot_ms == pytest.approx(1e3 * (t2 + t3) / 2, rel=1e-12)
