"""KV tiers in plans: who offloads, who borrows, who lends (docs/kv-tiers.md).

``offload_gib`` is the prefix cache's host-memory tier (``kv_tiers: auto`` / ``offload``, what engines
realise) or, under ``kv_tiers: experimental-live``, live KV spilled to host memory; borrowing and lending
exist only under experimental-live (deployments marked ``kv.live``).

The cost model's side is ``trimtab.cost.model.KvTier`` (a replica's KV capacity beyond HBM and the link to
it); candidates with a tier and the MILP rows ``kv_offload[g]`` / ``kv_borrow[g]`` are in
``trimtab.milp.candidates`` and ``trimtab.milp.formulate``. This module turns a solved plan's tiers into plan
fields and back:

  * ``allocate`` (plan extraction): per GPU type, the borrowers' GiB are served by the HBM-only deployments
    with spare KV, in name order, each lending all its spare until the borrowing is covered (the slack lets
    placement pair borrowers with lenders node by node); every borrower lists the lenders of its type.
  * a plan deployment's tier and lent GiB are fields of its ``DeploymentSpecView`` (``of_plan``); its cost
    model (``trimtab.deployment.shape.replica_model_of``) has the tier and, for a lender, its HBM KV less what
    it lends.
  * ``verify_kv`` (``check``): re-derives the limits from the spec and the cost model, independently of the
    solver: offload within the host memory of the type's nodes and of each node, borrowed within lent per GPU
    type and per node, each lender's lent GiB within its spare HBM KV at the load the plan routes to it.
"""
from __future__ import annotations

from dataclasses import replace

from trimtab.cost.model import GIB
from trimtab.cost.factory import HOST_KV_SHARE
from trimtab.deployment.shape import DeploymentSpecView, replica_model_of

TOL_GIB = 1e-3  # rounding of GiB figures in plans


def allocate(deps) -> dict[str, tuple[float, tuple[str, ...]]]:
    """deployment name -> (GiB it lends per replica, lenders it borrows from) for the chosen ``(candidate,
    replicas)`` pairs. Lenders in name order each offer their spare until the type's borrowing is covered."""
    out: dict[str, tuple[float, tuple[str, ...]]] = {}
    by_gpu: dict[str, list] = {}
    for c, n in deps:
        by_gpu.setdefault(c.gpu, []).append((c, n))
    for gpu, items in sorted(by_gpu.items()):
        need = sum(c.kv_borrow_gib * n for c, n in items)
        if need <= 0:
            continue
        lenders = []
        for c, n in sorted(items, key=lambda t: t[0].id):
            if c.kv_spare_gib <= 0 or need <= TOL_GIB:
                continue
            need -= c.kv_spare_gib * n  # a lender offers all its spare: room for placement to pair nodes up
            out[c.id] = (c.kv_spare_gib, ())
            lenders.append(c.id)
        for c, _ in items:
            if c.kv_borrow_gib > 0:
                out[c.id] = (0.0, tuple(lenders))
    return out


def usable_host_gib(ir, node) -> float:
    """Host memory of one topology node the KV offload tier may use (HOST_KV_SHARE of it)."""
    pool = ir.gpu(node.gpu)
    if node.cpu_memory_gib is not None:
        mem = node.cpu_memory_gib
    else:
        prof = pool.profile
        host = prof.host_memory_gib_per_node.value if prof.host_memory_gib_per_node is not None else 0.0
        mem = host * node.gpus / prof.gpus_per_node.value
    return mem * HOST_KV_SHARE


