"""``trimtab emit``: a plan's engine commands as Kubernetes manifests, compose files, Dynamo graphs or llm-d
values (logic in ``trimtab.deploy``; docs/deploy.md)."""
from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from trimtab.cli.common import TableOrJson, err, out


class EmitTarget(str, Enum):
    k8s = "k8s"
    compose = "compose"
    dynamo = "dynamo"
    llm_d = "llm-d"


def emit_cmd(
    plan_path: Annotated[Path, typer.Argument(metavar="PLAN", help="Plan file written by trimtab plan.")],
    spec: Annotated[Path, typer.Option("--spec", help="Spec the plan was made from (models, engine, SLOs).")],
    to: Annotated[EmitTarget, typer.Option("--to", help="k8s (Deployments or LeaderWorkerSets, Services, KEDA "
                                                        "ScaledObjects, Gateway API routes), compose (one file "
                                                        "per node), dynamo (DynamoGraphDeployment, vLLM) or "
                                                        "llm-d (modelservice Helm values, vLLM).")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Folder to write the files into; '-': every "
                                         "document on stdout as one YAML stream (k8s, dynamo), for kubectl apply -f -.")],
    fmt: Annotated[TableOrJson, typer.Option("--format", help="json: on stdout, {files: {name: text}, warnings} "
                                                              "with -o -, else {written, warnings}.")] = TableOrJson.table,
    allow_experimental: Annotated[bool, typer.Option("--allow-experimental", help="Emit a plan with an experimental "
                                                     "live KV tier (kv_tiers: experimental-live: live-KV spill or "
                                                     "borrowing), which no engine flag realises.")] = False,
) -> None:
    """Write what runs a plan: its engine commands in Kubernetes manifests or docker compose files
    (docs/deploy.md).

    Example: trimtab emit plan.yaml --spec examples/quickstart.yaml --to k8s -o deploy/ && kubectl apply -f deploy/
    (or -o - | kubectl apply -f -)
    """
    from trimtab.api import load_spec
    from trimtab.gate.analytic import load_plan
    from trimtab.deploy import render, stream, write

    files, warnings = render(load_plan(plan_path), load_spec(spec), to.value, allow_experimental)
    for w in warnings:
        err.print(f"warning: {w}", markup=False)
    if str(output) == "-":
        if fmt == TableOrJson.json:
            sys.stdout.write(json.dumps({"files": files, "warnings": warnings}, indent=2) + "\n")
        else:
            sys.stdout.write(stream(files, to.value))
        return
    paths = write(files, output)
    if fmt == TableOrJson.json:
        sys.stdout.write(json.dumps({"written": [str(p) for p in paths], "warnings": warnings}, indent=2) + "\n")
    else:
        out.print(f"{len(paths)} file(s) written to {output} ({to.value})")
