"""What a simulation runs: a plan's deployments and routes, and each workload's traffic, from plan + spec.

``build_scenario(plan, spec, ir, trace=None)`` resolves everything by name once (replica models from the cost
model, length grids and buckets exactly as the planner made them, route shares) so the event loop only touches
arrays. A route that names an unknown deployment, bucket or workload is skipped (``check`` reports it);
requests of a bucket without a route are counted as unserved.

Prefix reuse (docs/prefix-caching.md): a unified deployment serving a workload with prefix reuse keeps the
planner's prefix cache per replica (``trimtab.milp.candidates.prefix_cache``: reserved tokens and the hit rate
they get); with a trace that has hash_ids and a measured prefix (``from_trace``) every replica replays the
real hits through an LRU of the reserved size (the measured validation), otherwise each request reuses hit
rate x input.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trimtab.cost.factory import host_tier_tokens, prefix_hits
from trimtab.cost.model import ReplicaModel
from trimtab.deployment.shape import DeploymentSpecView, replica_model_of
from trimtab.ir.model import ProblemIR
from trimtab.spec.lengths import bucket_name, cut_inputs, cut_outputs, input_ranges, length_grids
from trimtab.contract.schema import Plan
from trimtab.spec.schema import Spec
from trimtab.spec.traces import Trace, read_trace
from trimtab.cost.transfer import is_local_pair, transfer_s
from trimtab.sim.replica import PrefixCache
from trimtab.util.graph import components


@dataclass
class SimDeployment:
    """A plan deployment as the event loop runs it: its view (shape, name, replicas), the workloads routed to
    it, its cost model and, for prefix reuse, the cache the planner gave it."""

    view: DeploymentSpecView
    workloads: tuple[str, ...]
    model: ReplicaModel
    prefix_reserved: int = 0  # KV tokens per replica kept for the prefix cache
    prefix_hits: dict[str, float] = field(default_factory=dict)  # per workload served: planned hit rate
    # The prefix cache's host-memory tier (docs/kv-tiers.md): its tokens per replica, and per workload served
    # the planned share of input tokens found only there (reloaded over PCIe)
    prefix_host_tokens: int = 0
    prefix_host_hits: dict[str, float] = field(default_factory=dict)


@dataclass
class SimWorkload:
    name: str
    rate_rps: float
    ttft_s: float
    tpot_s: float
    percentile: float
    ctx: int  # the model's context window
    buckets: tuple[str, ...]
    isl_grid: np.ndarray  # the planner's prompt-length grid (cut to the context window)
    osl_grid: np.ndarray  # the planner's output-length grid (as requested; cut per request by cut_outputs)
    in_ranges: list[tuple[int, int]]  # grid index ranges of the prompt-length ranges (one bucket each)
    arrival_cv: float = 1.0  # 0: fixed intervals (arrivals: constant)
    stages: tuple[tuple[float, float], ...] = ()  # load stages (rate, seconds); empty: rate_rps throughout
    trace: Trace | None = None  # replay arrivals (and lengths) from this trace
    trace_rate: float | None = None  # rescale the trace to this mean rate (None: its own times x trace_scale)
    trace_scale: float = 1.0
    trace_offset: int = 0
    prefix_hashes: tuple | None = None  # the trace's block hashes per row when its prefix reuse is replayed
    # Shared system prompts (the spec's shared_prefix): (groups, users per group, prefix tokens, prompts
    # repeat). Each request is one user's (drawn uniformly: its row); a replica's cache finds what it served.
    prompt_set: tuple[int, int, int, bool] | None = None
    # Per bucket: (deployment indices, cumulative shares within the bucket); empty when unrouted.
    routes: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    # A max_goodput plan's workload: the cumulative shares end at the share of the bucket the plan serves
    # (not 1), the rest, and unrouted buckets, are shed (``trimtab.sim.engine.SHED``), not offered
    sheds: bool = False

    def bucket_of_values(self, isl: np.ndarray) -> np.ndarray:
        """Bucket of each prompt length by value (trace requests): what a router sees at admission."""
        edges = np.array([self.isl_grid[a] for a, _ in self.in_ranges[1:]])
        return np.searchsorted(edges, isl, side="right")

    def bucket_of_indices(self, ii: np.ndarray) -> np.ndarray:
        """Bucket of each prompt drawn as a grid index (requests drawn from the spec's distributions)."""
        starts = np.array([a for a, _ in self.in_ranges[1:]], dtype=np.int64)
        return np.searchsorted(starts, ii, side="right")

    def lengths(self, isl: np.ndarray, osl: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(prompt, output) as served: prompts cut to the window, outputs where prompt + output exceeds it."""
        isl_c = cut_inputs(isl, self.ctx)
        return isl_c, cut_outputs(isl_c, osl, self.ctx)


@dataclass
class Scenario:
    deployments: list[SimDeployment]
    workloads: list[SimWorkload]
    notes: list[str]
    pairs: list[tuple[int, int]] = field(default_factory=list)  # (prefill, decode) deployment indices
    pair_xfer_s_per_token: list[float] = field(default_factory=list)  # KV hand-off seconds per input token

    def pair_groups(self) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        """The pairs in groups that share no deployment: (the group's deployments, its pairs' indices), both
        ascending, groups by their first deployment. A request moves only between the deployments of its
        pair, so each group's arrivals run in an event loop of their own (``Simulation._run_split``, exactly
        as in one loop over all arrivals: ``trimtab.sim.reuse``)."""
        out = []
        for deps in components(self.pairs):
            mine = set(deps)
            out.append((tuple(deps), tuple(i for i, (p, _) in enumerate(self.pairs) if p in mine)))
        return out


def build_scenario(plan: Plan, spec: Spec, ir: ProblemIR, trace: Trace | None = None,
                   trace_workloads: tuple[str, ...] | None = None,
                   arrival_cv: float | None = None) -> Scenario:
    notes: list[str] = []
    deps: list[SimDeployment] = []
    dep_index: dict[str, int] = {}
    # The routes by deployment and by (workload, bucket), in plan order, and the workloads by name (the first
    # of a name, as ``ProblemIR.workload``): one pass each, not one per deployment and bucket
    served_by: dict[str, set[str]] = {}
    routes_of: dict[tuple[str, str], list] = {}
    for r in plan.routes:
        for name in {r.deployment, r.prefill, r.decode}:
            served_by.setdefault(name, set()).add(r.workload)
        routes_of.setdefault((r.workload, r.bucket), []).append(r)
    ir_w = {w.name: w for w in reversed(ir.workloads)}
    for d in plan.deployments:
        if ir.gpu(d.gpu) is None or d.model not in ir.models or d.name in dep_index:
            continue
        view = DeploymentSpecView.of_plan(d)
        try:
            rm = replica_model_of(ir, view)  # a KV lender (docs/kv-tiers.md): its HBM KV less what it lends
        except ValueError:
            continue
        if rm.memory.kv_cache_tokens <= 0:
            continue
        served = tuple(sorted(served_by.get(d.name, ())))
        dep_index[d.name] = len(deps)
        sd = SimDeployment(view, served, rm)
        if d.role == "unified":
            for wn in served:
                wi = ir_w.get(wn)
                if wi is not None and wi.prefix_hit_rate:
                    reserved, hbm, hit = prefix_hits(wi, rm)
                    sd.prefix_reserved = max(sd.prefix_reserved, reserved)
                    sd.prefix_hits[wn] = hit
                    sd.prefix_host_hits[wn] = hit - hbm
                    sd.prefix_host_tokens = host_tier_tokens(rm)
        deps.append(sd)
    pairs, xfer, pair_index = pair_targets(plan, ir, deps, dep_index)
    spec_w = {w.name: w for w in spec.workloads}
    workloads: list[SimWorkload] = []
    shared = list(trace_workloads) if trace_workloads else [w.name for w in ir.workloads]
    for w in ir.workloads:
        sw = spec_w[w.name]
        ctx = int(ir.models[w.model].max_context_tokens.value)
        isl_raw, osl_raw = length_grids(sw, spec.base_dir)
        isl = cut_inputs(isl_raw, ctx)
        ins = input_ranges(isl)
        names = [bucket_name(isl, a, b) for a, b in ins]  # as trimtab.spec.lengths.make_buckets names them
        if names != [b.name for b in w.buckets]:
            raise RuntimeError(f"simulator and planner disagree on {w.name}'s buckets: {names} vs "
                               f"{[b.name for b in w.buckets]}")
        sim_w = SimWorkload(w.name, w.rate_rps, w.slo.ttft_ms / 1e3, w.slo.tpot_ms / 1e3, w.slo.percentile,
                            ctx, tuple(names), isl, osl_raw, ins,
                            arrival_cv=arrival_cv or sw.arrival_cv
                            or (0.0 if sw.arrivals == "constant" else 1.0),
                            stages=tuple((s.rate_rps, s.duration_s) for s in sw.stages or ()))
        if trace is not None and w.name in shared:
            # One trace for several workloads: each replays it from a different row, at its own rate.
            sim_w.trace, sim_w.trace_rate = trace, w.rate_rps
            sim_w.trace_offset = shared.index(w.name) * len(trace) // len(shared)
        elif sw.trace is not None:
            sim_w.trace = read_trace(Path(spec.base_dir) / sw.trace.path, sw.trace.format)
            sim_w.trace_rate = sw.rate_rps  # None: the trace's own times, sped up by rate_scale
            sim_w.trace_scale = sw.trace.rate_scale or 1.0
        if w.prefix_source == "trace" and sim_w.trace is not None and sim_w.trace.hash_ids is not None:
            sim_w.prefix_hashes = sim_w.trace.hash_ids
        elif w.prefix_source == "shared_prefix" and sim_w.trace is None:
            sp = sw.shared_prefix
            sim_w.prompt_set = (sp.groups, sp.users_per_group, sp.prefix_tokens, sp.prompts_repeat)
        # max_goodput: route shares are the served shares of the workload (docs/solvers.md, "Objectives");
        # the simulation offers each deployment what the plan routes to it, not the whole bucket
        sim_w.sheds = plan.goodput is not None
        bucket_share = {bk.name: bk.prob for bk in w.buckets}
        for b in names:
            mine = routes_of.get((w.name, b), ())
            rs = [r for r in mine if r.deployment in dep_index]
            rs.sort(key=lambda r: r.deployment)
            idx = [dep_index[r.deployment] for r in rs]
            for r in mine:  # P/D pairs: targets after the deployments
                if (r.prefill, r.decode) in pair_index:
                    rs.append(r)
                    idx.append(len(deps) + pair_index[(r.prefill, r.decode)])
            total = sum(r.share for r in rs)
            if not rs or total <= 0:
                sim_w.routes.append((np.zeros(0, np.int64), np.zeros(0)))
                continue
            idx = np.array(idx, np.int64)
            served = min(1.0, total / bucket_share[b]) if sim_w.sheds and bucket_share[b] > 0 else 1.0
            cum = np.cumsum([r.share / total for r in rs]) * served
            cum[-1] = 1.0 if served >= 1.0 - 1e-6 else served
            sim_w.routes.append((idx, cum))
        workloads.append(sim_w)
    for d in deps:
        if d.view.replicas == 0 and d.workloads:
            notes.append(f"deployment {d.view.name} has 0 replicas but routes send it traffic")
    return Scenario(deps, workloads, notes, pairs, xfer)


def attach_prefix_caches(sc: Scenario, replicas: list[list]) -> None:
    """Give every replica of a deployment with a prefix cache its own
    (``trimtab.sim.replica.PrefixCache``)."""
    index = {w.name: i for i, w in enumerate(sc.workloads)}
    for d, reps in zip(sc.deployments, replicas):
        if not d.prefix_hits:
            continue
        hits = {index[n]: h for n, h in d.prefix_hits.items() if n in index}
        hashes = {index[n]: sc.workloads[index[n]].prefix_hashes for n in d.prefix_hits
                  if n in index and sc.workloads[index[n]].prefix_hashes is not None}
        sets = {index[n]: sc.workloads[index[n]].prompt_set for n in d.prefix_hits
                if n in index and sc.workloads[index[n]].prompt_set is not None}
        host = {index[n]: h for n, h in d.prefix_host_hits.items() if n in index}
        for rep in reps:
            rep.set_prefix(d.prefix_reserved, PrefixCache(d.prefix_reserved, hits, hashes, host,
                                                          d.prefix_host_tokens, sets))


class PairTarget(tuple):
    """(prefill, decode) deployment indices; ``group``: (kp, kd) replicas per group of a co-located pair
    (prefill replica i hands off to a decode replica of group i // kp), else None."""

    def __new__(cls, p: int, d: int, group: tuple[int, int] | None = None):
        t = super().__new__(cls, (p, d))
        t.group = group
        return t


def pair_targets(plan, ir, deps, dep_index):
    """The plan's (prefill, decode) pairs as deployment indices, sorted by name, with the KV hand-off seconds
    per input token of each (``trimtab.cost.transfer.transfer_s``)."""
    names = sorted({(r.prefill, r.decode) for r in plan.routes
                    if r.prefill in dep_index and r.decode in dep_index
                    and deps[dep_index[r.prefill]].view.role == "prefill"
                    and deps[dep_index[r.decode]].view.role == "decode"})
    pairs, xfer, index = [], [], {}
    by = {d.name: d for d in plan.deployments}
    for p, d in names:
        dp, dd = by[p], by[d]
        index[(p, d)] = len(pairs)
        local = is_local_pair(dp, dd) and dp.group_replicas > 0 and dd.group_replicas > 0
        pairs.append(PairTarget(dep_index[p], dep_index[d],
                                (dp.group_replicas, dd.group_replicas) if local else None))
        xfer.append(transfer_s(ir, dp.model, dp.dtype, 1.0, dp.gpu,
                               dp.tensor_parallel * dp.pipeline_parallel * dp.data_parallel, dd.gpu,
                               dd.tensor_parallel * dd.pipeline_parallel * dd.data_parallel,
                               local=is_local_pair(dp, dd), kv_dtype=dp.kv_dtype))
    return pairs, xfer, index
