"""Metrics of a finished simulation, per workload and per deployment.

Per request: TTFT = first token - arrival; TPOT = (last token - first token) / (output tokens - 1) (the mean
time between its output tokens; 0 for one-token outputs); E2E = last token - arrival; queueing delay = first
scheduled - arrival. The engine's per-request front-end overhead (``ReplicaModel.request_overhead``, when the
cost model has one) is added to TTFT and E2E, as the analytic model adds it to TTFT.

A request meets the SLO when both its TTFT and its TPOT are within the workload's targets; SLO attainment is
the share of measured requests that do, and the workload passes when attainment >= percentile / 100.
Requests arriving in the first WARMUP share of the run (an empty system; in a run of per-workload counts, of
their workload's own arrivals: ``Simulation.warmup_from``) are not measured; requests not
finished when the run stops, too long for the KV cache, or without a route count as misses.
Goodput = requests meeting the SLO per second of the measured window. Percentiles use the inverted CDF
(an observed value, never an interpolation); unfinished requests count as infinitely slow.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter

import numpy as np

WARMUP = 0.05
BATCHES = 10  # consecutive batches per workload for the confidence interval (trimtab.sim.validate)


def _q(x: np.ndarray, p: float) -> float:
    """``x`` at percentile ``p`` (0-100)."""
    return _at(x, p / 100.0)


def _at(x: np.ndarray, share: float) -> float:
    """``x`` at quantile ``share`` (0-1; 1: the largest), an observed value (``inverted_cdf``); nan when
    empty."""
    if len(x) == 0:
        return math.nan
    return float(np.quantile(x, share, method="inverted_cdf"))


def quantile_ci(x: np.ndarray, p: float, confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free confidence interval for the ``p``-th percentile of the population ``x`` was drawn
    from.

    Order statistics: with ``B ~ Binomial(n, p/100)`` the number of samples below the true percentile,
    ``[x_(l), x_(u)]`` covers it with probability ``P(l <= B < u)``; ``l`` and ``u`` are the ``(1-c)/2`` and
    ``(1+c)/2`` quantiles of ``B`` (``u`` one rank up), so the coverage is at least ``confidence`` whatever
    the latency distribution. Too few samples for a bound: that end is -inf / +inf (35 samples have no upper
    bound for a p90 at 95 %). Why: a percentile of 40 requests moves by tens of percent between runs of the
    same engine, and a comparison with a model must say how far the measurement itself could be off."""
    from scipy.stats import binom  # lazy: scipy.stats takes about a second to import (sim/validate.py)

    n = len(x)
    if n == 0:
        return math.nan, math.nan
    xs = np.sort(np.asarray(x, dtype=float))
    q, a = p / 100.0, (1.0 - confidence) / 2.0
    lo_rank = int(binom.ppf(a, n, q))  # 1-based rank of the lower bound; 0: none
    hi_rank = int(binom.ppf(1.0 - a, n, q)) + 1
    lo = float(xs[lo_rank - 1]) if lo_rank >= 1 else -math.inf
    hi = float(xs[hi_rank - 1]) if hi_rank <= n else math.inf
    return lo, hi


def min_requests(p: float, confidence: float = 0.95) -> int:
    """The fewest samples for which ``quantile_ci`` of the ``p``-th percentile has a finite upper bound: below
    it, even if every sample met the SLO, the percentile itself could lie above any of them, so a percentile
    of so few requests cannot be called met (368 for a p99, 36 for a p90, 6 for a p50, at 95 %). The upper
    rank exists when P(all n samples below the percentile) = q^n <= (1 - confidence) / 2."""
    q, a = p / 100.0, (1.0 - confidence) / 2.0
    if q <= 0.0:
        return 1
    if q >= 1.0:
        return 2**31 - 1  # a maximum is never bounded by samples
    n = math.ceil(math.log(a) / math.log(q) - 1e-9)
    return max(1, n)


def _stats_ms(x: np.ndarray) -> dict[str, float]:
    fin = x[np.isfinite(x)]
    return {"mean": float(fin.mean() * 1e3) if len(fin) else math.nan,
            "p50": _q(x, 50) * 1e3, "p90": _q(x, 90) * 1e3, "p99": _q(x, 99) * 1e3}


