"""Fit a GPU profile's efficiency parameters to measured operator timings (``trimtab calibrate``).

Entry points:
  * ``read_measurements(folder) -> Measurements``: every CSV under ``folder`` in either format below;
  * ``fit(meas, peaks) -> Fit``: least-squares parameters and the fit error per operation;
  * ``calibrate(folder, output, base=None) -> CalibrationResult``: both, then writes a GPU profile whose
    fitted numbers name their measurements (source kind ``fit``; measured peaks kind ``measurement``).

Formats read:
  * ``trimtab bench`` output: ``bench.csv`` (columns ``op, dtype, m, n, k, batch, context, heads, kv_heads,
    head_dim, bytes, gpus, flops, bytes_moved, time_ms``) with ``metadata.json`` beside it;
  * Vidur's per-operator profiles (microsoft/vidur ``data/profiling``): ``compute/<gpu>/<model>/mlp.csv``
    (``time_stats.<op>.median`` in ms per transformer-layer operator at ``num_tokens`` tokens and
    ``num_tensor_parallel_workers``) and ``network/<cluster>/all_reduce.csv``.

Models fitted (t in seconds; peaks from the base profile's spec sheet, or the highest rate measured when
there is no base profile):
  * GEMM:        t = t_k + max(FLOPs / (peak_flops x eta_c), bytes / (peak_bw x eta_b))   (eta_c, eta_b, t_k)
                 fp8 GEMMs fit their own eta_c against the fp8 peak;
  * elementwise: t = n_kernels x t_e + passes x tokens x hidden x 2 B / (peak_bw x eta_b)   (passes, t_e)
  * attention:   prefill t = t_k + FLOPs / (peak_flops x eta_a); decode is reported against the GEMM fit;
  * copies:      device-to-device bandwidth (a direct measurement of achievable HBM bandwidth);
  * all-reduce:  t = latency + bytes x 2(n-1)/n / bus_bandwidth.
Each least-squares fit minimises the squared log ratio of predicted to measured time (relative error), with
efficiencies bounded to (0, 1].
"""
from __future__ import annotations

import csv
import datetime as _dt
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from trimtab.errors import InputError, Problem
from trimtab.profiles import data_dir
from trimtab.profiles.loader import GpuProfile, load_profiles
from trimtab.util.validation import validate

VIDUR_GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
VIDUR_ELEMENTWISE = ("input_layernorm", "attn_rope", "post_attention_layernorm", "mlp_act", "add")
BENCH_COLUMNS = ("op", "dtype", "m", "n", "k", "batch", "context", "heads", "kv_heads", "head_dim", "bytes",
                 "gpus", "flops", "bytes_moved", "time_ms")


@dataclass
class Rec:
    op: str  # gemm name, elementwise, attn_prefill, attn_decode, copy_d2d, copy_h2d, copy_d2h, allreduce
    kind: str  # gemm | elementwise | attn_prefill | attn_decode | copy | allreduce
    dtype: str
    flops: float
    bytes: float
    time_s: float
    tokens: float = 0.0
    gpus: int = 1
    kernels: float = 1.0
    context: float = 0.0


@dataclass
class Measurements:
    recs: list[Rec] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # files read, relative to the folder
    formats: set[str] = field(default_factory=set)
    metadata: dict = field(default_factory=dict)
    gpu_hint: str | None = None  # e.g. "h100" from a Vidur path


def _f(row: dict, key: str, default: float = 0.0) -> float:
    v = row.get(key, "")
    try:
        return float(v) if v not in ("", None) else default
    except ValueError:
        return default


def _read_vidur_mlp(path: Path, rows: list[dict], out: list[Rec]) -> None:
    for row in rows:
        heads, kv, hidden = int(row["n_head"]), int(row["n_kv_head"]), int(row["n_embd"])
        inter, tp, tokens = (int(row["n_expanded_embd"]), int(row["num_tensor_parallel_workers"]),
                             int(row["num_tokens"]))
        hd = hidden // heads
        gated = str(row.get("use_gated_mlp", "True")) == "True"
        shapes = {
            "attn_pre_proj": (tokens, (heads + 2 * kv) * hd / tp, hidden),
            "attn_post_proj": (tokens, hidden, heads * hd / tp),
            "mlp_up_proj": (tokens, (2 if gated else 1) * inter / tp, hidden),
            "mlp_down_proj": (tokens, hidden, inter / tp),
        }
        for op, (m, n, k) in shapes.items():
            t = _f(row, f"time_stats.{op}.median") * 1e-3
            if t > 0:
                out.append(Rec(op, "gemm", "bf16", 2 * m * n * k, 2 * (n * k + m * k + m * n), t, tokens, tp))
        te = sum(_f(row, f"time_stats.{op}.median") for op in VIDUR_ELEMENTWISE) * 1e-3
        if te > 0:
            out.append(Rec("elementwise", "elementwise", "bf16", 0.0, tokens * hidden * 2.0, te, tokens, tp,
                           kernels=len(VIDUR_ELEMENTWISE)))


