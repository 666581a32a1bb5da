"""The ground-truth table format shared by ``benchmarks/accuracy.py`` and its tests: columns, metrics and
their units, the benchmark modes of ``concurrency_or_rate``, the mapping of published model and GPU names to
profiles, the precision a row ran at, and a checker that names the file, line and field of each malformed
value.

Tables: ``../shared/groundtruth/dev.csv`` (dense models) and ``benchmarks/data/moe_groundtruth.csv`` (MoE
models), columns ``source, model, gpu, num_gpus, tp, pp, engine, isl, osl, concurrency_or_rate, metric, value,
unit, notes`` plus the optional trailing ``dp`` (attention data-parallel ranks; the replica spans tp x pp x dp
GPUs), ``ep`` (expert-parallel degree; 1 = experts sharded by TP) and ``dtype`` (weight precision: bf16, fp16,
fp8, fp4), left empty where the source does not state them.
"""
from __future__ import annotations

import csv
import math
import re
from pathlib import Path

COLUMNS = ("source", "model", "gpu", "num_gpus", "tp", "pp", "engine", "isl", "osl", "concurrency_or_rate",
           "metric", "value", "unit", "notes")
OPTIONAL_COLUMNS = ("dp", "ep", "dtype")
METRIC_UNITS = {
    "output_throughput_per_gpu": "tok/s/GPU", "output_throughput": "tok/s", "total_token_throughput": "tok/s",
    "request_throughput": "req/s", "ttft_ms": "ms", "ttft_mean_ms": "ms", "tpot_mean_ms": "ms",
    "itl_mean_ms": "ms", "e2e_latency_mean_ms": "ms",
}
DTYPES = ("bf16", "fp16", "fp8", "fp4")

# Published model names (lower case) -> trimtab model profiles. DeepSeek-R1 (and R1-0528) has DeepSeek-V3's
# architecture, so its rows are predicted with the deepseek-v3 profile.
MODELS = {"llama-2-7b": "llama-2-7b", "llama-2-70b": "llama-2-70b", "gpt-j-6b": "gpt-j-6b",
          "llama-3.1-8b": "llama-3.1-8b", "llama-3-70b": "llama-3-70b", "qwen3-8b": "qwen3-8b",
          "qwen3-14b": "qwen3-14b", "qwen3-32b": "qwen3-32b",
          "mixtral-8x7b": "mixtral-8x7b", "qwen3-235b-a22b": "qwen3-235b-a22b",
          "qwen3-30b-a3b": "qwen3-30b-a3b",
          "deepseek-v3": "deepseek-v3", "deepseek-r1": "deepseek-v3", "llama-4-maverick": "llama-4-maverick",
          "llama-4-scout": "llama-4-scout", "gpt-oss-120b": "gpt-oss-120b"}
GPUS = (("h100", "h100-sxm"), ("h200", "h200"), ("b200", "b200"), ("a100", "a100-80gb"), ("l40s", "l40s"))


def model_profile(name: str) -> str | None:
    return MODELS.get(name.strip().lower())


def gpu_profile(name: str) -> str | None:
    """``H100-SXM-80GB`` -> ``h100-sxm``; None for a GPU without a profile (GB200 is not a B200)."""
    n = name.strip().lower()
    return next((prof for prefix, prof in GPUS if n.startswith(prefix)), None)


def engine_family(text: str) -> str:
    """TensorRT-LLM and NeMo (which serves through TensorRT-LLM) -> trt-llm; SGLang -> sglang; vLLM ->
    vllm."""
    t = text.lower()
    if "tensorrt" in t or "nemo" in t:
        return "trt-llm"
    if "sglang" in t:
        return "sglang"
    if "vllm" in t:
        return "vllm"
    raise ValueError(f"unknown engine {text!r}")


def mode(text: str) -> tuple[str, float]:
    """``concurrency_or_rate`` -> (static | closed | open | saturated, batch / concurrency / rate /
    requests)."""
    t = text.lower()
    if m := re.match(r"batch=(\d+)", t):
        return "static", float(m.group(1))
    if m := re.match(r"max concurrency=(\d+)", t):
        return "closed", float(m.group(1))
    if m := re.match(r"([\d.]+) qps poisson", t):
        return "open", float(m.group(1))
    if m := re.search(r"(\d+) [a-z ]*prompts", t):
        return "saturated", float(m.group(1))
    raise ValueError(f"cannot read the benchmark mode from {text!r}")