@dataclass
class WorkloadStats:
    name: str
    requests: int  # measured (after warm-up)
    completed: int
    unserved: int  # too long for the KV cache, or no route
    attainment: float
    target: float  # percentile / 100
    ttft_slo_ms: float
    tpot_slo_ms: float
    ttft_ms: dict[str, float]
    tpot_ms: dict[str, float]
    e2e_ms: dict[str, float]
    queue_ms: dict[str, float]
    ttft_at_target_ms: float  # TTFT at the SLO percentile
    tpot_at_target_ms: float
    ttft_miss: float  # share of requests over the TTFT target
    tpot_miss: float
    goodput_rps: float
    throughput_rps: float
    preemptions: int
    by_deployment: dict[str, tuple[int, float]]  # deployment -> (requests, attainment)
    worst_deployment: str  # the deployment with the most misses
    below_target: list[str]  # deployments whose own attainment for this workload is below target
    # (requests meeting the SLO, requests) per consecutive batch of measured requests, in arrival order: the
    # batch means behind the confidence interval (trimtab.sim.validate)
    batches: list[tuple[int, int]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.requests > 0 and self.attainment >= self.target - 1e-12

    def failure(self) -> str:
        """One line: the attainment against its target, then what misses (``misses``)."""
        if self.requests == 0:
            return f"workload {self.name}: no request measured (simulate longer)"
        return (f"workload {self.name}: SLO attainment {self.attainment:.2%} < {self.target:.0%}"
                f"{'' if self._unserved_miss() else ' (simulated)'}: {self.misses()}")

    def _unserved_miss(self) -> bool:
        return bool(self.unserved) and self.unserved >= (1 - self.attainment) * self.requests * 0.5

    def misses(self) -> str:
        """What misses, without the attainment (a caller pooling several runs states its own, so that one line
        carries one attainment): each metric over its SLO at the percentile and by how much, or (a joint miss)
        the share of requests missing each metric, or the requests unserved; and the deployment with most
        misses."""
        pct = f"p{self.target * 100:g}"
        at = f"; deployment with most misses: {self.worst_deployment}" if self.worst_deployment else ""
        if self.requests == 0:
            return "no request measured (simulate longer)"
        if self._unserved_miss():
            return (f"{self.unserved} of {self.requests} requests unserved (no route, longer than the KV "
                    f"cache or than the context window){at}")
        over = [f"{m} {pct} {_fmt(v)} ms > SLO {slo:g} ms ({_excess(v, slo)})"
                for m, v, slo in (("TTFT", self.ttft_at_target_ms, self.ttft_slo_ms),
                                  ("TPOT", self.tpot_at_target_ms, self.tpot_slo_ms)) if v > slo]
        if over:
            return " and ".join(over) + at
        return (f"a joint miss: TTFT {pct} {_fmt(self.ttft_at_target_ms)} ms and TPOT {pct} "
                f"{_fmt(self.tpot_at_target_ms)} ms are each within SLO, but {self.ttft_miss:.2%} of "
                f"requests miss TTFT and {self.tpot_miss:.2%} miss TPOT{at}")


def _excess(v: float, slo: float) -> str:
    return "never finished" if not math.isfinite(v) else f"+{(v / slo - 1):.0%}"


def _fmt(v: float) -> str:
    if not math.isfinite(v):
        return "inf"
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}"


@dataclass
class DeploymentStats:
    name: str
    replicas: int
    requests: int
    attainment: float
    utilization: float  # share of time replicas run engine steps
    prefill_utilization: float  # share of time in steps carrying prompt work (the analytic `utilization`)
    decode_batch: float  # time-mean requests decoding per step
    kv_mean: float  # time-mean share of the KV cache in use
    kv_max: float
    preemptions: int
    steps: int
    queue_ms_mean: float


@dataclass
class SimResult:
    seed: int
    requests: int  # simulated, all
    measured_from_s: float
    duration_s: float  # last arrival
    end_s: float  # last event
    workloads: dict[str, WorkloadStats]
    deployments: dict[str, DeploymentStats]
    notes: list[str]
    wall_s: float = 0.0
    steps: int = 0
    stopped_early: bool = False
    # For plots: per workload, measured (TTFT, TPOT, E2E) seconds; per deployment, timeline rows.
    samples: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)
    timeline_dt: float = 0.0
    # (bins, [busy share, queue, kv share])
    timeline: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return all(w.passed for w in self.workloads.values())

    def failures(self) -> list[str]:
        return [w.failure() for w in self.workloads.values() if not w.passed]

    def latency_at_ms(self, name: str, share: float) -> tuple[float, float] | None:
        """Workload ``name``'s measured (TTFT, TPOT) in ms at quantile ``share`` (0-1; 1: the worst request),
        from ``samples``; None when this run did not keep them."""
        got = self.samples.get(name)
        if got is None or not len(got[0]):
            return None
        return _at(got[0], share) * 1e3, _at(got[1], share) * 1e3

    def to_dict(self) -> dict:
        ws = {}
        for w in self.workloads.values():
            d = {k: getattr(w, k) for k in ("requests", "completed", "unserved", "attainment", "target",
                                            "ttft_ms", "tpot_ms", "e2e_ms", "queue_ms", "goodput_rps",
                                            "throughput_rps", "preemptions", "worst_deployment")}
            d["passed"] = w.passed
            d["slo"] = {"ttft_ms": w.ttft_slo_ms, "tpot_ms": w.tpot_slo_ms, "percentile": w.target * 100}
            d["by_deployment"] = {k: {"requests": n, "attainment": a}
                                  for k, (n, a) in w.by_deployment.items()}
            ws[w.name] = d
        ds = {d.name: {k: v for k, v in vars(d).items() if k != "name"} for d in self.deployments.values()}
        return clean({"ok": self.ok, "seed": self.seed, "requests": self.requests,
                      "measured_from_s": self.measured_from_s, "duration_s": self.duration_s,
                      "end_s": self.end_s, "stopped_early": self.stopped_early, "steps": self.steps,
                      "wall_s": self.wall_s,
                      "failures": self.failures(), "notes": self.notes, "workloads": ws, "deployments": ds})


