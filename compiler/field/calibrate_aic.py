"""GPU profiles from aiconfigurator-core's measured kernel tables.

``trimtab calibrate --from aiconfigurator``.

aiconfigurator-core (PyPI, Apache-2.0) ships per-operator timings measured on each GPU, per engine and engine
release, as parquet tables under ``systems/data/<gpu>/<operator>/<engine>/<version>/``. This module reads
vLLM's tables and fits, per GPU, the quantities the cost model takes from them (docs/cost-model.md):

  * ``graph_bandwidth_efficiency``: bf16 GEMM table (``gemm_perf``), m <= 16 and at least STREAM_BYTES of
    weights and activations (past L2): least relative squares of t = t0 + bytes / bandwidth, over the HBM
    peak: the rate a graph step's GEMMs stream their weights at (``fit_graph_bandwidth``);
  * ``graph_kernel_latency_us``: the same table, m <= 16: median of latency minus the weights' and
    activations' bytes at that graph bandwidth: a GEMM's fixed time inside a captured CUDA graph
    (``fit_graph_kernel``);
  * ``compute_efficiency``: the same table, m 512-16384, n and k >= 4096: median 2 m n k / latency over the
    spec-sheet bf16 peak (``fit_compute_efficiency``);
  * ``graph_allreduce_latency_us`` / ``graph_allreduce_bus_gbps``: vLLM's tensor-parallel all-reduce
    captured in a graph (``custom_allreduce_perf``, kernel vLLM_custom_graph: the custom kernel, or NCCL where
    vLLM does not run it), 128 - 8M bf16 elements, 2/4/8 GPUs: least relative squares of latency + bytes
    x 2(n-1)/n / bus bandwidth (``trimtab.field.calibrate.fit_allreduce``);
  * ``attention_kernel_us``: decode attention table (``generation_attention_perf``), bf16 KV, no sliding
    window: least relative squares of t = t0 + KV bytes / bandwidth; t0 is the kernel's fixed time a layer
    (``fit_attention``);
  * ``moe_rows_half`` / ``moe_cols_half``: unquantised bf16 fused-MoE table (``moe_perf``), ep 1, balanced
    routing: grid fit, least median |log error|, of ``MoeLayer.compute_s``'s roofline with the grouped GEMMs'
    FLOPs those of T k + rows_half x experts touched rows, x (1 + cols_half / expert columns per GPU)
    (``fit_moe_shape``).

Every number is written with a ``sources`` entry naming the package, GPU, engine, version, table and rows
used. A GPU without a table for an operator keeps its profile's number and source. Of several releases of a
table the one nearest the release the bundled vLLM engine profile describes (``RELEASE``) is read, the newest
at or below it first: kernels change between releases.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from trimtab.field.calibrate import fit_allreduce
from trimtab.field.yamltext import merge_yaml
from trimtab.errors import InputError, Problem
from trimtab.profiles import data_dir
from trimtab.profiles.loader import GpuProfile
from trimtab.util.validation import validate

# aiconfigurator's system name -> trimtab's bundled GPU profile (the same part: memory, bandwidth, links).
# a100_sxm is the 80 GB SXM4 (its systems/a100_sxm.yaml: 2,039 GB/s, 80 GiB); no PCIe H100/A100, L4 or
# A30 vLLM tables ship in 0.12.0.
GPUS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200", "a100_sxm": "a100-80gb", "l40s": "l40s",
        "b200_sxm": "b200"}
ENGINE = "vllm"
RELEASE = "0.15.1"  # profiles/engines/vllm.yaml's current release (the blis-dev runs' vLLM)
PACKAGE = "aiconfigurator-core"
BF16 = ("bfloat16",)
GRAPH_TOKENS = 16  # decode GEMMs: m <= 16 rows, where the weights' bytes dominate and t_k shows
STREAM_BYTES = 256e6  # GEMMs this large (bytes) stream their weights from HBM, past every GPU's L2
# The all-reduce tables' message_size counts elements, not bytes: aiconfigurator's collector
# (collector/network/collect_all_reduce.py, get_input_shape_and_comm_size) reduces a [size / 4096, 4096]
# tensor of the dtype. Up to 8M elements (16 MiB): past the steps a graph holds (512 tokens x 16k hidden).
AR_MAX_ELEMENTS = 8 << 20
AR_ELEMENT_BYTES = 2  # bf16
AR_ROWS = "kernel vLLM_custom_graph, bf16"
MOE_COLS = ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size")


def default_data_dir() -> Path | None:
    """``systems/data`` of the installed aiconfigurator_core package, or None."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        return None
    d = Path(list(spec.submodule_search_locations)[0]) / "systems" / "data"
    return d if d.is_dir() else None


