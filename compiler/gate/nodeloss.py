"""``check --fail-each-node`` (docs/online.md, "Redundancy"): the plan with each node removed, checked like
the plan.

A node lost takes every replica with a stage on it. The router keeps each route's deployment and share, so a
deployment's surviving replicas carry all of its traffic (the simulator's router spreads it over them); a
deployment left with no replica has its routes' shares re-spread over the other deployments of the same
workload and length bucket, in proportion to their shares; a bucket left with none is unserved (a violation).
Nodes that lose the same replicas of the same deployments are equivalent: one of each kind is checked, and the
report names them all. Nodes holding no replica change nothing and are skipped.

    losses = check_each_node(plan, spec)                 # simulated on unused seeds, as ``check``
    losses = check_each_node(plan, spec, analytic=True)  # the cost model's assessment
    worst = worst_loss(losses)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from trimtab.gate.analytic import CheckReport, verify
from trimtab.ir.model import ProblemIR
from trimtab.deployment.price import fleet_usd_per_hour
from trimtab.ir.lower import lower
from trimtab.contract.schema import Placement, Plan
from trimtab.ir.topology import build_topology
from trimtab.gate.simulated import check_simulated


@dataclass
class NodeLoss:
    nodes: tuple[str, ...]  # equivalent nodes: each loses the same replicas (the first one is simulated)
    lost: dict[str, int]  # deployment -> replicas lost
    report: CheckReport
    result: object | None = None  # trimtab.sim.validate.SeedsResult; None when analytic or not simulated
    slo: dict[str, tuple[float, float]] | None = None  # analytic: workload -> (TTFT, TPOT) SLO, ms

    @property
    def margin(self) -> float:
        """Simulated: lowest (lower 95 % bound - target) over the workloads. Analytic: lowest share of an SLO
        left over TTFT and TPOT (1 - predicted / SLO). -inf when a bucket is left unserved."""
        if self.result is not None:
            r = self.result
            return min(r.intervals[n].lower - r.targets[n] for n in r.intervals)
        a = self.report.assessment
        if a is None or not self.slo:
            return -math.inf
        return min(min(1 - p.ttft_ms / self.slo[k][0], 1 - p.tpot_ms / self.slo[k][1])
                   for k, p in a.workloads.items() if k in self.slo)


def losses_by_node(plan: Plan) -> dict[str, dict[str, int]]:
    """node -> {deployment: replicas with a stage on it}, for the nodes the plan places replicas on."""
    out: dict[str, dict[str, set]] = {}
    for d in plan.deployments:
        for p in d.placement:
            out.setdefault(p.node, {}).setdefault(d.name, set()).add(p.replica)
    return {n: {k: len(v) for k, v in sorted(ds.items())} for n, ds in sorted(out.items())}


def without_node(plan: Plan, node: str, ir: ProblemIR) -> tuple[Plan, list[str]]:
    """The plan after ``node`` is lost (module docstring), and the buckets left unserved (one line each)."""
    deps, gone = [], set()
    for d in plan.deployments:
        hit = {p.replica for p in d.placement if p.node == node}
        if not hit:
            deps.append(d)
            continue
        left = sorted({p.replica for p in d.placement} - hit)
        if not left:
            gone.add(d.name)
            continue
        new = {r: i for i, r in enumerate(left)}
        deps.append(d.model_copy(update={"replicas": len(left), "placement": [
            Placement(replica=new[p.replica], stage=p.stage, node=p.node, gpus=list(p.gpus))
            for p in d.placement if p.replica in new]}))
    dead = lambda r: bool({r.deployment, r.prefill, r.decode} & gone)  # noqa: E731
    routes, unserved = [], []
    for key in sorted({(r.workload, r.bucket) for r in plan.routes}):
        rs = [r for r in plan.routes if (r.workload, r.bucket) == key]
        alive = [r for r in rs if not dead(r)]
        total, kept = sum(r.share for r in rs), sum(r.share for r in alive)
        if not alive:
            unserved.append(f"node {node} lost: workload {key[0]} bucket {key[1]} is left with no deployment "
                            f"({', '.join(sorted(r.deployment or r.prefill for r in rs))} all gone)")
            continue
        routes += [r.model_copy(update={"share": min(1.0, r.share * total / kept)}) for r in alive]
    gpus: dict[str, int] = {}
    priced = []
    for d in deps:
        n = d.replicas * d.gpus_per_replica
        gpus[d.gpu] = gpus.get(d.gpu, 0) + n
        pool = ir.gpu(d.gpu)
        priced.append((n, pool.usd_per_hour if pool is not None else 0.0))
    cost = fleet_usd_per_hour(priced)
    out = plan.model_copy(update={"deployments": deps, "routes": routes, "gpus": dict(sorted(gpus.items())),
                                  "cost_usd_per_hour": round(cost, 4), "schedule": None})
    return out, unserved


def check_each_node(plan: Plan, spec, *, analytic: bool = False, seed: int | None = None, seeds: int = 3,
                    requests: int | None = None, strict: bool = False, profiles=None) -> list[NodeLoss]:
    """One check per kind of node loss (module docstring), simulated
    (``trimtab.gate.simulated.check_simulated``) or, with ``analytic``, by the cost model
    (``trimtab.gate.analytic.verify``)."""
    ir = lower(spec, profiles)
    topo = build_topology(spec, ir)
    kinds: dict[tuple, list[str]] = {}
    per = losses_by_node(plan)
    for node, lost in per.items():
        kinds.setdefault(tuple(lost.items()), []).append(node)
    out = []
    for sig, nodes in sorted(kinds.items(), key=lambda kv: kv[1][0]):
        reduced, unserved = without_node(plan, nodes[0], ir)
        res = None
        if unserved:
            rep = CheckReport(False, unserved)
        elif analytic:
            rep = verify(reduced, ir, topo)
        else:
            rep, res = check_simulated(reduced, spec, profiles=profiles, seed=seed, seeds=seeds,
                                       requests=requests, strict=strict)
        out.append(NodeLoss(tuple(nodes), dict(sig), rep, res,
                            {w.name: (w.slo.ttft_ms, w.slo.tpot_ms) for w in ir.workloads}))
    return out


def worst_loss(losses: list[NodeLoss]) -> NodeLoss | None:
    return min(losses, key=lambda x: (x.report.ok, x.margin, x.nodes[0]), default=None)
