"""`trimtab emit --to k8s` of a P/D plan: a P/D router (the vLLM project's vllm-router, NIXL P/D mode) per
prefill/decode pair, reached by the workload's HTTPRoute, whose command line vllm-router's own parser reads
(when the vllm-router package is installed) and whose service discovery selects exactly the pair's serving
pods on the port their engines listen on; its RBAC lets it list them. The PodMonitor option against
prometheus-operator's CRD schema (tests/engines/schemas)."""
from __future__ import annotations

import pytest
import yaml

from tests.engines import runtime
from trimtab.deploy import render
from trimtab.deploy.common import Cluster
from trimtab.deploy.pdrouter import ACCOUNT, APP

validate = pytest.importorskip("tests.engines.test_emit_k8s").validate


def _objs(files: dict[str, str]) -> list[dict]:
    return [o for text in files.values() for o in yaml.safe_load_all(text)]


# The P/D router of each engine (profiles/engine_flags.yaml pd_router): its Python package and program
ROUTERS = {"vllm": ("vllm_router", ["vllm-router"]),
           "sglang": ("sglang_router", ["python3", "-m", "sglang_router.launch_router"])}


def router_parse(argv: list[str], engine: str = "vllm"):
    """The router's Python launcher parser (``<package>/launch_router.py parse_router_args``) and its own
    validation, then the Rust router's constructor, which rejects what its config cannot hold; None without
    the package."""
    import importlib

    package, program = ROUTERS[engine]
    try:
        launch = importlib.import_module(f"{package}.launch_router")
        router = importlib.import_module(f"{package}.router")
    except ImportError:
        return None
    assert argv[:len(program)] == program, argv[:4]
    args = launch.parse_router_args(argv[len(program):])
    args._validate_router_args()
    router.Router.from_args(args)
    return args


def _labels_match(sel: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in sel.items())


def _selector(argv: list[str], flag: str) -> dict:
    i = argv.index(flag) + 1
    out = {}
    while i < len(argv) and not argv[i].startswith("--"):
        k, v = argv[i].split("=", 1)
        out[k] = v
        i += 1
    return out


def _routed(plan, spec, cluster=None):
    """(objects, the processes Kubernetes would start, the P/D router Deployments) of ``emit --to k8s``, every
    object valid against its schema and no warning that a pair has no router."""
    files, warns = render(plan, spec, "k8s", **({"cluster": cluster} if cluster is not None else {}))
    assert not any("no P/D router" in w for w in warns)
    objs = _objs(files)
    for o in objs:
        validate(o)
    routers = [o for o in objs if o["kind"] == "Deployment"
               and o["metadata"]["labels"]["app.kubernetes.io/name"] == APP]
    return objs, runtime.k8s(objs), routers


@pytest.mark.parametrize("namespace", (None, "llm"))
def test_each_pair_gets_a_router_that_reaches_its_pods(plan_of, namespace):
    plan, _, spec = plan_of("disaggregated")
    objs, procs, routers = _routed(plan, spec, Cluster(namespace=namespace))
    pairs = {(r.prefill, r.decode) for r in plan.routes if r.prefill}
    assert len(routers) == len(pairs) >= 1
    engines = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Deployment" and o not in routers}
    for router in routers:
        proc = procs[router["metadata"]["name"]][0]
        ns = namespace or runtime.NAMESPACE
        assert proc.argv[proc.argv.index("--service-discovery-namespace") + 1] == ns  # $(POD_NAMESPACE)
        picked = {}
        for side, flag in (("prefill", "--prefill-selector"), ("decode", "--decode-selector")):
            sel = _selector(proc.argv, flag)
            hits = [n for n, o in engines.items()
                    if _labels_match(sel, o["spec"]["template"]["metadata"]["labels"])]
            assert len(hits) == 1, (side, hits)  # exactly one deployment's pods: the pair's side
            picked[side] = hits[0]
            eng = procs[hits[0]][0]
            port = int(proc.argv[proc.argv.index("--service-discovery-port") + 1])
            assert runtime.listen_port(eng) == port, (side, eng.argv)
            # the KV peer address the prefiller returns and the router passes on to the decoder
            assert eng.env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == runtime.POD_IP
        assert (picked["prefill"], picked["decode"]) in {(p.replace(".", "-"), d.replace(".", "-"))
                                                          for p, d in pairs}
        parsed = router_parse(proc.argv)
        if parsed is not None:
            assert parsed.vllm_pd_disaggregation and parsed.service_discovery
            assert parsed.kv_connector == "nixl"
            assert parsed.prefill_selector == _selector(proc.argv, "--prefill-selector")
            assert parsed.decode_selector == _selector(proc.argv, "--decode-selector")
            assert parsed.port == runtime.listen_port(proc) and parsed.service_discovery_namespace == ns
        # the router may list pods: its ServiceAccount is bound to a Role that allows it, in its namespace
        spec_ = router["spec"]["template"]["spec"]
        assert spec_["serviceAccountName"] == ACCOUNT
        role = next(o for o in objs if o["kind"] == "Role" and o["metadata"]["name"] == ACCOUNT)
        assert any("pods" in r["resources"] and {"list", "watch"} <= set(r["verbs"]) for r in role["rules"])
        rb = next(o for o in objs if o["kind"] == "RoleBinding")
        assert rb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ACCOUNT}
        assert rb["subjects"][0]["name"] == ACCOUNT and rb["subjects"][0].get("namespace") == namespace
    # a P/D workload's request: HTTPRoute -> the router Service -> the router listening on that port
    for w in sorted({r.workload for r in plan.routes if r.prefill}):
        route = runtime.route_k8s(objs, w, 1000)
        assert set(route.procs) <= {o["metadata"]["name"] for o in routers} and route.procs, route.hops
        assert all(runtime.listen_port(p) == route.port for p in route.procs.values()), route.hops


