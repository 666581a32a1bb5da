"""Every model x GPU x TP of the held-out vLLM evaluation split (issue 34) can be described as
benchmarks/accuracy_gpu.py describes a run and simulated at a modest load without a crash or an overloaded
prediction: A100 and L40S as well as H100, Mixtral's MoE layers at TP 2-8, Mixtral-8x22B from its config.json.
And the run description's two readings that decide the simulated work: the tokens the engine generates and the
model's profile or config."""
from __future__ import annotations

import pytest

from benchmarks.accuracy_gpu import (OVERLOADED_S, coverage_run, engine_output_len, gpu_of, hf_config,
                                     model_entry, simulate_run)
from trimtab.profiles.loader import load_profiles

PROFILES = load_profiles()


@pytest.mark.parametrize("model,gpu,tp", [
    ("mistralai/Mixtral-8x7B-v0.1", "A100-80GB", 2),
    ("mistralai/Mixtral-8x7B-v0.1", "L40S", 4),
    ("mistralai/Mixtral-8x7B-v0.1", "H100-80GB-HBM3 SXM", 8),
    ("mistralai/Mixtral-8x22B-v0.1", "L40S", 8),
    ("mistralai/Mixtral-8x22B-v0.1", "A100-80GB", 4),
    ("Qwen/Qwen3-14B", "L40S", 1),
    ("meta-llama/Llama-3.1-8B-Instruct", "A100-80GB", 1),
    ("codellama/CodeLlama-34b-Instruct-hf", "L40S", 2),
    ("meta-llama/Llama-2-70b-hf", "H100-80GB-HBM3 SXM", 4),
])
def test_heldout_combination_simulates_unloaded(model, gpu, tp):
    run = coverage_run(model, gpu, tp, PROFILES)
    assert run is not None
    out = simulate_run(run, PROFILES)
    assert out["_unfinished"] <= 0.01
    assert 0 < out["ttft_mean"] < OVERLOADED_S * 1e3
    assert out["itl_mean"] > 0 and out["e2e_mean"] > out["ttft_mean"]


def test_combinations_that_cannot_hold_the_weights_are_reported_not_simulated():
    assert coverage_run("meta-llama/Llama-2-70b-hf", "L40S", 1, PROFILES) is None  # 138 GB of bf16 on 48 GB
    assert coverage_run("mistralai/Mixtral-8x22B-v0.1", "H100-80GB-HBM3 SXM", 2, PROFILES) is None  # 281 GB


def test_engine_generates_max_tokens_with_ignore_eos():
    gen = "inference-perf shared_prefix, multi-turn chat, streaming completions, ignore_eos=true"
    # the Llama-2-7b roleplay run: 251 tokens asked for and generated; the client re-counted 206.4 on average
    assert engine_output_len({"output_len_target": "251", "data_generator": gen}, 206.4) == 251
    # without ignore_eos a request may stop early: the measured count is the estimate
    assert engine_output_len({"output_len_target": "251", "data_generator": "streaming"}, 206.4) == 206.4
    assert engine_output_len({"output_len_target": "251", "data_generator": "streaming"}, None) == 251


def test_gpu_names_as_runs_write_them():
    assert [gpu_of(n) for n in ("H100-80GB-HBM3 SXM", "NVIDIA A100-SXM4-80GB", "A100-80GB", "L40S",
                                "NVIDIA L40S")] == ["h100-sxm", "a100-80gb", "a100-80gb", "l40s", "l40s"]
    assert gpu_of("GB200") is None


def test_model_description_profile_or_config():
    assert model_entry(_run("Qwen/Qwen3-14B")) == "  - name: qwen3-14b\n"
    cfg = hf_config("MISTRALAI/mixtral-8x22b-instruct-v0.1")  # repository names match regardless of case
    assert cfg.name == "config.json" and cfg.parent.name == "Mixtral-8x22B-Instruct-v0.1"
    with pytest.raises(FileNotFoundError, match="no bundled profile"):
        hf_config("nobody/none-7b")


def _run(model: str):
    run = coverage_run("meta-llama/Llama-3.1-8B-Instruct", "A100-80GB", 1, PROFILES)
    run.model = model
    return run
