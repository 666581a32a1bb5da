"""``trimtab calibrate --engine URL``: the engine's front-end and per-step overheads fitted from timed
requests (``trimtab.field.enginefit``). The fit is checked on recorded measurements whose answer is computed
by hand; the command runs against the real HTTP test server of ``test_loadtest`` (known delays, no engine),
and its profile folder is planned with through ``--profiles``."""
from __future__ import annotations

import json
import threading

import pytest
import yaml

from tests.conftest import POLL_S, run_cli
from tests.loadtest.test_loadtest import CONFIG, SlowSSE
from trimtab.field.enginefit import OVERHEADS, Shape, ShapeResult, fit_engine, predict, with_params
from trimtab.profiles.loader import load_profiles, model_from_hf_config


def test_overheads_fit_on_recorded_measurements_hand_computed(tmp_path):
    """Lone requests (concurrency 1, one prefill step each): TTFT = front end + one step's kernels and
    overhead, TPOT = one decode step's kernels and overhead. Measured 23 ms over the kernels' TTFT and 3 ms
    over their TPOT is a step overhead of 3 ms and a front end of 23 - 3 = 20 ms."""
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    model = model_from_hf_config(tmp_path / "config.json", "tiny")
    p = load_profiles()
    gpu, engine = p.gpus["cpu-xeon-2c"], p.engines["vllm-cpu"]
    shapes = [Shape(64, 16, 1), Shape(512, 8, 1), Shape(256, 16, 1)]
    bare = predict([ShapeResult(s, 1.0, 1.0, 1) for s in shapes], model, gpu,
                   with_params(engine, {"step_overhead_ms": 0.0, "request_overhead_ms": 0.0}), 2048)
    rows = [ShapeResult(s, t + 23.0, d + 3.0, 4) for s, (t, d) in zip(shapes, bare)]
    start = with_params(engine, {"step_overhead_ms": 10.0, "request_overhead_ms": 1.0})
    f = fit_engine(rows, model, gpu, start, 2048, OVERHEADS)
    assert f.params == pytest.approx({"step_overhead_ms": 3.0, "request_overhead_ms": 20.0}, abs=0.05)
    # not fitted: the device profile's kernel share stays
    assert f.engine.kernel_efficiency == engine.kernel_efficiency
    assert max(f.fit_errors["ttft"] + f.fit_errors["tpot"]) < 0.5


def test_calibrate_engine_command_writes_a_profile_folder_to_plan_with(tmp_path):
    srv = SlowSSE(first_s=0.03, gap_s=0.005)
    threading.Thread(target=srv.serve_forever, args=(POLL_S,), daemon=True).start()
    try:
        (tmp_path / "model").mkdir()
        (tmp_path / "model" / "config.json").write_text(json.dumps(CONFIG))
        res = run_cli("calibrate", "--engine", srv.url, "--model", tmp_path / "model" / "config.json",
                      "--gpu", "cpu-xeon-2c", "--engine-profile", "vllm-cpu", "--out", tmp_path / "mine",
                      "--format", "json")
    finally:
        srv.shutdown()
        srv.server_close()
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    path = tmp_path / "mine" / "engines" / "vllm-cpu.yaml"
    assert doc["profile"] == str(path) and set(doc["params"]) == set(OVERHEADS)
    # The server's delays do not grow with the prompt: a front end of about its 30 ms first-token wait, a step
    # of about its 5 ms gap (loopback and this machine's scheduling add a few ms).
    assert 2.0 <= doc["params"]["step_overhead_ms"] <= 15.0, doc["params"]
    assert 10.0 <= doc["params"]["request_overhead_ms"] <= 60.0, doc["params"]
    written = yaml.safe_load(path.read_text())
    assert "trimtab calibrate --engine" in written["sources"]["server_fit"]["ref"]
    eng = load_profiles((tmp_path / "mine",)).engines["vllm-cpu"]
    assert eng.step_overhead_ms.value == pytest.approx(doc["params"]["step_overhead_ms"], abs=0.01)
    # the folder plans as the user's own profiles
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    from trimtab.ir.lower import lower
    from trimtab.spec.load import load_spec

    assert lower(load_spec(spec, profile_dir=tmp_path / "mine")).engine.step_overhead_ms.value == \
        eng.step_overhead_ms.value


def test_calibrate_engine_names_the_bad_option():
    res = run_cli("calibrate", "--engine", "http://127.0.0.1:1", "--model", "no-such-model",
                  "--gpu", "h100-sxm")
    assert res.exit_code == 1 and "--model" in res.stderr and "no-such-model" in res.stderr
    res = run_cli("calibrate", "--engine", "http://127.0.0.1:1", "--gpu", "h100-sxm")
    assert res.exit_code == 1 and "--model/--gpu" in res.stderr
    from tests.e2e.helpers import free_port

    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    res = run_cli("calibrate", "--engine", url, "--model", "llama-3.1-8b", "--gpu", "h100-sxm")
    assert res.exit_code == 1 and "--engine" in res.stderr and "no OpenAI-compatible server" in res.stderr


SPEC = """version: 1
name: own-engine
gpus:
  - {type: cpu-xeon-2c, count: 1, usd_per_hour: 1.0}
models:
  - {name: tiny, config: model/config.json}
defaults: {engine: vllm-cpu}
workloads:
  - name: chat
    model: tiny
    rate_rps: 0.5
    input_tokens: {fixed: 64}
    output_tokens: {fixed: 8}
    slo: {ttft_ms: 3000, tpot_ms: 200, percentile: 90}
"""
