"""Discrete-event simulation of a plan: requests arriving over time, continuous batching, chunked prefill,
queues, a filling KV cache, routing across replicas. See docs/simulator.md.

    from trimtab.sim import simulate
    res = simulate(plan, spec, requests=20_000, seed=0)   # SimResult: .workloads, .deployments, .ok,
    .failures()

Layout: ``engine`` (event loop, arrivals drawn up front), ``arrivals`` (Poisson, Gamma, trace replay),
``replica`` (one engine's scheduler; step times from ``trimtab.cost.model.ReplicaModel.iteration_s``),
``router`` inside ``engine`` (plan shares to a deployment, least request of two sampled replicas to a
replica), ``scenario`` (plan + spec resolved to arrays), ``metrics`` (per workload and per deployment). No
solver imports: a plan read from disk simulates on its own.
"""
from __future__ import annotations

import math
import time
from typing import Callable

from trimtab.ir.model import ProblemIR
from trimtab.util.jobs import gc_paused
from trimtab.ir.lower import lower
from trimtab.contract.schema import Plan
from trimtab.sim.engine import Simulation
from trimtab.sim.disagg import DisaggSimulation
from trimtab.sim.lora import apply_adapters
from trimtab.sim.metrics import SimResult, summarise
from trimtab.sim.reuse import RunCache
from trimtab.sim.scenario import Scenario, build_scenario
from trimtab.spec.schema import Spec
from trimtab.spec.traces import Trace

DEFAULT_REQUESTS = 20_000  # at least, in total ...
MIN_PER_WORKLOAD = 1_000  # ... and enough that the slowest workload gets this many
TAIL_SAMPLES = 20  # ... and this many requests expected beyond its SLO percentile
MAX_DEFAULT_REQUESTS = 200_000
DEFAULT_SEED = 0


def aim(w) -> float:
    """Requests of workload ``w`` (an IR workload) a run aims at: MIN_PER_WORKLOAD, and TAIL_SAMPLES beyond
    its percentile."""
    return max(MIN_PER_WORKLOAD, TAIL_SAMPLES / max(1 - w.slo.percentile / 100, 1e-6))


def default_requests(ir: ProblemIR) -> int:
    """Requests a run simulates when neither a count nor a duration is given (what ``plan`` validates with and
    ``check`` replays): every workload gets its ``aim``, up to MAX_DEFAULT_REQUESTS in all (past it, the
    workloads of the lowest rates get fewer: ``aim_counts``)."""
    total = sum(w.rate_rps for w in ir.workloads)
    need = max((aim(w) * total / w.rate_rps for w in ir.workloads if w.rate_rps > 0), default=0.0)
    return int(min(MAX_DEFAULT_REQUESTS, max(DEFAULT_REQUESTS, need)))


# a workload gets a run of its own length (aim_counts) when a run gives it under this share of its aim
AIM_SHORT = 0.5


def aim_counts(plan: Plan, ir: ProblemIR, requests: int, names, runs: int = 1) -> dict[str, int]:
    """Requests per workload, per run, for the workloads of ``names`` that a run of ``requests`` (split by
    rate) leaves *short*: under AIM_SHORT of their ``aim`` (MAX_DEFAULT_REQUESTS caps the runs of specs of
    many workloads; a low-rate p99 workload then gets ~100 requests, too few to show its target). ``runs``
    such runs together give each short workload its aim, and every workload it shares a deployment with
    (``closure``) the same span of arrivals: per closure, the span in which its slowest workload gets aim /
    ``runs`` requests (never shorter than a run of ``requests``), each workload's rate x that span. All the
    counts add up to MAX_DEFAULT_REQUESTS at most (scaled down past it). {}: no workload of ``names`` is
    short. For ``simulate(counts=...)`` in the planner's validating seeds after the first
    (``trimtab.sim.validate``)."""
    by_name = {w.name: w for w in ir.workloads}
    total = sum(w.rate_rps for w in ir.workloads)
    if total <= 0:
        return {}
    short = sorted(n for n in names if n in by_name and by_name[n].rate_rps > 0
                   and requests * by_name[n].rate_rps / total < AIM_SHORT * aim(by_name[n]))
    span: dict[str, float] = {}  # workload -> seconds of arrivals its closure needs
    done: set[str] = set()
    for n in short:
        if n in done:
            continue
        group = sorted(w for w in closure(plan, (n,))[0] if w in by_name and by_name[w].rate_rps > 0)
        s = max(max(aim(by_name[w]) / runs / by_name[w].rate_rps for w in group), requests / total)
        for w in group:
            span[w] = max(span.get(w, 0.0), s)
        done.update(group)
    counts = {w: s * by_name[w].rate_rps for w, s in span.items()}
    scale = min(1.0, MAX_DEFAULT_REQUESTS / max(sum(counts.values()), 1.0))
    return {w: max(1, int(math.ceil(c * scale))) for w, c in sorted(counts.items())}


