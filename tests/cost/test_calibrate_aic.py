"""trimtab calibrate --from aiconfigurator: each fit recovers the parameters a synthetic table was generated
with (aiconfigurator's parquet layout and columns, written here), and the command writes GPU profiles the
profile loader accepts, numbers and sources, keeping what no table covers."""
from pathlib import Path

import numpy as np
import pytest
import yaml

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from trimtab.field import calibrate_aic as aic  # noqa: E402
from trimtab.cost.moe import MoeLayer  # noqa: E402
from trimtab.profiles.loader import load_profiles  # noqa: E402
from trimtab.profiles import data_dir  # noqa: E402

# L40S as bundled: 864 GB/s x 0.841, 362 TFLOPS bf16 (the base the fits read the peaks from)
BW, PEAK = 864e9 * 0.841, 362e12
TK, CE = 3.0e-6, 0.70  # GEMM: fixed time, compute efficiency
GBW = 864e9 * 0.9  # the GEMMs' own bandwidth in graphs (not the profile's BW, which KV and MoE keep)
AR = {2: (5e-6, 10e9), 4: (12e-6, 2e9), 8: (25e-6, 1e9)}  # per GPU count: latency, bus bandwidth (PCIe-like)
NCCL = {2: (7e-6, 18e9), 4: (11e-6, 5e9), 8: (22e-6, 1.5e9)}  # the eager (NCCL) all-reduce, alike
T0, ATT_BW = 9e-6, 0.6e12  # decode attention
ROWS_HALF, COLS_HALF = 100.0, 300.0  # fused MoE (on the fit's grid)


def _write(data: Path, gpu: str, op: str, version: str, name: str, cols: dict) -> None:
    d = data / gpu / op / "vllm" / version
    d.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(cols), d / name)


def _gemm(data: Path, gpu: str, version: str = "0.24.0") -> None:
    # decode rows (m <= 16) also at sizes no L2 holds, where the graph bandwidth fit reads them
    shapes = [(m, n, k) for m in (1, 2, 4, 8, 16, 512, 2048, 8192) for n in (1024, 4096, 8192, 16384)
              for k in (4096, 8192, 16384) if m <= 16 or (n < 16384 and k < 16384)]
    m, n, k = (np.array(x, dtype=np.int64) for x in zip(*shapes))
    t = TK + np.maximum(2.0 * m * n * k / (PEAK * CE), 2.0 * (n * k + m * k + m * n) / GBW)
    # an fp8 row the bf16 fits must leave out
    _write(data, gpu, "gemm", version, "gemm_perf.parquet", {
        "kernel_source": ["torch.nn.functional.linear"] * len(m) + ["CutlassFP8ScaledMMLinearKernel"],
        "gemm_dtype": ["bfloat16"] * len(m) + ["fp8"], "m": np.append(m, 1), "n": np.append(n, 1024),
        "k": np.append(k, 4096), "latency": np.append(t * 1e3, 1e3)})  # ms, as aiconfigurator stores


def _allreduce(data: Path, gpu: str, version: str) -> None:
    rows = [(n, s) for n in AR for s in (128 << np.arange(17))]
    n, s = (np.array(x) for x in zip(*rows))
    t = np.array([AR[g][0] + 2 * b * 2 * (g - 1) / g / AR[g][1] for g, b in rows])  # b bf16 elements: 2 B
    _write(data, gpu, "comm", version, "custom_allreduce_perf.parquet", {
        "kernel_source": ["vLLM_custom_graph"] * len(rows) + ["vLLM_custom_eager"],
        "allreduce_dtype": ["bfloat16"] * (len(rows) + 1), "num_gpus": np.append(n, 2),
        "message_size": np.append(s, 128), "latency": np.append(t * 1e3, 1.0)})


def _nccl(data: Path, gpu: str) -> None:
    rows = [(n, s) for n in NCCL for s in (128 << np.arange(0, 26, 2))]
    n, s = (np.array(x) for x in zip(*rows))
    t = np.array([NCCL[g][0] + 2 * b * 2 * (g - 1) / g / NCCL[g][1] for g, b in rows])
    d = data / gpu / "comm" / "nccl" / "2.27.3"
    d.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"op_name": ["all_reduce"] * len(rows) + ["all_gather"],
                             "nccl_dtype": ["half"] * (len(rows) + 1), "num_gpus": np.append(n, 2),
                             "message_size": np.append(s, 128), "latency": np.append(t * 1e3, 1.0)}),
                   d / "nccl_perf.parquet")


