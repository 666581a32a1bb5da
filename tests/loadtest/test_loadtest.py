"""``trimtab loadtest`` against a real HTTP server on 127.0.0.1 that streams server-sent events with known
delays.

The server (``SlowSSE``) is a real socket server speaking HTTP/1.1 with chunked transfer coding, as vLLM's
uvicorn does: it waits ``first_s`` before the first token and ``gap_s`` between tokens, so the client's TTFT
and TPOT must come out as those delays (plus loopback and scheduling time, a few ms).
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.conftest import POLL_S
from trimtab.cli.main import app
from trimtab.api import load_spec, plan as do_plan
from trimtab.field.loadtest import endpoints_for, parse_endpoint, run_loadtest
from trimtab.errors import InputError
from trimtab.contract.write import emit

CONFIG = {"architectures": ["LlamaForCausalLM"], "hidden_size": 256, "intermediate_size": 512,
          "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
          "max_position_embeddings": 1024}
SPEC = """\
version: 1
name: lt
gpus:
  - {{type: cpu-xeon-2c, count: 1, usd_per_hour: 1.0}}
models:
  - {{name: tiny, config: model/config.json}}
defaults: {{engine: vllm-cpu}}
workloads:
  - name: chat
    model: tiny
    rate_rps: {rate}
    input_tokens: {{uniform: {{min: 32, max: 96}}}}
    output_tokens: {{uniform: {{min: 4, max: 10}}}}
    slo: {{ttft_ms: {ttft}, tpot_ms: {tpot}, percentile: {pct}}}
