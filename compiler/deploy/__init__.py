"""Deployable artefacts from a plan (``trimtab emit``): Kubernetes manifests, docker compose files, NVIDIA
Dynamo graphs, llm-d Helm values.

Entry points: ``emit(plan, spec, target, allow_experimental=False, cluster=None) -> Emitted`` (files
{relative path: text}, byte-stable for the same plan, spec and ``Cluster`` knobs; warnings; the cluster's
prerequisites), ``render`` (its files and warnings); ``write(files, out_dir)``. docs/deploy.md describes each
target and what it needs on the cluster.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trimtab.deploy.common import Cluster, prepare
from trimtab.util.yamlio import dump_canonical
from trimtab.deploy import compose, dynamo, k8s, llmd
from trimtab.errors import InputError, Problem

TARGETS = ("k8s", "compose", "dynamo", "llm-d")


def _multi(objs: list[dict]) -> str:
    return "---\n".join(dump_canonical(o) for o in objs)


@dataclass(frozen=True)
class Emitted:
    files: dict[str, str]  # relative path -> text, byte-stable for the same plan, spec and cluster knobs
    warnings: list[str]  # the plan's, and what the target cannot express as planned
    prerequisites: list[str]  # what the files need on the cluster (docs/deploy.md)


def emit(plan, spec, target: str, allow_experimental: bool = False,
         cluster: Cluster | None = None) -> Emitted:
    b = prepare(plan, spec, allow_experimental, cluster)
    if target == "k8s":
        files = {name: _multi(objs) for name, objs in k8s.manifests(b).items()}
        mod = k8s
    elif target == "compose":
        files = {name: dump_canonical(doc) for name, doc in compose.compose_files(b).items()}
        for t in b.targets:  # the TensorRT-LLM extra options files the compose services mount
            files.update(t.launch.files)
        mod = compose
    elif target == "dynamo":
        files = {name: _multi(objs) for name, objs in dynamo.manifests(b).items()}
        mod = dynamo
    elif target == "llm-d":
        files = {name: dump_canonical(doc) for name, doc in llmd.values(b).items()}
        mod = llmd
    else:
        raise ValueError(f"unknown target {target!r}; one of {', '.join(TARGETS)}")
    warnings = b.warnings + [w for w in mod.warnings(b) if w not in b.warnings]
    return Emitted(dict(sorted(files.items())), warnings, mod.prerequisites(b))


def render(plan, spec, target: str, allow_experimental: bool = False,
           cluster: Cluster | None = None) -> tuple[dict[str, str], list[str]]:
    """(files, warnings) of ``emit``."""
    e = emit(plan, spec, target, allow_experimental, cluster)
    return e.files, e.warnings


def stream(files: dict[str, str], target: str) -> str:
    """Every file as one YAML stream (``kubectl apply -f -``); compose files are separate projects per
    node."""
    if target in ("compose", "llm-d"):
        raise InputError([Problem("-o", f"{target} writes one file per node or release; "
                                        "give a folder, not '-'")])
    return "---\n".join(t for name, t in files.items() if name.endswith(".yaml"))


def write(files: dict[str, str], out_dir: str | Path) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in files.items():
        p = out / name
        p.write_text(text, encoding="utf-8")
        paths.append(p)
    return paths
