"""The spec's ``nodes`` section checked against its ``gpus`` (issue 35): one function for the loader, which
knows the YAML's lines, and for ``trimtab.ir.topology.build_topology``, which builds the nodes."""
from __future__ import annotations

from trimtab.spec.schema import Spec


def node_problems(spec: Spec, gpus_per_node: dict[str, int]) -> list[tuple[tuple, str, str]]:
    """What is wrong with the spec's ``nodes`` as (YAML location, field, message): a group of a GPU type
    ``gpus`` lacks, an NVLink domain that does not divide its node, a node name used twice, a pool whose
    ``count`` the nodes cannot hold. ``gpus_per_node``: the profile's per GPU type (types without a profile
    are left to the loader's unknown-type error). The loader runs it with the YAML's lines, before any
    planning (a bad ``nodes`` section used to be found only when the first plan was placed, seconds or minutes
    later and without a line); ``trimtab.ir.topology.build_topology`` runs it again for specs built in
    code."""
    if spec.nodes is None:
        return []
    out: list[tuple[tuple, str, str]] = []
    listed = {g.type for g in spec.gpus}
    names: set[str] = set()
    held: dict[str, int] = {}
    for gi, grp in enumerate(spec.nodes):
        where = f"nodes[{gi}] ({grp.name})"
        if grp.gpu not in listed:
            out.append((("nodes", gi, "gpu"), f"{where}.gpu",
                        f"GPU type {grp.gpu!r} is not listed under gpus"))
            continue
        if grp.gpu not in gpus_per_node:
            continue
        per = grp.gpus_per_node or gpus_per_node[grp.gpu]
        dom = grp.nvlink_domain or per
        if per % dom:
            out.append((("nodes", gi, "nvlink_domain"), f"{where}.nvlink_domain",
                        f"{dom} does not divide gpus_per_node {per}"))
        # the group's GPUs count towards its pool whatever its domain (a bad domain is its own error, not
        # "the nodes hold only 0")
        held[grp.gpu] = held.get(grp.gpu, 0) + per * grp.count
        for i in range(grp.count):
            name = f"{grp.name}-{i}" if grp.count > 1 else grp.name
            if name in names:
                out.append((("nodes", gi, "name"), f"{where}.name", f"node name {name!r} is used twice"))
                break
            names.add(name)
    for pi, g in enumerate(spec.gpus):
        if g.type in gpus_per_node and g.count > held.get(g.type, 0):
            out.append((("gpus", pi, "count"), f"gpus[{pi}] ({g.type}).count",
                        f"{g.count} GPUs listed but the nodes hold only {held.get(g.type, 0)} {g.type}"))
    return out
