"""Mixture-of-experts arithmetic (compiler/cost/moe.py) against independent oracles: a seeded simulation of
routing, hand-computed bytes and memory, the models' published parameter counts, and the speed-of-light
bound."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from trimtab.cost.moe import MoeLayer, experts_touched
from trimtab.cost.predict import replica
from trimtab.cost.physics import decode_bound
from trimtab.profiles.loader import architecture_params, load_profiles, model_from_hf_config

P = load_profiles()
MOE = ("mixtral-8x7b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3", "llama-4-scout", "llama-4-maverick",
       "gpt-oss-120b")
GIB = 1024 ** 3


def test_experts_touched_hand_cases():
    assert experts_touched(0, 8, 2) == 0.0
    assert experts_touched(1, 8, 2) == pytest.approx(2 / 8)  # one token: exactly its k experts
    assert experts_touched(2, 8, 2) == pytest.approx(1 - 0.75 ** 2)  # 0.4375
    assert experts_touched(10_000, 128, 8) == pytest.approx(1.0)
    assert experts_touched(5, 1, 1) == 1.0  # dense


def test_experts_touched_matches_a_routing_simulation():
    """Each token picks k distinct experts uniformly (seeded); the mean number of distinct experts a batch of
    T tokens touches matches E x experts_touched within sampling error."""
    rng = random.Random(7)
    E, k = 128, 8
    for T in (1, 4, 16, 64):
        n = 2000
        mean = sum(len({e for _ in range(T) for e in rng.sample(range(E), k)}) for _ in range(n)) / n
        assert mean == pytest.approx(E * experts_touched(T, E, k), rel=0.01), T


@pytest.mark.parametrize("name", MOE)
def test_profiles_architecture_matches_published_counts(name):
    """Parameters from the profile's architecture (config.json numbers) vs the model card's totals: within 3
    %. gpt-oss's card counts active parameters without the input embedding (201088 x 2880)."""
    m = P.models[name]
    dense_inter = 16384 if name == "llama-4-maverick" else m.intermediate_size.value
    total, active = architecture_params(m, dense_inter, tied=False)
    if name == "gpt-oss-120b":
        active -= 201088 * 2880
    assert total / 1e9 == pytest.approx(m.params_billion.value, rel=0.03)
    assert active / 1e9 == pytest.approx(m.active_params_billion.value, rel=0.03)


def test_hf_import_reads_deepseek_moe_and_mla(tmp_path):
    cfg = {"num_hidden_layers": 61, "hidden_size": 7168, "num_attention_heads": 128,
           "num_key_value_heads": 128,
           "intermediate_size": 18432, "moe_intermediate_size": 2048, "vocab_size": 129280,
           "n_routed_experts": 256,
           "num_experts_per_tok": 8, "n_shared_experts": 1, "first_k_dense_replace": 3, "kv_lora_rank": 512,
           "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
           "max_position_embeddings": 163840, "tie_word_embeddings": False}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = model_from_hf_config(tmp_path / "config.json", "dsv3")
    assert (m.num_experts.value, m.experts_per_token.value) == (256, 8)
    assert (m.moe_layers.value, m.shared_experts.value) == (58, 1)
    assert m.kv_lora_rank.value == 512 and m.qk_rope_head_dim.value == 64
    assert m.params_billion.value == pytest.approx(671, rel=0.01)  # DeepSeek-V3 report: 671B
    assert m.active_params_billion.value == pytest.approx(37, rel=0.03)  # 37B activated


def test_hf_import_llama4_text_config_interleaves(tmp_path):
    text = {"num_hidden_layers": 48, "hidden_size": 5120, "num_attention_heads": 40, "num_key_value_heads": 8,
            "head_dim": 128, "intermediate_size": 8192, "intermediate_size_mlp": 16384, "vocab_size": 202048,
            "num_local_experts": 128, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2}
    (tmp_path / "config.json").write_text(json.dumps({"text_config": text}))
    m = model_from_hf_config(tmp_path / "config.json", "mav")
    assert m.moe_layers.value == 24 and m.shared_experts.value == 1
    assert m.params_billion.value == pytest.approx(400, rel=0.03)  # Maverick card: 400B total