def _attention(data: Path, gpu: str) -> None:
    b, step, kvh, hd = (np.array(x) for x in zip(*[(b, s, h, d) for b in (1, 8, 64) for s in (1, 127, 4095)
                                                    for h in (1, 8) for d in (64, 128)]))
    t = T0 + b * (1 + step) * kvh * hd * 4 / ATT_BW  # KV of isl (1) + step tokens
    _write(data, gpu, "attention", "0.24.0", "generation_attention_perf.parquet", {
        "kernel_source": ["vllm_flash_attn_fa2"] * len(b), "batch_size": b, "isl": np.ones_like(b),
        "num_heads": kvh * 4, "num_key_value_heads": kvh, "head_dim": hd,
        "kv_cache_dtype": ["bfloat16"] * len(b),
        "step": step, "window_size": np.zeros_like(b), "latency": t * 1e3})


def _moe_cols() -> dict:
    # mostly compute-bound rows (a median fit: bandwidth-bound rows leave the shape unidentified)
    shapes = [(4096, 14336, 2, 8), (2048, 768, 8, 128), (5120, 8192, 1, 16)]
    rows = [(T, h, i, k, e, tp) for h, i, k, e in shapes for tp in (1, 2, 8) for T in (64, 1024, 4096, 16384)]
    return {c: np.array(x, dtype=float) for c, x in zip(("num_tokens", "hidden_size", "inter_size", "topk",
                                                         "num_experts", "moe_tp_size"), zip(*rows))}


def _moe(data: Path, gpu: str) -> None:
    c = _moe_cols()
    t = aic.moe_time(c, BW, PEAK * CE, TK, np.array([ROWS_HALF]), np.array([COLS_HALF]))[:, 0]
    n = len(t)
    _write(data, gpu, "moe", "0.24.0", "moe_perf.parquet", {
        "kernel_source": ["vllm_unquantizedfusedmoe_triton_tritonexperts"] * n, "moe_dtype": ["bfloat16"] * n,
        "distribution": ["balanced"] * n, "moe_ep_size": np.ones(n, dtype=np.int64),
        **{k: v.astype(np.int64) for k, v in c.items()}, "latency": t * 1e3})


def test_moe_time_is_moe_layer_compute_s():
    """The vectorised roofline the grid search evaluates is MoeLayer.compute_s (one implementation)."""
    c = _moe_cols()
    t = aic.moe_time(c, BW, PEAK * CE, TK, np.array([ROWS_HALF]), np.array([COLS_HALF]))[:, 0]
    for i in range(len(t)):
        T, h, inter, k, e, tp = (c[x][i] for x in ("num_tokens", "hidden_size", "inter_size", "topk",
                                                     "num_experts", "moe_tp_size"))
        layer = MoeLayer(e, k, 3 * h * inter, 1.0, h, inter, int(tp), 1, 2.0, BW, PEAK * CE, TK, 0.0, 1.0,
                         1.0, 1.0, 8, int(tp), 1, 1.0, ROWS_HALF, COLS_HALF)
        assert layer.compute_s(T) == pytest.approx(t[i], rel=1e-12)


