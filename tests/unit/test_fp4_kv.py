"""An FP4 (NVFP4) KV cache (``workloads[].kv_dtype: fp4``; docs/moe.md, "FP4"): its size against vLLM's own
layout computed by hand, the planner's choice of GPUs, the engines' flags (vLLM's own parser reads them in
tests/engines/test_fp4_kv_flags.py), a check of the plan at seeds the planner did not use, and the errors for
what cannot serve it."""
from __future__ import annotations

import pytest

from trimtab.api import plan
from trimtab.cost.predict import replica
from trimtab.engines import sglang as sglang_emitter
from trimtab.engines import trtllm as trtllm_emitter
from trimtab.contract.realise import deployment_facts
from trimtab.errors import InputError
from trimtab.ir.lower import lower
from trimtab.profiles.loader import load_profiles
from trimtab.gate.simulated import check_simulated
from trimtab.spec.load import load_spec

# Decode-heavy long contexts on Llama 3.1 70B fp8: the KV cache, not compute, limits a replica's batch.
SPEC = """\
version: 1
name: kv4
gpus:
  - {type: b200, count: 32}
models:
  - name: llama-3.1-70b
workloads:
  - name: agent
    model: llama-3.1-70b
    rate_rps: 3
    dtype: fp8
    kv_dtype: fp4
    input_tokens: {lognormal: {median: 12000, p99: 40000}}
    output_tokens: {lognormal: {median: 1500, p99: 4000}}
    slo: {ttft_ms: 20000, tpot_ms: 120, percentile: 90}
"""


