"""`trimtab emit --to dynamo`: the DynamoGraphDeployment (nvidia.com/v1beta1) structure of Dynamo's published
vLLM examples, each pod template against the Kubernetes schema, and each worker's arguments parsed by vLLM's
engine-argument parser (what `python3 -m dynamo.vllm` hands to vLLM). The full CRD schema is not used
(docs/deploy.md)."""
from __future__ import annotations

import pytest
import yaml

from trimtab.deploy import render
from trimtab.deploy.dynamo import COMPONENT_TYPE, ROLE_ARGS

kubernetes_validate = pytest.importorskip("kubernetes_validate")
jsonschema = pytest.importorskip("jsonschema")

# Structure of github.com/ai-dynamo/dynamo examples/backends/vllm/deploy/v1beta1/disagg.yaml and
# disagg-multinode.yaml (spec.components[] with a podTemplate)
COMPONENT = {"type": "object", "additionalProperties": False,
             "required": ["name", "type", "replicas", "podTemplate"],
             "properties": {
                 "name": {"type": "string"},
                 "type": {"enum": ["frontend", "worker", "prefill", "decode"]},
                 "replicas": {"type": "integer", "minimum": 0},
                 "multinode": {"type": "object", "additionalProperties": False,
                               "properties": {"nodeCount": {"type": "integer", "minimum": 2}}},
                 "podTemplate": {"type": "object", "required": ["spec"]}}}
DGD = {"type": "object", "required": ["apiVersion", "kind", "metadata", "spec"],
       "properties": {"apiVersion": {"const": "nvidia.com/v1beta1"},
                      "kind": {"const": "DynamoGraphDeployment"},
                      "spec": {"type": "object", "additionalProperties": False, "required": ["components"],
                               "properties": {"components": {"type": "array", "items": COMPONENT}}}}}


def engine_parse(args: list[str]):
    arg_utils = pytest.importorskip("vllm.engine.arg_utils")
    argparse_utils = pytest.importorskip("vllm.utils.argparse_utils")
    role = next((i for i, a in enumerate(args) if a == "--disaggregation-mode"), None)
    argv = args if role is None else args[:role] + args[role + 2:]  # dynamo.vllm's own flag
    p = arg_utils.AsyncEngineArgs.add_cli_args(argparse_utils.FlexibleArgumentParser())
    return p.parse_args(argv)


def _parser_present() -> bool:
    try:
        import vllm  # noqa: F401
    except ImportError:
        return False
    return True


def test_every_example_emits_valid_graphs(example_plans, example_specs):
    for name, (plan, ir) in example_plans.items():
        files, _ = render(plan, example_specs[name], "dynamo", allow_experimental=True)
        workers = 0
        for text in files.values():
            for g in yaml.safe_load_all(text):
                jsonschema.validate(g, DGD)
                for comp in g["spec"]["components"]:
                    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
                           "spec": comp["podTemplate"]["spec"]}
                    kubernetes_validate.validate(pod, "1.33.0", strict=True)
                    if comp["type"] == "frontend":
                        continue
                    d = next(d for d in plan.deployments if d.name.replace(".", "-") == comp["name"])
                    args = comp["podTemplate"]["spec"]["containers"][0]["args"]
                    assert args[:2] == ["--model", ir.identities[d.model].model_id]
                    assert comp["type"] == COMPONENT_TYPE[d.role] and comp["replicas"] == d.replicas
                    assert (args[-2:] == ROLE_ARGS[d.role]) if d.role != "unified" else \
                        "--disaggregation-mode" not in args
                    assert not {"--is-prefill-worker", "--is-decode-worker"} & set(args)  # deprecated
                    if _parser_present():
                        ns = engine_parse(args)
                        assert ns.max_model_len == d.context_tokens <= d.kv_cache_tokens
                        assert ns.tensor_parallel_size == d.tensor_parallel
                    workers += 1
        assert workers == len(plan.deployments), name
        assert "${" not in "".join(files.values())  # every image resolves as written


def test_multi_node_worker_declares_its_nodes(example_plans, example_specs):
    plan, _ = example_plans["big405b"]
    files, _ = render(plan, example_specs["big405b"], "dynamo")
    comp = next(c for g in yaml.safe_load_all(next(iter(files.values())))
                for c in g["spec"]["components"] if c["type"] != "frontend")
    limits = comp["podTemplate"]["spec"]["containers"][0]["resources"]["limits"]
    assert comp["multinode"] == {"nodeCount": 2} and limits["nvidia.com/gpu"] == "8"
