"""Placement for ``redundancy: n+1`` (docs/online.md, "Redundancy"): every deployment spread over the nodes of
its GPU type, so that one node holds at most

    cap[d] = ceil(replicas[d] / N_g)        N_g: nodes of d's GPU type

of its replicas, and each replica (all its pipeline stages) inside one node. A node loss then removes at most
cap[d] replicas of every deployment d, which is what the MILP rows of ``trimtab.planning.redundancy`` plan for
(``spread[c]``, ``survive[c]``, ``node_room[g]``; their notation is there).

Greedy: deployments by replica size (largest first, then name), each replica to the node of its type holding
the fewest replicas of that deployment so far (ties: the earliest node), stages on contiguous GPU indices
inside one NVLink domain. ``node_room[g]`` (every node has room for cap[d] replicas of every d) makes this
always succeed when domains are whole nodes; smaller domains can fragment, and then no placement is
claimed: the error says so.
"""
from __future__ import annotations

import math

from trimtab.deployment.shape import DeploymentSpecView
from trimtab.errors import InfeasibleError
from trimtab.milp.placement import StagePlacement, _stage_groups
from trimtab.ir.topology import Topology


def node_cap(replicas: int, nodes: int) -> int:
    """The most replicas of one deployment a node holds when ``replicas`` are spread over ``nodes`` nodes."""
    return math.ceil(replicas / nodes) if nodes > 0 else replicas


def place_spread(deployments: list[DeploymentSpecView],
                 topo: Topology) -> dict[str, tuple[StagePlacement, ...]]:
    """Replicas onto nodes and GPU indices, at most ``node_cap`` of a deployment per node
    (module docstring)."""
    deps = sorted((d for d in _stage_groups(deployments, topo) if d.replicas > 0),
                  key=lambda d: (-d.tp * d.pp, d.name))
    # free[node][domain]: next free GPU offset inside the domain (groups are allocated contiguously)
    free = {n.name: [0] * n.domains for n in topo.nodes}
    out: dict[str, tuple[StagePlacement, ...]] = {}
    for d in deps:
        nodes = [n for n in topo.nodes if n.gpu == d.gpu]
        cap = node_cap(d.replicas, len(nodes))
        held = {n.name: 0 for n in nodes}
        stages: list[StagePlacement] = []
        for r in range(d.replicas):
            got = None
            for n in sorted(nodes, key=lambda n: held[n.name]):  # stable: earliest node among the emptiest
                if held[n.name] >= cap:
                    continue
                trial = list(free[n.name])
                picks = []
                for _ in range(d.pp):
                    j = next((j for j in range(n.domains) if n.nvlink_domain - trial[j] >= d.tp), None)
                    if j is None:
                        break
                    start = j * n.nvlink_domain + trial[j]
                    trial[j] += d.tp
                    picks.append(tuple(range(start, start + d.tp)))
                if len(picks) == d.pp:
                    got = (n, trial, picks)
                    break
            if got is None:
                raise InfeasibleError([f"no n+1 placement exists: replica {r} of {d.name} "
                                       f"({d.tp * d.pp} {d.gpu}) finds no node with room holding fewer than "
                                       f"{cap} of its replicas; give the {d.gpu} nodes more GPUs or larger "
                                       f"NVLink domains"])
            n, trial, picks = got
            free[n.name] = trial
            held[n.name] += 1
            stages += [StagePlacement(r, s, n.name, g) for s, g in enumerate(picks)]
        out[d.name] = tuple(stages)
    return out
