"""`trimtab emit --to dynamo`: the DynamoGraphDeployment structure of Dynamo's published vLLM examples, each
container against the Kubernetes schema, and each worker's arguments parsed by vLLM's engine-argument parser
(what `python3 -m dynamo.vllm` hands to vLLM). The full CRD schema is not used (about 780 KB; docs/deploy.md)."""
from __future__ import annotations

import pytest
import yaml

from trimtab.deploy import render
from trimtab.deploy.dynamo import ROLE_FLAGS

kubernetes_validate = pytest.importorskip("kubernetes_validate")
jsonschema = pytest.importorskip("jsonschema")
arg_utils = pytest.importorskip("vllm.engine.arg_utils")
argparse_utils = pytest.importorskip("vllm.utils.argparse_utils")

# Structure of github.com/ai-dynamo/dynamo examples/backends/vllm/deploy/disagg.yaml and disagg-multinode.yaml
SERVICE = {"type": "object", "additionalProperties": False, "required": ["componentType", "replicas", "extraPodSpec"],
           "properties": {
               "componentType": {"enum": ["frontend", "worker"]},
               "subComponentType": {"enum": ["prefill", "decode"]},
               "replicas": {"type": "integer", "minimum": 0},
               "envFromSecret": {"type": "string"},
               "resources": {"type": "object", "properties": {"limits": {
                   "type": "object", "properties": {"gpu": {"type": "string", "pattern": "^[0-9]+$"}}}}},
               "multinode": {"type": "object", "additionalProperties": False,
                             "properties": {"nodeCount": {"type": "integer", "minimum": 2}}},
               "extraPodSpec": {"type": "object", "required": ["mainContainer"]}}}
DGD = {"type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
       "properties": {"apiVersion": {"const": "nvidia.com/v1alpha1"}, "kind": {"const": "DynamoGraphDeployment"},
                      "spec": {"type": "object", "additionalProperties": False, "required": ["services"],
                               "properties": {"backendFramework": {"enum": ["vllm", "sglang", "trtllm"]},
                                              "services": {"type": "object", "additionalProperties": SERVICE}}}}}


def engine_parse(args: list[str]):
    argv = [a for a in args if a not in ROLE_FLAGS.values()]
    p = arg_utils.AsyncEngineArgs.add_cli_args(argparse_utils.FlexibleArgumentParser())
    return p.parse_args(argv)


def test_every_example_emits_valid_graphs(example_plans, example_specs):
    for name, (plan, ir) in example_plans.items():
        files, _ = render(plan, example_specs[name], "dynamo", allow_experimental=True)
        workers = 0
        for text in files.values():
            for g in yaml.safe_load_all(text):
                jsonschema.validate(g, DGD)
                for sname, svc in g["spec"]["services"].items():
                    pod = {k: v for k, v in svc["extraPodSpec"].items() if k != "mainContainer"}
                    pod["containers"] = [{"name": "main", **svc["extraPodSpec"]["mainContainer"]}]
                    kubernetes_validate.validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
                                                  "spec": pod}, "1.33.0", strict=True)
                    if svc["componentType"] != "worker":
                        continue
                    d = next(d for d in plan.deployments if d.name.replace(".", "-") == sname)
                    args = svc["extraPodSpec"]["mainContainer"]["args"]
                    ns = engine_parse(args)
                    assert ns.model == ir.identities[d.model].model_id
                    assert ns.max_model_len == d.context_tokens <= d.kv_cache_tokens
                    assert ns.tensor_parallel_size == d.tensor_parallel and svc["replicas"] == d.replicas
                    if d.role == "unified":
                        assert not set(args) & set(ROLE_FLAGS.values())
                    else:
                        assert ROLE_FLAGS[d.role] in args
                    assert svc.get("subComponentType") == (d.role if d.role != "unified" else None)
                    if d.role != "unified":
                        assert ns.kv_transfer_config is None  # Dynamo wires NIXL itself
                    workers += 1
        assert workers == len(plan.deployments), name


def test_multi_node_worker_declares_its_nodes(example_plans, example_specs):
    plan, _ = example_plans["big405b"]
    files, _ = render(plan, example_specs["big405b"], "dynamo")
    svc = next(s for g in yaml.safe_load_all(next(iter(files.values())))
               for s in g["spec"]["services"].values() if s["componentType"] == "worker")
    assert svc["multinode"] == {"nodeCount": 2} and svc["resources"]["limits"]["gpu"] == "8"
