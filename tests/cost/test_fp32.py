"""``dtype: fp32``: a CPU device without native bf16 serves the model in fp32 (vLLM's CPU kernels run bf16
there at an eighth of the fp32 rate: docs/fidelity.md). Only a device whose profile has a measured
``fp32_tflops`` (``trimtab calibrate`` of an fp32 bench) can serve it; its weights and KV cache take 4 bytes a
value."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from trimtab.cli.main import app
from trimtab.profiles import data_dir
from trimtab.profiles.loader import Q, load_profiles

runner = CliRunner()
FP32_TFLOPS = 0.0723  # an AVX2-only CPU's one-thread fp32 linear-layer rate (72 GFLOP/s)
TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 768,
        "intermediate_size": 2048, "max_position_embeddings": 2048, "num_attention_heads": 12,
        "num_hidden_layers": 8, "num_key_value_heads": 4, "vocab_size": 4096, "torch_dtype": "bfloat16"}
SPEC = """\
version: 1
name: fp32-cpu
gpus:
  - {{type: {gpu}, count: 1, usd_per_hour: 1.0}}
models:
  - {{name: tiny, config: model/config.json}}
defaults: {{engine: vllm-cpu, dtype: fp32}}
workloads:
  - name: chat
    model: tiny
    rate_rps: 0.2
    input_tokens: {{fixed: 256}}
    output_tokens: {{fixed: 32}}
    slo: {{ttft_ms: 5000, tpot_ms: 200, percentile: 90}}
"""


def _case(tmp_path: Path, gpu: str = "cpu-xeon-2c") -> Path:
    """A spec for the tiny model in fp32, and a profile folder whose CPU device has a measured fp32 rate."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps(TINY))
    prof = yaml.safe_load((data_dir() / "gpus" / "cpu-xeon-2c.yaml").read_text())
    prof["fp32_tflops"] = {"value": FP32_TFLOPS, "source": "measured_peak"}
    (tmp_path / "mine" / "gpus").mkdir(parents=True)
    (tmp_path / "mine" / "gpus" / "cpu-xeon-2c.yaml").write_text(yaml.safe_dump(prof))
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(gpu=gpu))
    return spec


def test_fp32_prices_4_byte_values_at_the_measured_fp32_rate():
    from trimtab.cost.model import ReplicaModel

    profs = load_profiles()
    model, engine = profs.models["llama-3.1-8b"], profs.engines["vllm-cpu"]
    cpu = profs.gpus["cpu-xeon-2c"]
    cpu32 = cpu.model_copy(update={"fp32_tflops": Q(value=FP32_TFLOPS, source="measured_peak")})
    fp32 = ReplicaModel(model, cpu32, engine, 1, 1, "fp32")
    bf16 = ReplicaModel(model, cpu32, engine, 1, 1, "bf16")
    keff = engine.kernel_efficiency.value
    assert fp32.flops_linear == pytest.approx(FP32_TFLOPS * 1e12 * cpu.compute_efficiency.value * keff)
    eta = cpu.compute_efficiency.value * keff
    assert bf16.flops_linear == pytest.approx(cpu.bf16_tflops.value * 1e12 * eta)
    assert fp32.wbytes == 4.0 and bf16.wbytes == 2.0
    assert fp32.kvbytes == 2 * bf16.kvbytes
    assert fp32.memory.weights_gib_per_gpu == pytest.approx(2 * bf16.memory.weights_gib_per_gpu)


def test_fp32_on_a_device_without_a_measured_fp32_rate_is_infeasible_with_the_reason(tmp_path):
    spec = _case(tmp_path, gpu="h100-sxm")
    r = runner.invoke(app, ["plan", str(spec), "-o", str(tmp_path / "p.yaml")])
    assert r.exit_code == 3, r.output
    assert "fp32_tflops" in r.output


def test_fp32_plan_serves_in_float32_with_the_kv_room_at_4_bytes(tmp_path):
    """Planned on the CPU device with its fp32 rate; the server command a user (and tests/e2e) runs asks vLLM
    for float32 and sizes the KV cache at 4 bytes a value."""
    from trimtab.api import load_spec, plan
    from trimtab.field.engine_run import server_command
    from trimtab.profiles.loader import use_profile_dirs

    spec_path = _case(tmp_path)
    use_profile_dirs((tmp_path / "mine",))
    try:
        res = plan(load_spec(spec_path))
    finally:
        use_profile_dirs(())
    d = res.plan.deployments[0]
    assert d.dtype == "fp32" and d.gpu == "cpu-xeon-2c"
    argv, env = server_command(res.plan, d, tmp_path / "model", device="cpu")
    assert argv[argv.index("--dtype") + 1] == "float32"
    per_token = 2 * 8 * 4 * (768 // 12) * 4  # K and V, layers, KV heads, head dim, 4 bytes
    assert env["VLLM_CPU_KVCACHE_SPACE"] == str(max(1, int(d.kv_cache_tokens * per_token / 2**30)))
