"""Specs served by SGLang or TensorRT-LLM (defaults.engine) end to end: plan -> emit --to k8s, manifests
valid, the engine's own command in them, TensorRT-LLM's options file mounted, autoscaling on SGLang's queue
gauge and none for TensorRT-LLM (it exports no waiting-queue gauge)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trimtab.deploy import render
from tests.engines.test_emit_k8s import validate

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", params=["sglang", "trt-llm"])
def engine_bundle(request, tmp_path_factory):
    import trimtab

    text = (ROOT / "examples/quickstart.yaml").read_text()
    path = tmp_path_factory.mktemp(request.param) / "spec.yaml"
    path.write_text(text.rstrip() + f"\ndefaults: {{engine: {request.param}}}\n")
    spec = trimtab.load_spec(path)
    # the manifests are under test, not the SLOs: the cost model's plan, without the simulation rounds
    plan = trimtab.plan(spec, validate=False).plan
    return request.param, plan, render(plan, spec, "k8s")[0]


def test_manifests_validate_and_carry_the_engine_command(engine_bundle):
    engine, plan, files = engine_bundle
    assert plan.engine.name == engine
    objs = [o for t in files.values() for o in yaml.safe_load_all(t)]
    for o in objs:
        validate(o)
    deps = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Deployment"}
    scalers = [o for o in objs if o["kind"] == "ScaledObject"]
    for d in plan.deployments:
        c = deps[d.name]["spec"]["template"]["spec"]["containers"][0]
        assert c["command"] + c["args"] == d.command
        if engine == "trt-llm":
            assert c["workingDir"] == "/etc/trimtab"
            (fname, text), = d.engine_files.items()
            cm = next(o for o in objs if o["kind"] == "ConfigMap"
                      and o["metadata"]["name"] == f"{d.name}-engine-files")
            assert cm["data"] == {fname: text}
    if engine == "sglang":
        assert len(scalers) == len(plan.deployments)
        assert all("sglang:num_queue_reqs" in s["spec"]["triggers"][0]["metadata"]["query"] for s in scalers)
    else:
        assert scalers == []