def _read_vidur_allreduce(rows: list[dict], out: list[Rec]) -> None:
    for row in rows:
        n, size = int(row["num_workers"]), float(row["size"])
        if int(row.get("devices_per_node", n)) != n:
            continue  # multi-node collectives cross the NICs; the profile's all-reduce is within a node
        t = _f(row, "time_stats.all_reduce.median") * 1e-3
        if t > 0 and n > 1:
            out.append(Rec("allreduce", "allreduce", "bf16", 0.0, size, t, gpus=n))


def _read_bench(rows: list[dict], out: list[Rec]) -> None:
    for row in rows:
        op, t = row["op"], _f(row, "time_ms") * 1e-3
        if t <= 0:
            continue
        kind = {"gemm": "gemm", "attn_prefill": "attn_prefill", "attn_decode": "attn_decode",
                "allreduce": "allreduce"}.get(op, "copy" if op.startswith("copy") else None)
        if kind is None:
            continue
        tokens = (_f(row, "m") if kind == "gemm"
                  else _f(row, "batch") * (_f(row, "context") if kind == "attn_prefill" else 1))
        nbytes = _f(row, "bytes") if kind == "allreduce" else _f(row, "bytes_moved")
        out.append(Rec(op, kind, row.get("dtype", "bf16") or "bf16", _f(row, "flops"), nbytes, t, tokens,
                       int(_f(row, "gpus", 1)), context=_f(row, "context")))


def _csvs(root: Path) -> list[Path]:
    out = []
    for d, _, files in os.walk(root, followlinks=True):
        out += [Path(d) / f for f in files if f.endswith(".csv")]
    return sorted(out)


def read_measurements(folder: str | Path | list, meas: Measurements | None = None) -> Measurements:
    """Every measurement CSV under ``folder`` (or each of a list of folders)."""
    if isinstance(folder, (list, tuple)):
        meas = Measurements()
        for f in folder:
            read_measurements(f, meas)
        return meas
    root = Path(folder)
    if not root.is_dir():
        raise InputError([Problem("DIR", "not a folder", str(root))])
    top = meas is None
    meas = meas or Measurements()
    for path in _csvs(root):
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            cols = set(reader.fieldnames or ())
            rows = list(reader)
        rel = str(path.relative_to(root.parent))
        if "time_stats.mlp_up_proj.median" in cols:
            _read_vidur_mlp(path, rows, meas.recs)
            meas.formats.add("vidur")
            parts = path.absolute().parts
            if "compute" in parts and parts.index("compute") + 1 < len(parts):
                meas.gpu_hint = parts[parts.index("compute") + 1]
        elif "time_stats.all_reduce.median" in cols:
            _read_vidur_allreduce(rows, meas.recs)
            meas.formats.add("vidur")
        elif {"op", "time_ms"} <= cols:
            _read_bench(rows, meas.recs)
            meas.formats.add("bench")
            md = path.parent / "metadata.json"
            if md.is_file():
                meas.metadata = json.loads(md.read_text(encoding="utf-8"))
        else:
            continue
        meas.sources.append(rel)
    if top and not meas.recs:
        raise InputError([Problem("DIR", "no measurements found: expected trimtab bench CSVs (bench.csv) or "
                                         "Vidur profiling CSVs (mlp.csv, all_reduce.csv)", str(root))])
    return meas


# --------------------------------------------------------------------------- fits
@dataclass
class OpError:
    rows: int
    median_pct: float
    p90_pct: float


@dataclass
class Fit:
    params: dict[str, float]
    errors: dict[str, OpError]
    ranges: dict[str, list[float]]
    peaks: dict[str, float]
    measured_peaks: bool


def _err(pred: np.ndarray, t: np.ndarray) -> OpError:
    e = np.abs(pred - t) / t * 100
    return OpError(len(t), float(np.median(e)), float(np.percentile(e, 90)))


