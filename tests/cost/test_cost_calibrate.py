"""``trimtab calibrate`` end to end on tiny fixture CSVs written here (Vidur format and bench format)."""
from __future__ import annotations

import csv

import pytest
import yaml
from typer.testing import CliRunner

from trimtab.cli.main import app
from trimtab.field.calibrate import BENCH_COLUMNS, calibrate
from trimtab.profiles.loader import GpuProfile

runner = CliRunner()
PEAK_F, PEAK_B = 989e12, 3350e9  # the h100-sxm spec sheet, used as --base
ETA_C, ETA_B, T_K = 0.6, 0.8, 5e-6  # the truth the fixtures are generated from


def gemm_time(m, n, k):
    return T_K + max(2 * m * n * k / (PEAK_F * ETA_C), 2 * (n * k + m * k + m * n) / (PEAK_B * ETA_B))


def write_vidur(folder):
    """Vidur's compute/<gpu>/<model>/mlp.csv and network/<cluster>/all_reduce.csv, timings in ms."""
    mlp = folder / "compute" / "h100" / "tiny-model" / "mlp.csv"
    mlp.parent.mkdir(parents=True)
    ops = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj", "input_layernorm", "attn_rope",
           "post_attention_layernorm", "mlp_act", "add")
    cols = ["n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp", "num_tokens",
            "num_tensor_parallel_workers"] + [f"time_stats.{o}.median" for o in ops]
    H, heads, kv, inter = 4096, 32, 8, 14336
    with open(mlp, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        for tp in (1, 2):
            for T in (1, 4, 16, 64, 256, 1024, 4096):
                hd = H // heads
                shapes = {"attn_pre_proj": (T, (heads + 2 * kv) * hd / tp, H),
                          "attn_post_proj": (T, H, H / tp),
                          "mlp_up_proj": (T, 2 * inter / tp, H), "mlp_down_proj": (T, H, inter / tp)}
                row = {"n_head": heads, "n_kv_head": kv, "n_embd": H, "n_expanded_embd": inter,
                       "vocab_size": 32000,
                       "use_gated_mlp": "True", "num_tokens": T, "num_tensor_parallel_workers": tp}
                for op, (m, n, k) in shapes.items():
                    row[f"time_stats.{op}.median"] = gemm_time(m, n, k) * 1e3
                for op in ops[4:]:  # 3 passes of token x hidden x 2 B each, plus 4 us per kernel
                    row[f"time_stats.{op}.median"] = (4e-6 + 3 * T * H * 2 / (PEAK_B * ETA_B) / 5) * 1e3
                w.writerow(row)
    ar = folder / "network" / "h100_dgx" / "all_reduce.csv"
    ar.parent.mkdir(parents=True)
    with open(ar, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["", "time_stats.all_reduce.median", "rank", "num_workers", "size", "collective",
                    "devices_per_node", "max_devices_per_node"])
        for i, (n, size) in enumerate((n, s) for n in (2, 4, 8) for s in (2048, 1 << 16, 1 << 20, 1 << 24)):
            w.writerow([i, (20e-6 + size * 2 * (n - 1) / n / 300e9) * 1e3, 0, n, size, "all_reduce", n, 8])


def test_vidur_format_recovers_parameters(tmp_path):
    write_vidur(tmp_path / "vidur")
    out = tmp_path / "gpus" / "h100-fit.yaml"
    r = calibrate([tmp_path / "vidur" / "compute" / "h100", tmp_path / "vidur" / "network" / "h100_dgx"], out,
                  "h100-sxm")
    p = r.fit.params
    assert p["compute_efficiency"] == pytest.approx(ETA_C, rel=0.02)
    assert p["bandwidth_efficiency"] == pytest.approx(ETA_B, rel=0.02)
    assert p["kernel_latency_us"] == pytest.approx(T_K * 1e6, rel=0.1)
    assert p["elementwise_passes"] == pytest.approx(3, rel=0.05)
    assert p["allreduce_latency_us"] == pytest.approx(20, rel=0.02)
    assert p["allreduce_bus_gbps"] == pytest.approx(300, rel=0.02)
    assert all(e.median_pct < 5 for e in r.fit.errors.values())
    prof = GpuProfile.model_validate(yaml.safe_load(out.read_text()))  # loads with the strict schema
    assert prof.name == "h100-fit"
    assert prof.kinds()["compute_efficiency"] == "fit" and prof.kinds()["hbm_bandwidth_gbps"] == "spec_sheet"
    assert "vidur" in prof.sources[prof.compute_efficiency.source].ref
    assert prof.measured_ranges["gemm_tokens"] == [1.0, 4096.0]
    assert prof.measured_ranges["allreduce_gpus"] == [2.0, 8.0]


def test_bench_format_cli(tmp_path):
    d = tmp_path / "bench"
    d.mkdir()
    with open(d / "bench.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=BENCH_COLUMNS)
        w.writeheader()
        for m in (1, 8, 64, 512, 4096):
            for n, k in ((4096, 4096), (14336, 4096)):
                w.writerow({"op": "gemm", "dtype": "bf16", "m": m, "n": n, "k": k, "flops": 2 * m * n * k,
                            "bytes_moved": 2 * (m * k + k * n + m * n), "time_ms": gemm_time(m, n, k) * 1e3})
        for ctx in (512, 2048, 8192):
            fl = 4 * 32 * 128 * ctx * ctx / 2
            w.writerow({"op": "attn_prefill", "dtype": "bf16", "batch": 1, "context": ctx, "heads": 32,
                        "kv_heads": 8, "head_dim": 128, "flops": fl, "bytes_moved": 2 * ctx * 128 * 80,
                        "time_ms": (T_K + fl / (PEAK_F * 0.5)) * 1e3})
        w.writerow({"op": "copy_d2d", "dtype": "u8", "bytes": 1 << 30, "bytes_moved": 2 << 30,
                    "time_ms": (2 << 30) / (PEAK_B * 0.9) * 1e3})
        # a copy that fits in the L2 cache reads faster than HBM: not the device's copy bandwidth
        w.writerow({"op": "copy_d2d", "dtype": "u8", "bytes": 1 << 24, "bytes_moved": 2 << 24,
                    "time_ms": (2 << 24) / (PEAK_B * 1.6) * 1e3})
    (d / "metadata.json").write_text('{"device_name": "NVIDIA H100 80GB HBM3", "date": "2026-01-01"}')
    out = tmp_path / "h100-bench.yaml"
    res = runner.invoke(app, ["calibrate", str(d), "-o", str(out)])  # base guessed from the device name
    assert res.exit_code == 0, res.output
    assert "gemm" in res.output and "median" in res.output  # the fit error table
    assert "copy_bandwidth_efficiency = 0.9\n" in res.output  # from the largest copy
    prof = GpuProfile.model_validate(yaml.safe_load(out.read_text()))
    assert prof.compute_efficiency.value == pytest.approx(ETA_C, rel=0.03)
    assert prof.attention_efficiency.value == pytest.approx(0.5, rel=0.05)
    assert prof.kinds()["attention_efficiency"] == "fit"


def test_calibrate_errors_are_input_errors(tmp_path):
    res = runner.invoke(app, ["calibrate", str(tmp_path), "-o", str(tmp_path / "x.yaml")])
    assert res.exit_code == 1
    assert "no measurements found" in res.output and "Traceback" not in res.output
    res = runner.invoke(app, ["calibrate", str(tmp_path / "missing"), "-o", str(tmp_path / "x.yaml")])
    assert res.exit_code == 1
