"""``trimtab bench --device cpu --quick`` end to end, then ``trimtab calibrate`` on its output (needs torch)."""
from __future__ import annotations

import csv
import json

import pytest
import yaml
from typer.testing import CliRunner

from cli.main import app
from compiler.profiles import GpuProfile

torch = pytest.importorskip("torch")
runner = CliRunner()


def test_bench_cpu_quick_then_calibrate(tmp_path):
    out = tmp_path / "bench"
    res = runner.invoke(app, ["bench", "--device", "cpu", "--quick", "-o", str(out)])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(open(out / "bench.csv")))
    ops = {r["op"] for r in rows}
    assert {"gemm", "attn_prefill", "attn_decode", "copy_d2d"} <= ops
    assert all(float(r["time_ms"]) > 0 for r in rows)
    md = json.loads((out / "metadata.json").read_text())
    assert md["device"] == "cpu" and md["torch"] == torch.__version__ and "date" in md and "device_name" in md
    prof_path = tmp_path / "gpus" / "cpu-ci.yaml"
    res = runner.invoke(app, ["calibrate", str(out), "-o", str(prof_path)])
    assert res.exit_code == 0, res.output
    prof = GpuProfile.model_validate(yaml.safe_load(prof_path.read_text()))
    assert prof.kinds()["compute_efficiency"] == "fit"
    assert prof.kinds()["bf16_tflops"] == "measurement"  # no spec sheet for a CPU: the best measured rate
    assert 0 < prof.compute_efficiency.value <= 1 and 0 < prof.bandwidth_efficiency.value <= 1
    # the measured profile is usable by the cost model
    from compiler.profiles import load_profiles

    profs = load_profiles((tmp_path,))
    assert "cpu-ci" in profs.gpus