def _fit_gemm(recs: list[Rec], peak_f: float, peak_b: float, fixed_b: float | None = None):
    from scipy.optimize import least_squares

    F = np.array([r.flops for r in recs])
    B = np.array([r.bytes for r in recs])
    t = np.array([r.time_s for r in recs])

    def model(x):
        ec, eb, tk = x
        return tk + np.maximum(F / (peak_f * ec), B / (peak_b * eb))

    def resid(x):
        if fixed_b is not None:
            x = (x[0], fixed_b, x[2])
        return np.log(model(x) / t)

    x0 = np.array([0.6, 0.7 if fixed_b is None else fixed_b, 1e-6])
    lb, ub = [1e-4, 1e-4, 0.0], [1.0, 1.0, max(float(np.median(t)), 1e-9)]
    sol = least_squares(resid, x0, bounds=(lb, ub), x_scale=[0.1, 0.1, 1e-6])
    ec, eb, tk = sol.x
    if fixed_b is not None:
        eb = fixed_b
    return (float(ec), float(eb), float(tk)), model((ec, eb, tk))


def fit_allreduce(nbytes: np.ndarray, gpus: np.ndarray, t: np.ndarray) -> tuple[float, float, np.ndarray]:
    """Least relative squares of t = latency + bytes x 2(n-1)/n / bus bandwidth (the ring's traffic per GPU):
    (latency s, bus bandwidth bytes/s, predicted times). Shared by the CSV fit and ``calibrate_aic``."""
    X = np.column_stack([np.ones(len(t)), nbytes * 2 * (gpus - 1) / gpus])
    w = 1 / t  # relative error weighting: small messages count as much as large ones
    (a, b), *_ = np.linalg.lstsq(X * w[:, None], t * w, rcond=None)
    a, b = max(float(a), 0.0), max(float(b), 1e-15)
    return a, 1 / b, X @ np.array([a, b])


