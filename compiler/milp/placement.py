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
for thousands of GPUs. Inside a bin, groups get contiguous GPU indices, largest first. Stages of one pipeline
replica are placed in bin order, so they tend to share a rack. CP-SAT runs with one worker and a fixed seed,
so placements are deterministic.

Prefill/decode pairs (``trimtab.milp.disagg``): a co-located pair's groups (kp prefill + kd decode replicas)
are
packed as single units, so each group's hand-off stays inside one NVLink domain; when the placement of
cross-node pairs loads an inter-rack link beyond ``LINK_UTIL``, the pairs are re-packed one rack each (rack
affinity) or the plan is refused naming the link and by how much it is over.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from trimtab.deployment.shape import DeploymentSpecView, stage_parts
from trimtab.errors import InfeasibleError, NoSolutionError
from trimtab.ir.topology import LINK_UTIL, Topology, kv_link_loads
from trimtab.cost.transfer import is_local_pair
from trimtab.milp.pair_routes import pair_flows


@dataclass(frozen=True, slots=True)
class StagePlacement:
    """Where one pipeline stage of one replica runs: a node and the GPU indices of its
    tensor-parallel group."""

    replica: int
    stage: int
    node: str
    gpus: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class LocalGroup:
    """A co-located P/D pair: ``kp`` replicas of ``prefill`` and ``kd`` of ``decode`` per group, each group in
    one NVLink domain (the hand-off runs over the GPUs' links)."""
    prefill: str
    decode: str
    kp: int
    kd: int


def place(deployments: list[DeploymentSpecView], topo: Topology, time_limit_s: float = 20.0,
          groups: tuple[LocalGroup, ...] = (), flows: tuple[tuple[str, str, float], ...] = ()
          ) -> dict[str, tuple[StagePlacement, ...]]:
    """``groups``: co-located pairs, placed as one unit of kp x tp_p + kd x tp_d GPUs per group and domain.
    ``flows``: (prefill, decode, KV bytes/s) of the cross-node pairs; when the first placement loads an
    inter-rack link beyond LINK_UTIL, the pairs are kept in one rack each (``_rack_affine``), else refused."""
    deployments = _stage_groups(deployments, topo)
    if groups:
        return _place_groups(deployments, topo, time_limit_s, groups, flows)
    deps = sorted((d for d in deployments if d.replicas > 0), key=lambda d: d.name)
    bins = [(n, j) for n in topo.nodes for j in range(n.domains)]
    why = _obvious_impossibility(deps, topo)
    if why:
        raise InfeasibleError(["no placement exists: " + w for w in why])
    counts = _first_fit_decreasing(deps, bins)
    if counts is None:
        counts = _solve_cpsat(deps, bins, time_limit_s)
    out = _expand(deps, bins, counts)
    if flows and topo.inter_rack_gbps:
        out = _rack_affine(deps, bins, topo, out, flows)
    return out


def _stage_groups(deployments: list[DeploymentSpecView], topo: Topology) -> list[DeploymentSpecView]:
    """What placement packs per pipeline stage: its TP group times its attention data-parallel ranks (MoE
    layouts), all in one NVLink domain; an expert group wider than the GPU type's domain is that many whole
    domains, each its share of the ranks (``trimtab.deployment.shape.stage_parts``), placed as consecutive
    "stages". Below, ``tp`` is a part's width and ``pp`` the parts of a replica (idempotent: ``dp``
    becomes 1)."""
    out = []
    for d in deployments:
        if d.dp > 1:
            parts, width = stage_parts(d.tp, d.dp, topo.max_domain(d.gpu))
            d = replace(d, tp=width, pp=d.pp * parts, dp=1)
        out.append(d)
    return out


