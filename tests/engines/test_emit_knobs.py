"""`trimtab emit`'s cluster knobs (--namespace, --image, --storage-class, --access-mode, --prometheus,
--gateway, --rdma-resource) reach every object they concern, and emit lists each target's prerequisites
(docs/deploy.md)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from trimtab.cli.main import app
from trimtab.deploy import emit
from trimtab.deploy.common import Cluster

ROOT = Path(__file__).resolve().parents[2]
KNOBS = Cluster(namespace="serving", image="registry.example/vllm-openai:v0.32.0", storage_class="fast-rwx",
                access_mode="ReadWriteMany", prometheus="http://prom.obs.svc:9090", gateway="infra/edge")


def test_k8s_objects_carry_the_knobs(plan_of):
    from tests.engines.test_emit_k8s import validate

    plan, _, spec = plan_of("quickstart")
    e = emit(plan, spec, "k8s", cluster=KNOBS)
    objs = [o for text in e.files.values() for o in yaml.safe_load_all(text)]
    seen = set()
    for o in objs:
        validate(o)
        assert o["metadata"]["namespace"] == "serving"
        seen.add(o["kind"])
        if o["kind"] == "Deployment":
            assert o["spec"]["template"]["spec"]["containers"][0]["image"] == KNOBS.image
        elif o["kind"] == "PersistentVolumeClaim":
            assert o["spec"]["storageClassName"] == "fast-rwx"
        elif o["kind"] == "ScaledObject":
            assert o["spec"]["triggers"][-1]["metadata"]["serverAddress"] == KNOBS.prometheus
        elif o["kind"] == "HTTPRoute":
            assert o["spec"]["parentRefs"] == [{"name": "edge", "namespace": "infra"}]
    assert {"Deployment", "PersistentVolumeClaim", "ScaledObject", "HTTPRoute"} <= seen
    need = "\n".join(e.prerequisites)
    for word in ("KEDA", KNOBS.prometheus, "Gateway infra/edge", "fast-rwx", "hf-token",
                 "HF_TOKEN -n serving"):
        assert word in need, word


def test_an_image_of_another_version_is_said(plan_of):
    plan, _, spec = plan_of("quickstart")
    e = emit(plan, spec, "k8s", cluster=Cluster(image="vllm/vllm-openai:v0.9.0"))
    assert any("--image vllm/vllm-openai:v0.9.0" in w for w in e.warnings)
    assert not any("--image" in w for w in emit(plan, spec, "k8s", cluster=KNOBS).warnings)


@pytest.mark.parametrize("target", ("k8s", "compose", "dynamo", "llm-d"))
def test_every_target_lists_its_prerequisites(plan_of, target):
    plan, _, spec = plan_of("quickstart")
    assert emit(plan, spec, target).prerequisites


def test_cli_prints_prerequisites_and_takes_the_knobs(plan_of, tmp_path):
    from trimtab.contract.write import emit as write_plan

    path = tmp_path / "plan.yaml"
    path.write_text(write_plan(plan_of("quickstart")[0]))
    args = ["emit", str(path), "--spec", str(ROOT / "examples/quickstart.yaml"), "--to", "k8s", "-o", "-",
            "--namespace", "serving", "--storage-class", "fast-rwx"]
    r = CliRunner().invoke(app, [*args, "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert any("fast-rwx" in p for p in doc["prerequisites"])
    objs = [o for t in doc["files"].values() for o in yaml.safe_load_all(t)]
    assert objs and all(o["metadata"]["namespace"] == "serving" for o in objs)
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0 and "needs on the cluster" in r.stderr and "kind: Deployment" in r.stdout


def test_each_scaler_reads_its_own_pods_only(plan_of):
    """KEDA's query selects a deployment's pods by name: multi-lora has deployments whose names extend
    another's (...-t2k and ...-t2k-l2); `NAME-.*` summed both queues into one ScaledObject."""
    import re

    plan, _, spec = plan_of("multi-lora")
    # the case itself, whatever the example's plan is today: a deployment whose name extends another's
    first = plan.deployments[0]
    plan = plan.model_copy(update={"deployments": [*plan.deployments,
                                                   first.model_copy(update={"name": f"{first.name}-l2"})]})
    objs = [o for text in emit(plan, spec, "k8s").files.values() for o in yaml.safe_load_all(text)]
    names = [o["metadata"]["name"] for o in objs if o["kind"] == "Deployment"]
    assert any(a != b and b.startswith(a) for a in names for b in names)
    pods = {n: f"{n}-7d9f8c6b5-x2k4q" for n in names}  # ReplicaSet hash and suffix, as Kubernetes names pods
    for o in objs:
        if o["kind"] == "ScaledObject":
            query = o["spec"]["triggers"][-1]["metadata"]["query"]
            pattern = re.search(r'pod=~"([^"]+)"', query).group(1)
            hits = {n for n, pod in pods.items() if re.fullmatch(pattern, pod)}
            assert hits == {o["metadata"]["name"]}, (query, hits)
