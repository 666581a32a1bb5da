"""Placement: after sizing, put every replica on concrete nodes and GPU indices (CP-SAT).

Entry point: ``place(deployments, topology) -> dict[name, tuple[StagePlacement, ...]]``; raises
``InfeasibleError`` saying plainly why when no placement exists.

Model (one "bin" per NVLink domain of each node; a replica has ``pp`` stages of ``tp`` GPUs, each stage a
tensor-parallel group that must stay inside one domain):

    cnt[d, k] in Z+   stages of deployment d in bin k (same GPU type, tp[d] <= size[k])
    sum_k cnt[d, k] == replicas[d] x pp[d]                   for each deployment d
    sum_d tp[d] x cnt[d, k] <= size[k]                        for each bin k
    used[k] >= [cnt[d, k] > 0]
    minimise sum_k used[k] x (1 + k / K)                      (pack tightly; earlier nodes first)

A first-fit-decreasing packing is tried first; it is tight for power-of-two group and domain sizes, so the
CP-SAT model runs only when it fails. Counting stages per bin (not binaries per stage) keeps the model small
for thousands of GPUs. Inside a bin,
groups get contiguous GPU indices, largest first. Stages of one pipeline replica are placed in bin order, so they
tend to share a rack; rack affinity is not yet a constraint. CP-SAT runs with one worker and a fixed seed,
so placements are deterministic.
"""
from __future__ import annotations

from dataclasses import dataclass

from compiler.errors import InfeasibleError
from compiler.topology import Topology


@dataclass(frozen=True, slots=True)
class ToPlace:
    name: str
    gpu: str
    tp: int
    pp: int
    replicas: int


@dataclass(frozen=True, slots=True)
class StagePlacement:
    replica: int
    stage: int
    node: str
    gpus: tuple[int, ...]


def place(deployments: list[ToPlace], topo: Topology, time_limit_s: float = 20.0
          ) -> dict[str, tuple[StagePlacement, ...]]:
    deps = sorted((d for d in deployments if d.replicas > 0), key=lambda d: d.name)
    bins = [(n, j) for n in topo.nodes for j in range(n.domains)]
    why = _obvious_impossibility(deps, topo)
    if why:
        raise InfeasibleError(["no placement exists: " + w for w in why])
    counts = _first_fit_decreasing(deps, bins)
    if counts is None:
        counts = _solve_cpsat(deps, bins, time_limit_s)
    return _expand(deps, bins, counts)


def _first_fit_decreasing(deps: list[ToPlace], bins: list) -> dict[tuple[int, int], int] | None:
    """Largest groups first, each into the first bin with room. With power-of-two group sizes and domain sizes
    this packing is tight (no bin is left with room a later group could have used), so it uses the fewest
    domains and CP-SAT is needed only when it fails (odd domain sizes, fragmentation)."""
    free = [node.nvlink_domain for node, _ in bins]
    counts: dict[tuple[int, int], int] = {}
    for di in sorted(range(len(deps)), key=lambda i: (-deps[i].tp, deps[i].name)):
        d = deps[di]
        for _ in range(d.replicas * d.pp):
            k = next((k for k, (node, _) in enumerate(bins) if node.gpu == d.gpu and free[k] >= d.tp), None)
            if k is None:
                return None
            free[k] -= d.tp
            counts[(di, k)] = counts.get((di, k), 0) + 1
    return counts


def _solve_cpsat(deps: list[ToPlace], bins: list, time_limit_s: float) -> dict[tuple[int, int], int]:
    from ortools.sat.python import cp_model

    m = cp_model.CpModel()
    cnt: dict[tuple[int, int], object] = {}
    for di, d in enumerate(deps):
        stages = d.replicas * d.pp
        terms = []
        for k, (node, _) in enumerate(bins):
            if node.gpu == d.gpu and d.tp <= node.nvlink_domain:
                v = m.new_int_var(0, min(stages, node.nvlink_domain // d.tp), f"cnt[{d.name},{k}]")
                cnt[(di, k)] = v
                terms.append(v)
        m.add(sum(terms) == stages)
    used = []
    by_bin: dict[int, list[tuple[int, object]]] = {}
    for (di, k), v in cnt.items():
        by_bin.setdefault(k, []).append((di, v))
    for k, (node, _) in enumerate(bins):
        here = by_bin.get(k)
        if not here:
            continue
        m.add(sum(deps[di].tp * v for di, v in here) <= node.nvlink_domain)
        u = m.new_bool_var(f"used[{k}]")
        for _, v in here:
            m.add(v == 0).only_enforce_if(u.Not())
        used.append((k, u))
    scale = len(bins) + 1
    m.minimize(sum((scale + k) * u for k, u in used))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    solver.parameters.max_time_in_seconds = time_limit_s
    status = solver.solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        if status == cp_model.INFEASIBLE:
            raise InfeasibleError(["no placement exists: the tensor-parallel groups cannot be packed into the "
                                   "nodes' NVLink domains (fragmentation); give nodes larger domains or more GPUs"])
        raise InfeasibleError([f"no placement found within {time_limit_s:g} s ({solver.status_name(status)})"])
    return {key: int(solver.value(v)) for key, v in cnt.items() if solver.value(v)}


def _expand(deps: list[ToPlace], bins: list, counts: dict[tuple[int, int], int]
            ) -> dict[str, tuple[StagePlacement, ...]]:
    """Stage counts per bin -> concrete GPU indices, contiguous inside each domain, largest groups first."""
    out: dict[str, list[StagePlacement]] = {d.name: [] for d in deps}
    next_free = {k: 0 for k in range(len(bins))}
    order = sorted(range(len(deps)), key=lambda i: (-deps[i].tp, deps[i].name))
    per_dep_bins: dict[int, list[tuple[int, int]]] = {i: [] for i in range(len(deps))}
    for k in range(len(bins)):
        for di in order:
            n = counts.get((di, k), 0)
            if n:
                per_dep_bins[di].append((k, n))
    for k in range(len(bins)):  # contiguous indices: largest groups first inside each bin
        for di in order:
            for kk, n in per_dep_bins[di]:
                if kk != k:
                    continue
                node, j = bins[k]
                for _ in range(n):
                    start = j * node.nvlink_domain + next_free[k]
                    next_free[k] += deps[di].tp
                    idx = len(out[deps[di].name])
                    out[deps[di].name].append(StagePlacement(idx // deps[di].pp, idx % deps[di].pp, node.name,
                                                             tuple(range(start, start + deps[di].tp))))
    return {name: tuple(v) for name, v in out.items()}


def _obvious_impossibility(deps: list[ToPlace], topo: Topology) -> list[str]:
    out = []
    need: dict[str, int] = {}
    for d in deps:
        need[d.gpu] = need.get(d.gpu, 0) + d.tp * d.pp * d.replicas
        dom = topo.max_domain(d.gpu)
        if d.tp > dom:
            out.append(f"deployment {d.name} needs tensor-parallel groups of {d.tp} {d.gpu} inside one NVLink "
                       f"domain; the largest domain in the nodes has {dom}")
    for g, n in sorted(need.items()):
        have = topo.gpus_of(g)
        if n > have:
            out.append(f"the plan needs {n} {g} but the nodes hold {have}")
    return out