def verify_kv(plan, ir, assessment, topo=None) -> list[str]:
    """Violations of the KV-tier limits (module docstring), one line each naming the deployment and the
    limit."""
    bad: list[str] = []
    deps = [d for d in plan.deployments if d.kv is not None]
    tiered = [d for d in deps if d.kv.offload_gib > 0 or d.kv.borrowed_gib > 0 or d.kv.lent_gib > 0]
    if not tiered:
        return bad
    if ir.kv_tiers == "off":
        return [f"deployment {d.name}: uses a KV tier but the spec has defaults.kv_tiers: off"
                for d in tiered]
    if ir.kv_tiers != "experimental-live":  # the prefix cache's host tier only: no live KV beyond HBM
        bad += [f"deployment {d.name}: holds live KV beyond HBM (live, borrowed or lent KV) but the spec has "
                f"defaults.kv_tiers: {ir.kv_tiers}, whose tier is the prefix cache's host memory; live KV "
                "needs experimental-live"
                for d in tiered if d.kv.live or d.kv.borrowed_gib > 0 or d.kv.lent_gib > 0]
    by = {d.name: d for d in plan.deployments}
    off_by_gpu: dict[str, float] = {}
    bor_by_gpu: dict[str, float] = {}
    lent_by_gpu: dict[str, float] = {}
    for d in deps:
        kv = d.kv
        pool = ir.gpu(d.gpu)
        if pool is None:
            continue
        if kv.offload_gib > 0 and kv.borrowed_gib > 0:
            bad.append(f"deployment {d.name}: offloads and borrows KV; a replica has one KV tier")
        if kv.lent_gib > 0 and (kv.offload_gib > 0 or kv.borrowed_gib > 0):
            bad.append(f"deployment {d.name}: lends KV while using a KV tier itself")
        if kv.offload_gib > 0:
            room = pool.cpu_memory_gib_per_node * HOST_KV_SHARE
            if kv.offload_gib > room + TOL_GIB:
                bad.append(f"deployment {d.name}: offloads {kv.offload_gib:g} GiB of KV per replica, more "
                           f"than the {room:g} GiB a {d.gpu} node's host memory allows ({HOST_KV_SHARE:g} of "
                           f"{pool.cpu_memory_gib_per_node:g} GiB)")
            off_by_gpu[d.gpu] = off_by_gpu.get(d.gpu, 0.0) + kv.offload_gib * d.replicas
        if kv.borrowed_gib > 0:
            bor_by_gpu[d.gpu] = bor_by_gpu.get(d.gpu, 0.0) + kv.borrowed_gib * d.replicas
            for ln in kv.borrowed_from:
                lender = by.get(ln)
                if lender is None or lender.gpu != d.gpu or lender.kv is None or lender.kv.lent_gib <= 0:
                    bad.append(f"deployment {d.name}: borrows KV from {ln}, which is not a {d.gpu} "
                               "deployment lending KV")
            if not kv.borrowed_from:
                bad.append(f"deployment {d.name}: borrows {kv.borrowed_gib:g} GiB of KV per replica from no "
                           "lender")
        if kv.lent_gib > 0:
            lent_by_gpu[d.gpu] = lent_by_gpu.get(d.gpu, 0.0) + kv.lent_gib * d.replicas
            # before lending
            rm = replica_model_of(ir, replace(DeploymentSpecView.of_plan(d), kv_lent_gib=0.0))
            load = assessment.deployments.get(d.name) if assessment is not None else None
            used = load.kv_tokens_used if load is not None and load.stable else 0.0
            spare = max(rm.memory.kv_cache_tokens - used, 0.0)
            spare_gib = spare * rm.memory.kv_bytes_per_token_per_gpu * rm.tp * rm.pp / GIB
            if kv.lent_gib > spare_gib + TOL_GIB:
                bad.append(f"deployment {d.name}: lends {kv.lent_gib:g} GiB of KV per replica, its spare HBM "
                           f"KV at the planned load is {spare_gib:.3f} GiB ({rm.memory.kv_cache_tokens} "
                           f"tokens, {used:.0f} in use)")
    for g, off in sorted(off_by_gpu.items()):
        pool = ir.gpu(g)
        limit = pool.cpu_memory_gib * HOST_KV_SHARE
        if off > limit + TOL_GIB:
            bad.append(f"kv_offload[{g}]: the plan offloads {off:g} GiB of KV, the {g} nodes' host memory "
                       f"allows {limit:g} GiB ({HOST_KV_SHARE:g} of {pool.cpu_memory_gib:g} GiB)")
    for g, bor in sorted(bor_by_gpu.items()):
        lent = lent_by_gpu.get(g, 0.0)
        if bor > lent + TOL_GIB:
            bad.append(f"kv_borrow[{g}]: the plan borrows {bor:g} GiB of KV, its {g} lenders lend {lent:g} "
                       "GiB")
    if topo is not None:
        bad += _per_node(plan, ir, topo)
    return bad


def _per_node(plan, ir, topo) -> list[str]:
    """Per node of the placement: offload within the node's host memory, borrowed within what is lent there
    (borrowing runs over the node's NVLink)."""
    bad = []
    off: dict[str, float] = {}
    bor: dict[str, float] = {}
    lent: dict[str, float] = {}
    for d in plan.deployments:
        if d.kv is None or not d.placement:
            continue
        stages = max(d.pipeline_parallel, 1)
        for p in d.placement:
            for acc, v in ((off, d.kv.offload_gib), (bor, d.kv.borrowed_gib), (lent, d.kv.lent_gib)):
                if v > 0:
                    acc[p.node] = acc.get(p.node, 0.0) + v / stages
    nodes = {n.name: n for n in topo.nodes}
    for name, v in sorted(off.items()):
        n = nodes.get(name)
        if n is not None and v > usable_host_gib(ir, n) + TOL_GIB:
            bad.append(f"node {name}: its replicas offload {v:g} GiB of KV, its host memory allows "
                       f"{usable_host_gib(ir, n):g} GiB")
    for name, v in sorted(bor.items()):
        if v > lent.get(name, 0.0) + TOL_GIB:
            bad.append(f"node {name}: its replicas borrow {v:g} GiB of KV, lenders on the node lend "
                       f"{lent.get(name, 0.0):g} GiB (borrowing stays on the node's NVLink)")
    return bad