"""


class SlowSSE(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, first_s: float, gap_s: float, fail_every: int = 0):
        self.first_s, self.gap_s, self.fail_every = first_s, gap_s, fail_every
        self.bodies: list[dict] = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):  # keep pytest output clean
        pass

    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{"id": "tiny-served"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def do_POST(self):
        srv: SlowSSE = self.server
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with srv.lock:
            srv.bodies.append(req)
            n = len(srv.bodies)
        if srv.fail_every and n % srv.fail_every == 0:
            msg = b'{"error": "overloaded"}'
            self.send_response(503)
            self.send_header("Content-Length", str(len(msg)))
            self.end_headers()
            self.wfile.write(msg)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        time.sleep(srv.first_s)
        for k in range(req["max_tokens"]):
            if k:
                time.sleep(srv.gap_s)
            ev = {"choices": [{"index": 0, "text": f" w{k}", "finish_reason": None}]}
            self._chunk(b"data: " + json.dumps(ev).encode() + b"\n\n")
        usage = {"prompt_tokens": len(req["prompt"]), "completion_tokens": req["max_tokens"]}
        self._chunk(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")


@pytest.fixture
def server():
    started = []

    def make(first_s=0.08, gap_s=0.03, fail_every=0):
        s = SlowSSE(first_s, gap_s, fail_every)
        threading.Thread(target=s.serve_forever, args=(POLL_S,), daemon=True).start()
        started.append(s)
        return s

    yield make
    for s in started:
        s.shutdown()
        s.server_close()


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    d = tmp_path_factory.mktemp("lt")
    (d / "model").mkdir()
    (d / "model" / "config.json").write_text(json.dumps(CONFIG))
    (d / "spec.yaml").write_text(SPEC.format(rate=8, ttft=3000, tpot=200, pct=90))
    (d / "tight.yaml").write_text(SPEC.format(rate=8, ttft=20, tpot=200, pct=90))
    # a p50: 6 measured requests can call it met, where a p90 needs 36 (trimtab.sim.metrics.min_requests)
    (d / "median.yaml").write_text(SPEC.format(rate=8, ttft=3000, tpot=200, pct=50))
    plan = do_plan(load_spec(d / "spec.yaml")).plan
    (d / "plan.yaml").write_text(emit(plan))
    return d, plan


def test_measured_ttft_and_tpot_are_the_servers_delays(server, case):
    d, plan = case
    srv = server(first_s=0.08, gap_s=0.03)
    res = run_loadtest(plan, load_spec(d / "spec.yaml"), [srv.url], requests=24, seed=3, timeout_s=60)
    w = res.workloads["chat"]
    assert w.errors == 0 and w.completed == w.requests and w.length_mismatches == 0
    m = w.measured
    # The server's delays, plus loopback and thread scheduling (a loaded CI machine: a generous upper margin).
    assert 80 <= m["ttft_p50"] <= 80 + 60, m
    assert 30 <= m["tpot_p50"] <= 30 + 10, m
    # The p90 of 24 short requests' TPOT moves by tens of ms with one stall of a client or server thread on 2
    # shared cores (65.5 ms in one clean CI run with nothing else of ours running): the same margin as TTFT's;
    # the p50 above pins the measurement itself.
    assert m["tpot_p90"] <= 30 + 60 and m["attainment"] == 1.0
    # ... yet a p90 of about 22 measured requests is not called met: below 36 its 95 % interval has no upper
    # bound (issue 36: a p99 reported "met" from 9 requests)
    assert w.requests < 36 and w.min_requests == 36 and w.verdict == "insufficient" and not res.ok
    assert res.failures() == [f"workload chat: insufficient: {w.requests} measured request(s); a p90 needs "
                              "at least 36 to be called met (below that its 95 % interval has no upper "
                              "bound); send more with --requests or --duration"]
    # Every request as the planner's length grids and the simulator's draw make it, and what vLLM needs.
    assert len(srv.bodies) == res.sent == 24
    for b in srv.bodies:
        assert b["stream"] is True and b["ignore_eos"] is True and b["model"] == "tiny-served"
        assert 4 <= b["max_tokens"] <= 10 and 32 <= len(b["prompt"]) <= 96
        assert all(3 <= t < 1000 for t in b["prompt"])
    # The simulator replayed the same stream (same count) and the cost model's prediction is there to compare.
    assert w.simulated["attainment"] > 0.5 and np.isfinite(w.predicted["ttft_pslo"])


def test_same_seed_same_requests(server, case):
    d, plan = case
    spec = load_spec(d / "spec.yaml")
    a, b = server(0.0, 0.0), server(0.0, 0.0)
    run_loadtest(plan, spec, [a.url], requests=10, seed=7, timeout_s=60, simulate=False)
    run_loadtest(plan, spec, [b.url], requests=10, seed=7, timeout_s=60, simulate=False)
    key = lambda x: (len(x["prompt"]), x["max_tokens"], x["prompt"][:4])  # noqa: E731 - arrival order may tie
    assert sorted(map(key, a.bodies)) == sorted(map(key, b.bodies))


def test_failed_requests_count_as_misses(server, case):
    d, plan = case
    srv = server(first_s=0.01, gap_s=0.0, fail_every=4)
    res = run_loadtest(plan, load_spec(d / "spec.yaml"), [srv.url], requests=20, seed=1, timeout_s=60)
    w = res.workloads["chat"]
    assert w.errors >= 4 and w.measured["attainment"] <= 1 - w.errors / w.requests + 1e-9
    assert any("503" in n for n in res.notes)


def test_cli_exits_5_when_the_slo_is_missed_and_0_when_met(server, case):
    d, _ = case
    srv = server(first_s=0.05, gap_s=0.01)
    runner = CliRunner()
    # (four times the spec's rate: the same 12 requests, a quarter of the seconds)
    base = ["loadtest", "--plan", str(d / "plan.yaml"), "--endpoint", srv.url, "--requests", "12",
            "--rate-scale", "4", "--format", "json"]
    ok = runner.invoke(app, base + ["--spec", str(d / "median.yaml")])  # a p50 of ~10 requests: enough
    assert ok.exit_code == 0, ok.output
    data = json.loads(ok.stdout)
    w = data["workloads"]["chat"]
    assert data["ok"] and w["measured"]["ttft_p50"] >= 50 and w["verdict"] == "met" and w["min_requests"] == 6
    short = runner.invoke(app, base + ["--spec", str(d / "spec.yaml")])  # the same requests, judged at p90
    assert short.exit_code == 5, short.output
    w = json.loads(short.stdout)["workloads"]["chat"]
    assert w["verdict"] == "insufficient" and not w["slo_met"] and w["min_requests"] == 36
    table = runner.invoke(app, base[:-2] + ["--spec", str(d / "spec.yaml")])
    assert table.exit_code == 5, table.output
    assert "insufficient requests to call every SLO met" in table.stdout
    assert "loadtest: sending 12 requests" in table.stderr  # progress, on stderr
    assert "a p90 needs at least 36" in table.stdout
    bad = runner.invoke(app, base + ["--spec", str(d / "tight.yaml")])  # TTFT SLO 20 ms < the server's 50 ms
    assert bad.exit_code == 5, bad.output
    assert json.loads(bad.stdout)["failures"][0].startswith("workload chat: measured SLO attainment 0.0%")
    assert json.loads(bad.stdout)["workloads"]["chat"]["verdict"] == "missed"  # a miss is a miss at any count


def test_min_requests_is_where_the_percentiles_upper_bound_exists():
    """The minimum ``loadtest`` states is the count from which quantile_ci bounds the percentile above."""
    from trimtab.sim.metrics import min_requests, quantile_ci

    assert (min_requests(99), min_requests(90), min_requests(50)) == (368, 36, 6)
    for p in (50, 90, 95, 99, 99.9):
        n = min_requests(p)
        assert np.isinf(quantile_ci(np.arange(n - 1.0), p)[1])
        assert np.isfinite(quantile_ci(np.arange(float(n)), p)[1])


def test_bad_endpoints_are_input_errors(case, tmp_path):
    d, plan = case
    runner = CliRunner()
    r = runner.invoke(app, ["loadtest", "--plan", str(d / "plan.yaml"), "--spec", str(d / "spec.yaml"),
                            "--endpoint", "ftp://127.0.0.1:1"])
    assert r.exit_code == 1 and "--endpoint" in r.output and "Traceback" not in r.output
    # Nothing listens on this port: a clear error naming the endpoint, not a traceback.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = runner.invoke(app, ["loadtest", "--plan", str(d / "plan.yaml"), "--spec", str(d / "spec.yaml"),
                            "--endpoint", f"http://127.0.0.1:{port}"])
    assert r.exit_code == 1 and "no OpenAI-compatible server answers" in r.output
    with pytest.raises(InputError, match="not in the plan"):
        endpoints_for(plan, ["nope=http://127.0.0.1:1"])
    assert parse_endpoint("http://127.0.0.1:8000/v1").path == "/v1/completions"
    assert parse_endpoint("http://localhost:9").url == "http://localhost:9/v1/completions"


# --------------------------------------------------------------------------- trimtab.field.enginefit
def test_enginefit_measures_the_servers_delays(server):
    from trimtab.field.enginefit import Shape, measure

    srv = server(first_s=0.06, gap_s=0.02)
    rows = measure(srv.url, [Shape(40, 6, 1), Shape(24, 4, 3)], vocab=1000, rounds=2)
    for r in rows:
        assert r.requests == 2 * r.shape.concurrency
        assert 60 <= r.ttft_ms <= 60 + 40 and 20 <= r.tpot_ms <= 20 + 10, r
    assert {len(b["prompt"]) for b in srv.bodies} == {40, 24} and {b["max_tokens"]
                                                                   for b in srv.bodies} == {6, 4}


def test_enginefit_recovers_known_overheads(tmp_path):
    """Measurements made by the cost model itself with known engine numbers: the fit must find them again."""
    from trimtab.field.enginefit import Shape, ShapeResult, errors, fit_engine, predict, with_params
    from trimtab.profiles.loader import load_profiles, model_from_hf_config

    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    model = model_from_hf_config(tmp_path / "config.json", "tiny")
    p = load_profiles()
    gpu, engine = p.gpus["cpu-xeon-2c"], p.engines["vllm-cpu"]
    truth = {"step_overhead_ms": 4.0, "request_overhead_ms": 12.0, "kernel_efficiency": 0.5}
    shapes = [Shape(64, 16, 1), Shape(512, 8, 1), Shape(256, 16, 1), Shape(128, 16, 2)]
    blank = [ShapeResult(s, 1.0, 1.0, 1) for s in shapes]
    pred = predict(blank, model, gpu, with_params(engine, truth), 2048)
    rows = [ShapeResult(s, t, d, 4) for s, (t, d) in zip(shapes, pred)]
    f = fit_engine(rows, model, gpu, with_params(engine,
                                                 {"step_overhead_ms": 20.0, "request_overhead_ms": 1.0,
                                                          "kernel_efficiency": 0.9}), 2048)
    for k, v in truth.items():
        assert f.params[k] == pytest.approx(v, rel=0.05), (k, f.params)
    assert errors(rows, model, gpu, f.engine, 2048)["tpot_median"] < 1.0


# ---------------------------------------------------------------------------
# trimtab.field.engine_run.server_command
def test_server_command_carries_the_plans_deployment(case):
    from trimtab.field.engine_run import server_command

    d, plan = case
    dep = plan.deployments[0]
    argv, env = server_command(plan, dep.name, d / "model", port=8123, python="py")
    assert argv[:3] == ["py", "-m", "vllm.entrypoints.openai.api_server"]
    from trimtab.field.engine_run import _plan_args

    # the plan's arguments, less address, dtype, name and context, which a local server sets itself
    assert all(a in argv for a in _plan_args(dep)) and "--no-enable-prefix-caching" in argv
    assert sum(a.startswith("--max-model-len") for a in argv) == 1 and "--host=0.0.0.0" not in argv
    assert argv[argv.index("--port") + 1] == "8123" and argv[argv.index("--host") + 1] == "127.0.0.1"
    longest = max(b.input_tokens_max + b.output_tokens_max for b in plan.buckets["chat"])
    assert f"--max-model-len={longest}" in argv
    # KV: the plan's tokens x (2 x 2 layers x 2 KV heads x 64 head dim x 2 B) in whole GiB, at least 1.
    assert env["VLLM_CPU_KVCACHE_SPACE"] == str(max(1, int(dep.kv_cache_tokens * 1024 / 2**30)))
    assert env["OMP_NUM_THREADS"] == "1" and env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    argv2, env2 = server_command(plan, dep, d / "model", device="cuda", min_context=1000)
    assert env2 == {} and "--max-model-len=1000" in argv2
    with pytest.raises(InputError, match="not in the plan"):
        server_command(plan, "nope", d / "model")
    with pytest.raises(InputError, match="no config.json"):
        server_command(plan, dep, d)


def test_a_plan_from_another_spec_is_refused_before_any_request(case, server):
    d, plan = case
    srv = server()
    with pytest.raises(InputError, match="was the plan made from another spec"):
        run_loadtest(plan, load_spec(Path(__file__).parents[2] / "examples" / "quickstart.yaml"), [srv.url])
    assert srv.bodies == []