def test_memory_under_expert_parallelism_hand_computed():
    """Qwen3-235B-A22B fp8, tp1 x dp8 x ep8: each GPU holds all dense weights and 1/8 of the routed
    experts."""
    experts = 94 * 128 * 3 * 4096 * 1536  # layers x experts x (gate, up, down) x hidden x moe_intermediate
    dense = 235e9 - experts
    rm = replica(P, "qwen3-235b-a22b", "h200", tp=1, dtype="fp8", dp=8, ep=8)
    assert rm.memory.weights_gib_per_gpu == pytest.approx((dense + experts / 8) / GIB, rel=1e-9)
    tp8 = replica(P, "qwen3-235b-a22b", "h200", tp=8, dtype="fp8")
    assert tp8.memory.weights_gib_per_gpu == pytest.approx(235e9 / 8 / GIB, rel=1e-9)
    # same expert bytes per GPU whether TP splits each expert 8 ways or EP gives each GPU 16 whole experts
    ep8 = replica(P, "qwen3-235b-a22b", "h200", tp=8, dtype="fp8", ep=8)
    assert ep8.memory.weights_gib_per_gpu == pytest.approx(tp8.memory.weights_gib_per_gpu, rel=1e-9)
    # each of the 8 attention ranks keeps its own requests' KV: 8 x the tokens of one rank
    assert rm.memory.kv_cache_tokens % 8 == 0 and rm.gpus == 8


def test_mla_kv_is_the_latent_whole_on_every_tp_rank():
    """DeepSeek-V3: (kv_lora_rank 512 + qk_rope_head_dim 64) x 61 layers x 1 B (fp8) per token, per GPU at any
    TP."""
    for tp in (1, 8):
        rm = replica(P, "deepseek-v3", "h200", tp=tp, dtype="fp8")
        assert rm.memory.kv_bytes_per_token_per_gpu == pytest.approx(576 * 61)
    assert replica(P, "deepseek-v3", "h200", tp=8, dtype="fp8").kv_bytes_per_token == pytest.approx(576 * 61)


def test_all_to_all_hand_computed():
    """64 tokens, G = ep = 8 on one node, top-8, hidden 7168: each GPU sends 64/8 x 8 x 7168 x 2 B x 7/8 per
    direction over NVLink; dispatch + combine, each with one collective latency."""
    g = P.gpus["h200"]
    layer = MoeLayer.of(P.models["deepseek-v3"], g, tp=1, dp=8, ep=8, wbytes=1.0, bw=1e12, flops=1e15,
                        kernel_s=0.0)
    sent = 64 / 8 * 8 * 7168 * 2 * 7 / 8
    want = 58 / 61 * 2 * (g.allreduce_latency_us.value * 1e-6 + sent / (g.link_bandwidth_gbps.value * 1e9))
    assert layer.comm_s(64) == pytest.approx(want, rel=1e-12)
    # across two nodes (G = 16): the half bound for the other node crosses the NICs, which are slower
    wide = MoeLayer.of(P.models["deepseek-v3"], g, tp=1, dp=16, ep=16, wbytes=1.0, bw=1e12, flops=1e15,
                       kernel_s=0.0)
    assert wide.comm_s(128) > layer.comm_s(128)


def test_decode_reads_more_experts_as_the_batch_grows():
    """Memory-bound decode: the step grows with the batch because more distinct experts are read, and at a
    large batch approaches the step that reads all of them; a dense model of the same active size grows far
    less."""
    rm = replica(P, "qwen3-30b-a3b", "h100-sxm", dtype="bf16")
    t1, t64, t512 = (rm.iteration_s(b, 500) for b in (1, 64, 512))
    assert t1 < t64 < t512
    all_experts = rm.expert_params * 2 / rm.bw  # every expert's bf16 bytes at the achieved bandwidth
    assert t64 - t1 > 0.8 * (all_experts * (experts_touched(64, 128, 8) - experts_touched(1, 128, 8)))


CASES = [(m, g, dt) for m in MOE for g in ("h100-sxm", "h200", "b200") for dt in ("bf16", "fp8", "fp4")]


@pytest.mark.parametrize("model,gpu,dtype", CASES)
def test_predict_covers_moe_models_within_physics(model, gpu, dtype):
    """Every MoE model on H100/H200/B200 in bf16/fp8/fp4 (fp4 weight-only where the GPU has no FP4 tensor
    cores): the smallest single-node layout that fits predicts a throughput below the speed-of-light bound."""
    fits = None
    for tp, dp in ((1, 1), (2, 1), (4, 1), (8, 1), (1, 8), (2, 4)):
        ep = tp * dp if tp * dp > 1 else 1
        if P.models[model].num_attention_heads.value % tp:
            continue
        rm = replica(P, model, gpu, tp=tp, dtype=dtype, dp=dp, ep=ep)
        if rm.memory.kv_cache_tokens >= 32 * 1200:  # the 32 requests below, 1,200 tokens each
            fits = rm
            break
    if fits is None:
        pytest.skip(f"{model} {dtype} does not fit one 8-GPU {gpu} node")
    pr = fits.predict_closed_loop(1000, 200, 32)
    assert pr.fits and pr.output_tokens_per_s > 0
    bound = decode_bound(P.models[model], P.gpus[gpu], fits.gpus, dtype, 32, 1000, 200, prefill=True)
    assert pr.output_tokens_per_s <= bound