def test_fits_recover_the_generating_parameters(tmp_path):
    _gemm(tmp_path, "l40s")
    _allreduce(tmp_path, "l40s", "0.14.0")
    _attention(tmp_path, "l40s")
    _moe(tmp_path, "l40s")
    g = aic.gemm_rows(aic.find_table(tmp_path, "l40s", "gemm", "gemm_perf.parquet"))
    tk, n_tk = aic.fit_graph_kernel(g, GBW)
    assert tk == pytest.approx(TK, rel=1e-9) and n_tk == 5 * 12
    fb = aic.fit_graph_bandwidth(g)  # m <= 16 with n x k of 8192 x 16384 and up: 3 shapes a row count
    assert fb["bw_bps"] == pytest.approx(GBW, rel=1e-9) and fb["t0_s"] == pytest.approx(TK, rel=1e-6)
    assert fb["rows"] == 5 * 3
    eff, _ = aic.fit_compute_efficiency(g, PEAK)
    assert eff == pytest.approx(CE, rel=0.01)  # t_k is in the measured times: a hair under CE
    r = aic.allreduce_rows(aic.find_table(tmp_path, "l40s", "comm", "custom_allreduce_perf.parquet"))
    for n, (lat, bus) in AR.items():
        f = aic.fit_graph_allreduce({k: v[r["gpus"] == n] for k, v in r.items()})
        assert f["latency_s"] == pytest.approx(lat, rel=1e-6) and f["bus_bps"] == pytest.approx(bus, rel=1e-6)
    a = aic.fit_attention(aic.attention_rows(aic.find_table(tmp_path, "l40s", "attention",
                                                            "generation_attention_perf.parquet")))
    assert a["t0_s"] == pytest.approx(T0, rel=1e-6) and a["bw_bps"] == pytest.approx(ATT_BW, rel=1e-6)
    m, dist = aic.moe_rows(aic.find_table(tmp_path, "l40s", "moe", "moe_perf.parquet"))
    f = aic.fit_moe_shape(m, BW, PEAK * CE, TK)
    assert dist == "balanced" and (f["rows_half"], f["cols_half"]) == (ROWS_HALF, COLS_HALF)
    assert f["median_log"] < 1e-9


def test_graph_bandwidth_leaves_out_gemms_whose_weights_stay_in_l2():
    """Timed again and again, a GEMM of a few MB reads its weights from L2; a decode step, reading each
    layer's weights once, streams them from HBM. The fit takes the GEMMs too large for any L2 only."""
    n = np.array([1024, 2048, 4096, 8192, 16384, 16384, 32768], dtype=float)
    k = np.full(7, 8192.0)
    m = np.full(7, 8.0)
    nbytes = 2 * (n * k + m * k + m * n)
    in_l2 = nbytes < aic.STREAM_BYTES
    t = TK + nbytes / np.where(in_l2, 3 * GBW, GBW)
    fb = aic.fit_graph_bandwidth({"m": m, "n": n, "k": k, "t": t})
    assert fb["rows"] == int((~in_l2).sum()) == 3 and fb["bw_bps"] == pytest.approx(GBW, rel=1e-9)
    every = aic._rel_lstsq(np.stack([np.ones(7), nbytes], axis=1), t)  # the same fit over every row
    assert abs(1 / every[1] / GBW - 1) > 0.05  # (the L2 rows would have moved it)
    assert aic.fit_graph_bandwidth({"m": m[:5], "n": n[:5], "k": k[:5], "t": t[:5]}) is None


def test_version_nearest_the_engine_release():
    assert aic.pick_version(["0.14.0", "0.19.0", "0.24.0"], "0.15.1") == "0.14.0"
    assert aic.pick_version(["0.19.0", "0.24.0"], "0.15.1") == "0.19.0"
    assert aic.pick_version(["0.22.0", "1.3.0rc20"], "0.15.1") == "0.22.0"


