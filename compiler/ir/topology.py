"""The fleet as nodes and links: ``build_topology(spec, ir) -> Topology``, and a networkx view of it.

A node is one server: a GPU type, a number of GPUs split into NVLink (or xGMI, or one PCIe switch) domains,
a NIC bandwidth and a rack. When the spec has no ``nodes:`` section, nodes are derived from ``gpus[]``: each
pool of ``count`` GPUs fills nodes of the profile's ``gpus_per_node`` (the last one partly), one rack per
type.

``Topology.graph()`` builds a networkx graph lazily: node vertices, a switch vertex per rack and a core
vertex, with edge attribute ``gbps``; ``bandwidth_gbps(a, b)`` is the bottleneck bandwidth between two nodes
(NVLink inside a node, else the narrowest link on the path).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from trimtab.errors import InputError, Problem
from trimtab.ir.model import ProblemIR
from trimtab.spec.nodes import node_problems
from trimtab.spec.schema import Spec

LINK_UTIL = 0.5  # share of a NIC (or the inter-rack links) the KV hand-offs may use at the planned load

if TYPE_CHECKING:  # networkx is imported where a graph is built: most commands never need one (start-up time)
    import networkx as nx


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    gpu: str
    gpus: int
    nvlink_domain: int  # GPUs per domain; TP groups stay in one
    nic_gbps: float
    link_gbps: float  # GPU-to-GPU inside a domain
    rack: str
    cpu_memory_gib: float | None = None
    pcie_gbps: float | None = None

    @property
    def domains(self) -> int:
        return self.gpus // self.nvlink_domain


@dataclass(frozen=True)
class Topology:
    nodes: tuple[Node, ...]
    inter_rack_gbps: float | None = None
    derived: bool = True

    def gpus_of(self, gpu: str) -> int:
        return sum(n.gpus for n in self.nodes if n.gpu == gpu)

    def max_domain(self, gpu: str) -> int:
        return max((n.nvlink_domain for n in self.nodes if n.gpu == gpu), default=0)

    @cached_property
    def _graph(self) -> nx.Graph:
        import networkx as nx

        g = nx.Graph()
        g.add_node("core", kind="core")
        for rack in sorted({n.rack for n in self.nodes}):
            g.add_node(f"rack:{rack}", kind="switch")
            g.add_edge(f"rack:{rack}", "core", gbps=self.inter_rack_gbps or float("inf"))
        for n in self.nodes:
            g.add_node(n.name, kind="node", gpu=n.gpu, gpus=n.gpus)
            g.add_edge(n.name, f"rack:{n.rack}", gbps=n.nic_gbps)
        return g

    def graph(self) -> nx.Graph:
        return self._graph

    def bandwidth_gbps(self, a: str, b: str) -> float:
        """Bottleneck bandwidth between nodes ``a`` and ``b`` (GB/s)."""
        if a == b:
            return next(n.link_gbps for n in self.nodes if n.name == a)
        import networkx as nx

        path = nx.shortest_path(self._graph, a, b)
        return min(self._graph.edges[u, v]["gbps"] for u, v in zip(path, path[1:]))


def build_topology(spec: Spec, ir: ProblemIR) -> Topology:
    if spec.nodes is None:
        nodes = []
        for pool in ir.gpus:
            per = int(pool.profile.gpus_per_node.value)
            left, i = pool.count, 0
            while left > 0:
                k = min(per, left)
                nodes.append(_node(f"{pool.type}-{i}", pool, k, k, None, None, None, None, pool.type))
                left -= k
                i += 1
        return Topology(tuple(nodes), spec.network.inter_rack_gbps, derived=True)
    problems = [Problem(where, msg) for _, where, msg in
                node_problems(spec, {p.type: int(p.profile.gpus_per_node.value) for p in ir.gpus})]
    if problems:
        raise InputError(problems, "spec")
    nodes = []
    for grp in spec.nodes:
        pool = ir.gpu(grp.gpu)
        per = grp.gpus_per_node or int(pool.profile.gpus_per_node.value)
        for i in range(grp.count):
            name = f"{grp.name}-{i}" if grp.count > 1 else grp.name
            nodes.append(_node(name, pool, per, grp.nvlink_domain or per, grp.nic_gbps, grp.cpu_memory_gib,
                               grp.pcie_gbps, grp.rack, grp.rack or "default"))
    topo = Topology(tuple(nodes), spec.network.inter_rack_gbps, derived=False)
    return topo


def _node(name, pool, gpus, domain, nic, cpu, pcie, _rack_given, rack) -> Node:
    prof = pool.profile
    nic_gbps = nic if nic is not None else prof.node_network_gbps.value
    return Node(name, pool.type, gpus, domain, nic_gbps, prof.link_bandwidth_gbps.value, rack, cpu, pcie)


def kv_link_loads(topo: Topology, stages: dict[str, list[tuple[str, int]]],
                  flows: list[tuple[str, str, float]]) -> dict[str, tuple[float, float, list[str]]]:
    """KV hand-off load on every network link of a placement: ``stages[deployment]`` lists (node, GPU index)
    of each replica stage, ``flows`` (prefill, decode, bytes/s) the cross-node P/D routes.
    Least-outstanding-work routing spreads a route's flow evenly over the replicas of both sides, so the share
    s_p(N) of the prefill side's stages on node N sends f s_p(N) (1 - s_d(N)) out of N's NIC (the rest stays
    inside the node); rack uplinks likewise with rack shares. Returns link -> (load, capacity in bytes/s,
    routes loading it); links: ``nic <node> out|in`` (``nic_gbps``) and ``inter-rack <rack> out|in``
    (``network.inter_rack_gbps``, when given)."""
    nodes = {n.name: n for n in topo.nodes}
    out: dict[str, tuple[float, float, list[str]]] = {}

    def add(link: str, load: float, cap: float, route: str) -> None:
        if load <= 0:
            return
        old = out.get(link, (0.0, cap, []))
        out[link] = (old[0] + load, cap, old[2] + [route])

    def shares(name: str, key) -> dict[str, float]:
        got = stages.get(name) or []
        s: dict[str, float] = {}
        for node, _ in got:
            if node in nodes:
                s[key(nodes[node])] = s.get(key(nodes[node]), 0.0) + 1.0 / len(got)
        return s

    for p, d, f in flows:
        route = f"{p} -> {d}"
        sp, sd = shares(p, lambda n: n.name), shares(d, lambda n: n.name)
        for n in sorted(set(sp) | set(sd)):
            cap = nodes[n].nic_gbps * 1e9
            add(f"nic {n} out", f * sp.get(n, 0.0) * (1 - sd.get(n, 0.0)), cap, route)
            add(f"nic {n} in", f * sd.get(n, 0.0) * (1 - sp.get(n, 0.0)), cap, route)
        if topo.inter_rack_gbps:
            rp, rd = shares(p, lambda n: n.rack), shares(d, lambda n: n.rack)
            cap = topo.inter_rack_gbps * 1e9
            for r in sorted(set(rp) | set(rd)):
                add(f"inter-rack {r} out", f * rp.get(r, 0.0) * (1 - rd.get(r, 0.0)), cap, route)
                add(f"inter-rack {r} in", f * rd.get(r, 0.0) * (1 - rp.get(r, 0.0)), cap, route)
    return out