def package_label(data: Path) -> str:
    """'aiconfigurator-core 0.12.0 (PyPI, Apache-2.0)': the version from an installed or extracted wheel's
    dist-info beside the package (the tables carry the engine release only)."""
    version = None
    for info in sorted(data.parent.parent.parent.glob("aiconfigurator_core-*.dist-info")):
        version = info.name.removesuffix(".dist-info").split("-")[1]
    if version is None:
        try:
            version = importlib.metadata.version(PACKAGE)
        except importlib.metadata.PackageNotFoundError:
            version = "unknown version"
    return f"{PACKAGE} {version} (PyPI, Apache-2.0)"


def _release(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v.split("rc")[0].split(".dev")[0])[:3])


def pick_version(versions: list[str], release: str = RELEASE) -> str:
    """The newest version at or below ``release``, else the oldest above it."""
    target = _release(release)
    below = [v for v in versions if _release(v) <= target]
    return max(below, key=_release) if below else min(versions, key=_release)


@dataclass
class Table:
    gpu: str
    op: str
    engine: str
    version: str
    file: str
    cols: dict[str, np.ndarray]

    def where(self, label: str, rows: int) -> str:
        path = f"systems/data/{self.gpu}/{self.op}/{self.engine}/{self.version}/{self.file}"
        return f"{path}, {label} ({rows:,} rows)"


def read_parquet(path: Path) -> dict[str, np.ndarray]:
    try:
        import pyarrow.parquet as pq
    except ImportError as e:  # the optional extra
        need = "reading aiconfigurator's parquet tables needs pyarrow: pip install 'trimtab[aiconfigurator]'"
        raise InputError([Problem("--from aiconfigurator", need)]) from e
    t = pq.read_table(path)
    return {c: t.column(c).to_numpy(zero_copy_only=False) for c in t.column_names}


def find_table(data: Path, gpu: str, op: str, file: str, engine: str = ENGINE,
               release: str = RELEASE) -> Table | None:
    root = data / gpu / op / engine
    versions = [d.name for d in root.iterdir() if (d / file).is_file()] if root.is_dir() else []
    if not versions:
        return None
    v = pick_version(versions, release)
    return Table(gpu, op, engine, v, file, read_parquet(root / v / file))


# --------------------------------------------------------------------------- the fits
def _rel_lstsq(X: np.ndarray, t: np.ndarray) -> np.ndarray:
    w = 1 / t  # relative squares: short kernels count as much as long ones
    sol, *_ = np.linalg.lstsq(X * w[:, None], t * w, rcond=None)
    return sol