def _place_groups(deployments: list[DeploymentSpecView], topo: Topology, time_limit_s: float, groups, flows):
    """Each co-located group becomes one unit (a pseudo deployment of kp tp_p + kd tp_d GPUs, pp 1) for the
    packing; its GPUs are then split: the first kp x tp_p to the prefill replicas, the rest to the
    decode ones."""
    by = {d.name: d for d in deployments if d.replicas > 0}
    units, split = [], {}
    for g in groups:
        p, d = by.pop(g.prefill, None), by.pop(g.decode, None)
        if p is None or d is None:
            continue
        n = p.replicas // g.kp
        if p.pp != 1 or d.pp != 1 or p.gpu != d.gpu or p.replicas != n * g.kp or d.replicas != n * g.kd:
            raise InfeasibleError([f"co-located pair {p.name} + {d.name}: {p.replicas} and {d.replicas} "
                                   f"replicas (pp {p.pp}, {d.pp}) do not form whole groups of {g.kp} + "
                                   f"{g.kd} on one GPU type"])
        size = g.kp * p.tp + g.kd * d.tp
        if size > topo.max_domain(p.gpu):
            raise InfeasibleError([f"no placement exists: co-located pair {p.name} + {d.name} needs {size} "
                                   f"{p.gpu} in one NVLink domain; the largest domain in the nodes has "
                                   f"{topo.max_domain(p.gpu)}"])
        name = f"{p.name}+{d.name}"
        units.append(replace(p, name=name, tp=size, pp=1, replicas=n))  # one group: a replica of kp + kd
        split[name] = (g, p, d)
    placed = place(list(by.values()) + units, topo, time_limit_s, (), flows)
    out = {k: v for k, v in placed.items() if k not in split}
    for name, (g, p, d) in split.items():
        ps, ds = [], []
        for sp in placed.get(name, ()):
            gp = sp.gpus
            for i in range(g.kp):
                ps.append(StagePlacement(sp.replica * g.kp + i, 0, sp.node, gp[i * p.tp:(i + 1) * p.tp]))
            off = g.kp * p.tp
            for i in range(g.kd):
                ds.append(StagePlacement(sp.replica * g.kd + i, 0, sp.node,
                                         gp[off + i * d.tp:off + (i + 1) * d.tp]))
        out[p.name], out[d.name] = tuple(ps), tuple(ds)
    return out


def _rack_affine(deps: list[DeploymentSpecView], bins: list, topo: Topology, placed: dict, flows) -> dict:
    """Keep P/D pairs in one rack when the placement found loads an inter-rack link beyond LINK_UTIL: pairs
    joined by a route form a component; components (most GPUs first) go first-fit into the first rack that
    holds them all, then the other deployments first-fit. Refuses, naming the link and by how much it is over,
    when no rack-local packing is found (greedy: a packing may exist that it misses)."""
    def over(pl):
        st = {k: [(s.node, 0) for s in v] for k, v in pl.items()}
        return [(link, load, cap)
                for link, (load, cap, _) in sorted(kv_link_loads(topo, st, list(flows)).items())
                if link.startswith("inter-rack") and load > LINK_UTIL * cap * (1 + 1e-9)]

    bad = over(placed)
    if not bad:
        return placed
    comp = {d.name: d.name for d in deps}

    def root(x):
        while comp[x] != x:
            x = comp[x]
        return x

    for p, d, _ in flows:
        if p in comp and d in comp:
            comp[root(p)] = root(d)
    members: dict[str, list[int]] = {}
    for i, d in enumerate(deps):
        if any(d.name in (p, dd) for p, dd, _ in flows):
            members.setdefault(root(d.name), []).append(i)
    free = [node.nvlink_domain for node, _ in bins]
    counts: dict[tuple[int, int], int] = {}
    racks = sorted({node.rack for node, _ in bins})

    def fill(idx: list[int], allowed) -> dict | None:
        f, c = list(free), {}
        for di in sorted(idx, key=lambda i: (-deps[i].tp, deps[i].name)):
            d = deps[di]
            for _ in range(d.replicas * d.pp):
                k = next((k for k, (node, _) in enumerate(bins)
                          if allowed(node) and node.gpu == d.gpu and f[k] >= d.tp), None)
                if k is None:
                    return None
                f[k] -= d.tp
                c[(di, k)] = c.get((di, k), 0) + 1
        free[:] = f
        return c

    done = set()
    for key in sorted(members, key=lambda k: (-sum(deps[i].tp * deps[i].pp * deps[i].replicas
                                                    for i in members[k]), k)):
        got = next((c for r in racks
                    if (c := fill(members[key], lambda n, r=r: n.rack == r)) is not None), None)
        if got is None:
            break
        counts.update(got)
        done.update(members[key])
    else:
        rest = fill([i for i in range(len(deps)) if i not in done], lambda n: True)
        if rest is not None:
            counts.update(rest)
            out = _expand(deps, bins, counts)
            if not over(out):
                return out
    link, load, cap = bad[0]
    raise InfeasibleError([f"no placement keeps the KV hand-offs within the network: link {link} carries "
                           f"{load / 1e9:.2f} GB/s of KV, over {LINK_UTIL:.0%} of its {cap / 1e9:g} GB/s by "
                           f"{(load - LINK_UTIL * cap) / 1e9:.2f} GB/s, and the prefill/decode pairs do not "
                           "fit in one rack each; add GPUs to a rack or raise network.inter_rack_gbps"])