def test_layout_errors_name_the_cause():
    with pytest.raises(ValueError, match="dense"):
        replica(P, "llama-3.1-8b", "h100-sxm", dp=2)
    with pytest.raises(ValueError, match="must divide"):
        replica(P, "qwen3-30b-a3b", "h100-sxm", tp=2, ep=4)



def test_fp4_without_fp4_tensor_cores_is_weight_only():
    """gpt-oss-120b fp4 on H100 (MXFP4 weight-only kernels): 4-bit weights in memory and read per step, GEMMs
    at the bf16 rate (the H100 profile has no fp4_tflops); on B200 the FP4 tensor cores' rate."""
    h100 = replica(P, "gpt-oss-120b", "h100-sxm", dtype="fp4", kv_dtype="bf16")
    bf16 = replica(P, "gpt-oss-120b", "h100-sxm", dtype="bf16")
    assert h100.flops_linear == bf16.flops_linear
    assert h100.wbytes == pytest.approx(0.5625) and bf16.wbytes == 2.0
    assert h100.memory.weights_gib_per_gpu == pytest.approx(bf16.memory.weights_gib_per_gpu * 0.5625 / 2)
    b200 = replica(P, "gpt-oss-120b", "b200", dtype="fp4")
    g = P.gpus["b200"]
    assert b200.flops_linear == pytest.approx(g.fp4_tflops.value * 1e12 * g.fp8_compute_efficiency.value
                                              * (P.engines["vllm"].kernel_efficiency.value
                                                 if P.engines["vllm"].kernel_efficiency else 1.0))


def _cli(args):
    from typer.testing import CliRunner

    from trimtab.cli.main import app

    return CliRunner().invoke(app, args)


def test_predict_cli_dp_ep_and_fp4():
    r = _cli(["predict", "--model", "deepseek-v3", "--gpu", "b200", "--isl", "1000", "--osl", "500",
              "--concurrency", "64", "--tp", "1", "--dp", "8", "--ep", "8", "--dtype", "fp4", "--format",
              "json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["fits"] and out["output_tokens_per_s_per_gpu"] == pytest.approx(out["output_tokens_per_s"] / 8)
    hopper = _cli(["predict", "--model", "deepseek-v3", "--gpu", "h200", "--isl", "1000", "--osl", "500",
                   "--concurrency", "8", "--tp", "8", "--dtype", "fp4", "--format", "json"])
    assert hopper.exit_code == 0, hopper.output  # weight-only FP4 on Hopper
    dense = _cli(["predict", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--isl", "100", "--osl", "10",
                  "--concurrency", "1", "--dp", "2"])
    assert dense.exit_code == 1 and "--dp/--ep" in dense.output


def test_fp4_on_gpus_without_fp4_is_infeasible_with_the_reason(tmp_path):
    spec = (Path(__file__).resolve().parents[2] / "examples" / "moe.yaml").read_text().replace("dtype: fp8",
                                                                                                "dtype: fp4")
    (tmp_path / "s.yaml").write_text(spec)
    r = _cli(["plan", str(tmp_path / "s.yaml"), "-o", str(tmp_path / "p.yaml")])
    assert r.exit_code == 3 and "no FP4 tensor cores" in r.output


def test_physics_guard_reads_the_mla_latent_and_fp4_peak():
    """The speed-of-light guard (spec sheets only) uses MLA's latent KV and the B200's FP4 peak."""
    from trimtab.cost.physics import _kv_bytes_per_token, prompt_bound

    assert _kv_bytes_per_token(P.models["deepseek-v3"], "fp8") == 61 * (512 + 64)
    m, g = P.models["gpt-oss-120b"], P.gpus["b200"]
    assert prompt_bound(m, g, 1, "fp4") == pytest.approx(9000e12 / (2 * 5.1e9))
    assert prompt_bound(m, g, 1, "fp4") == pytest.approx(2 * prompt_bound(m, g, 1, "fp8"))
