"""``trimtab emit``: a plan's engine commands as Kubernetes manifests, compose files, Dynamo graphs or llm-d
values (logic in ``trimtab.deploy``; docs/deploy.md)."""
from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from trimtab.cli.common import ProfilesOpt, TableOrJson, err, out, plan_path, refuse_misses
from trimtab.api import load_spec
from trimtab.gate.analytic import load_plan


class EmitTarget(str, Enum):
    k8s = "k8s"
    compose = "compose"
    dynamo = "dynamo"
    llm_d = "llm-d"


def emit_cmd(
    spec: Annotated[Path, typer.Option("--spec", help="Spec the plan was made from (models, engine, SLOs).")],
    to: Annotated[EmitTarget, typer.Option("--to", help="k8s (Deployments or LeaderWorkerSets, "
                                                        "Services, KEDA ScaledObjects, Gateway API routes), "
                                                        "compose (one file per node), dynamo "
                                                        "(DynamoGraphDeployment, vLLM) or llm-d "
                                                        "(modelservice Helm values, vLLM).")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Folder to write the files into; '-': every "
                                         "document on stdout as one YAML stream (k8s, dynamo), for "
                                         "kubectl apply -f -.")],
    fmt: Annotated[TableOrJson, typer.Option(
        "--format", help="json: on stdout, {files: {name: text}, warnings, prerequisites} with -o -, else "
                         "{written, warnings, prerequisites}.")] = TableOrJson.table,
    allow_experimental: Annotated[bool, typer.Option("--allow-experimental", help="Emit a plan with an "
                                                     "experimental live KV tier (kv_tiers: "
                                                     "experimental-live: live-KV spill or borrowing), which "
                                                     "no engine flag realises.")] = False,
    namespace: Annotated[str | None, typer.Option(
        "--namespace", help="Namespace of every object (k8s, dynamo; llm-d: the helm -n in the "
                            "prerequisites); default: kubectl's current one.")] = None,
    image: Annotated[str | None, typer.Option(
        "--image", help="Engine container image with its tag (default: the engine version's image in "
                        "profiles/engine_flags.yaml; dynamo: Dynamo's vLLM runtime image).")] = None,
    storage_class: Annotated[str | None, typer.Option(
        "--storage-class", help="storageClassName of the model cache claim (k8s; default: the cluster's "
                                "default class).")] = None,
    access_mode: Annotated[str | None, typer.Option(
        "--access-mode", help="Access mode of the model cache claim, which every replica mounts (k8s; "
                              "default ReadWriteMany).")] = None,
    prometheus: Annotated[str | None, typer.Option(
        "--prometheus", help="Prometheus address KEDA queries (k8s; default http://prometheus-operated."
                             "monitoring.svc:9090).")] = None,
    gateway: Annotated[str | None, typer.Option(
        "--gateway", help="Gateway the HTTPRoutes attach to, NAME or NAMESPACE/NAME (k8s; default "
                          "trimtab-gateway).")] = None,
    rdma_resource: Annotated[str | None, typer.Option(
        "--rdma-resource", help="Extended resource of an RDMA device, requested once by each prefill/decode "
                                "pod (k8s, llm-d; e.g. rdma/ib); without it emit warns.")] = None,
    pod_monitor: Annotated[bool, typer.Option(
        "--pod-monitor", help="Also a PodMonitor (prometheus-operator, monitoring.coreos.com/v1) for the "
                              "engine pods, which the operator's Prometheus scrapes instead of following the "
                              "prometheus.io annotations (k8s).")] = False,
    plan_opt: Annotated[Path | None, typer.Option("--plan", help="Plan file written by trimtab "
                                                                 "plan.")] = None,
    plan_pos: Annotated[Path | None, typer.Argument(metavar="PLAN", help="Deprecated spelling of --plan.",
                                                    show_default=False)] = None,
    allow_misses: Annotated[bool, typer.Option("--allow-misses", help="Emit a plan written by plan "
                                               "--allow-misses (marked with misses: its own validation "
                                               "showed a workload below its SLO).")] = False,
    profiles: ProfilesOpt = None,
) -> None:
    """Write what runs a plan: its engine commands in Kubernetes manifests or docker compose files
    (docs/deploy.md).

    Example: trimtab emit --plan plan.yaml --spec examples/quickstart.yaml --to k8s -o deploy/
    && kubectl apply -f deploy/
    (or -o - | kubectl apply -f -)
    """
    from trimtab.deploy import emit, stream, write
    from trimtab.deploy.common import Cluster

    knobs = dict(namespace=namespace, image=image, storage_class=storage_class, access_mode=access_mode,
                 prometheus=prometheus, gateway=gateway, rdma_resource=rdma_resource,
                 pod_monitor=pod_monitor or None)
    cluster = Cluster(**{k: v for k, v in knobs.items() if v is not None})  # unset: Cluster's defaults
    path = plan_path(plan_opt, plan_pos, "a positional PLAN")
    plan = load_plan(path)
    refuse_misses(plan, path, allow_misses)
    e = emit(plan, load_spec(spec, profile_dir=profiles), to.value, allow_experimental, cluster)
    for w in e.warnings:
        err.print(f"warning: {w}", markup=False)
    if fmt == TableOrJson.table:  # on stderr, so that -o - stays one YAML stream
        err.print(f"needs on the cluster ({to.value}; docs/deploy.md):", markup=False)
        for p in e.prerequisites:
            err.print(f"  - {p}", markup=False)
    if str(output) == "-":
        if fmt == TableOrJson.json:
            sys.stdout.write(json.dumps({"files": e.files, "warnings": e.warnings,
                                         "prerequisites": e.prerequisites}, indent=2) + "\n")
        else:
            sys.stdout.write(stream(e.files, to.value))
        return
    paths = write(e.files, output)
    if fmt == TableOrJson.json:
        sys.stdout.write(json.dumps({"written": [str(p) for p in paths], "warnings": e.warnings,
                                     "prerequisites": e.prerequisites}, indent=2) + "\n")
    else:
        out.print(f"{len(paths)} file(s) written to {output} ({to.value})")
