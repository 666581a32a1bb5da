"""`trimtab emit --to compose` of a P/D plan: a P/D router service (vllm-router, NIXL P/D mode, the same
command line as --to k8s's but with each replica's URL instead of Kubernetes discovery) per prefill/decode
pair. Checked: the files against the compose-spec JSON Schema; the router's argv as compose runs it
(``runtime.compose``) read by vllm-router's own parser and the Rust router's constructor; every URL it is
given resolved as compose would (a service name on the router's own node's project network, or another
node's name and published port) to exactly the pair's replicas, listening on that port; ``depends_on``
naming the pair's replicas of its node, which have health checks; its published port reaching the port it
listens on, and ``emit``'s prerequisites naming it as the workload's entry point; and the real router run
with that argv (each URL rewritten to a stand-in peer on 127.0.0.1, as compose's DNS would resolve it to the
engine) sending each request to a prefiller, then to a decoder with its KV parameters."""
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

jsonschema = pytest.importorskip("jsonschema")
SCHEMA = json.loads((Path(__file__).resolve().parent / "schemas" / "compose-spec.json").read_text())
PAIR = ("trimtab.dev/prefill", "trimtab.dev/decode")


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
    return {f"{n}": dump_canonical(d) for n, d in compose.compose_files(replace(b, targets=targets)).items()}


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


def _router_parse(argv: list[str]):
    from tests.engines.test_emit_pd_router import _router_parse as parse

    return parse(argv)


@pytest.mark.parametrize("where", ("as planned", "one node"))
def test_each_pair_gets_a_router_reaching_exactly_its_replicas(plan_of, where):
    plan, _, spec = plan_of("disaggregated")
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
        parsed = _router_parse(proc.argv)
        if parsed is not None:  # without the package the URLs are read from the argv as the parser would
            assert parsed.vllm_pd_disaggregation and not parsed.service_discovery
            assert parsed.kv_connector == "nixl" and parsed.port == runtime.listen_port(proc)
            prefill = [u for u, boot in parsed.prefill_urls]
            decode = list(parsed.decode_urls)
        else:
            prefill = [proc.argv[i + 1] for i, a in enumerate(proc.argv) if a == "--prefill"]
            decode = [proc.argv[i + 1] for i, a in enumerate(proc.argv) if a == "--decode"]
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


def test_the_compose_router_sends_prefill_then_decode(plan_of, tmp_path):
    pytest.importorskip("vllm_router.router")
    from tests.engines.test_pd_router_runs import check_flow, peer, running

    plan, _, spec = plan_of("disaggregated")
    docs = _docs(emit(plan, spec, "compose").files)
    (home, name, _), = _routers(docs)
    argv = _proc(docs[home], name).argv
    assert argv[0] == "vllm-router"
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
        with running(_local(argv[1:], free_port(), urls), tmp_path / "router.log") as base:
            check_flow(base, peers)
    finally:
        for ps in peers.values():
            for s in ps:
                s.shutdown()
