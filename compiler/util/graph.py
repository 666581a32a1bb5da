"""Connected components, for the two places that group things by what they share: the P/D pairs of a
simulation (``trimtab.sim.scenario.Scenario.pair_groups``) and the workload-deployment groups of
``trimtab online watch`` (``trimtab.online.watch``)."""
from __future__ import annotations

from collections.abc import Hashable, Iterable


def components(edges: Iterable[tuple[Hashable, Hashable]]) -> list[list]:
    """The connected components of the graph of ``edges`` (pairs of sortable nodes): each component's nodes
    ascending, the components in the order of their smallest node (the same for the same edges in any
    order)."""
    parent: dict = {}

    def root(x):
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for a, b in edges:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    out: dict = {}
    for x in sorted(parent):
        out.setdefault(root(x), []).append(x)
    return list(out.values())
