"""NVIDIA Dynamo: one DynamoGraphDeployment per model, with a frontend and one worker service per plan deployment
(prefill and decode workers for P/D pairs, which Dynamo's frontend orchestrates over NIXL).

Entry point: ``manifests(bundle) -> dict[file name, list[object]]``. vLLM plans only: a Dynamo vLLM worker
(`python3 -m dynamo.vllm`) takes vLLM's *engine* arguments plus its own role flags; the HTTP server, the KV
connector and multi-node wiring are Dynamo's, so those flags are dropped here. The field names follow Dynamo's
published examples (github.com/ai-dynamo/dynamo examples/backends/vllm/deploy/disagg.yaml and
disagg-multinode.yaml); tests check that structure and parse the worker arguments with vLLM's engine parser,
not the full CRD schema (docs/deploy.md).
"""
from __future__ import annotations

from trimtab.deploy.common import HF_SECRET, Bundle, gpu_prerequisite, k8s_name, pooled, secret_prerequisite
from trimtab.engines.base import flag_table
from trimtab.errors import InputError, Problem

RUNTIME_IMAGE = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:${DYNAMO_VERSION}"  # envsubst before kubectl apply
ROLE_FLAGS = {"prefill": "--is-prefill-worker", "decode": "--is-decode-worker"}  # dynamo.vllm's own
# vLLM flags (keys of profiles/engine_flags.yaml) that Dynamo replaces: its frontend serves HTTP, it wires NIXL
# between prefill and decode workers and starts multi-node workers itself.
DYNAMO_OWNS = ("host", "port", "kv_transfer", "nnodes", "node_rank", "master_addr", "headless", "lora_modules")


def worker_args(model_id: str, engine_args, role: str) -> list[str]:
    fl = flag_table()["vllm"]["flags"]
    drop = {fl[k] for k in DYNAMO_OWNS}
    out, skipping = ["--model", model_id], False
    for a in engine_args:
        if a.startswith("--"):
            skipping = a.split("=", 1)[0] in drop
        if not skipping:
            out.append(a)
    if role in ROLE_FLAGS:
        out.append(ROLE_FLAGS[role])
    return out


def manifests(b: Bundle) -> dict[str, list[dict]]:
    if b.ir.engine.name not in ("vllm", "vllm-cpu"):
        raise InputError([Problem("defaults.engine", f"--to dynamo is written for vLLM workers; this plan's engine "
                                  f"is {b.ir.engine.name} (use --to k8s)")], "spec")
    graphs: dict[str, dict] = {}
    for t in b.targets:
        model = t.dep.model
        g = graphs.setdefault(model, {"Frontend": {"componentType": "frontend", "replicas": 1, "extraPodSpec": {
            "mainContainer": {"image": RUNTIME_IMAGE, "command": ["python3", "-m", "dynamo.frontend"],
                              "args": ["--http-port", "8000"]}}}})
        svc = {"envFromSecret": HF_SECRET, "componentType": "worker", "replicas": t.dep.replicas,
               "resources": {"limits": {"gpu": str(t.facts.gpus_per_node)}},
               "extraPodSpec": {"nodeSelector": {t.gpu_k8s["label"]: t.gpu_k8s["value"]},
                                "mainContainer": {"image": RUNTIME_IMAGE,
                                                  "command": ["python3", "-m", "dynamo.vllm"],
                                                  "args": worker_args(t.facts.model.model_id, t.launch.engine_args,
                                                                      t.dep.role)}}}
        if t.dep.role in ROLE_FLAGS:
            svc["subComponentType"] = t.dep.role
        if t.facts.nodes_per_replica > 1:
            svc["multinode"] = {"nodeCount": t.facts.nodes_per_replica}
        g[t.name] = svc
    return {f"dynamo-{k8s_name(m)}.yaml": [{
        "apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment",
        "metadata": {"name": k8s_name(m)}, "spec": {"backendFramework": "vllm", "services": services}}]
        for m, services in sorted(graphs.items())}


def warnings(b: Bundle) -> list[str]:
    return pooled(b, "dynamo", "the Dynamo frontend")


def prerequisites(b: Bundle) -> list[str]:
    return [gpu_prerequisite(b), secret_prerequisite(b),
            "the Dynamo platform (its operator and CRDs, nvidia.com/v1alpha1 DynamoGraphDeployment) in the "
            "namespace"]