def test_an_engine_without_a_pd_router_still_says_so(plan_of):
    """TensorRT-LLM's P/D needs a router of its own, which emit does not write (its profile has no
    ``pd_router``): the pairs' workloads get no router objects or services and the warning stays, on k8s and
    compose (shown on the vLLM plan with its router taken out of the profile)."""
    from dataclasses import replace

    from trimtab.deploy import compose, k8s
    from trimtab.deploy.common import prepare
    from trimtab.engines.base import engine_table

    assert "pd_router" not in engine_table("trt-llm") and "pd_router" in engine_table("sglang")
    plan, _, spec = plan_of("disaggregated")
    b = prepare(plan, spec)
    b = replace(b, engine={k: v for k, v in b.engine.items() if k != "pd_router"})
    assert any("no P/D router" in w for w in k8s.warnings(b))
    objs = [o for objs in k8s.manifests(b).values() for o in objs]
    assert not any(o["kind"] in ("RoleBinding", "HTTPRoute") for o in objs)
    assert any("--to compose has no P/D router" in w for w in compose.warnings(b))
    services = [s for doc in compose.compose_files(b).values() for s in doc["services"]]
    assert services and not any(s.startswith("pd-") for s in services)


def test_pod_monitor_scrapes_every_engine_pod_and_no_router(plan_of):
    plan, _, spec = plan_of("disaggregated")
    objs = _objs(render(plan, spec, "k8s", cluster=Cluster(pod_monitor=True))[0])
    pm = next(o for o in objs if o["kind"] == "PodMonitor")
    validate(pm)  # prometheus-operator's CRD schema, with the pruning rule
    sel = pm["spec"]["selector"]["matchLabels"]
    ports = {e["port"] for e in pm["spec"]["podMetricsEndpoints"]}
    assert {e["path"] for e in pm["spec"]["podMetricsEndpoints"]} == {"/metrics"}
    for o in objs:
        if o["kind"] != "Deployment":
            continue
        tmpl = o["spec"]["template"]
        engine = tmpl["metadata"]["labels"]["app.kubernetes.io/name"] != APP
        assert _labels_match(sel, tmpl["metadata"]["labels"]) is engine, o["metadata"]["name"]
        if engine:  # the selected pods expose the named port the PodMonitor scrapes
            assert ports <= {p["name"] for c in tmpl["spec"]["containers"] for p in c.get("ports", [])}
    plain = _objs(render(plan, spec, "k8s")[0])
    assert not any(o["kind"] == "PodMonitor" for o in plain)  # an option: the annotations stay the default


def test_sglang_pairs_get_sglang_router_that_finds_the_bootstrap_port(plan_of, tmp_path):
    """The disaggregated plan realised for SGLang (``defaults.engine``): each pair's router is sglang-router
    in its P/D mode, its argv read by sglang-router's own parser, its selectors each picking exactly the
    pair's side, and the prefill pods annotated with the bootstrap port under the annotation the router
    reads it from (its discovery has no other source for it)."""
    import trimtab
    from pathlib import Path

    plan, _, _ = plan_of("disaggregated")
    text = (Path(__file__).resolve().parents[2] / "examples/disaggregated.yaml").read_text()
    (tmp_path / "spec.yaml").write_text(text.rstrip() + "\ndefaults: {engine: sglang}\n")
    objs, procs, routers = _routed(plan, trimtab.load_spec(tmp_path / "spec.yaml"))
    assert len(routers) == len({(r.prefill, r.decode) for r in plan.routes if r.prefill}) >= 1
    engines = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Deployment" and o not in routers}
    for router in routers:
        argv = procs[router["metadata"]["name"]][0].argv
        assert argv[:3] == ROUTERS["sglang"][1]
        parsed = router_parse(argv, "sglang")
        if parsed is None:
            pytest.skip("sglang-router is not installed (the test extra has it)")
        assert parsed.pd_disaggregation and parsed.service_discovery
        assert parsed.service_discovery_port == runtime.listen_port(procs[next(iter(engines))][0])
        for side, sel in (("prefill", parsed.prefill_selector), ("decode", parsed.decode_selector)):
            hits = [n for n, o in engines.items()
                    if _labels_match(sel, o["spec"]["template"]["metadata"]["labels"])]
            assert len(hits) == 1, (side, hits)
            ann = engines[hits[0]]["spec"]["template"]["metadata"].get("annotations", {})
            port = ann.get(parsed.bootstrap_port_annotation)
            assert (port == "8998") if side == "prefill" else port is None, (side, ann)
            assert f"--disaggregation-mode={side}" in procs[hits[0]][0].argv
