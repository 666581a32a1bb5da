"""`trimtab emit --to k8s` for every example: each built-in object validated by kubernetes-validate (the
Kubernetes OpenAPI schemas, strict: unknown fields rejected), each custom resource against its published CRD
schema (tests/engines/schemas/) with the API server's pruning rule applied (a field the schema does not
declare would be dropped silently: here it fails)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from trimtab.deploy import render
from trimtab.deploy.common import Cluster, k8s_name

kubernetes_validate = pytest.importorskip("kubernetes_validate")
jsonschema = pytest.importorskip("jsonschema")

K8S_VERSION = "1.33.0"
SCHEMAS = Path(__file__).resolve().parent / "schemas"
CRDS = {("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): "leaderworkerset.x-k8s.io_v1.json",
        ("keda.sh/v1alpha1", "ScaledObject"): "keda.sh_scaledobject_v1alpha1.json",
        ("gateway.networking.k8s.io/v1", "HTTPRoute"): "gateway.networking.k8s.io_httproute_v1.json",
        ("monitoring.coreos.com/v1", "PodMonitor"): "monitoring.coreos.com_podmonitor_v1.json"}


def _pruned(obj, schema, path="") -> list[str]:
    """Fields of ``obj`` the schema does not declare (the API server would prune them)."""
    bad = []
    if isinstance(obj, dict) and schema.get("type") == "object":
        props = schema.get("properties")
        if props is not None and not schema.get("x-kubernetes-preserve-unknown-fields") \
                and "additionalProperties" not in schema:
            bad += [f"{path}.{k}" for k in obj if k not in props
                    and not (path == "" and k in ("apiVersion", "kind"))]
        for k, v in obj.items():
            sub = (props or {}).get(k) or (schema.get("additionalProperties") if isinstance(
                schema.get("additionalProperties"), dict) else None)
            if sub is not None and k != "metadata":
                bad += _pruned(v, sub, f"{path}.{k}")
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, v in enumerate(obj):
            bad += _pruned(v, schema["items"], f"{path}[{i}]")
    return bad


def validate(obj: dict) -> None:
    key = (obj["apiVersion"], obj["kind"])
    if key in CRDS:
        schema = json.loads((SCHEMAS / CRDS[key]).read_text())
        jsonschema.Draft7Validator(schema).validate(obj)
        assert _pruned(obj, schema) == [], key
        if obj["kind"] == "LeaderWorkerSet":  # its pod templates against the Kubernetes Pod schema too
            t = obj["spec"]["leaderWorkerTemplate"]
            for tmpl in (t["leaderTemplate"], t["workerTemplate"]):
                kubernetes_validate.validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
                                              "spec": tmpl["spec"]}, K8S_VERSION, strict=True)
    else:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


MONITORED = Cluster(pod_monitor=True)  # every example with the optional PodMonitor too


@pytest.fixture(scope="module")
def bundles(example_plans, example_specs):
    return {n: render(plan, example_specs[n], "k8s", allow_experimental=True, cluster=MONITORED)
            for n, (plan, _) in example_plans.items()}


def test_every_manifest_of_every_example_validates(bundles):
    kinds = set()
    for name, (files, _) in bundles.items():
        for fname, text in files.items():
            for obj in yaml.safe_load_all(text):
                validate(obj)
                kinds.add(obj["kind"])
    assert kinds >= {"Deployment", "LeaderWorkerSet", "Service", "ScaledObject", "HTTPRoute", "ConfigMap",
                     "PersistentVolumeClaim", "PodMonitor", "ServiceAccount", "Role", "RoleBinding"}


def test_validation_catches_a_mistake():
    """The validators are strict enough to matter: a misspelt field fails each path."""
    with pytest.raises(Exception):
        validate({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}, "spec": {"portz": []}})
    bad = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "x"},
           "spec": {"scaleTargetRef": {"name": "x"}, "minReplicas": 1,  # KEDA's field is minReplicaCount
                    "triggers": [{"type": "prometheus", "metadata": {"query": "q"}}]}}
    with pytest.raises(AssertionError):  # the CRD schema allows it; the API server would prune it
        validate(bad)


def _objs(files: dict[str, str]) -> list[dict]:
    return [o for text in files.values() for o in yaml.safe_load_all(text)]


def test_deployments_carry_the_plan(example_plans, bundles):
    tiered = 0
    for name, (plan, _) in example_plans.items():
        objs = _objs(bundles[name][0])
        for d in plan.deployments:
            w = next(o for o in objs if o["kind"] in ("Deployment", "LeaderWorkerSet")
                     and o["metadata"]["name"] == k8s_name(d.name))
            assert w["spec"]["replicas"] == d.replicas
            if w["kind"] == "Deployment":
                pod = w["spec"]["template"]["spec"]
                c = pod["containers"][0]
                assert c["command"] + c["args"] == d.command
                gpus = d.tensor_parallel * d.pipeline_parallel * d.data_parallel
                assert c["resources"]["limits"]["nvidia.com/gpu"] == gpus
            else:
                pod = w["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
                c = pod["containers"][0]
                assert w["spec"]["leaderWorkerTemplate"]["size"] == 2
                assert "--master-addr=$(LWS_LEADER_ADDRESS)" in c["args"]
                worker = w["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
                assert "--node-rank=$(LWS_WORKER_INDEX)" in worker["args"] and "--headless" in worker["args"]
                assert c["resources"]["limits"]["nvidia.com/gpu"] == 8
            assert "nvidia.com/gpu.product" in pod["nodeSelector"]
            assert {v["name"] for v in pod["volumes"]} >= {"dshm", "model-cache"}
            assert c["startupProbe"]["httpGet"]["path"] == "/health"
            # the prefix cache's host tier: the pod requests the pinned host memory it holds (long-context's
            # RAG)
            host = d.kv.offload_gib if d.kv is not None and not d.kv.live else 0.0
            assert (c["resources"]["requests"].get("memory")
                    == (f"{math.ceil(host)}Gi" if host else None)), name
            tiered += host > 0
    assert tiered >= 1


def test_startup_budget_grows_with_the_weights(bundles):
    """405B (about 810 GB in bf16) gets a longer start-up budget than an 8B model."""
    def budget(name, prefix):
        o = next(o for o in _objs(bundles[name][0]) if o["kind"] in ("Deployment", "LeaderWorkerSet")
                 and o["metadata"]["name"].startswith(prefix))
        spec = o["spec"]["template"]["spec"] if o["kind"] == "Deployment" else \
            o["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
        p = spec["containers"][0]["startupProbe"]
        return p["failureThreshold"] * p["periodSeconds"]
    assert budget("big405b", "chat") > budget("quickstart", "autocomplete") >= 300


def test_router_weights_are_the_plan_shares(example_plans, bundles):
    plan, _ = example_plans["quickstart"]
    routes = [o for o in _objs(bundles["quickstart"][0]) if o["kind"] == "HTTPRoute"]
    chat = next(r for r in routes if r["metadata"]["name"] == "chat-route")
    weights = {b["name"]: b["weight"] for b in chat["spec"]["rules"][0]["backendRefs"]}
    want = {}
    for r in plan.routes:
        if r.workload == "chat":
            want[r.deployment] = want.get(r.deployment, 0) + r.share
    assert weights == {k: round(v * 10_000) for k, v in want.items()}
    table = yaml.safe_load(next(o for o in _objs(bundles["quickstart"][0]) if o["kind"] == "ConfigMap"
                                and o["metadata"]["name"] == "trimtab-routes")["data"]["routes.yaml"])
    assert {b["bucket"] for b in table["chat"]} == {r.bucket for r in plan.routes if r.workload == "chat"}


def test_emit_is_byte_stable(example_plans, example_specs, bundles):
    plan, _ = example_plans["quickstart"]
    assert render(plan, example_specs["quickstart"], "k8s", cluster=MONITORED)[0] == bundles["quickstart"][0]


def test_emit_bytes_do_not_depend_on_the_hash_seed(example_plans, tmp_path):
    """A process whose string hashes differ from this one's writes the manifests this process writes (no set
    order leaks out)."""
    import os
    import subprocess
    import sys

    from tests.conftest import run_cli
    from trimtab.contract.write import emit

    root = Path(__file__).resolve().parents[2]
    plan = tmp_path / "plan.yaml"
    plan.write_text(emit(example_plans["disaggregated"][0]))
    args = ["emit", str(plan), "--spec", str(root / "examples/disaggregated.yaml"), "--to", "k8s", "-o", "-"]
    here = run_cli(*args)
    assert here.exit_code == 0, here.output
    seed = "4242" if os.environ.get("PYTHONHASHSEED") == "1" else "1"  # not this process's hashes
    r = subprocess.run([sys.executable, "-m", "trimtab.cli.main", *args], cwd=root, capture_output=True,
                       text=True, env={**os.environ, "PYTHONHASHSEED": seed})
    assert r.returncode == 0, r.stderr
    assert r.stdout == here.stdout and "kind: Deployment" in r.stdout