def _first_fit_decreasing(deps: list[DeploymentSpecView], bins: list) -> dict[tuple[int, int], int] | None:
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


def _solve_cpsat(deps: list[DeploymentSpecView], bins: list, time_limit_s: float,
                 extra=None) -> dict[tuple[int, int], int]:
    """``extra(m, cnt)``: adds further constraints over the stage counts (KV tiers: ``place_kv``)."""
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
    if extra is not None:
        extra(m, cnt)
    scale = len(bins) + 1
    m.minimize(sum((scale + k) * u for k, u in used))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    solver.parameters.max_deterministic_time = time_limit_s  # the limit that may decide the placement
    solver.parameters.max_time_in_seconds = 10 * time_limit_s  # a safety net: never a placement
    status = solver.solve(m)
    if status != cp_model.OPTIMAL and solver.wall_time >= 0.98 * solver.parameters.max_time_in_seconds:
        raise NoSolutionError([f"placement: the wall-clock safety net ({10 * time_limit_s:g} s) expired"])
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        if status == cp_model.INFEASIBLE:
            raise InfeasibleError(["no placement exists: the tensor-parallel groups cannot be packed into "
                                   "the nodes' NVLink domains (fragmentation); give nodes larger domains or "
                                   "more GPUs"])
        raise InfeasibleError([f"no placement found within {time_limit_s:g} deterministic s "
                               f"({solver.status_name(status)})"])
    return {key: int(solver.value(v)) for key, v in cnt.items() if solver.value(v)}


