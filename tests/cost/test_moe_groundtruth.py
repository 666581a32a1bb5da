"""The MoE ground truth (issue 17, item 5): every row of benchmarks/data/moe_groundtruth.csv is well formed,
the checker that says so catches each kind of defect, and benchmarks/accuracy.py predicts the rows this
checkout can and reports every other row as skipped with its reason."""
from __future__ import annotations

import csv
import inspect
import re
from pathlib import Path

from benchmarks.groundtruth import (METRIC_UNITS, check_file, check_row, gpu_profile, model_profile, mode,
                                    precision)
from trimtab.cost.predict import replica

ROOT = Path(__file__).resolve().parents[2]
CSV = ROOT / "benchmarks" / "data" / "moe_groundtruth.csv"


def accuracy(capsys, *args) -> tuple[int, str, str]:
    """``python benchmarks/accuracy.py ARGS`` run in this process: its exit code, stdout and stderr (what the
    script does is under test, not a Python start-up)."""
    from benchmarks.accuracy import main

    capsys.readouterr()
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _rows() -> list[dict]:
    with open(CSV, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_every_row_is_well_formed():
    assert check_file(CSV) == []
    rows = _rows()
    assert len(rows) >= 40
    docs = {r["source"].split("[")[0].strip() for r in rows}
    assert len(docs) >= 4
    models = {model_profile(r["model"]) for r in rows}
    assert None not in models and len(models) >= 4
    for r in rows:
        # the exact document: repository path at a commit, or a URL, in brackets
        assert re.search(r"\[[^\]]*(@[0-9a-f]{7,40}|https?://)[^\]]*\]", r["source"]), r["source"]
        assert r["unit"] == METRIC_UNITS[r["metric"]] and float(r["value"]) > 0
        dp = int(r["dp"] or 1)
        assert int(r["tp"]) * int(r["pp"]) * dp == int(r["num_gpus"])
        assert gpu_profile(r["gpu"]) in ("h100-sxm", "h200", "b200", "a100-80gb")


def test_checker_names_each_defect(tmp_path):
    good = _rows()[0]
    assert check_row(good) == []
    cases = [("metric", "tokens_per_second", "metric"), ("unit", "ms", "unit"), ("value", "-3", "value"),
             ("value", "0", "value"), ("value", "n/a", "value"), ("source", " ", "source"),
             ("num_gpus", "3", "num_gpus"), ("dp", "2", "num_gpus"), ("ep", "3", "ep"), ("tp", "0", "tp"),
             ("dtype", "int4", "dtype"), ("concurrency_or_rate", "lots", "concurrency_or_rate"),
             ("isl", "", "isl"), ("engine", "llama.cpp", "engine")]
    for field, bad, named in cases:
        r = dict(good, **{field: bad})
        problems = check_row(r)
        assert any(p.startswith(named + ":") for p in problems), (field, bad, problems)
    f = tmp_path / "bad.csv"
    with open(f, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, list(good))
        w.writeheader()
        w.writerow(good)
        w.writerow(dict(good, unit="tok/s/GPU"))
    assert [p for p in check_file(f)] == [f"{f}:3: unit: 'tok/s/GPU' for output_throughput "
                                          "(expected 'tok/s')"]


def test_precision_model_and_gpu_names():
    # TensorRT-LLM's FP8 setting quantizes the KV cache too
    assert precision("FP8", "trt-llm") == ("fp8", "fp8")
    assert precision("FP8 weights (Qwen3-8B-FP8)", "sglang") == ("fp8", "bf16")
    assert precision("BF16", "vllm") == ("bf16", "bf16")
    assert precision("NVFP4 weights, FP8 KV cache", "trt-llm", "fp4") == ("fp4", "fp8")
    assert precision("NVFP4 weights, FP16 KV cache", "trt-llm", "fp4") == ("fp4", "bf16")
    assert precision("MXFP4 expert weights as published", "trt-llm", "fp4") == ("fp4", "bf16")
    assert precision("ModelOpt NVFP4 checkpoint", "trt-llm") == ("fp4", "fp8")
    assert model_profile("DeepSeek-R1") == model_profile("deepseek-v3") == "deepseek-v3"
    assert model_profile("Grok-1") is None
    assert gpu_profile("B200-180GB") == "b200" and gpu_profile("GB200") is None
    assert mode("max concurrency=7168 (114688 requests)") == ("closed", 7168.0)
    assert mode("offline (30000 prompts)") == ("saturated", 30000.0)


HEADER = ("source,model,gpu,num_gpus,tp,pp,engine,isl,osl,concurrency_or_rate,metric,value,unit,notes,"
          "dp,ep,dtype\n")
TRT = '"TensorRT-LLM v0.17 (trtllm-bench)"'


def _fixture(tmp_path) -> Path:
    rows = [
        f"docA [o/r a.md @abc1234],Mixtral-8x7B,H100-SXM-80GB,2,2,1,{TRT},2048,128,offline (64 prompts),"
        "output_throughput,3300,tok/s,FP8,,1,fp8",
        f"docB [https://example.org/b],Mixtral-8x7B,H200-SXM-141GB,2,2,1,{TRT},2048,128,offline (64 prompts),"
        "output_throughput,3400,tok/s,FP8,,1,fp8",
        f"docB [https://example.org/b],Grok-1,H100-SXM-80GB,8,8,1,{TRT},128,128,offline (64 prompts),"
        "output_throughput,1000,tok/s,FP8,,,fp8",
        f"docB [https://example.org/b],Mixtral-8x7B,GB200,1,1,1,{TRT},128,128,offline (64 prompts),"
        "output_throughput,1000,tok/s,FP4,,,fp4",
        f"docB [https://example.org/b],Mixtral-8x7B,H200-SXM-141GB,8,8,1,{TRT},1024,2048,batch=1,"
        "output_throughput,150,tok/s,MTP speculative decoding,,4,fp8",
        f"docB [https://example.org/b],Mixtral-8x7B,H200-SXM-141GB,2,1,1,{TRT},2048,128,offline (64 prompts),"
        "output_throughput,3000,tok/s,FP8,2,2,fp8",
    ]
    f = tmp_path / "moe.csv"
    f.write_text(HEADER + "\n".join(rows) + "\n")
    return f


def test_accuracy_predicts_what_it_can_and_names_every_skip(tmp_path, capsys):
    f = _fixture(tmp_path)
    code, out, err = accuracy(capsys, f, "--cv")
    assert code == 0, err
    has_dp = "dp" in inspect.signature(replica).parameters
    predicted = 3 if has_dp else 2
    assert f"{predicted} rows from {f} ({6 - predicted} more skipped, listed below)" in out
    assert "no model mapping for 'Grok-1'" in out and "(lines 4)" in out
    assert "no GPU profile for 'GB200'" in out and "(lines 5)" in out
    assert "speculative decoding (MTP/EAGLE) is not modelled" in out and "(lines 6)" in out
    assert ("dp=2 needs the MoE predict API" in out) == (not has_dp)
    assert "leave-one-source-out" in out and "docA" in out and "docB" in out


def test_accuracy_rejects_a_malformed_table(tmp_path, capsys):
    f = tmp_path / "bad.csv"
    f.write_text(HEADER
                 + f"doc [x @abc1234],Mixtral-8x7B,H100-SXM-80GB,2,1,1,{TRT},128,128,offline (64 prompts),"
                 "output_throughput,-5,tok/s,FP8,,,\n")
    code, _, err = accuracy(capsys, f)
    assert code == 2
    assert f"{f}:2: value: '-5' is not a positive number" in err
    assert f"{f}:2: num_gpus: 2 != tp 1 x pp 1 x dp 1" in err
    assert "Traceback" not in err