def fit(meas: Measurements, peaks: dict[str, float] | None) -> Fit:
    """Least-squares parameters. ``peaks``: bf16_flops, fp8_flops, hbm_bps (None: take measured maxima)."""
    recs = meas.recs
    params: dict[str, float] = {}
    errors: dict[str, OpError] = {}
    ranges: dict[str, list[float]] = {}
    measured = peaks is None
    if peaks is None:
        # No spec sheet: the best rate measured is the peak (so every efficiency is <= 1 by construction).
        def best(kind, attr, dtype=None):
            xs = [getattr(r, attr) / r.time_s for r in recs
                  if r.kind == kind and (dtype is None or r.dtype == dtype) and getattr(r, attr) > 0]
            return max(xs) if xs else 0.0
        pb = max(best("copy", "bytes"), best("gemm", "bytes"), 1.0)
        pf = max(best("gemm", "flops", "bf16"), best("gemm", "flops", "fp32"), 1.0)
        if pf <= 1.0:
            pf = max(best("attn_prefill", "flops"), 1.0)
        peaks = {"bf16_flops": pf, "fp8_flops": max(best("gemm", "flops", "fp8"), pf), "hbm_bps": pb}
    pf, pb = peaks["bf16_flops"], peaks["hbm_bps"]

    gemm16 = [r for r in recs if r.kind == "gemm" and r.dtype != "fp8"]
    if gemm16:
        (ec, eb, tk), pred = _fit_gemm(gemm16, pf, pb)
        params.update(compute_efficiency=ec, bandwidth_efficiency=eb, kernel_latency_us=tk * 1e6)
        t = np.array([r.time_s for r in gemm16])
        for op in sorted({r.op for r in gemm16}):
            idx = np.array([r.op == op for r in gemm16])
            errors[op] = _err(pred[idx], t[idx])
        ranges["gemm_tokens"] = [min(r.tokens for r in gemm16), max(r.tokens for r in gemm16)]
    eb = params.get("bandwidth_efficiency")
    gemm8 = [r for r in recs if r.kind == "gemm" and r.dtype == "fp8"]
    if gemm8 and eb is not None:
        (ec8, _, _), pred = _fit_gemm(gemm8, peaks["fp8_flops"], pb, fixed_b=eb)
        params["fp8_compute_efficiency"] = ec8
        errors["gemm_fp8"] = _err(pred, np.array([r.time_s for r in gemm8]))

    elem = [r for r in recs if r.kind == "elementwise"]
    if elem and eb is not None:
        A = np.array([[r.kernels, r.bytes / (pb * eb)] for r in elem])
        t = np.array([r.time_s for r in elem])
        w = 1 / t  # relative error weighting
        (te, passes), *_ = np.linalg.lstsq(A * w[:, None], t * w, rcond=None)
        te, passes = max(float(te), 0.0), max(float(passes), 0.0)
        params["elementwise_passes"] = passes
        errors["elementwise"] = _err(A @ np.array([te, passes]), t)

    pre = [r for r in recs if r.kind == "attn_prefill"]
    if pre:
        (ea, _, tka), pred = _fit_gemm(pre, pf, pb, fixed_b=eb or 0.7)
        params["attention_efficiency"] = ea
        errors["attn_prefill"] = _err(pred, np.array([r.time_s for r in pre]))
        ranges["attention_context"] = [min(r.context for r in pre), max(r.context for r in pre)]
    dec = [r for r in recs if r.kind == "attn_decode"]
    if dec and eb is not None:
        ea = params.get("attention_efficiency", params.get("compute_efficiency", 0.5))
        tk = params.get("kernel_latency_us", 0.0) * 1e-6
        pred = np.array([tk + max(r.flops / (pf * ea), r.bytes / (pb * eb)) for r in dec])
        errors["attn_decode"] = _err(pred, np.array([r.time_s for r in dec]))
        ctx = [r.context for r in dec] + ranges.get("attention_context", [])
        ranges["attention_context"] = [min(ctx), max(ctx)]

    d2d = [r for r in recs if r.op == "copy_d2d" and r.bytes >= 1e6]
    if d2d:  # the largest copies only: smaller ones can stay in the L2 cache (60 MB on an H200) and beat HBM
        top = max(r.bytes for r in d2d)
        bw = max(r.bytes / r.time_s for r in d2d if r.bytes == top)
        params["copy_bandwidth_efficiency"] = min(bw / pb, 1.0)
    h2d = [r for r in recs if r.op in ("copy_h2d", "copy_d2h") and r.bytes >= 1e6]
    if h2d:
        params["host_link_gbps"] = max(r.bytes / r.time_s for r in h2d) / 1e9

    ar = [r for r in recs if r.kind == "allreduce"]
    if len(ar) >= 2:
        t = np.array([r.time_s for r in ar])
        a, bus, pred = fit_allreduce(np.array([r.bytes for r in ar]), np.array([r.gpus for r in ar]), t)
        params["allreduce_latency_us"] = a * 1e6
        params["allreduce_bus_gbps"] = bus / 1e9
        errors["allreduce"] = _err(pred, t)
        ranges["allreduce_gpus"] = [float(min(r.gpus for r in ar)), float(max(r.gpus for r in ar))]
        ranges["allreduce_bytes"] = [min(r.bytes for r in ar), max(r.bytes for r in ar)]
    return Fit(params, errors, ranges, peaks, measured)


# --------------------------------------------------------------------------- profile output
@dataclass
class CalibrationResult:
    fit: Fit
    profile: dict
    output: Path
    measurements: Measurements


def _base_profile(base: str | None, meas: Measurements) -> tuple[dict | None, str | None]:
    """Raw dict of the base GPU profile (a bundled name or a YAML path) and its name."""
    if base is None:
        hint = meas.gpu_hint or ""
        guess = {"h100": "h100-sxm", "a100": "a100-80gb", "h200": "h200"}.get(hint)
        name = meas.metadata.get("device_name", "")
        for key, prof in (("H100", "h100-sxm"), ("H200", "h200"), ("A100", "a100-80gb"), ("L40S", "l40s"),
                          ("B200", "b200"), ("MI300X", "mi300x")):
            if key in name:
                guess = prof
        if guess is None:
            return None, None
        base = guess
    p = Path(base)
    if p.suffix in (".yaml", ".yml") and p.is_file():
        return yaml.safe_load(p.read_text(encoding="utf-8")), str(p)
    profs = load_profiles()
    if base not in profs.gpus:
        raise InputError([Problem("--base", f"unknown GPU profile {base!r}; known: "
                                            f"{', '.join(sorted(profs.gpus))}")])

    path = data_dir() / "gpus" / f"{base}.yaml"
    return yaml.safe_load(path.read_text(encoding="utf-8")), base


