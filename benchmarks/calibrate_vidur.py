"""Fit the cost model's efficiency parameters to Vidur's measured per-operator timings.

usage: python benchmarks/calibrate_vidur.py [SHARED_DIR]   (default ../shared)

Reads ``profiling/vidur/compute/<gpu>/*/*/mlp.csv`` and ``profiling/vidur/network/<gpu>_dgx/all_reduce.csv``
and prints, per GPU, the parameters the cost model uses, with the fit error per operation:

* ``compute_efficiency``: median of achieved/peak FLOP/s over the four GEMMs of a layer (QKV, O, up, down)
  at 1024 tokens or more, where they are compute-bound;
* ``bandwidth_efficiency``: median of achieved/peak HBM bandwidth for the same GEMMs at 1 to 8 tokens,
  where reading the weights dominates;
* ``allreduce_latency_us`` and ``allreduce_bus_gbps``: least squares of t = a + bytes * 2(n-1)/n / B.

The fitted numbers are committed in ``profiles/gpus/{a100-80gb,h100-sxm}.yaml`` with this script named as
their source; the data itself is not committed.
"""
from __future__ import annotations

import csv
import glob
import statistics
import sys
from pathlib import Path

PEAK = {  # dense bf16 FLOP/s and HBM bytes/s from the vendor datasheets (same as profiles/gpus)
    "a100": (312e12, 2039e9),
    "h100": (989e12, 3350e9),
}
GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")


def _gemm_shape(op: str, row: dict) -> tuple[float, float, float]:
    """(m, n, k) of one GEMM of the layer, per tensor-parallel shard."""
    heads, kv, hidden = int(row["n_head"]), int(row["n_kv_head"]), int(row["n_embd"])
    inter, tp, tokens = int(row["n_expanded_embd"]), int(row["num_tensor_parallel_workers"]), int(row["num_tokens"])
    head_dim = hidden // heads
    gated = row["use_gated_mlp"] == "True"
    if op == "attn_pre_proj":
        return tokens, (heads + 2 * kv) * head_dim / tp, hidden
    if op == "attn_post_proj":
        return tokens, hidden, heads * head_dim / tp
    if op == "mlp_up_proj":
        return tokens, (2 if gated else 1) * inter / tp, hidden
    return tokens, hidden, inter / tp


def fit_compute(shared: Path, gpu: str) -> dict:
    peak_flops, peak_bw = PEAK[gpu]
    comp, mem, errs = [], [], {op: [] for op in GEMMS}
    rows = []
    for path in sorted(glob.glob(str(shared / f"profiling/vidur/compute/{gpu}/*/*/mlp.csv"))):
        with open(path) as fh:
            rows.extend(csv.DictReader(fh))
    for row in rows:
        for op in GEMMS:
            m, n, k = _gemm_shape(op, row)
            t = float(row[f"time_stats.{op}.median"]) * 1e-3
            flops, nbytes = 2 * m * n * k, 2 * (n * k + m * k + m * n)
            if m >= 1024:
                comp.append(flops / t / peak_flops)
            if m <= 8:
                mem.append(nbytes / t / peak_bw)
    eta_c, eta_b = statistics.median(comp), statistics.median(mem)
    for row in rows:
        for op in GEMMS:
            m, n, k = _gemm_shape(op, row)
            t = float(row[f"time_stats.{op}.median"]) * 1e-3
            pred = max(2 * m * n * k / (peak_flops * eta_c), 2 * (n * k + m * k + m * n) / (peak_bw * eta_b))
            errs[op].append(abs(pred - t) / t)
    return {
        "compute_efficiency": round(eta_c, 3),
        "bandwidth_efficiency": round(eta_b, 3),
        "rows": len(rows),
        "median_abs_pct_error": {op: round(100 * statistics.median(e), 1) for op, e in errs.items()},
    }


def fit_allreduce(shared: Path, gpu: str) -> dict:
    import numpy as np

    path = shared / f"profiling/vidur/network/{gpu}_dgx/all_reduce.csv"
    xs, ys = [], []
    with open(path) as fh:
        for row in csv.DictReader(fh):
            n, size = int(row["num_workers"]), float(row["size"])
            if int(row["devices_per_node"]) != n:  # keep single-node (NVLink) collectives only
                continue
            xs.append([1.0, size * 2 * (n - 1) / n])
            ys.append(float(row["time_stats.all_reduce.median"]) * 1e-3)
    a, b = np.linalg.lstsq(np.array(xs), np.array(ys), rcond=None)[0]
    pred = np.array(xs) @ np.array([a, b])
    err = np.median(np.abs(pred - np.array(ys)) / np.array(ys))
    return {
        "allreduce_latency_us": round(float(a) * 1e6, 1),
        "allreduce_bus_gbps": round(1 / float(b) / 1e9, 1),
        "rows": len(ys),
        "median_abs_pct_error": round(100 * float(err), 1),
    }


def main() -> None:
    shared = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared")
    for gpu in ("a100", "h100"):
        print(gpu, "compute", fit_compute(shared, gpu))
        print(gpu, "allreduce", fit_allreduce(shared, gpu))


if __name__ == "__main__":
    main()
