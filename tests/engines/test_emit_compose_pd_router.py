"""`trimtab emit --to compose` of a P/D plan: a P/D router service per prefill/decode pair, the engine's own
router with the command line --to k8s gives it but each replica's URL instead of Kubernetes discovery: for
vLLM vllm-router (NIXL P/D mode), for SGLang sglang-router (P/D mode, each prefill URL with its bootstrap
port). Checked for both: the files against the compose-spec JSON Schema; the router's argv as compose runs it
(``runtime.compose``) read by the router package's own parser and its Rust router's constructor; every URL
resolved as compose would (a service name on the router's own node's project network, or another node's
name and published port) to exactly the pair's replicas, listening on that port; ``depends_on`` naming the
pair's replicas of its node, which have health checks; its published port reaching the port it listens on,
and ``emit``'s prerequisites naming it as the workload's entry point; and the real router run with that argv
(each URL rewritten to a stand-in peer on 127.0.0.1, as compose's DNS would resolve it to the engine): vLLM's
sends each request to a prefiller, then to a decoder with its KV parameters; SGLang's sends it to a prefiller
and a decoder, both told the same bootstrap room and the prefiller's bootstrap address. The SGLang plan is
the disaggregated example's, realised for SGLang (``defaults.engine``)."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from tests.e2e.helpers import free_port
from tests.engines import runtime
from trimtab.deploy import compose, emit
from trimtab.deploy.common import prepare
from trimtab.util.yamlio import dump_canonical
from tests.engines.test_emit_pd_router import ROUTERS, router_parse

jsonschema = pytest.importorskip("jsonschema")
SCHEMA = json.loads((Path(__file__).resolve().parent / "schemas" / "compose-spec.json").read_text())
PAIR = ("trimtab.dev/prefill", "trimtab.dev/decode")
ROOT = Path(__file__).resolve().parents[2]
BOOTSTRAP = 8998  # SGLang's --disaggregation-bootstrap-port default, which emit leaves (engine_flags.yaml)


@pytest.fixture(scope="module", params=("vllm", "sglang"))
def pd_case(request, plan_of, tmp_path_factory):
    """(engine, plan, spec): the disaggregated example's plan, with the spec's engine set for SGLang (emit
    re-derives every command from the spec: the same deployments, SGLang's commands and router)."""
    import trimtab

    plan, _, spec = plan_of("disaggregated")
    if request.param != "vllm":
        path = tmp_path_factory.mktemp(request.param) / "spec.yaml"
        text = (ROOT / "examples/disaggregated.yaml").read_text()
        path.write_text(text.rstrip() + f"\ndefaults: {{engine: {request.param}}}\n")
        spec = trimtab.load_spec(path)
    return request.param, plan, spec


def _docs(files: dict[str, str]) -> dict[str, dict]:
    """Node -> its compose document, read from the emitted text and validated as docker compose would."""
    out = {}
    for fname, text in files.items():
        if fname.startswith("compose-"):
            doc = yaml.safe_load(text)
            jsonschema.Draft7Validator(SCHEMA).validate(doc)
            out[fname[len("compose-"):-len(".yaml")]] = doc
    return out


def _one_node(plan, spec) -> dict[str, str]:
    """The plan's compose files with every replica moved to one node (distinct GPU indices): the case where
    the router reaches each replica by its service name."""
    b = prepare(plan, spec)
    gpu, targets = 0, []
    for t in b.targets:
        pl = []
        for p in t.dep.placement:
            pl.append(p.model_copy(update={"node": "one", "gpus": list(range(gpu, gpu + len(p.gpus)))}))
            gpu += len(p.gpus)
        targets.append(replace(t, dep=t.dep.model_copy(update={"placement": pl})))
    return {n: dump_canonical(d) for n, d in compose.compose_files(replace(b, targets=targets)).items()}


def _routers(docs: dict[str, dict]) -> list[tuple[str, str, dict]]:
    return [(node, name, svc) for node, doc in docs.items() for name, svc in doc["services"].items()
            if set(PAIR) <= set(svc.get("labels", {}))]


def _proc(doc: dict, name: str) -> runtime.Proc:
    return next(p for p in runtime.compose(doc) if p.name == name)


def _resolve(docs: dict[str, dict], home: str, url: str) -> tuple[str, str]:
    """(node, service) a URL from the router on node ``home`` reaches: a service name resolves on its own
    project's network (the container's port), a node name to that node (a published host port)."""
    u = urlsplit(url)
    if u.hostname in docs[home]["services"]:
        node, name, port = home, u.hostname, u.port
    else:
        assert u.hostname in docs, url  # neither a service of the router's project nor a node
        node = u.hostname
        name, port = next((n, int(p.split(":")[-1])) for n, s in docs[node]["services"].items()
                          for p in s.get("ports", []) if int(p.split(":")[-2]) == u.port)
    assert runtime.listen_port(_proc(docs[node], name)) == port, (url, node, name)
    return node, name


@pytest.mark.parametrize("where", ("as planned", "one node"))
def test_each_pair_gets_a_router_reaching_exactly_its_replicas(pd_case, where):
    engine, plan, spec = pd_case
    e = emit(plan, spec, "compose")
    assert not any("no P/D router" in w for w in e.warnings)
    docs = _docs(e.files if where == "as planned" else _one_node(plan, spec))
    pairs = {(p.replace(".", "-"), d.replace(".", "-")) for p, d in
             {(r.prefill, r.decode) for r in plan.routes if r.prefill}}
    routers = _routers(docs)
    assert len(routers) == len(pairs) >= 1
    for home, name, svc in routers:
        labels = svc["labels"]
        pair = (labels[PAIR[0]], labels[PAIR[1]])
        assert pair in pairs
        proc = _proc(docs[home], name)
        assert proc.argv[:len(ROUTERS[engine][1])] == ROUTERS[engine][1]
        parsed = router_parse(proc.argv, engine)
        if parsed is None:
            pytest.skip(f"the {ROUTERS[engine][0]} package is not installed (the test extra has it)")
        assert not parsed.service_discovery and parsed.port == runtime.listen_port(proc)
        if engine == "vllm":
            assert parsed.vllm_pd_disaggregation and parsed.kv_connector == "nixl"
        else:
            assert parsed.pd_disaggregation
        # SGLang's prefill URLs carry the bootstrap port their servers listen on; vLLM's none
        assert {boot for _, boot in parsed.prefill_urls} == ({None} if engine == "vllm" else {BOOTSTRAP})
        prefill = [u for u, _ in parsed.prefill_urls]
        decode = list(parsed.decode_urls)
        for side, urls in zip(pair, (prefill, decode)):
            reached = [_resolve(docs, home, u) for u in urls]
            replicas = [(n, s) for n, doc in docs.items() for s in doc["services"]
                        if s.rsplit("-r", 1)[0] == side and s.rsplit("-r", 1)[-1].isdigit()]
            assert sorted(reached) == sorted(replicas) and replicas, (side, urls)  # each replica once
        local = {s for s in docs[home]["services"] if s.rsplit("-r", 1)[0] in pair}
        assert set(svc["depends_on"]) == local and local, svc["depends_on"]
        for dep in svc["depends_on"].values():  # service_healthy needs a health check to wait for
            assert dep["condition"] == "service_healthy"
        assert all("healthcheck" in docs[home]["services"][s] for s in local)
        # the published port reaches the router, and emit names it as its workloads' entry point
        host, container = svc["ports"][0].split(":")
        assert int(container) == runtime.listen_port(proc)
        if where == "as planned":
            said = [p for p in e.prerequisites if f"{name} on {home}, host port {host}" in p]
            assert said and all(w in said[0] for w in labels["trimtab.dev/workloads"].split(","))


def _local(argv: list[str], port: int, urls: dict[str, str]) -> list[str]:
    """The router's arguments with its listen address on 127.0.0.1 and each peer URL replaced by ``urls``
    (the peer that stands in for the engine compose's DNS resolves it to)."""
    out = list(argv)
    for flag, value in (("--host", "127.0.0.1"), ("--port", str(port)), ("--prometheus-host", "127.0.0.1")):
        out[out.index(flag) + 1] = value
    out = [urls.get(a, a) for a in out]
    return out + ["--prometheus-port", str(free_port())]


def _sglang_flow(base: str, peers: dict[str, list], n: int = 4) -> None:
    """SGLang's P/D hand-off: each request goes, whole, to one prefiller and one decoder, both told the same
    ``bootstrap_room`` and the prefiller's bootstrap server (the host of its URL, the bootstrap port), where
    the decoder fetches the KV; the client gets the decoder's answer."""
    import httpx

    for k in range(n):
        r = httpx.post(f"{base}/v1/completions", timeout=30,
                       json={"model": "m", "prompt": f"request {k}", "max_tokens": 16})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"].startswith("from decode-")
    got = {role: [(s, b) for s in ps for p, b in s.seen if p == "/v1/completions"]
           for role, ps in peers.items()}
    assert len(got["prefill"]) == len(got["decode"]) == n
    rooms = {b["bootstrap_room"]: (s, b) for s, b in got["prefill"]}
    assert len(rooms) == n
    for s, b in got["decode"]:
        pre, pb = rooms[b["bootstrap_room"]]
        assert b["prompt"] == pb["prompt"] and b["max_tokens"] == pb["max_tokens"] == 16
        assert (b["bootstrap_host"], b["bootstrap_port"]) == (pre.server_address[0], BOOTSTRAP)
        assert (pb["bootstrap_host"], pb["bootstrap_port"]) == (pre.server_address[0], BOOTSTRAP)


def test_the_compose_router_sends_prefill_then_decode(pd_case, tmp_path):
    engine, plan, spec = pd_case
    package, program = ROUTERS[engine]
    pytest.importorskip(f"{package}.router")
    from tests.engines.test_pd_router_runs import check_flow, peer, running

    docs = _docs(emit(plan, spec, "compose").files)
    (home, name, _), = _routers(docs)
    argv = _proc(docs[home], name).argv
    assert argv[:len(program)] == program
    peers: dict[str, list] = {"prefill": [], "decode": []}
    urls = {}
    for flag, role in (("--prefill", "prefill"), ("--decode", "decode")):
        for i, a in enumerate(argv):
            if a == flag:
                s = peer(role, len(peers[role]))
                peers[role].append(s)
                urls[argv[i + 1]] = f"http://127.0.0.1:{s.server_port}"
    assert peers["prefill"] and peers["decode"]
    try:
        with running(_local(argv[len(program):], free_port(), urls), tmp_path / "router.log",
                     package) as base:
            (check_flow if engine == "vllm" else _sglang_flow)(base, peers)
    finally:
        for ps in peers.values():
            for s in ps:
                s.shutdown()