@gc_paused()
def simulate(plan: Plan, spec: Spec, *, ir: ProblemIR | None = None, requests: int | None = None,
             duration_s: float | None = None, seed: int = DEFAULT_SEED, trace: Trace | None = None,
             trace_workloads: tuple[str, ...] | None = None, arrival_cv: float | None = None,
             timeline: bool = True, progress: Callable[[float], None] | None = None,
             cache: RunCache | None = None, only_workloads: frozenset[str] | None = None,
             counts: dict[str, int] | None = None, scenario: Scenario | None = None,
             warmup: bool = True) -> SimResult:
    """Simulate ``plan`` under ``spec``'s traffic. ``requests`` (total, split by rate) or ``duration_s``
    (seconds of arrivals); neither: ``default_requests``. ``trace`` replays one trace's arrivals and lengths
    for every workload (or those in ``trace_workloads``), each rescaled to its own rate. ``cache``
    (``trimtab.sim.reuse.RunCache``, the planner's rounds): reuse the deployment runs of the last simulation
    of this seed whose inputs are unchanged; the result is the same as without it. ``only_workloads``: run
    only the deployments these workloads are routed to (``closure``: with every workload those serve, and so
    on) and report those workloads and deployments alone: the workloads exactly as the whole run reports them
    (the deployments' event loops are independent; the arrivals are drawn for every workload, the same random
    streams), unless a deployment left out would have stopped the run at its drain limit
    (``reuse.join_ends``); the deployments' time shares (utilisation, KV) are over this run's end, which can
    come earlier. ``counts`` (workload -> requests; instead of ``requests`` or ``duration_s``, and as
    ``only_workloads`` its workloads): those workloads alone, each from a random stream of its own
    (``trimtab.sim.engine.draw_counts``) and measured after the first WARMUP share of its own arrivals
    (``aim_counts``: runs as long as rare workloads need); ``only_workloads`` then runs only those of them
    (and their closure). ``scenario``: what ``build_scenario(plan, spec, ir, trace, trace_workloads,
    arrival_cv)`` returns for these arguments, built once by a caller that simulates the same plan at several
    seeds (``trimtab.sim.validate.simulate_seeds``): a run never changes its scenario, so the result is the
    same. ``warmup=False`` measures every request from the first (a load test's own report, cold caches
    included) rather than after the first WARMUP share of the run (steady state). Runs with the garbage
    collector paused (``trimtab.util.jobs.gc_paused``)."""
    t0 = time.perf_counter()
    ir = ir or lower(spec)
    if requests is None and duration_s is None and counts is None:
        requests = default_requests(ir)
    sc = (scenario if scenario is not None
          else build_scenario(plan, spec, ir, trace, trace_workloads, arrival_cv))
    index = None
    if counts is not None:
        if requests is not None or duration_s is not None or trace is not None:
            raise ValueError("counts is a run of its own: no requests, duration_s or trace with it")
        only_workloads = frozenset(counts) if only_workloads is None else only_workloads & frozenset(counts)
        index = {w.name: i for i, w in enumerate(sc.workloads)}
        unknown = sorted(set(counts) - set(index))
        if unknown:
            raise ValueError(f"counts names workloads the spec does not have: {', '.join(unknown)}")
        index = {index[n]: c for n, c in counts.items()}
    cls = DisaggSimulation if sc.pairs else Simulation
    keep = deps = None
    if only_workloads is not None:
        keep, deps = closure(plan, only_workloads)
    sim = cls(sc, seed, requests if duration_s is None else None, duration_s, timeline, cache=cache,
              only=deps, counts=index).run(progress)
    lora_notes = apply_adapters(sim, plan, ir, seed)  # multi-LoRA plans: adapter loads and evictions
    span = None if warmup or counts is not None else (0.0, math.inf)
    res = summarise(sim, span, workloads=keep, deployments=deps)  # (None, None: all)
    res.notes += lora_notes + prefix_notes(sim) + rejected_notes(sim)
    res.wall_s = time.perf_counter() - t0
    return res