def test_kv_bytes_are_vllms_nvfp4_layout():
    """vLLM stores an NVFP4 KV head as head_size / 2 bytes of 4-bit values plus head_size / 16 fp8 scales
    (vllm/utils/torch_utils.py, nvfp4_kv_cache_full_dim): Llama 3.1 70B (80 layers, 8 KV heads of 128) takes
    2 x 80 x 8 x (64 + 8) = 92,160 bytes a token, against 163,840 in fp8; the same HBM holds 16/9 the
    tokens."""
    P = load_profiles()
    fp4 = replica(P, "llama-3.1-70b", "b200", dtype="fp8", kv_dtype="fp4")
    fp8 = replica(P, "llama-3.1-70b", "b200", dtype="fp8")
    assert fp4.memory.kv_bytes_per_token_per_gpu == 2 * 80 * 8 * (128 // 2 + 128 // 16) == 92_160
    assert fp8.memory.kv_bytes_per_token_per_gpu == 2 * 80 * 8 * 128 == 163_840
    assert fp4.memory.kv_cache_tokens == pytest.approx(fp8.memory.kv_cache_tokens * 16 / 9, abs=1)
    with pytest.raises(ValueError, match="FP4 tensor cores"):
        replica(P, "llama-3.1-70b", "h100-sxm", dtype="fp8", kv_dtype="fp4")
    with pytest.raises(ValueError, match="MLA"):
        replica(P, "deepseek-v3", "b200", tp=8, dtype="fp8", kv_dtype="fp4")


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    path = tmp_path_factory.mktemp("kv4") / "kv4.yaml"
    path.write_text(SPEC)
    spec = load_spec(path)
    res = plan(spec)
    assert res.plan is not None
    return spec, res.plan


def test_plan_states_the_fp4_kv_cache_and_every_engine_serves_it(planned):
    spec, p = planned
    ir = lower(spec)
    assert p.deployments and all(d.kv_dtype == "fp4" for d in p.deployments)
    for d in p.deployments:
        rm = replica(load_profiles(), d.model, d.gpu, tp=d.tensor_parallel, pp=d.pipeline_parallel,
                     dtype=d.dtype,
                     kv_dtype="fp4", max_num_seqs=d.max_batch_size,
                     max_batched_tokens=d.max_num_batched_tokens)
        assert d.kv_cache_tokens == rm.memory.kv_cache_tokens
        assert "--kv-cache-dtype=nvfp4" in d.engine_args and "--quantization=fp8" in d.engine_args
    facts = [f for f, _ in deployment_facts(p, ir)]
    assert all("--kv-cache-dtype=fp4_e2m1" in sglang_emitter.launch(f).engine_args for f in facts)
    import yaml
    for f in facts:
        ln = trtllm_emitter.launch(f)
        (opts,) = ln.files.values()
        assert yaml.safe_load(opts)["kv_cache_config"]["dtype"] == "nvfp4"


# A second plan and a check by simulation at new seeds (6 s): in the slow suite; the quick suite keeps the
# plan's fp4 KV cache and every engine serving it.
@pytest.mark.slow
def test_fp4_kv_plan_is_cheaper_than_the_fp8_one_and_passes_check_at_new_seeds(planned, tmp_path):
    """Where the KV cache limits the batch, 16/9 the tokens per replica need fewer replicas; and the plan
    holds at seeds the planner did not use (``check``'s default 1000-1002)."""
    spec, p = planned
    path = tmp_path / "kv8.yaml"
    path.write_text(SPEC.replace("    kv_dtype: fp4\n", ""))
    fp8 = plan(load_spec(path)).plan
    assert all(d.kv_dtype is None for d in fp8.deployments)
    assert p.cost_usd_per_hour < fp8.cost_usd_per_hour
    report, res = check_simulated(p, spec)
    assert report.ok, report.violations
    assert min(res.seeds) >= 1000


def test_h100s_are_left_out_with_the_reason(tmp_path):
    """A GPU without FP4 tensor cores gets no candidate for the workload, and says why (``plan -v``'s
    table)."""
    from trimtab.milp.candidates import build_candidates

    text = SPEC.replace("  - {type: b200, count: 32}\n",
                        "  - {type: b200, count: 32}\n  - {type: h100-sxm, count: 32}\n")
    ir = lower(load_spec("s.yaml", text=text))
    cs = build_candidates(ir)
    assert cs.candidates and all(c.gpu == "b200" and c.kv_dtype == "fp4" for c in cs.candidates)
    assert any("h100-sxm" in x.id and "kv_dtype fp4 needs a GPU with them" in x.reason for x in cs.pruned)


@pytest.mark.parametrize("change, field_msg", [
    ({"type: b200": "type: h100-sxm"}, "none of the spec's gpus (h100-sxm) has them"),
    ({"llama-3.1-70b": "deepseek-v3"}, "MLA"),
])
def test_what_cannot_serve_it_is_an_error_naming_the_field_and_line(change, field_msg):
    text = SPEC
    for a, b in change.items():
        text = text.replace(a, b)
    with pytest.raises(InputError) as exc:
        load_spec("s.yaml", text=text)
    (line,) = exc.value.lines
    assert "workloads[0] (agent).kv_dtype:" in line and field_msg in line
    kv_line = text.splitlines().index("    kv_dtype: fp4") + 1
    assert line.startswith(f"s.yaml:{kv_line}: ")


def test_predict_cli_takes_kv_dtype_fp4_on_b200_and_names_the_option_elsewhere():
    import json

    from typer.testing import CliRunner

    from trimtab.cli.main import app
    from trimtab.errors import ExitCode

    args = ["predict", "--model", "llama-3.1-70b", "--dtype", "fp8", "--kv-dtype", "fp4", "--isl", "8000",
            "--osl", "500", "--concurrency", "4", "--format", "json"]
    ok = CliRunner().invoke(app, [*args, "--gpu", "b200"])
    assert ok.exit_code == 0, ok.output
    fp8 = replica(load_profiles(), "llama-3.1-70b", "b200", dtype="fp8")
    assert json.loads(ok.output)["kv_cache_tokens"] == pytest.approx(fp8.memory.kv_cache_tokens * 16 / 9,
                                                                     abs=1)
    bad = CliRunner().invoke(app, [*args, "--gpu", "h100-sxm", "--tp", "2"])
    assert bad.exit_code == ExitCode.INVALID_INPUT
    assert "--kv-dtype: an fp4 KV cache needs FP4 tensor cores" in bad.output