def test_cli_writes_loadable_profiles(tmp_path):
    from typer.testing import CliRunner

    from trimtab.cli.main import app

    data = tmp_path / "data"
    _gemm(data, "l40s")
    _allreduce(data, "l40s", "0.14.0")
    _allreduce(data, "l40s", "0.22.0")  # a second release: 0.14.0 is the nearer to the engine's 0.15.1
    _attention(data, "l40s")
    _moe(data, "l40s")
    _nccl(data, "l40s")  # the L40S's eager all-reduce is an assumption: the table replaces it
    _nccl(data, "a100_sxm")  # the A100's is a fit to Vidur's measurements: kept
    _gemm(data, "a100_sxm", "0.14.0")  # a GPU with one table: the rest of its profile as bundled
    (data / "gb300" / "gemm").mkdir(parents=True)  # no trimtab profile: skipped
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["calibrate", "--from", "aiconfigurator", "--data", str(data),
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (out / "gpus").iterdir()) == ["a100-80gb.yaml", "l40s.yaml"]
    profs = load_profiles((out,))
    l40s, bundled = profs.gpus["l40s"], load_profiles().gpus["l40s"]
    assert l40s.graph_kernel_latency_us.value == pytest.approx(TK * 1e6, abs=0.01)
    assert l40s.graph_bandwidth_efficiency.value == pytest.approx(GBW / 864e9, abs=0.001)
    assert "m <= 16, >= 256 MB" in l40s.sources[l40s.graph_bandwidth_efficiency.source].ref
    assert l40s.bandwidth_efficiency == bundled.bandwidth_efficiency  # KV reads, eager steps: as they were
    assert l40s.compute_efficiency.value == pytest.approx(CE, abs=0.01)
    assert l40s.attention_kernel_us.value == pytest.approx(T0 * 1e6, abs=0.1)
    # (here on the profile's rounded, fitted compute efficiency, a hair under CE: within two grid steps)
    assert l40s.moe_rows_half.value == pytest.approx(ROWS_HALF, abs=10)
    assert l40s.moe_cols_half.value == pytest.approx(COLS_HALF, abs=10)
    # PCIe: one fit per GPU count (the joint one stays for counts not measured)
    for n, (lat, bus) in AR.items():
        fit = l40s.graph_allreduce_by_gpus[n]
        assert fit.latency_us.value == pytest.approx(lat * 1e6, abs=0.01)
        assert fit.bus_gbps.value == pytest.approx(bus / 1e9, abs=0.01)
    ref = l40s.sources[l40s.graph_allreduce_latency_us.source].ref
    assert "systems/data/l40s/comm/vllm/0.14.0/custom_allreduce_perf.parquet" in ref and "51 rows" in ref
    assert "Apache-2.0" in ref
    for n, (lat, bus) in NCCL.items():
        fit = l40s.allreduce_by_gpus[n]
        assert fit.latency_us.value == pytest.approx(lat * 1e6, abs=0.01)
        assert fit.bus_gbps.value == pytest.approx(bus / 1e9, abs=0.01)
    assert "comm/nccl/2.27.3/nccl_perf.parquet" in l40s.sources[l40s.allreduce_latency_us.source].ref
    # numbers no table covers keep their value and source
    assert l40s.kernel_latency_us == bundled.kernel_latency_us
    assert l40s.sources["efficiency"] == bundled.sources["efficiency"]
    a100, a100_bundled = profs.gpus["a100-80gb"], load_profiles().gpus["a100-80gb"]
    # refitted on the synthetic GEMMs; the rest as bundled
    assert a100.graph_kernel_latency_us != a100_bundled.graph_kernel_latency_us
    for field in ("attention_kernel_us", "graph_allreduce_bus_gbps", "moe_rows_half", "kernel_latency_us",
                  "allreduce_bus_gbps"):
        assert getattr(a100, field) == getattr(a100_bundled, field), field
    assert "no vLLM table (numbers kept): custom all-reduce, attention, moe" in res.output
    # the file keeps the bundled one's lines it did not change (comments, formats)
    text = (out / "gpus" / "l40s.yaml").read_text()
    assert "usd_per_hour: {value: 1.80, source: price}" in text
    assert yaml.safe_load(text)["name"] == "l40s"


def test_bundled_profiles_name_their_tables():
    """Every bundled number the command wrote names aiconfigurator's table it came from."""
    for name in ("a100-80gb", "l40s", "h200", "b200", "h100-sxm"):
        g = yaml.safe_load((data_dir() / "gpus" / f"{name}.yaml").read_text())
        for field in ("compute_efficiency", "graph_kernel_latency_us", "graph_bandwidth_efficiency",
                      "graph_allreduce_latency_us", "attention_kernel_us", "moe_rows_half"):
            ref = g["sources"][g[field]["source"]]["ref"]
            aic_ref = "aiconfigurator-core 0.12.0 (PyPI, Apache-2.0), systems/data/"
            assert ref.startswith(aic_ref), (name, field)


def test_a_graph_bandwidth_past_the_hbm_peak_is_refused():
    """A profile stating its graph GEMMs faster than its HBM (a share above 1) does not load."""
    from pydantic import ValidationError

    from trimtab.profiles.loader import GpuProfile

    g = yaml.safe_load((data_dir() / "gpus" / "h100-sxm.yaml").read_text())
    assert GpuProfile.model_validate(g).graph_bandwidth_efficiency.value == 0.884
    g["graph_bandwidth_efficiency"]["value"] = 1.2
    with pytest.raises(ValidationError, match=r"graph_bandwidth_efficiency must be in \(0, 1\], got 1.2"):
        GpuProfile.model_validate(g)