def _err_pct(pred: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    e = np.abs(pred - t) / t * 100
    return float(np.median(e)), float(np.percentile(e, 90))


def gemm_rows(tab: Table) -> dict[str, np.ndarray]:
    """The unquantised bf16 GEMMs (cuBLAS through torch's linear, vLLM's default kernel): m, n, k, seconds."""
    c = tab.cols
    sel = np.isin(c["gemm_dtype"].astype(str), BF16)
    return {"m": c["m"][sel].astype(float), "n": c["n"][sel].astype(float), "k": c["k"][sel].astype(float),
            "t": c["latency"][sel].astype(float) * 1e-3,
            "kernels": sorted(set(c["kernel_source"][sel].astype(str)))}


def fit_graph_bandwidth(g: dict[str, np.ndarray]) -> dict[str, float] | None:
    """The GEMMs' achieved HBM bandwidth inside a captured graph: least relative squares of t = t0 + bytes /
    bandwidth over m <= GRAPH_TOKENS with at least STREAM_BYTES of weights and activations. Below that the
    table's repeated timings find a GEMM's weights in L2 (up to 126 MB on these GPUs), which a decode step,
    reading every layer's weights once, does not. None: fewer than two such rows."""
    sel = g["m"] <= GRAPH_TOKENS
    m, n, k, t = g["m"][sel], g["n"][sel], g["k"][sel], g["t"][sel]
    nbytes = 2 * (n * k + m * k + m * n)
    big = nbytes >= STREAM_BYTES
    if big.sum() < 2:
        return None
    A = np.stack([np.ones(int(big.sum())), nbytes[big]], axis=1)
    t0, inv_bw = _rel_lstsq(A, t[big])
    med, p90 = _err_pct(t0 + nbytes[big] * inv_bw, t[big])
    return {"bw_bps": 1.0 / inv_bw, "t0_s": t0, "rows": int(big.sum()), "median_pct": med, "p90_pct": p90}


def fit_graph_kernel(g: dict[str, np.ndarray], bw: float) -> tuple[float, int]:
    """Fixed seconds of a GEMM kernel without the host's launch: median over m <= 16 of latency - (weights +
    activations) bytes / ``bw`` (the GEMMs' achieved HBM bandwidth in graphs, ``fit_graph_bandwidth``).
    aiconfigurator times vLLM's GEMMs replayed in a CUDA graph, so the launch is not in them."""
    sel = g["m"] <= GRAPH_TOKENS
    m, n, k = g["m"][sel], g["n"][sel], g["k"][sel]
    nbytes = 2 * (n * k + m * k + m * n)
    return float(np.median(g["t"][sel] - nbytes / bw)), int(sel.sum())


def fit_compute_efficiency(g: dict[str, np.ndarray], peak: float) -> tuple[float, int]:
    """Median achieved bf16 FLOP/s over the compute-bound shapes (m 512-16384, n and k >= 4096) / peak."""
    sel = (g["m"] >= 512) & (g["m"] <= 16384) & (g["n"] >= 4096) & (g["k"] >= 4096)
    rate = 2 * g["m"][sel] * g["n"][sel] * g["k"][sel] / g["t"][sel]
    return float(np.median(rate) / peak), int(sel.sum())


def allreduce_rows(tab: Table, kernel: str = "vLLM_custom_graph") -> dict[str, np.ndarray]:
    c = tab.cols
    sel = (c["kernel_source"].astype(str) == kernel) & np.isin(c["allreduce_dtype"].astype(str), BF16) \
        & (c["message_size"] <= AR_MAX_ELEMENTS)
    return {"bytes": c["message_size"][sel].astype(float) * AR_ELEMENT_BYTES,
            "gpus": c["num_gpus"][sel].astype(float),
            "t": c["latency"][sel].astype(float) * 1e-3}


def fit_graph_allreduce(r: dict[str, np.ndarray]) -> dict[str, float]:
    """vLLM's custom all-reduce in a CUDA graph: latency + bytes x 2(n-1)/n / bus bandwidth over every GPU
    count together, and the fit error per count."""
    lat, bus, pred = fit_allreduce(r["bytes"], r["gpus"], r["t"])
    out = {"latency_s": lat, "bus_bps": bus, "rows": len(r["t"])}
    out["median_pct"], out["p90_pct"] = _err_pct(pred, r["t"])
    for n in sorted(set(r["gpus"].astype(int))):
        sel = r["gpus"] == n
        out[f"median_pct_{n}"] = _err_pct(pred[sel], r["t"][sel])[0]
    return out


def nccl_version(data: Path, gpu: str) -> str:
    """The NCCL release aiconfigurator's own system file names for ``gpu`` (its misc.nccl_version)."""
    f = data.parent / f"{gpu}.yaml"
    v = (yaml.safe_load(f.read_text(encoding="utf-8")) or {}).get("misc", {}).get("nccl_version") \
        if f.is_file() else None
    return str(v) if v else "9999"  # none named: the newest


def nccl_rows(tab: Table) -> dict[str, np.ndarray]:
    c = tab.cols
    sel = (c["op_name"].astype(str) == "all_reduce") & (c["nccl_dtype"].astype(str) == "half")
    return {"bytes": c["message_size"][sel].astype(float) * AR_ELEMENT_BYTES,
            "gpus": c["num_gpus"][sel].astype(float), "t": c["latency"][sel].astype(float) * 1e-3}


BY_COUNT_PCT = 20.0


def _misses_a_count(f: dict) -> bool:
    """Whether the joint all-reduce fit misses some GPU count by more than BY_COUNT_PCT (median): then each
    count gets its own fit (the graph tables: L40S only; NCCL's: L40S, H200, B200)."""
    return max(v for k, v in f.items() if k.startswith("median_pct_")) > BY_COUNT_PCT


def _by_count(r: dict[str, np.ndarray], src: str, cal: "GpuCalibration") -> dict[int, dict]:
    """One all-reduce fit a GPU count (PCIe GPUs), as profile entries naming ``src``."""
    by = {}
    for n in sorted(set(r["gpus"].astype(int))):
        sel = r["gpus"] == n
        fn = fit_graph_allreduce({k: v[sel] for k, v in r.items()})
        by[int(n)] = {"latency_us": _q(fn["latency_s"] * 1e6, src, 2),
                      "bus_gbps": _q(fn["bus_bps"] / 1e9, src, 2)}
        cal.notes.append(f"  {n} GPUs alone: {fn['latency_s'] * 1e6:.2f} us + bytes / "
                         f"{fn['bus_bps'] / 1e9:.2f} GB/s, median error {fn['median_pct']:.1f} %")
    return by


def attention_rows(tab: Table) -> dict[str, np.ndarray]:
    """Decode attention, bf16 KV, full attention (no sliding window); the preferred (most rows) kernel."""
    c = tab.cols
    sel = np.isin(c["kv_cache_dtype"].astype(str), BF16)
    if "window_size" in c:  # older tables (vLLM 0.14) time full attention only and have no such column
        sel &= c["window_size"] == 0
    kern = c["kernel_source"].astype(str)
    names, counts = np.unique(kern[sel], return_counts=True)
    sel &= kern == names[np.argmax(counts)]
    # tokens whose K and V the step reads: aiconfigurator's sequence length s = isl + step (its collectors:
    # step = context, isl = 1 new token, whose KV is written and read in the same call)
    ctx = c["isl"][sel].astype(float) + c["step"][sel].astype(float)
    kv = c["batch_size"][sel] * ctx * c["num_key_value_heads"][sel] * c["head_dim"][sel] * 2 * 2  # K, V; 2 B
    return {"kv_bytes": kv.astype(float), "t": c["latency"][sel].astype(float) * 1e-3,
            "kernel": str(names[np.argmax(counts)])}


def fit_attention(r: dict[str, np.ndarray]) -> dict[str, float]:
    """Least relative squares of t = t0 + KV bytes / bandwidth: t0 is the attention call's fixed time a layer
    (split-KV launch and combine), the slope its KV bandwidth."""
    t0, inv_bw = _rel_lstsq(np.column_stack([np.ones(len(r["t"])), r["kv_bytes"]]), r["t"])
    pred = t0 + r["kv_bytes"] * inv_bw
    med, p90 = _err_pct(pred, r["t"])
    return {"t0_s": float(t0), "bw_bps": float(1 / inv_bw), "rows": len(r["t"]), "median_pct": med,
            "p90_pct": p90}


def moe_rows(tab: Table) -> tuple[dict[str, np.ndarray], str]:
    """Unquantised bf16 fused-MoE (Triton) timings without expert parallelism, balanced routing where the
    table has it (else the mildest power law it has: the nearest to the uniform routing MoeLayer assumes)."""
    c = tab.cols
    sel = np.isin(c["moe_dtype"].astype(str), BF16) & (c["moe_ep_size"] == 1)
    dists = sorted(set(c["distribution"][sel].astype(str)))
    dist = "balanced" if "balanced" in dists else min(dists)
    sel &= c["distribution"].astype(str) == dist
    rows = {k: c[k][sel].astype(float) for k in MOE_COLS}
    rows["t"] = c["latency"][sel].astype(float) * 1e-3
    return rows, dist


def moe_time(r: dict[str, np.ndarray], bw: float, flops: float, kernel_s: float, rows_half: np.ndarray,
             cols_half: np.ndarray) -> np.ndarray:
    """``MoeLayer.compute_s`` for ep = 1 (one MoE layer, share 1), vectorised over table rows (axis 0) and
    candidate (rows_half, cols_half) pairs (axis 1); tests/cost check it equals ``MoeLayer.compute_s``."""
    T, H, I, k, E, G = (r[c][:, None] for c in MOE_COLS)
    Pe = 3 * H * I  # gate, up and down projections of one expert
    hit = 1 - (1 - k / E) ** T
    w = E * hit * Pe * 2 / G
    act = T * k * (2 * H + 3 * I / G) * 2
    fl = (2 * T * k * Pe / G + 2 * Pe / G * rows_half[None, :] * E * hit) * (1 + cols_half[None, :] * G / I)
    return np.maximum((w + act) / bw, fl / flops) + 4 * kernel_s


ROWS_GRID = np.arange(0.0, 401.0, 5.0)
COLS_GRID = np.arange(0.0, 1001.0, 5.0)


def fit_moe_shape(r: dict[str, np.ndarray], bw: float, flops: float, kernel_s: float) -> dict[str, float]:
    """Grid search (rows_half 0-400, cols_half 0-1000, steps of 5) of the least median |log error|."""
    rr, cc = np.meshgrid(ROWS_GRID, COLS_GRID, indexing="ij")
    rr, cc = rr.ravel(), cc.ravel()
    best = (math.inf, 0.0, 0.0)
    logt = np.log(r["t"])[:, None]
    for lo in range(0, len(rr), 2000):  # chunks: rows x candidates stays a few tens of MB
        err = np.median(np.abs(np.log(moe_time(r, bw, flops, kernel_s, rr[lo:lo + 2000], cc[lo:lo + 2000]))
                               - logt), axis=0)
        i = int(np.argmin(err))
        if err[i] < best[0]:
            best = (float(err[i]), float(rr[lo + i]), float(cc[lo + i]))
    med, rows_half, cols_half = best
    e = np.abs(np.log(moe_time(r, bw, flops, kernel_s, np.array([rows_half]), np.array([cols_half])))[:, 0]
               - np.log(r["t"]))
    shapes = len({tuple(x) for x in np.column_stack([r[c] for c in MOE_COLS[1:]])})
    return {"rows_half": rows_half, "cols_half": cols_half, "median_log": med,
            "p90_log": float(np.percentile(e, 90)), "rows": len(r["t"]), "shapes": shapes}


# --------------------------------------------------------------------------- one GPU
@dataclass
class GpuCalibration:
    gpu: str  # aiconfigurator's name
    profile: str  # trimtab's
    values: dict[str, float] = field(default_factory=dict)  # profile field -> fitted value
    before: dict[str, float | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # the fit errors, one line each
    missing: list[str] = field(default_factory=list)  # operators without a vLLM table (numbers kept)
    output: Path | None = None


def _q(v: float, src: str, nd: int) -> dict:
    return {"value": float(round(v, nd)), "source": src}


def calibrate_gpu(data: Path, gpu: str, base: dict, label: str, release: str = RELEASE
                  ) -> tuple[dict, GpuCalibration]:
    """``base`` (a GPU profile's YAML dict) with every quantity the tables of ``gpu`` cover refitted."""
    prof = dict(base)
    sources = dict(prof.get("sources", {}))
    cal = GpuCalibration(gpu, base["name"])
    bw = base["hbm_bandwidth_gbps"]["value"] * 1e9 * base["bandwidth_efficiency"]["value"]
    peak = base["bf16_tflops"]["value"] * 1e12

    def put(field_: str, value: float, src: str, nd: int) -> None:
        old = base.get(field_)
        cal.before[field_] = old["value"] if isinstance(old, dict) else None
        prof[field_] = _q(value, src, nd)
        cal.values[field_] = prof[field_]["value"]

    def allreduce(r, src: str, latency: tuple[str, int], bus: str, by_field: str, what: str, ref,
                  by_ref) -> None:
        """An all-reduce table's rows as the profile's ``latency`` (field, decimals) and ``bus`` fields under
        source ``src``; where the joint fit misses a GPU count (``_misses_a_count``), one fit a count in
        ``by_field`` under ``src``_n. ``ref(fit, per-count errors)`` and ``by_ref(fit)`` word the sources."""
        f = fit_graph_allreduce(r)
        per = ", ".join(f"{n} GPUs {f[f'median_pct_{n}']:.0f} %" for n in sorted(set(r["gpus"].astype(int))))
        sources[src] = {"kind": "fit", "ref": ref(f, per)}
        put(latency[0], f["latency_s"] * 1e6, src, latency[1])
        put(bus, f["bus_bps"] / 1e9, src, 1)
        cal.notes.append(f"{what}: {f['latency_s'] * 1e6:.2f} us + bytes / {f['bus_bps'] / 1e9:.1f} GB/s, "
                         f"median error {f['median_pct']:.1f} % ({per})")
        if _misses_a_count(f):
            by = _by_count(r, f"{src}_n", cal)
            sources[f"{src}_n"] = {"kind": "fit", "ref": by_ref(f)}
            prof[by_field] = by
            cal.before[by_field] = None
            cal.values[by_field] = {n: (v["latency_us"]["value"], v["bus_gbps"]["value"])
                                    for n, v in by.items()}

    gemm = find_table(data, gpu, "gemm", "gemm_perf.parquet", release=release)
    if gemm is not None:
        g = gemm_rows(gemm)
        kern = ", ".join(g["kernels"])
        eff, n_eff = fit_compute_efficiency(g, peak)
        sources["aic_gemm"] = {"kind": "measurement", "ref": (
            f"{label}, {gemm.where(f'bf16 {kern}, m 512-16384, n and k >= 4096', n_eff)}: median achieved "
            f"2 m n k / latency = {eff * peak / 1e12:,.0f} TFLOPS = {eff:.3f} of the "
            f"{peak / 1e12:,.0f} TFLOPS bf16 peak (trimtab calibrate --from aiconfigurator)")}
        put("compute_efficiency", eff, "aic_gemm", 3)
        hbm = base["hbm_bandwidth_gbps"]["value"] * 1e9
        # without streaming rows (or past the HBM's peak: not a DRAM rate), the profile's own graph
        # bandwidth (or its eager one) stays
        gbw = hbm * value_of(base, "graph_bandwidth_efficiency", base["bandwidth_efficiency"]["value"])
        if (fb := fit_graph_bandwidth(g)) is not None and 0 < fb["bw_bps"] <= hbm:
            gbw = hbm * round(fb["bw_bps"] / hbm, 3)  # the kernel time below is fitted at the rounded rate
            what = f"bf16 {kern}, m <= {GRAPH_TOKENS}, >= {STREAM_BYTES / 1e6:.0f} MB of weights and inputs"
            sources["aic_graph_bw"] = {"kind": "fit", "ref": (
                f"{label}, {gemm.where(what, fb['rows'])}: least relative squares of t = t0 + bytes / "
                f"bandwidth: {fb['bw_bps'] / 1e9:,.0f} GB/s = {gbw / hbm:.3f} of the {hbm / 1e9:,.0f} GB/s "
                f"HBM peak, median error {fb['median_pct']:.1f} % (p90 {fb['p90_pct']:.1f} %); smaller "
                f"GEMMs find their weights in L2 between timings (trimtab calibrate --from aiconfigurator)")}
            put("graph_bandwidth_efficiency", gbw / hbm, "aic_graph_bw", 3)
            cal.notes.append(f"gemm {gemm.version}: graph bandwidth {gbw / hbm:.3f} of HBM ({fb['rows']} "
                             f"rows, median error {fb['median_pct']:.1f} %)")
        tk, n_tk = fit_graph_kernel(g, gbw)
        sources["aic_graph_gemm"] = {"kind": "measurement", "ref": (
            f"{label}, {gemm.where(f'bf16 {kern}, m <= {GRAPH_TOKENS}', n_tk)}: median of latency - "
            f"(weights + activations) bytes / ({hbm / 1e9:,.0f} GB/s x {gbw / hbm:.3f}, the graph bandwidth "
            f"above), the fixed time per GEMM kernel inside vLLM's captured graphs (trimtab calibrate "
            f"--from aiconfigurator)")}
        put("graph_kernel_latency_us", tk * 1e6, "aic_graph_gemm", 2)
        cal.notes.append(f"gemm {gemm.version}: compute_efficiency {eff:.3f} ({n_eff} rows), graph kernel "
                         f"{tk * 1e6:.2f} us ({n_tk} rows)")
    else:
        cal.missing.append("gemm")

    ar = find_table(data, gpu, "comm", "custom_allreduce_perf.parquet", release=release)
    if ar is not None and len(allreduce_rows(ar)["t"]) >= 2:
        r = allreduce_rows(ar)
        allreduce(r, "aic_custom_ar", ("graph_allreduce_latency_us", 2), "graph_allreduce_bus_gbps",
                  "graph_allreduce_by_gpus", f"custom all-reduce {ar.version}",
                  lambda f, per: (
                      f"{label}, "
                      f"{ar.where(AR_ROWS + ', 2/4/8 GPUs, 128 - 8M elements (256 B - 16 MiB)', f['rows'])}: "
                      f"least relative squares of t = latency + bytes x 2(n-1)/n / bus bandwidth; median "
                      f"error {f['median_pct']:.1f} % (p90 {f['p90_pct']:.0f} %; by GPU count: {per}); "
                      f"vLLM's "
                      f"tensor-parallel all-reduce inside a CUDA graph (message_size counts bf16 elements, "
                      f"2 B each: aiconfigurator's collect_all_reduce.py) (trimtab calibrate --from "
                      f"aiconfigurator)"),
                  # Through a PCIe host's root complexes the bandwidth per GPU falls with the count, which the
                  # ring's 2(n-1)/n does not follow (NVLink GPUs: every count within 15 % of the joint fit)
                  lambda f: (
                      f"{label}, {ar.where(AR_ROWS + ', messages 256 B - 16 MiB', f['rows'])}: the "
                      f"same least relative squares one GPU count at a time (the joint fit's median error "
                      f"{f['median_pct']:.0f} %, over {BY_COUNT_PCT:.0f} % at a count; vLLM itself runs its "
                      f"custom all-reduce on at most two PCIe GPUs and NCCL above, whose table (comm/nccl) "
                      f"gives times of the same order) (trimtab calibrate --from aiconfigurator)"))
    else:
        cal.missing.append("custom all-reduce")

    # Eager steps (prefill chunks past the capture size) all-reduce through NCCL: its table replaces an
    # assumed profile number only (H100 and A100 keep their fits to Vidur's NCCL measurements).
    nccl = find_table(data, gpu, "comm", "nccl_perf.parquet", engine="nccl", release=nccl_version(data, gpu))
    ar_key = base["allreduce_latency_us"]["source"]  # replaced if assumed, or this command's own fit
    assumed = ar_key == "aic_nccl" or base.get("sources", {}).get(ar_key, {}).get("kind") == "assumption"
    if nccl is not None and assumed and len(nccl_rows(nccl)["t"]) >= 2:
        # NCCL switches algorithms (ring, tree, NVLS) with the count: one fit each where the joint one misses
        allreduce(nccl_rows(nccl), "aic_nccl", ("allreduce_latency_us", 1), "allreduce_bus_gbps",
                  "allreduce_by_gpus", f"NCCL all-reduce {nccl.version}",
                  lambda f, per: (
                      f"{label}, {nccl.where('all_reduce, half, 2/4/8 GPUs', f['rows'])}: least relative "
                      f"squares of t = latency + bytes x 2(n-1)/n / bus bandwidth (message_size counts "
                      f"elements, 2 B each); median error {f['median_pct']:.1f} % (p90 {f['p90_pct']:.0f} %; "
                      f"by GPU count: {per}); NCCL {nccl.version}, the version aiconfigurator's "
                      f"systems/{gpu}.yaml names (trimtab calibrate --from aiconfigurator)"),
                  lambda f: (
                      f"{label}, {nccl.where('all_reduce, half', f['rows'])}: the same least relative "
                      f"squares one GPU count at a time (the joint fit's median error "
                      f"{f['median_pct']:.0f} %, over {BY_COUNT_PCT:.0f} % at a count) (trimtab calibrate "
                      f"--from aiconfigurator)"))
    elif nccl is None and assumed:
        cal.missing.append("nccl")

    att = find_table(data, gpu, "attention", "generation_attention_perf.parquet", release=release)
    if att is not None:
        r = attention_rows(att)
        f = fit_attention(r)
        sources["aic_attention"] = {"kind": "measurement", "ref": (
            f"{label}, {att.where(r['kernel'] + ', bf16 KV, no sliding window', f['rows'])}: least relative "
            f"squares of t = t0 + KV bytes / bandwidth: t0 {f['t0_s'] * 1e6:.1f} us, "
            f"{f['bw_bps'] / 1e12:.2f} TB/s (the profile's {bw / 1e12:.2f} TB/s kept), median error "
            f"{f['median_pct']:.0f} % (trimtab calibrate --from aiconfigurator)")}
        put("attention_kernel_us", f["t0_s"] * 1e6, "aic_attention", 1)
        cal.notes.append(f"decode attention {att.version} ({r['kernel']}): t0 {f['t0_s'] * 1e6:.1f} us, "
                         f"{f['bw_bps'] / 1e12:.2f} TB/s, median error {f['median_pct']:.0f} %")
    else:
        cal.missing.append("attention")

    moe = find_table(data, gpu, "moe", "moe_perf.parquet", release=release)
    if moe is not None:
        r, dist = moe_rows(moe)
        if len(r["t"]):
            flops = peak * prof["compute_efficiency"]["value"]
            kernel_s = value_of(prof, "graph_kernel_latency_us", value_of(prof, "kernel_latency_us", 0.0))
            f = fit_moe_shape(r, bw, flops, kernel_s * 1e-6)
            bf16 = np.isin(moe.cols["moe_dtype"].astype(str), BF16)
            kerns = ", ".join(sorted(set(moe.cols["kernel_source"][bf16].astype(str))))
            what = f"bf16 {kerns}, {dist} routing, ep 1, {f['shapes']} shapes"
            sources["aic_moe_shape"] = {"kind": "fit", "ref": (
                f"{label}, {moe.where(what, f['rows'])}: "
                f"grid fit, least median |log error|, of the MoeLayer roofline (this profile's bandwidth, "
                f"compute efficiency and graph kernel time) with the grouped GEMMs' FLOPs those of T k + "
                f"rows_half x experts touched rows, x (1 + cols_half / (I_e / G)); median |log error| "
                f"{f['median_log']:.3f}, p90 {f['p90_log']:.2f}; overrides the engine's H100 fit for vLLM on "
                f"this GPU (trimtab calibrate --from aiconfigurator)")}
            put("moe_rows_half", f["rows_half"], "aic_moe_shape", 0)
            put("moe_cols_half", f["cols_half"], "aic_moe_shape", 0)
            cal.notes.append(f"fused MoE {moe.version} ({dist}): rows_half {f['rows_half']:.0f}, cols_half "
                             f"{f['cols_half']:.0f}, median |log error| {f['median_log']:.3f} "
                             f"(p90 {f['p90_log']:.2f}, {f['rows']} rows)")
        else:
            cal.missing.append("moe (no bf16 rows)")
    else:
        cal.missing.append("moe")

    used = {v["source"] for v in prof.values() if isinstance(v, dict) and "source" in v}
    for name in ("graph_allreduce_by_gpus", "allreduce_by_gpus"):
        used |= {q["source"] for fit in (prof.get(name) or {}).values() for q in fit.values()}
    prof["sources"] = {k: v for k, v in sources.items() if k in used}
    order = ["name", "description", "sources"]
    return {k: prof[k] for k in order if k in prof} | {k: v for k, v in prof.items() if k not in order}, cal


def value_of(prof: dict, field_: str, default: float) -> float:
    q = prof.get(field_)
    return q["value"] if isinstance(q, dict) else default


def calibrate_from_aiconfigurator(data: str | Path | None, out: str | Path, release: str = RELEASE,
                                  base_dir: str | Path | None = None) -> list[GpuCalibration]:
    """Every GPU of ``data`` (aiconfigurator's ``systems/data``; default the installed package's) that maps to
    a trimtab GPU profile: the profile (from ``base_dir``/gpus, default the bundled ones) refitted, written to
    ``out``/gpus/<name>.yaml, validated by the profile loader's schema first."""
    if data is None:
        data = default_data_dir()
        if data is None:
            raise InputError([Problem("--data", "aiconfigurator_core is not installed: pip install "
                                                "aiconfigurator-core, or give its systems/data with --data")])
    data = Path(data)
    if not data.is_dir():
        raise InputError([Problem("--data", "not a folder", str(data))])
    if base_dir is None:
        base_dir = data_dir()
    label = package_label(data)
    outs: list[GpuCalibration] = []
    for gpu in sorted(GPUS):
        if not (data / gpu).is_dir():
            continue
        src = Path(base_dir) / "gpus" / f"{GPUS[gpu]}.yaml"
        text = src.read_text(encoding="utf-8")
        base = yaml.safe_load(text)
        prof, cal = calibrate_gpu(data, gpu, base, label, release)
        if not cal.values:
            continue
        dest = Path(out) / "gpus" / f"{GPUS[gpu]}.yaml"
        new_text = merge_yaml(text, prof, base)
        # refuse to write what the loader would reject
        validate(GpuProfile, yaml.safe_load(new_text), {}, str(dest), "profile")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(new_text, encoding="utf-8")
        cal.output = dest
        outs.append(cal)
    if not outs:
        raise InputError([Problem("--data", f"no vLLM tables of a GPU trimtab has a profile for "
                                            f"({', '.join(sorted(GPUS))})", str(data))])
    return outs


def report_lines(cals: list[GpuCalibration]) -> list[str]:
    """What ``trimtab calibrate --from aiconfigurator`` prints: per GPU the fits, each field before and
    after."""
    lines = []
    for c in cals:
        lines.append(f"{c.gpu} -> {c.profile}: {c.output}")
        lines += [f"  {n}" for n in c.notes]
        for f, v in c.values.items():
            lines.append(f"  {f}: {c.before.get(f)} -> {v}")
        if c.missing:
            lines.append(f"  no vLLM table (numbers kept): {', '.join(c.missing)}")
    return lines
