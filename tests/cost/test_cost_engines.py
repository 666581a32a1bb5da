"""Engine selection (predict --engine, spec defaults.engine), fidelity tags, and benchmarks/accuracy.py."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from trimtab.cli.main import app
from trimtab.cost.predict import fidelity, replica
from trimtab.profiles.loader import load_profiles

runner = CliRunner()
ARGS = ["predict", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--isl", "512", "--osl", "128",
        "--concurrency", "8", "--format", "json"]


def _predict(*extra):
    res = runner.invoke(app, ARGS + list(extra))
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_predict_engines_differ_and_keep_keys():
    v, s, t = _predict(), _predict("--engine", "sglang"), _predict("--engine", "trt-llm")
    keys = {"ttft_ms", "tpot_ms", "output_tokens_per_s", "output_tokens_per_s_per_gpu", "requests_per_s",
            "fits", "max_concurrency", "fidelity"}
    assert keys <= set(v) and keys <= set(s) and keys <= set(t)
    assert v["engine"] == "vllm" and s["engine"] == "sglang" and t["engine"] == "trt-llm"
    # the engines' front ends and schedulers differ (vLLM 0.15: 12.6 ms and async scheduling, fit on blis-dev;
    # SGLang 19.3 ms), so do their TTFTs
    assert len({v["ttft_ms"], s["ttft_ms"], t["ttft_ms"]}) == 3
    assert len({v["tpot_ms"], s["tpot_ms"], t["tpot_ms"]}) == 3


def test_predict_unknown_engine_is_input_error():
    res = runner.invoke(app, ARGS + ["--engine", "nope"])
    assert res.exit_code == 1 and "--engine" in res.output and "Traceback" not in res.output


def test_fidelity_levels():
    fitted = _predict()["fidelity"]
    assert fitted["level"] == "fitted" and fitted["unfitted"] == []
    # aiconfigurator's measured GEMM table (issue 34)
    assert fitted["sources"]["gpu.compute_efficiency"] == "measurement"
    l4 = json.loads(runner.invoke(app, ["predict", "--model", "llama-3.1-8b", "--gpu", "l4", "--isl", "256",
                                        "--osl", "64", "--concurrency", "2", "--format", "json"]).output)
    assert l4["fidelity"]["level"] == "assumption" and l4["fidelity"]["unfitted"]
    p = load_profiles()
    rm = replica(p, "llama-3.1-8b", "h100-sxm", "vllm", max_batched_tokens=16384)
    assert any("GEMM range" in e for e in fidelity(rm, 16000, 100, 1).extrapolation)


def test_fp8_predict_more_kv_and_faster_decode():
    bf, f8 = _predict(), _predict("--dtype", "fp8")
    assert f8["kv_cache_tokens"] > bf["kv_cache_tokens"]
    assert f8["tpot_ms"] < bf["tpot_ms"]


def test_spec_engine_selects_profile(tmp_path):
    from trimtab.api import load_spec
    from trimtab.ir.lower import lower

    from tests.conftest import SMALL_SPEC

    spec_text = SMALL_SPEC
    path = tmp_path / "s.yaml"
    path.write_text(spec_text + "defaults: {engine: sglang}\n")
    assert lower(load_spec(path)).engine.name == "sglang"
    path.write_text(spec_text + "defaults: {engine: tensorrt}\n")
    res = runner.invoke(app, ["plan", str(path)])
    assert res.exit_code == 1 and "engine" in res.output


def test_accuracy_script_on_fixture(tmp_path, capsys):
    csv_text = (
        "source,model,gpu,num_gpus,tp,pp,engine,isl,osl,concurrency_or_rate,metric,value,unit,notes\n"
        'doc,Llama-2-7B,A100-SXM-80GB,1,1,1,"TensorRT-LLM v0.6.1 (static batch)",128,128,batch=64,'
        "output_throughput,3000,tok/s,FP16\n"
        'doc,Qwen3-8B,H100-SXM-80GB,1,1,1,vLLM v0.11.0,233,221,max concurrency=4,tpot_mean_ms,7.4,ms,BF16\n'
        'doc,Llama-3-70B,H100-SXM-80GB,4,4,1,"vLLM (nightly)",,,1 qps Poisson (200 ShareGPT prompts),'
        "ttft_mean_ms,62,ms,serving\n"
        'doc,Qwen3-14B,A100-80GB,1,1,1,SGLang v0.5.5,217,202,50 ShareGPT prompts at once (rate=inf),'
        "total_token_throughput,4000,tok/s,BF16\n")
    f = tmp_path / "rows.csv"
    f.write_text(csv_text)
    from benchmarks.accuracy import main  # the script's main, in this process: no Python start-up per run

    capsys.readouterr()
    code = main([str(f)])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "median" in out.out and "worst" in out.out and "4 rows" in out.out