def clean(v):
    """JSON-ready: floats rounded to 6 digits, non-finite ones None, in nested dicts, lists and tuples."""
    if isinstance(v, float):
        return None if not math.isfinite(v) else round(v, 6)
    if isinstance(v, dict):
        return {k: clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [clean(x) for x in v]
    return v


# what summarise reads
_NAMES = ("arrival", "w", "dep", "osl", "t_first", "t_done", "t_sched", "preempted", "status")
_FIELDS = attrgetter(*_NAMES)


def _groups(key: np.ndarray, keep: np.ndarray, k: int) -> list[np.ndarray]:
    """For each value 0..k-1 of ``key``, the indices (ascending) where ``key`` has it and ``keep`` holds: what
    ``np.flatnonzero(keep & (key == v))`` gives, in one stable sort instead of k passes over the run."""
    idx = np.flatnonzero(keep)
    sub = key[idx]
    order = np.argsort(sub, kind="stable")
    cuts = np.searchsorted(sub[order], np.arange(k + 1))
    return [idx[order[cuts[v]:cuts[v + 1]]] for v in range(k)]


def summarise(sim, span: tuple[float, float] | None = None, workloads: frozenset[str] | None = None,
              deployments: frozenset[str] | None = None) -> SimResult:
    """Per workload and deployment statistics of a finished run. ``span`` = (from, to): measure only the
    requests arriving in [from, to) (a window of a schedule simulation, ``trimtab.sim.schedule``) instead of
    those after the first WARMUP share of the run. ``workloads`` / ``deployments`` (None: all): report only
    these (a run of some workloads, ``trimtab.sim.simulate(only_workloads=...)``; the others' statistics are
    not computed)."""
    sc = sim.sc
    reqs = sim.requests
    n = len(reqs)
    # One pass over the requests (every field a float64: the integers are far below 2**53, so exact)
    cols = np.fromiter(chain.from_iterable(map(_FIELDS, reqs)), float,
                       n * len(_NAMES)).reshape(n, len(_NAMES)).T
    arrival, osl, t_first, t_done, t_sched = cols[0], cols[3], cols[4], cols[5], cols[6]
    w, dep, preempted, status = (cols[i].astype(np.int64) for i in (1, 2, 7, 8))
    fe = np.array([getattr(d.model, "request_overhead", 0.0) for d in sc.deployments] + [0.0])
    over = fe[np.where(dep >= 0, dep, len(fe) - 1)]  # unrouted, refused or shed (dep < 0): the trailing 0
    done = t_done >= 0
    ttft = np.where(t_first >= 0, t_first - arrival + over, np.inf)
    e2e = np.where(done, t_done - arrival + over, np.inf)
    tpot = np.where(done, np.where(osl > 1, (t_done - t_first) / np.maximum(osl - 1, 1), 0.0), np.inf)
    queue = np.where(t_sched >= 0, t_sched - arrival, np.inf)
    t0, t1 = span if span is not None else (WARMUP * sim.t_last_arrival, math.inf)
    warm = getattr(sim, "warmup_from", None)
    if span is None and warm is not None:  # workloads of their own lengths (``Simulation(counts=...)``)
        measured = arrival >= warm[w]
        t0 = float(warm.min()) if len(warm) else 0.0
    else:
        measured = (arrival >= t0) & (arrival < t1)
    # a max_goodput plan's shed requests (``trimtab.sim.engine.SHED``) are traffic the plan states it does not
    # serve (its ``goodput``): not measured, as ``check --analytic`` skips its unrouted buckets
    measured = measured & (dep != -3)
    window = max(min(sim.t_last_arrival, t1) - t0, 1e-9)
    dep_names = [d.view.name for d in sc.deployments]
    slo_ttft = np.array([wl.ttft_s for wl in sc.workloads], float)
    slo_tpot = np.array([wl.tpot_s for wl in sc.workloads], float)
    meets = (ttft <= slo_ttft[w]) & (tpot <= slo_tpot[w])  # each request against its own workload's SLO
    wstats: dict[str, WorkloadStats] = {}
    samples: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    by_w = _groups(w, measured, len(sc.workloads))  # each workload's measured requests, in arrival order
    for wi, wl in enumerate(sc.workloads):
        if workloads is not None and wl.name not in workloads:
            continue
        # indices (ascending): the same elements, in the same order, as a boolean mask would pick
        m = by_w[wi]
        k = len(m)
        okm = meets[m]  # in arrival order
        n_ok = int(okm.sum())
        target = wl.percentile / 100.0
        by_dep: dict[str, tuple[int, float]] = {}
        misses: dict[str, int] = {}
        dm = dep[m]
        for di in sorted(set(dm.tolist())):
            md = dm == di
            nd = int(md.sum())
            name = dep_names[di] if di >= 0 else "(no route)"
            ok_d = int((okm & md).sum())
            by_dep[name] = (nd, float(ok_d) / nd)
            misses[name] = nd - ok_d
        worst = max(sorted(misses), key=lambda d: misses[d]) if misses and max(misses.values()) > 0 else ""
        below = [d for d, (nd, a) in by_dep.items() if a < target and d in dep_names]
        tt, tp, ee = ttft[m], tpot[m], e2e[m]
        batches = [(int(b.sum()), len(b)) for b in np.array_split(okm, min(BATCHES, max(len(okm), 1)))
                   if len(b)]
        wstats[wl.name] = WorkloadStats(
            name=wl.name, requests=k, completed=int(done[m].sum()), unserved=int((status[m] > 0).sum()),
            attainment=float(n_ok) / k if k else 0.0, target=target,
            ttft_slo_ms=wl.ttft_s * 1e3, tpot_slo_ms=wl.tpot_s * 1e3,
            ttft_ms=_stats_ms(tt), tpot_ms=_stats_ms(tp), e2e_ms=_stats_ms(ee), queue_ms=_stats_ms(queue[m]),
            ttft_at_target_ms=_q(tt, wl.percentile) * 1e3, tpot_at_target_ms=_q(tp, wl.percentile) * 1e3,
            ttft_miss=float((tt > wl.ttft_s).mean()) if k else 0.0,
            tpot_miss=float((tp > wl.tpot_s).mean()) if k else 0.0,
            goodput_rps=float(n_ok) / window, throughput_rps=k / window,
            preemptions=int(preempted[m].sum()), by_deployment=by_dep, worst_deployment=worst,
            below_target=below, batches=batches)
        samples[wl.name] = (tt, tp, ee)
    span = max(sim.t_end, 1e-9)
    dstats: dict[str, DeploymentStats] = {}
    timeline: dict[str, np.ndarray] = {}
    by_d = _groups(dep, measured, len(sc.deployments))
    for di, d in enumerate(sc.deployments):
        reps = sim.replicas[di]
        cap = getattr(d.model, "kv_capacity_tokens", d.model.memory.kv_cache_tokens)
        if sim.timeline_dt and reps:
            tl = np.array([r.tl for r in reps], float)  # (replicas, bins, 3)
            timeline[d.view.name] = np.stack([tl[:, :, 0].mean(0) / sim.timeline_dt, tl[:, :, 1].sum(0),
                                         tl[:, :, 2].mean(0) / cap], axis=1)
        if deployments is not None and d.view.name not in deployments:
            continue
        md = by_d[di]
        nd = len(md)
        okd = meets[md]
        R = max(len(reps), 1)
        busy = sum(r.busy_s for r in reps)
        dstats[d.view.name] = DeploymentStats(
            name=d.view.name, replicas=len(reps), requests=nd,
            attainment=float(okd.sum()) / nd if nd else math.nan,
            utilization=busy / (R * span), prefill_utilization=sum(r.prefill_s for r in reps) / (R * span),
            decode_batch=sum(r.batch_area for r in reps) / busy if busy else 0.0,
            kv_mean=sum(r.kv_area for r in reps) / (R * span * cap),
            kv_max=max((r.kv_max for r in reps), default=0) / cap,
            preemptions=sum(r.preemptions for r in reps), steps=sum(r.steps for r in reps),
            queue_ms_mean=_stats_ms(queue[md])["mean"])
    res = SimResult(seed=sim.seed, requests=n, measured_from_s=t0, duration_s=sim.t_last_arrival,
                    end_s=sim.t_end, workloads=wstats, deployments=dstats, notes=list(sc.notes),
                    steps=sum(r.steps for reps in sim.replicas for r in reps),
                    stopped_early=sim.stopped_early,
                    samples=samples, timeline_dt=sim.timeline_dt, timeline=timeline)
    return res