def closure(plan: Plan, workloads) -> tuple[frozenset[str], frozenset[str]]:
    """(workloads, deployments): the deployments ``workloads`` are routed to (a P/D route: both sides), every
    workload routed to one of those, their deployments, and so on until nothing is added: a run of these
    deployments serves every request of these workloads."""
    by_w: dict[str, set[str]] = {}
    for r in plan.routes:
        if r.share > 0:
            by_w.setdefault(r.workload, set()).update(x for x in (r.deployment, r.prefill, r.decode) if x)
    ws, ds = set(workloads), set()
    while True:
        new_d = set().union(*(by_w.get(w, set()) for w in ws)) - ds
        if not new_d:
            return frozenset(ws), frozenset(ds)
        ds |= new_d
        ws |= {w for w, d in by_w.items() if d & new_d}


def rejected_notes(sim) -> list[str]:
    """Per workload: trace requests whose prompt does not fit the model's context window. A real engine
    refuses them (longer than --max-model-len); the simulator does the same and counts them as misses."""
    n: dict[int, int] = {}
    for r in sim.requests:
        if r.status == 3:
            n[r.w] = n.get(r.w, 0) + 1
    if not n:
        return []  # (the usual case: no second pass over the run's requests)
    tot: dict[int, int] = {}
    for r in sim.requests:
        tot[r.w] = tot.get(r.w, 0) + 1
    out = []
    for w, k in sorted(n.items()):
        sw = sim.sc.workloads[w]
        out.append(f"warning: {k} of {tot[w]} requests of {sw.name} ({k / tot[w]:.2%}) have prompts of at "
                   f"least the model's {sw.ctx}-token context window: rejected, as an engine rejects a "
                   "prompt longer than --max-model-len, and counted as misses")
    return out


def prefix_notes(sim) -> list[str]:
    """Per workload with prefix caches: the share of input tokens its requests found cached in simulation
    (replayed through each replica's LRU when the trace has block hashes; docs/prefix-caching.md)."""
    if not any(r.pfx is not None for reps in getattr(sim, "replicas", ()) for r in reps):
        return []
    hit: dict[int, int] = {}
    tot: dict[int, int] = {}
    for r in sim.requests:
        if r.rep >= 0:
            hit[r.w] = hit.get(r.w, 0) + r.cached
            tot[r.w] = tot.get(r.w, 0) + r.isl
    return [f"prefix reuse: {sim.sc.workloads[w].name} found {hit[w] / tot[w]:.1%} of its input tokens cached"
            + (" (trace block hashes replayed per "
               "replica)" if sim.sc.workloads[w].prefix_hashes is not None else "")
            for w in sorted(tot) if hit[w] and tot[w]]


__all__ = ["DEFAULT_SEED", "SimResult", "Simulation", "default_requests", "simulate"]
