"""The emitted P/D router, run: vllm-router (the package's launcher, its Rust router in-process) with the
arguments `trimtab emit --to k8s` gives it for the disaggregated example, Kubernetes service discovery
replaced by the same pods' addresses as static URLs (there is no API server here) and its address by a free
port on 127.0.0.1, in front of two prefill and two decode HTTP peers on 127.0.0.1 that answer as vLLM's
NixlConnector does (a prefill answer carries the KV transfer parameters of the engine that computed it) and
record what they are sent. vLLM itself cannot stand in: NIXL needs GPUs and UCX. Asserted: each request goes
to a prefill peer for one token with ``kv_transfer_params.do_remote_decode``, then to a decode peer with that
prefiller's parameters (``do_remote_prefill``, its engine id and side-channel address), and the client gets
the decoder's answer. Skips without the vllm-router package (the test extra installs it)."""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
import yaml

from tests.conftest import POLL_S
from tests.e2e.helpers import free_port
from tests.engines import runtime
from trimtab.deploy import render
from trimtab.deploy.pdrouter import APP

pytest.importorskip("vllm_router.router")
DISCOVERY = {"--service-discovery": 0, "--service-discovery-namespace": 1, "--service-discovery-port": 1,
             "--prefill-selector": None, "--decode-selector": None, "--host": 1, "--port": 1,
             "--prometheus-host": 1}


class _Peer(BaseHTTPRequestHandler):
    """A P/D side as the router sees it: /health, and /v1/completions answered as vLLM's NixlConnector
    does."""

    def log_message(self, *args):
        pass

    def _json(self, obj, code: int = 200) -> None:
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._json({} if self.path.startswith("/health") else {"object": "list", "data": []})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        srv = self.server
        srv.seen.append((self.path, body))
        kv = ({"do_remote_prefill": True, "do_remote_decode": False, "remote_engine_id": srv.name,
               "remote_host": srv.name, "remote_port": 5600, "remote_block_ids": [1, 2]}
              if srv.role == "prefill" else None)
        self._json({"id": "r", "object": "text_completion", "model": "m", "kv_transfer_params": kv,
                    "choices": [{"index": 0, "text": f"from {srv.name}", "finish_reason": "length"}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}})


def peer(role: str, i: int) -> ThreadingHTTPServer:
    s = ThreadingHTTPServer(("127.0.0.1", free_port()), _Peer)
    s.role, s.name, s.seen = role, f"{role}-{i}", []
    threading.Thread(target=s.serve_forever, args=(POLL_S,), daemon=True).start()
    return s


def _static(argv: list[str], port: int, prefill: list[str], decode: list[str]) -> list[str]:
    """The emitted arguments with service discovery and the listen address replaced (module docstring)."""
    out, i = [], 0
    while i < len(argv):
        a = argv[i]
        if a in DISCOVERY:
            n = DISCOVERY[a]
            i += 1
            while n is None and i < len(argv) and not argv[i].startswith("--"):
                i += 1
            i += n or 0
            continue
        out.append(a)
        i += 1
    out += ["--host", "127.0.0.1", "--port", str(port), "--prometheus-host", "127.0.0.1",
            "--prometheus-port", str(free_port())]
    for u in prefill:
        out += ["--prefill", u]
    for u in decode:
        out += ["--decode", u]
    return out


@contextlib.contextmanager
def running(args: list[str], log_path, package: str = "vllm_router"):
    """A router package's launcher (vllm-router's, or sglang-router's) with ``args`` (listening on
    127.0.0.1), until it answers /readiness; yields its base URL and stops it on exit."""
    port = int(args[args.index("--port") + 1])
    log = open(log_path, "w")
    proc = subprocess.Popen([sys.executable, "-m", f"{package}.launch_router", *args], stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, open(log_path).read()[-2000:]
            try:
                if httpx.get(f"{base}/readiness", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "router not ready in 60 s"
            time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def check_flow(base: str, peers: dict[str, list[ThreadingHTTPServer]], n: int = 4) -> None:
    """``n`` requests through the router at ``base``: each to a prefill peer for one token with
    ``do_remote_decode``, then to a decode peer with that prefiller's KV parameters, whose answer the client
    gets."""
    for k in range(n):
        r = httpx.post(f"{base}/v1/completions", timeout=30,
                       json={"model": "m", "prompt": f"request {k}", "max_tokens": 16})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"].startswith("from decode-")
    pre = [b for s in peers["prefill"] for p, b in s.seen if p == "/v1/completions"]
    dec = [b for s in peers["decode"] for p, b in s.seen if p == "/v1/completions"]
    assert len(pre) == len(dec) == n
    for b in pre:  # one token, and the prefiller keeps the KV for a remote decoder
        assert b["max_tokens"] == 1 and b["kv_transfer_params"]["do_remote_decode"] is True
    served = {s.name for s in peers["prefill"] if s.seen}
    for b in dec:  # the whole request, with the KV parameters of the prefiller that computed it
        kv = b["kv_transfer_params"]
        assert b["max_tokens"] == 16 and kv["do_remote_prefill"] is True
        assert kv["remote_engine_id"] in served and kv["remote_host"] == kv["remote_engine_id"]
    prompts = sorted(b["prompt"] for b in dec)
    assert prompts == sorted(b["prompt"] for b in pre) == [f"request {k}" for k in range(n)]


def test_the_emitted_router_sends_prefill_then_decode_with_the_kv_parameters(plan_of, tmp_path):
    plan, _, spec = plan_of("disaggregated")
    objs = [o for t in render(plan, spec, "k8s")[0].values() for o in yaml.safe_load_all(t)]
    router = next(o for o in objs if o["kind"] == "Deployment"
                  and o["metadata"]["labels"]["app.kubernetes.io/name"] == APP)
    argv = runtime.k8s([router])[router["metadata"]["name"]][0].argv
    peers = {r: [peer(r, i) for i in range(2)] for r in ("prefill", "decode")}  # power_of_two needs two
    url = {r: [f"http://127.0.0.1:{s.server_port}" for s in ps] for r, ps in peers.items()}
    args = _static(argv[1:], free_port(), url["prefill"], url["decode"])
    try:
        with running(args, tmp_path / "router.log") as base:
            check_flow(base, peers)
    finally:
        for ps in peers.values():
            for s in ps:
                s.shutdown()
