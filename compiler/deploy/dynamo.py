"""NVIDIA Dynamo: one DynamoGraphDeployment (``nvidia.com/v1beta1``) per model, with a frontend and one worker
component per plan deployment (``type: prefill`` / ``decode`` components for P/D pairs, which Dynamo's
frontend orchestrates over NIXL).

Entry point: ``manifests(bundle) -> dict[file name, list[object]]``. vLLM plans only: a Dynamo vLLM worker
(`python3 -m dynamo.vllm`) takes vLLM's *engine* arguments plus its own (``--disaggregation-mode``); the HTTP
server and multi-node wiring are Dynamo's, so those flags are dropped here. The field names follow Dynamo's
published v1beta1 examples (github.com/ai-dynamo/dynamo examples/backends/vllm/deploy/v1beta1/disagg.yaml,
disagg-multinode.yaml and README.md: ``spec.components[]`` with ``name``, ``type``, ``replicas``,
``multinode.nodeCount`` and a ``podTemplate`` whose container ``main`` reads the Secret by ``envFrom``); tests
check that structure and parse the worker arguments with vLLM's engine parser, not the full CRD schema
(docs/deploy.md).
"""
from __future__ import annotations

from trimtab.deploy.common import (HF_SECRET, Bundle, gpu_prerequisite, pool_workloads, pools,
                                    secret_prerequisite, split_workloads)
from trimtab.engines.base import flag_table
from trimtab.errors import InputError, Problem

# Dynamo's vLLM runtime image of the release whose v1beta1 examples the structure follows (--image to choose
# another: the release must bundle the vLLM version of the plan's flags)
RUNTIME_IMAGE = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.1"
ROLE_ARGS = {"prefill": ["--disaggregation-mode", "prefill"], "decode": ["--disaggregation-mode", "decode"]}
COMPONENT_TYPE = {"unified": "worker", "prefill": "prefill", "decode": "decode"}
# vLLM flags (keys of profiles/engine_flags.yaml) that Dynamo replaces: its frontend serves HTTP and it starts
# multi-node workers itself; LoRA adapters load through Dynamo's own LoRA API (warned below).
DYNAMO_OWNS = ("host", "port", "nnodes", "node_rank", "master_addr", "headless", "lora_modules")


def worker_args(model_id: str, engine_args, role: str) -> list[str]:
    fl = flag_table()["vllm"]["flags"]
    drop = {fl[k] for k in DYNAMO_OWNS}
    out, skipping = ["--model", model_id], False
    for a in engine_args:
        if a.startswith("--"):
            skipping = a.split("=", 1)[0] in drop
        if not skipping:
            out.append(a)
    return out + ROLE_ARGS.get(role, [])


def _container(b: Bundle, command: list[str], args: list[str]) -> dict:
    return {"name": "main", "image": b.image(RUNTIME_IMAGE), "command": command, "args": args}


def manifests(b: Bundle) -> dict[str, list[dict]]:
    if b.ir.engine.name not in ("vllm", "vllm-cpu"):
        raise InputError([Problem("defaults.engine", "--to dynamo is written for vLLM workers; this plan's "
                                                     f"engine is {b.ir.engine.name} (use --to k8s)")], "spec")
    graphs: dict[str, list[dict]] = {}
    targets = [(g, t) for g, ts in pools(b).items() for t in ts]
    for g, t in targets:
        comps = graphs.setdefault(g, [{
            "name": "Frontend", "type": "frontend", "replicas": 1, "podTemplate": {"spec": {"containers": [
                _container(b, ["python3", "-m", "dynamo.frontend"], ["--http-port", "8000"])]}}}])
        main = _container(b, ["python3", "-m", "dynamo.vllm"],
                          worker_args(t.facts.model.model_id, t.launch.engine_args, t.dep.role))
        gpus = str(t.facts.gpus_per_node)
        main["envFrom"] = [{"secretRef": {"name": HF_SECRET}}]  # exports key HF_TOKEN as HF_TOKEN
        main["resources"] = {k: {t.gpu_k8s["resource"]: gpus} for k in ("limits", "requests")}
        comp = {"name": t.name, "type": COMPONENT_TYPE[t.dep.role], "replicas": t.dep.replicas,
                "podTemplate": {"spec": {"nodeSelector": {t.gpu_k8s["label"]: t.gpu_k8s["value"]},
                                         "containers": [main]}}}
        if t.facts.nodes_per_replica > 1:
            comp["multinode"] = {"nodeCount": t.facts.nodes_per_replica}
        comps.append(comp)
    meta = {"namespace": b.cluster.namespace} if b.cluster.namespace else {}
    served = _served(b)
    return {f"dynamo-{g}.yaml": [{
        "apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
        # which workloads the plan sends here: a client (or gateway) picks the graph's frontend by it
        "metadata": {"name": g, **meta, "annotations": {WORKLOADS: ",".join(served.get(g, []))}},
        "spec": {"components": comps}}]
        for g, comps in sorted(graphs.items())}


WORKLOADS = "trimtab.dev/workloads"


def _served(b: Bundle) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for w, shares in pool_workloads(b, pools(b)).items():
        for g in shares:
            out.setdefault(g, []).append(w)
    return out


def warnings(b: Bundle) -> list[str]:
    lora = sorted(t.name for t in b.targets if t.facts.adapters)
    dropped = [f"--to dynamo: {', '.join(lora)} serve LoRA adapters, whose --lora-modules Dynamo does not "
               "take: load them through Dynamo's LoRA API (docs/deploy.md) or emit --to k8s"] if lora else []
    return split_workloads(b, pools(b), "dynamo", "graph") + dropped


def prerequisites(b: Bundle) -> list[str]:
    sends = "; ".join(f"{w} to {', '.join(shares)}" for w, shares in pool_workloads(b, pools(b)).items())
    return [gpu_prerequisite(b), secret_prerequisite(b),
            "the Dynamo Kubernetes platform (operator and CRDs serving nvidia.com/v1beta1 "
            "DynamoGraphDeployment) watching the namespace",
            "clients (or a gateway) sending each workload to the frontend of its graph (annotation "
            f"{WORKLOADS}): {sends}"]
