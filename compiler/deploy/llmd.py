"""llm-d: Helm values for the llm-d modelservice chart (llm-d-incubation/llm-d-modelservice, v0.4.x), one
release per plan deployment.

Entry point: ``values(bundle) -> dict[file name, values document]``. A unified deployment fills the chart's
``decode`` section without the routing sidecar (vLLM serves the Service port); a P/D side fills ``prefill`` or
``decode`` (the decode pods get llm-d's routing sidecar with the NIXL connector, vLLM moved to the sidecar's
target port). Releases of one model carry the same ``llm-d.ai/model`` label so one InferencePool (llm-d's
infrastructure chart, with its endpoint picker) selects them all, and each release's pods carry the prompts
it serves as ``llm-d.ai/context-length-range`` (the plan's routing rules, ``common.prompt_ranges``) for the
picker's context-length-aware plugin. P/D sides set the NIXL side channel to the pod IP. vLLM plans only.
Tests validate every values file against the chart's published ``values.schema.json``.
"""
from __future__ import annotations

import math

from trimtab.deploy.common import (GIB, HF_SECRET, PORT, Bundle, Target, engine_process, network_kv,
                                    pool_workloads, pools, served_spans, side_channel, side_channel_env,
                                    split_workloads, gpu_prerequisite, image_warnings, secret_prerequisite)
from trimtab.engines.base import flag_table
from trimtab.errors import InputError, Problem

PROXY_PORT = 8200  # the chart's routing.proxy.targetPort default: vLLM listens here behind the sidecar
CONNECTOR = "nixlv2"  # the routing sidecar's NIXL connector (chart default)
# llm-d's context-length-aware scorer reads this pod label, "min-max" with both ends included (llm-d
# inference scheduler, plugin context-length-aware: parseContextRanges, matchesAnyRange)
RANGE_LABEL = "llm-d.ai/context-length-range"
POOL_LABEL = "llm-d.ai/model"  # what each InferencePool selects: one pool per value


def _container(b: Bundle, t: Target, port: int) -> dict:
    port_flag = flag_table()["vllm"]["flags"]["port"]
    program, args = engine_process(b, t.launch.command)
    args = [f"{port_flag}={port}" if a.startswith(port_flag + "=") else a for a in args]
    res = {t.gpu_k8s["resource"]: t.facts.gpus_per_node}
    c = {"name": "vllm", "image": b.image(), "modelCommand": "custom", "command": program,
         "args": args, "ports": [{"containerPort": port, "name": "http"}], "mountModelVolume": True}
    sc = side_channel(b, t)
    if sc:  # the NIXL listener on the pod IP its peers reach (vLLM's default is localhost)
        c["env"] = side_channel_env(b, t)
        c["ports"].append({"containerPort": sc["port"], "name": "nixl"})
        if b.cluster.rdma_resource:
            res[b.cluster.rdma_resource] = 1
    c["resources"] = {"limits": dict(res), "requests": dict(res)}
    return c


def _section(b: Bundle, t: Target, port: int) -> dict:
    return {"create": True, "replicas": t.dep.replicas,
            # MoE layouts: dp attention ranks, all on one node
            "parallelism": {"tensor": t.dep.tensor_parallel,
                            **({"data": t.dep.data_parallel, "dataLocal": t.dep.data_parallel}
                               if t.dep.data_parallel > 1 else {})},
            "acceleratorTypes": {"labelKey": t.gpu_k8s["label"], "labelValues": [t.gpu_k8s["value"]]},
            "containers": [_container(b, t, port)]}


def values(b: Bundle) -> dict[str, dict]:
    if b.ir.engine.name not in ("vllm", "vllm-cpu"):
        raise InputError([Problem("defaults.engine", f"--to llm-d deploys vLLM; this plan's engine is "
                                  f"{b.ir.engine.name} (use --to k8s)")], "spec")
    spans = [Problem("deployments "
                     f"({t.dep.name})", f"a replica spans {t.facts.nodes_per_replica} nodes: the chart "
                     "runs one command on every pod of a LeaderWorkerSet, vLLM needs a leader and headless "
                     "workers; use --to k8s") for t in b.targets if t.facts.nodes_per_replica > 1]
    if spans:
        raise InputError(spans, "plan")
    spans = served_spans(b)
    # one InferencePool per model and tenant set (common.pools; lengths: the context-length-range labels)
    pool_of = {t.name: name for name, ts in pools(b, lengths=False).items() for t in ts}
    out = {}
    for t in b.targets:
        ident = t.facts.model
        lo, hi = spans.get(t.name, (0, t.facts.context_tokens))
        sidecar = t.dep.role == "decode"
        vals = {
            "modelArtifacts": {"name": ident.served_name, "uri": f"hf://{ident.model_id}",
                               # the cache volume holds the weights once, from the cost model's weight bytes
                               "size": f"{math.ceil(t.weight_bytes / GIB) + 10}Gi",
                               "authSecretName": HF_SECRET,
                               "labels": {"llm-d.ai/inference-serving": "true",
                                          POOL_LABEL: pool_of[t.name],
                                          RANGE_LABEL: f"{lo}-{hi - 1}"}},
            "multinode": False,
            "routing": {"servicePort": PORT, "proxy": {"enabled": sidecar, "targetPort": PROXY_PORT,
                                                       "connector": CONNECTOR}},
            "decode": {"create": False}, "prefill": {"create": False},
        }
        section = "prefill" if t.dep.role == "prefill" else "decode"
        vals[section] = _section(b, t, PROXY_PORT if sidecar else PORT)
        out[f"llm-d-{t.name}.values.yaml"] = vals
    return out


def warnings(b: Bundle) -> list[str]:
    # lengths: each pod's context-length-range label keeps prompts on pods that admit them
    return (split_workloads(b, pools(b, lengths=False), "llm-d", "InferencePool") + network_kv(b)
            + image_warnings(b))


def prerequisites(b: Bundle) -> list[str]:
    ns = f" -n {b.cluster.namespace}" if b.cluster.namespace else ""
    out = [gpu_prerequisite(b), secret_prerequisite(b),
           f"helm and the llm-d-modelservice chart v0.4.x: helm install <name> llm-d-modelservice/"
           f"llm-d-modelservice{ns} -f <file> per values file",
           f"llm-d's infrastructure: a Gateway and one InferencePool per value of {POOL_LABEL} "
           f"({', '.join(pools(b, lengths=False))}), each with its endpoint picker and the "
           f"context-length-aware plugin (label {RANGE_LABEL}, enableFiltering: true)",
           "an HTTPRoute (or client) sending each workload to its pool: " + "; ".join(
               f"{w} to {', '.join(shares)}"
               for w, shares in pool_workloads(b, pools(b, lengths=False)).items())]
    if any(t.dep.role != "unified" for t in b.targets):
        out.append("the endpoint picker's P/D profile (prefill and decode pods by llm-d.ai/role) for the "
                   "routing sidecar on the decode pods")
    if b.cluster.rdma_resource:
        out.append(f"an RDMA device plugin offering {b.cluster.rdma_resource} on the nodes of P/D pods")
    return out