def _q(v: float, src: str, nd: int = 4) -> dict:
    return {"value": float(round(v, nd)) if abs(v) >= 1e-3 else float(f"{v:.4g}"), "source": src}


def build_profile(name: str, fit_: Fit, meas: Measurements, folder: str, base: dict | None) -> dict:
    today = _dt.date.today().isoformat()
    files = ", ".join(meas.sources[:6]) + (f" and {len(meas.sources) - 6} "
                                           "more" if len(meas.sources) > 6 else "")
    fmt = " and ".join(sorted(meas.formats))
    where = f"{fmt} measurements in {folder} ({files})"
    err = fit_.errors

    def errtxt(*ops):
        parts = [f"{op} {err[op].median_pct:.1f} % (p90 {err[op].p90_pct:.1f} %, {err[op].rows} rows)"
                 for op in ops if op in err]
        return "; median fit error " + ", ".join(parts) if parts else ""

    prof = dict(base) if base else {}
    sources = dict(prof.get("sources", {}))
    p = fit_.params
    gemm_ops = [o for o in err
                if o not in ("elementwise", "attn_prefill", "attn_decode", "allreduce", "gemm_fp8")]
    if "compute_efficiency" in p:
        sources["calib_gemm"] = {"kind": "fit", "ref": (
            f"trimtab calibrate ({today}): least squares of t = t_k + max(FLOPs/(peak x eta_c), bytes/(peak "
            f"BW x eta_b)) over {sum(err[o].rows for o in gemm_ops)} GEMM timings from "
            f"{where}" + errtxt(*gemm_ops))}
        prof["compute_efficiency"] = _q(p["compute_efficiency"], "calib_gemm", 3)
        prof["bandwidth_efficiency"] = _q(p["bandwidth_efficiency"], "calib_gemm", 3)
        prof["kernel_latency_us"] = _q(p["kernel_latency_us"], "calib_gemm", 2)
    if "fp8_compute_efficiency" in p:
        sources["calib_gemm_fp8"] = {"kind": "fit", "ref": f"trimtab calibrate ({today}): fp8 "
                                                           f"GEMMs from {where}"
                                                          + errtxt("gemm_fp8")}
        prof["fp8_compute_efficiency"] = _q(p["fp8_compute_efficiency"], "calib_gemm_fp8", 3)
    if "elementwise_passes" in p:
        sources["calib_elementwise"] = {"kind": "fit", "ref": (
            f"trimtab calibrate ({today}): least squares of the summed norm, rope, activation and residual "
            "timings per layer as kernels x t_e + passes x tokens x hidden x 2 B / (peak BW x eta_b), from "
            f"{where}"
            + errtxt("elementwise"))}
        prof["elementwise_passes"] = _q(p["elementwise_passes"], "calib_elementwise", 2)
    if "attention_efficiency" in p:
        sources["calib_attention"] = {"kind": "fit", "ref": (
            f"trimtab calibrate ({today}): flash/SDPA attention timings from {where}"
            + errtxt("attn_prefill", "attn_decode"))}
        prof["attention_efficiency"] = _q(p["attention_efficiency"], "calib_attention", 3)
    if "allreduce_latency_us" in p:
        sources["calib_allreduce"] = {"kind": "fit", "ref": (
            f"trimtab calibrate ({today}): least squares of t = latency + bytes x 2(n-1)/n / bus bandwidth "
            f"over single-node all-reduce timings from {where}" + errtxt("allreduce"))}
        prof["allreduce_latency_us"] = _q(p["allreduce_latency_us"], "calib_allreduce", 1)
        prof["allreduce_bus_gbps"] = _q(p["allreduce_bus_gbps"], "calib_allreduce", 1)
    ranges = {k: [float(round(v, 1)) for v in rng] for k, rng in fit_.ranges.items()}
    if prof.get("measured_ranges"):
        ranges = {**prof["measured_ranges"], **ranges}
    prof["measured_ranges"] = ranges
    if not base:  # no spec sheet: a profile of what was measured (e.g. a CPU in CI)
        md = meas.metadata
        sources["measured_peak"] = {"kind": "measurement", "ref": (
            f"trimtab bench ({md.get('date', today)}) on {md.get('device_name', 'unknown device')}: highest "
            "GEMM FLOP/s and copy bandwidth measured, taken as the peaks")}
        sources["host"] = {"kind": "measurement", "ref": "trimtab bench metadata: "
                                                         f"{md.get('device_name', '?')}, "
                                                         f"{md.get('memory_gib', 0):.1f} GiB"}
        sources["assumed"] = {"kind": "assumption", "ref": "no spec sheet for this device; placeholder for "
                                                           "numbers the bench does not measure (one device, "
                                                           "no network)"}
        prof.update({
            "name": name, "description": "measured by trimtab bench: "
                                         f"{md.get('device_name', 'unknown device')}",
            "memory_gib": _q(max(md.get("memory_gib", 1.0), 0.1), "host", 2),
            "hbm_bandwidth_gbps": _q(fit_.peaks["hbm_bps"] / 1e9, "measured_peak", 3),
            "bf16_tflops": _q(fit_.peaks["bf16_flops"] / 1e12, "measured_peak", 4),
            "fp8_tflops": _q(fit_.peaks["fp8_flops"] / 1e12, "measured_peak", 4),
            "interconnect": "pcie", "link_bandwidth_gbps": _q(p.get("host_link_gbps", 1.0), "assumed"),
            "gpus_per_node": _q(1, "assumed"), "usd_per_hour": _q(0.0, "assumed"),
            "node_network_gbps": _q(1.0, "assumed"),
        })
        if md.get("dtype") == "fp32":  # a CPU without native bf16 (trimtab.field.bench.cpu_bf16_native)
            prof["fp32_tflops"] = _q(fit_.peaks["bf16_flops"] / 1e12, "measured_peak", 4)
            sources["measured_peak"]["ref"] += ("; GEMMs timed in fp32 (no native bf16): fp32_tflops, and "
                                                "bf16_tflops as the same rate, unmeasured in bf16")
        for f in ("allreduce_latency_us", "allreduce_bus_gbps"):
            prof.setdefault(f, _q(50.0 if f.endswith("us") else 1.0, "assumed"))
        for f in ("compute_efficiency", "bandwidth_efficiency"):
            prof.setdefault(f, _q(1.0, "assumed"))
    prof["name"] = name
    used = {v["source"] for v in prof.values() if isinstance(v, dict) and "source" in v}
    prof["sources"] = {k: v for k, v in sources.items() if k in used}
    order = ["name", "description", "sources"]
    return {k: prof[k] for k in order if k in prof} | {k: v for k, v in prof.items() if k not in order}