def precision(notes: str, engine: str, dtype_col: str = "") -> tuple[str, str]:
    """(weight dtype, KV-cache dtype) of a row. Weights: the ``dtype`` column where given, else FP4 / FP8
    named in the notes, else bf16. KV cache: what the notes state ("FP8 KV cache", "FP16 KV cache"); otherwise
    fp8 for TensorRT-LLM rows with quantized weights (its FP8 setting quantizes the KV cache too, and NVIDIA's
    quantized checkpoints ship an FP8 KV cache) unless the notes say the quantization is of the weights only
    ("FP8 weights", "MXFP4 expert weights", "weight-only"), bf16 otherwise."""
    low = notes.lower()
    dtype = dtype_col.strip().lower()
    if not dtype:
        dtype = "fp4" if re.search(r"\b(nv|mx)?fp4\b", low) else "fp8" if "fp8" in low else "bf16"
    if dtype == "fp16":
        dtype = "bf16"  # same width and peak: one 16-bit path in the cost model
    if re.search(r"fp8 kv", low):
        return dtype, "fp8"
    if re.search(r"(fp16|bf16) kv", low):
        return dtype, "bf16"
    weights_only = re.search(r"fp[48] (expert )?weights|weight-only", low) is not None
    quantized = dtype in ("fp8", "fp4")
    return dtype, "fp8" if quantized and engine == "trt-llm" and not weights_only else "bf16"


def _positive_int(text: str) -> int | None:
    try:
        v = int(text)
    except (TypeError, ValueError):
        return None
    return v if v > 0 else None


def check_row(r: dict) -> list[str]:
    """Problems with one row of a ground-truth table, each as 'field: what is wrong'."""
    out = []
    for c in ("source", "model", "gpu", "engine", "metric", "unit", "concurrency_or_rate"):
        if not (r.get(c) or "").strip():
            out.append(f"{c}: empty")
    if r.get("metric") and r["metric"] not in METRIC_UNITS:
        out.append(f"metric: unknown {r['metric']!r} (known: {', '.join(METRIC_UNITS)})")
    elif r.get("metric") and r.get("unit") != METRIC_UNITS[r["metric"]]:
        out.append(f"unit: {r.get('unit')!r} for {r['metric']} (expected {METRIC_UNITS[r['metric']]!r})")
    try:
        v = float(r.get("value", ""))
        if not (math.isfinite(v) and v > 0):
            out.append(f"value: {r.get('value')!r} is not a positive number")
    except ValueError:
        out.append(f"value: {r.get('value')!r} is not a number")
    ints = {}
    for c in ("num_gpus", "tp", "pp"):
        ints[c] = _positive_int(r.get(c, ""))
        if ints[c] is None:
            out.append(f"{c}: {r.get(c)!r} is not a positive integer")
    for c in ("dp", "ep"):
        if (r.get(c) or "").strip():
            ints[c] = _positive_int(r[c])
            if ints[c] is None:
                out.append(f"{c}: {r[c]!r} is not a positive integer")
    dp = ints.get("dp") or 1
    if (None not in (ints["num_gpus"], ints["tp"], ints["pp"])
            and ints["tp"] * ints["pp"] * dp != ints["num_gpus"]):
        out.append(f"num_gpus: {ints['num_gpus']} != tp {ints['tp']} x pp {ints['pp']} x dp {dp}")
    ep = ints.get("ep")
    if ep and ints["tp"] and (ints["tp"] * dp) % ep:
        out.append(f"ep: {ep} does not divide the tp x dp = {ints['tp'] * dp} GPUs the "
                   "experts are spread over")
    for c in ("isl", "osl"):
        txt = (r.get(c) or "").strip()
        if txt and _positive_int(txt) is None:
            out.append(f"{c}: {txt!r} is not a positive integer")
        if not txt and "sharegpt" not in ((r.get("concurrency_or_rate") or "")
                                          + (r.get("notes") or "")).lower():
            out.append(f"{c}: empty (only ShareGPT rows may leave the lengths to the dataset's means)")
    if (r.get("dtype") or "").strip() and r["dtype"].strip().lower() not in DTYPES:
        out.append(f"dtype: {r['dtype']!r} (known: {', '.join(DTYPES)})")
    try:
        mode(r.get("concurrency_or_rate") or "")
    except ValueError as e:
        out.append(f"concurrency_or_rate: {e}")
    try:
        engine_family(r.get("engine") or "")
    except ValueError as e:
        out.append(f"engine: {e}")
    return out


def check_file(path: Path) -> list[str]:
    """Every problem in a ground-truth CSV as 'file:line: field: problem' (header problems at line 1)."""
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        missing = [c for c in COLUMNS if c not in header]
        extra = [c for c in header if c not in COLUMNS + OPTIONAL_COLUMNS]
        out = [f"{path}:1: header: missing column {c!r}" for c in missing]
        out += [f"{path}:1: header: unknown column {c!r}" for c in extra]
        if missing:
            return out
        for line, r in enumerate(reader, start=2):
            if None in r or any(v is None for v in r.values()):
                out.append(f"{path}:{line}: row: {len(header)} columns expected")
                continue
            out += [f"{path}:{line}: {p}" for p in check_row(r)]
    return out