def _expand(deps: list[DeploymentSpecView], bins: list, counts: dict[tuple[int, int], int]
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


def _obvious_impossibility(deps: list[DeploymentSpecView], topo: Topology) -> list[str]:
    out = []
    need: dict[str, int] = {}
    for d in deps:
        need[d.gpu] = need.get(d.gpu, 0) + d.tp * d.pp * d.replicas
        dom = topo.max_domain(d.gpu)
        if d.tp > dom:
            out.append(f"deployment {d.name} needs tensor-parallel groups of {d.tp} {d.gpu} inside one "
                       f"NVLink domain; the largest domain in the nodes has {dom}")
    for g, n in sorted(need.items()):
        have = topo.gpus_of(g)
        if n > have:
            out.append(f"the plan needs {n} {g} but the nodes hold {have}")
    return out


def place_kv(deployments: list[DeploymentSpecView], topo: Topology, kv: dict[str, tuple[float, float, float]],
             host_gib: dict[str, float], time_limit_s: float = 20.0,
             **kw) -> dict[str, tuple[StagePlacement, ...]]:
    """``place`` for plans with KV tiers (docs/kv-tiers.md). ``kv``: deployment -> (borrowed, lent, offloaded)
    GiB per replica; ``host_gib``: node -> host memory the offload tier may use. Borrowing runs over the
    node's NVLink, so on every node
        sum_d (borrowed[d] - lent[d]) / pp[d] x stages of d on the node <= 0
        sum_d offloaded[d] / pp[d] x stages of d on the node <= host_gib[node]
    The ordinary placement is kept when it satisfies both; else CP-SAT packs with them (in MiB, integers);
    when no packing exists the error says so plainly."""
    deployments = _stage_groups(deployments, topo)
    out = place(deployments, topo, time_limit_s, **kw)
    kv = {k: v for k, v in kv.items() if any(x > 0 for x in v)}
    if not kv:
        return out
    deps = sorted((d for d in deployments if d.replicas > 0), key=lambda d: d.name)
    if not _kv_violations(deps, out, kv, host_gib):
        return out
    if kw.get("groups"):
        raise InfeasibleError(["no placement exists that keeps every KV borrower on a node with its lenders "
                               "and the offloaded KV within each node's host memory, next to co-located P/D "
                               "pairs"])
    bins = [(n, j) for n in topo.nodes for j in range(n.domains)]
    mib = {d.name: tuple(int(round(x * 1024 / d.pp)) for x in kv.get(d.name, (0.0, 0.0, 0.0))) for d in deps}

    def extra(m, cnt):
        nodes: dict[str, list[tuple[int, object]]] = {}
        for (di, k), v in cnt.items():
            nodes.setdefault(bins[k][0].name, []).append((di, v))
        for name, items in nodes.items():
            net = [(mib[deps[di].name][0] - mib[deps[di].name][1], v) for di, v in items]
            if any(a for a, _ in net):
                m.add(sum(a * v for a, v in net if a) <= 0)
            off = [(mib[deps[di].name][2], v) for di, v in items if mib[deps[di].name][2]]
            if off:
                m.add(sum(a * v for a, v in off) <= int(host_gib.get(name, 0.0) * 1024))

    try:
        counts = _solve_cpsat(deps, bins, time_limit_s, extra)
    except InfeasibleError:
        raise InfeasibleError(["no placement exists that keeps every KV borrower on a node with enough lent "
                               "HBM and the offloaded KV within each node's host memory; lend more (more "
                               "lender replicas), borrow less, or give the nodes more CPU memory"]) from None
    return _expand(deps, bins, counts)


def _kv_violations(deps, placed, kv, host_gib) -> list[str]:
    net: dict[str, float] = {}
    off: dict[str, float] = {}
    for d in deps:
        b, l, o = kv.get(d.name, (0.0, 0.0, 0.0))
        for sp in placed.get(d.name, ()):
            net[sp.node] = net.get(sp.node, 0.0) + (b - l) / d.pp
            off[sp.node] = off.get(sp.node, 0.0) + o / d.pp
    return sorted([n for n, v in net.items() if v > 1e-3]
                  + [n for n, v in off.items() if v > host_gib.get(n, 0.0) + 1e-3])


def placement_inputs(plan, ir):
    """``place``'s ``groups`` (co-located pairs) and ``flows`` (cross-node pairs) of a plan."""
    by = {d.name: d for d in plan.deployments}
    groups = tuple(LocalGroup(d.name, d.colocated_with, d.group_replicas, by[d.colocated_with].group_replicas)
                   for d in plan.deployments if d.role == "prefill" and d.colocated_with in by
                   and is_local_pair(d, by[d.colocated_with]) and d.group_replicas > 0)
    flows = tuple((p, d, f) for p, d, f, local in pair_flows(plan, ir) if not local)
    return groups, flows
