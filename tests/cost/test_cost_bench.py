"""``trimtab bench --device cpu --quick`` end to end, then ``trimtab calibrate`` on its output (needs
torch)."""
from __future__ import annotations

import csv
import json

import pytest
import yaml
from typer.testing import CliRunner

from trimtab.cli.main import app
from trimtab.profiles.loader import GpuProfile

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
    # GEMMs in the precision a CPU engine computes in: bf16 where the CPU has it natively, else fp32, whose
    # rate the profile then states (fp32_tflops: the device can serve dtype fp32)
    from trimtab.field.bench import cpu_bf16_native

    assert md["dtype"] == ("bf16" if cpu_bf16_native(torch) else "fp32")
    assert {r["dtype"] for r in rows if r["op"] == "gemm"} == {md["dtype"]}
    assert (prof.fp32_tflops is not None) == (md["dtype"] == "fp32")
    assert prof.kinds()["compute_efficiency"] == "fit"
    assert prof.kinds()["bf16_tflops"] == "measurement"  # no spec sheet for a CPU: the best measured rate
    assert 0 < prof.compute_efficiency.value <= 1 and 0 < prof.bandwidth_efficiency.value <= 1
    # the measured profile is usable by the cost model
    from trimtab.profiles.loader import load_profiles

    profs = load_profiles((tmp_path,))
    assert "cpu-ci" in profs.gpus


def test_bench_eager_option_runs(tmp_path):
    """``--eager`` is accepted (on a CPU it changes nothing: the graph timing is for GPUs)."""
    res = runner.invoke(app, ["bench", "--device", "cpu", "--quick", "--eager", "-o", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    assert "timing" not in json.loads((tmp_path / "b" / "metadata.json").read_text())  # (a GPU's field)


def test_gpu_timer_regraphs_short_calls_only(monkeypatch):
    """The GPU path of ``_Timer`` without a GPU (CI has none; benchmarks/data/h200-bench is the run on one):
    CUDA events that read a fixed eager time; calls under GRAPH_BELOW_MS are timed again in a graph
    (``_graph_ms``), longer ones, copies (``graph=False``) and a timer made with ``graph=False`` keep the
    eager median."""
    from types import SimpleNamespace

    from trimtab.field.bench import _Timer

    eager = {"ms": 0.02}

    class Event:
        def __init__(self, enable_timing=True):
            pass

        def record(self):
            pass

        def synchronize(self):
            pass

        def elapsed_time(self, _other):
            return eager["ms"]

    fake = SimpleNamespace(cuda=SimpleNamespace(Event=Event, synchronize=lambda: None))
    monkeypatch.setattr(_Timer, "_graph_ms", lambda self, fn: 0.008)
    tm = _Timer(fake, "cuda", warmup=1, reps=3)
    assert tm.median_ms(lambda: None) == 0.008 and tm.graphed == 1
    assert tm.median_ms(lambda: None, graph=False) == 0.02 and tm.graphed == 1  # a copy
    eager["ms"] = 2.0
    assert tm.median_ms(lambda: None) == 2.0 and tm.graphed == 1  # long enough: eager
    eager["ms"] = 0.02
    assert _Timer(fake, "cuda", 1, 3, graph=False).median_ms(lambda: None) == 0.02