def calibrate(folder: str | Path | list, output: str | Path, base: str | None = None) -> CalibrationResult:
    meas = read_measurements(folder)
    base_dict, base_name = _base_profile(base, meas)
    peaks = None
    if base_dict is not None:
        peaks = {"bf16_flops": base_dict["bf16_tflops"]["value"] * 1e12,
                 "fp8_flops": base_dict["fp8_tflops"]["value"] * 1e12,
                 "hbm_bps": base_dict["hbm_bandwidth_gbps"]["value"] * 1e9}
    f = fit(meas, peaks)
    out = Path(output)
    where = ", ".join(map(str, folder)) if isinstance(folder, (list, tuple)) else str(folder)
    if not meas.recs:
        raise InputError([Problem("DIR", "no measurements found: expected trimtab bench CSVs (bench.csv) or "
                                         "Vidur profiling CSVs (mlp.csv, all_reduce.csv)", where)])
    prof = build_profile(out.stem, f, meas, where, base_dict)
    validate(GpuProfile, prof, {}, str(out), "profile")  # refuse to write a profile the loader would reject
    out.parent.mkdir(parents=True, exist_ok=True)
    header = (f"# GPU profile written by trimtab calibrate from {where}"
              + (f" on top of {base_name}" if base_name else "") + ".\n"
              "# Units are in the field names; every number names its source (see sources).\n")
    body = yaml.safe_dump(prof, sort_keys=False, default_flow_style=None, width=10**6, allow_unicode=True)
    out.write_text(header + body, encoding="utf-8")
    return CalibrationResult(f, prof, out, meas)


def format_errors(f: Fit) -> list[str]:
    lines = [f"{'operation':18s} {'rows':>6s} {'median |err|':>13s} {'p90 |err|':>10s}"]
    for op, e in f.errors.items():
        lines.append(f"{op:18s} {e.rows:6d} {e.median_pct:12.1f}% {e.p90_pct:9.1f}%")
    for k, v in f.params.items():
        lines.append(f"{k} = {v:.4g}")
    if not math.isfinite(sum(f.params.values())):
        lines.append("warning: a parameter is not finite")
    return lines
