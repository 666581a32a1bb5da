"""The discrete-event core: one event heap per simulation, ordered by (time, sequence number).

``Simulation(scenario, seed, requests | duration_s).run()`` draws every workload's arrivals and lengths up
front (numpy ``Generator`` seeded per simulation), then advances time event by event: the next arrival (from
the merged, sorted arrival arrays) or the next end of an engine step (from the heap), arrivals second on ties.
All state (heap, sequence counter, random generator, replicas) belongs to the ``Simulation`` object, so two
simulations in one process share nothing and the same inputs give the same result.
"""
from __future__ import annotations

import hashlib
import itertools
import math
import zlib
from array import array
from dataclasses import dataclass
from heapq import heappop, heappush
from typing import TYPE_CHECKING, Callable

import numpy as np

import trimtab.sim.arrivals as arr
from trimtab.sim import fast
from trimtab.sim.replica import Replica, Request
from trimtab.sim.scenario import Scenario, SimWorkload, attach_prefix_caches
from trimtab.sim.metrics import WARMUP
from trimtab.sim.reuse import DepRun, join_ends, run_key
from trimtab.util.jobs import jobs_default

if TYPE_CHECKING:
    from trimtab.sim.reuse import RunCache

DRAIN_FACTOR = 1.0  # after the last arrival, run at most this many arrival spans (>= DRAIN_MIN_S) to drain
DRAIN_MIN_S = 120.0
TIMELINE_BINS = 200
NO_ROUTE = -1  # Arrivals.dep of a request whose prompt-length range the plan does not route
REJECTED = -2  # ... of a trace request whose prompt does not fit the context window (the engine refuses it)
# ... of a request a max_goodput plan does not serve: its bucket's traffic beyond the share the plan's routes
# carry (the plan states it in ``goodput``); turned away like NO_ROUTE and not measured (``summarise``)
SHED = -3


class EventQueue:
    """A heap of (time, seq, item) with its own counter: equal times keep insertion order."""

    __slots__ = ("heap", "seq")

    def __init__(self) -> None:
        self.heap: list = []
        self.seq = itertools.count()

    def push(self, t: float, item) -> None:
        heappush(self.heap, (t, next(self.seq), item))


@dataclass
class Arrivals:
    """Every request of a run, sorted by arrival time."""

    t: np.ndarray
    w: np.ndarray  # workload index
    isl: np.ndarray
    osl: np.ndarray
    dep: np.ndarray  # deployment index; NO_ROUTE when the bucket has none, REJECTED beyond the context window
    row: np.ndarray | None = None  # trace row replayed (-1: drawn from distributions); prefix hashes


def _workload_arrivals(rng: np.random.Generator, w: SimWorkload, n: int | None, duration_s: float | None):
    """(times, prompt, output, bucket, trace row) of one workload's requests. A trace row whose prompt does
    not fit the context window gets bucket -1: a real engine rejects it (longer than --max-model-len)."""
    if w.trace is not None:
        rate = w.trace_rate
        if rate is None:
            rate = w.trace.rate_rps * w.trace_scale if w.trace.rate_rps > 0 else w.rate_rps
        t, rows = arr.replay(w.trace.times_s, rate, n, duration_s, w.trace_offset)
        raw = w.trace.input_tokens[rows]
        isl, osl = w.lengths(raw, w.trace.output_tokens[rows])
        bucket = np.where(raw >= w.ctx, -1, w.bucket_of_values(isl))
        return t, isl.astype(np.int64), osl.astype(np.int64), bucket, rows.astype(np.int64)
    if w.stages:
        t = arr.staged(rng, w.stages, w.arrival_cv, n, duration_s)
    else:
        t = arr.gamma(rng, w.rate_rps, w.arrival_cv, n, duration_s)
    m = len(t)
    ii = rng.integers(0, len(w.isl_grid), m)
    oi = rng.integers(0, len(w.osl_grid), m)
    isl, osl = w.lengths(w.isl_grid[ii], w.osl_grid[oi])
    return t, isl.astype(np.int64), osl.astype(np.int64), w.bucket_of_indices(ii), np.full(m, -1, np.int64)


@dataclass
class Drawn:
    """A run's random draws before routing: every column of ``Arrivals`` but ``dep`` (sorted by time, then
    workload), and what routing reads of each workload's part (``parts``: (workload index, start, end) in
    ``bucket`` and ``u``, the parts as drawn, concatenated; ``order``: their sorted position). The draws do
    not depend on the routes (``route``), so a plan re-solved with new routes draws the same ones
    (``trimtab.sim.reuse.RunCache.drawn``). ``row`` None: every request -1 (drawn from distributions)."""

    t: np.ndarray
    w: np.ndarray
    isl: np.ndarray
    osl: np.ndarray
    row: np.ndarray | None
    bucket: np.ndarray
    u: np.ndarray
    parts: tuple[tuple[int, int, int], ...]
    order: np.ndarray

    def route(self, sc: Scenario) -> Arrivals:
        """The ``Arrivals`` of these draws under ``sc``'s routes."""
        deps = [_routed(sc.workloads[wi], self.bucket[a:b], self.u[a:b]) for wi, a, b in self.parts]
        dep = np.concatenate(deps)[self.order] if deps else np.zeros(0, np.int64)
        row = self.row if self.row is not None else np.full(len(self.t), -1, np.int64)
        return Arrivals(self.t, self.w, self.isl, self.osl, dep, row)


def _draw_part(rng: np.random.Generator, w: SimWorkload, n: int | None, duration_s: float | None):
    """One workload's random draws: (times, prompt, output, bucket, trace row, the uniform draw its route is
    picked by); the same draws, in the same order, whatever its routes."""
    t, isl, osl, bucket, row = _workload_arrivals(rng, w, n, duration_s)
    u = rng.random(len(t))
    if w.prompt_set is not None and w.trace is None:  # which user of which group sends each request (drawn
        # last: every other draw is as it would be without shared prompts)
        row = rng.integers(0, w.prompt_set[0] * w.prompt_set[1], len(t)).astype(np.int64)
    return t, isl, osl, bucket, row, u


def _routed(w: SimWorkload, bucket: np.ndarray, u: np.ndarray) -> np.ndarray:
    """The deployment of each of a workload's requests: its bucket's route, picked by its uniform draw
    ``u``."""
    dep = np.where(bucket < 0, REJECTED, SHED if w.sheds else NO_ROUTE)
    for b, (idx, cum) in enumerate(w.routes):
        sel = bucket == b
        if len(idx) and sel.any():
            k = np.searchsorted(cum, u[sel], side="right")
            # cum ends at 1 but for a max_goodput plan's bucket served in part: past its end, shed
            dep[sel] = np.where(k < len(idx), idx[np.minimum(k, len(idx) - 1)], SHED)
    return dep


def _merge(parts: list) -> Drawn:
    """The workloads' draws (``(wi, _draw_part(...))``) as one ``Drawn``, by time, then workload."""
    if not parts:
        z = np.zeros(0, np.int64)
        return Drawn(np.zeros(0), z, z, z, z, z, np.zeros(0), (), z)
    t = np.concatenate([p[0] for _, p in parts])
    w = np.concatenate([np.full(len(p[0]), wi, np.int64) for wi, p in parts])
    order = np.lexsort((w, t))  # by time, then workload
    row = np.concatenate([p[4] for _, p in parts])[order]
    ends = np.cumsum([len(p[0]) for _, p in parts]).tolist()
    return Drawn(t[order], w[order], *(np.concatenate([p[i] for _, p in parts])[order] for i in (1, 2)),
                 None if (row == -1).all() else row, np.concatenate([p[3] for _, p in parts]),
                 np.concatenate([p[5] for _, p in parts]),
                 tuple((wi, b - len(p[0]), b) for (wi, p), b in zip(parts, ends)), order)


def draw(sc: Scenario, rng: np.random.Generator, requests: int | None, duration_s: float | None) -> Drawn:
    """``requests`` in total, split across workloads by rate; or every arrival within ``duration_s``."""
    total_rate = sum(w.rate_rps for w in sc.workloads)
    parts = []
    for wi, w in enumerate(sc.workloads):
        n = None
        if requests is not None:
            n = max(1, int(round(requests * w.rate_rps / total_rate)))
        parts.append((wi, _draw_part(rng, w, n, duration_s)))
    return _merge(parts)


def draw_arrivals(sc: Scenario, rng: np.random.Generator, requests: int | None,
                  duration_s: float | None) -> Arrivals:
    """``draw``'s requests routed by ``sc``."""
    return draw(sc, rng, requests, duration_s).route(sc)


COUNTS_STREAM = 7919  # the random streams of ``draw_counts`` (apart from every ``Simulation(seed)``'s own)


def draw_for_counts(sc: Scenario, seed: int, counts: dict[int, int]) -> Drawn:
    """``counts[wi]`` requests of workload ``wi`` for each workload in ``counts`` (the others: none), each
    from a random stream of its own (seeded by (``seed``, COUNTS_STREAM, wi)): a workload's requests do not
    depend on which others are drawn or how many (``trimtab.sim.aim_counts``: the planner's longer runs of
    rare workloads)."""
    return _merge([(wi, _draw_part(np.random.default_rng((seed, COUNTS_STREAM, wi)), sc.workloads[wi], n,
                                   None)) for wi, n in sorted(counts.items())])


def draw_counts(sc: Scenario, seed: int, counts: dict[int, int]) -> Arrivals:
    """``draw_for_counts``'s requests routed by ``sc``."""
    return draw_for_counts(sc, seed, counts).route(sc)


def _drawn_now(sc: Scenario, rng: np.random.Generator, seed, requests: int | None, duration_s: float | None,
               counts: dict[int, int] | None) -> tuple[Drawn, bytes]:
    """A run's draws (``draw``, or ``draw_for_counts`` for ``counts``) and their digest, for
    ``RunCache.drawn``."""
    d = draw(sc, rng, requests, duration_s) if counts is None else draw_for_counts(sc, seed, counts)
    return d, arrivals_digest(d.t, d.w, d.isl, d.osl, d.row)


def arrivals_digest(*columns: np.ndarray | None) -> bytes:
    """A digest of arrival columns (each by dtype, shape and bytes; None: a column of -1, as
    ``Drawn.row``)."""
    h = hashlib.blake2b(digest_size=20)
    for c in columns:
        if c is None or (c.dtype == np.int64 and len(c) and c[0] == -1 and (c == -1).all()):
            h.update(b"-1")
            continue
        h.update(repr((c.dtype.str, c.shape)).encode())
        h.update(np.ascontiguousarray(c).tobytes())
    return h.digest()


def _warmup_from(a: Arrivals, n_workloads: int) -> np.ndarray:
    """Per workload index: WARMUP x the time of its last arrival (infinity for a workload not drawn)."""
    last = np.full(n_workloads, -np.inf)
    np.maximum.at(last, a.w, a.t)
    return np.where(np.isfinite(last), WARMUP * last, np.inf)


_M64 = (1 << 64) - 1


def _mix64(x: int) -> int:
    """SplitMix64's output function (Steele, Lea and Flood 2014): a 64-bit integer hash, cheap in Python, so a
    request's sampled replicas follow from its key alone (not from a shared random stream, which would tie the
    runs of the deployments, run apart and reused, together)."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def route_base(seed, side: int = 0) -> int:
    """The router's key offset for one simulation's ``seed`` (``side`` 1: the decode side of a P/D pair, drawn
    apart from its prefill side); a request's key is this plus its id (``least_request``). A numpy integer
    seed keys as the same Python int."""
    seed = tuple(int(x) for x in seed) if isinstance(seed, (tuple, list)) else int(seed)
    return _mix64(zlib.crc32(repr((seed, side)).encode()))


def least_request(group: list, key: int) -> object:
    """The router's replica for one request: of two replicas sampled from ``group`` (distinct, uniformly, from
    the hash of ``key``: Envoy's ``choice_count`` default), the one with fewer active requests, running or
    waiting; the first sampled on a tie. This is the power of two choices (Mitzenmacher 2001), Envoy's
    least-request load balancer with its defaults (Envoy Gateway's default for the plan's ``HTTPRoute``
    backends, docs/routing.md): it counts the requests a replica has taken and not finished, never their
    lengths, which no router knows."""
    n = len(group)
    if n == 1:
        return group[0]
    h = _mix64(key)
    i = h % n
    j = (h >> 32) % (n - 1)
    j += j >= i
    a, b = group[i], group[j]
    return b if len(b.running) + len(b.waiting) < len(a.running) + len(a.waiting) else a


class Simulation:
    # Replicas interact only at arrivals (the router reads its sampled replicas' active requests then):
    # between two arrivals each one's steps depend on its own state alone, so ``_on_event`` runs a replica's
    # steps up to the next arrival without interleaving them with the other replicas' events in time order
    # (the same floats, the same request times: tests/sim/test_rare_runs.py). False where events of one
    # replica act on another (P/D hand-offs, a schedule's scale events that dispatch waiting requests).
    replicas_apart = True

    def __init__(self, scenario: Scenario, seed: int = 0, requests: int | None = None,
                 duration_s: float | None = None, timeline: bool = True, cache: RunCache | None = None,
                 only: frozenset[str] | None = None, counts: dict[int, int] | None = None):
        if (requests is not None) + (duration_s is not None) + (counts is not None) != 1:
            raise ValueError("give exactly one of requests, duration_s and counts")
        self.sc = scenario
        self.seed = seed
        self._route = route_base(seed)  # the router's key offset (``least_request``)
        # ``counts`` (workload index -> requests; ``draw_counts``): only those workloads, each from its own
        # random stream, and each measured after the first WARMUP share of its own arrivals (``warmup_from``)
        self.counts = counts
        # Deployment runs reused across the planner's rounds (trimtab.sim.reuse); the deployments of a group
        # of P/D pairs (a subclass) interact and run together, reused together.
        self.cache = cache
        self._cache_slot = (seed, requests, duration_s) if counts is None else (seed, "counts", None)
        # Deployments to run (by name; None: all): the others' requests are drawn (the same random streams)
        # and left unserved and unmeasured (``trimtab.sim.simulate(only_workloads=...)`` reports only
        # workloads served entirely by the deployments run). Runs one event loop per deployment.
        self.only = only
        self.rng = np.random.default_rng(seed)
        # The draws of this seed, taken from the planner's last simulations where they made them
        # (``RunCache.drawn``: the draws do not depend on the routes; the generator left where drawing leaves
        # it); ``digest``: a digest of the drawn columns (``draw_digest``)
        drawn = (cache.drawn(scenario, seed, requests, duration_s, counts, self.rng,
                             lambda: _drawn_now(scenario, self.rng, seed, requests, duration_s, counts))
                 if cache is not None and type(self)._draw_arrivals is Simulation._draw_arrivals else None)
        self._digest = None if drawn is None else drawn[1]
        if drawn is not None:
            self.arrivals = drawn[0].route(scenario)
        elif counts is None:
            self.arrivals = self._draw_arrivals(requests, duration_s)
        else:
            self.arrivals = draw_counts(scenario, seed, counts)
        a = self.arrivals
        self.t_last_arrival = float(a.t[-1]) if len(a.t) else 0.0
        # per workload index: the arrival time from which its requests are measured (None: the first WARMUP
        # share of the whole run, trimtab.sim.metrics)
        self.warmup_from = None if counts is None else _warmup_from(a, len(scenario.workloads))
        self.t_stop = self.t_last_arrival + max(DRAIN_MIN_S, DRAIN_FACTOR * self.t_last_arrival)
        self.timeline_dt = self.t_stop / TIMELINE_BINS if timeline and self.t_stop > 0 else 0.0
        self.replicas: list[list[Replica]] = []
        for di, d in enumerate(scenario.deployments):
            reps = []
            for i in range(d.view.replicas):
                tl = [[0.0, 0, 0] for _ in range(TIMELINE_BINS)] if self.timeline_dt else None
                reps.append(Replica(di, i, d.model, tl, self.timeline_dt))
            self.replicas.append(reps)
        attach_prefix_caches(scenario, self.replicas)
        self.requests: list[Request] = []
        self.events = EventQueue()
        self.t_end = 0.0
        self.stopped_early = False
        self._horizon = math.inf  # the next arrival's time, while ``_loop`` runs (``_on_event``)
        self._t_seen = 0.0  # the latest step end ``_on_event`` took without the heap
        self._prepare()

    def _draw_arrivals(self, requests: int | None, duration_s: float | None) -> Arrivals:
        """Every request of the run (a hook: ``trimtab.sim.schedule`` draws one segment per window)."""
        return draw_arrivals(self.sc, self.rng, requests, duration_s)

    def draw_digest(self) -> bytes:
        """A digest of every drawn column of the arrivals (all but the routes): with a request's index, what a
        deployment run's key needs of its arrivals (``trimtab.sim.reuse.dep_key``)."""
        if self._digest is None:
            self._digest = arrivals_digest(self.arrivals.t, self.arrivals.w, self.arrivals.isl,
                                           self.arrivals.osl, self.arrivals.row)
        return self._digest

    def _kick(self, rep: Replica, t: float) -> None:
        """Start ``rep``'s next step at ``t`` when it is idle and has work; the step's end goes on the
        heap."""
        if not rep.busy:
            t_next = rep.start_step(t)
            if t_next >= 0:
                heappush(self.events.heap, (t_next, next(self.events.seq), rep))

    def _next_step(self, rep: Replica, t: float) -> None:
        """After a step of ``rep`` ended at ``t``: start its next one, if it has work, and put its end on the
        heap."""
        t_next = rep.start_step(t)
        if t_next >= 0:
            heappush(self.events.heap, (t_next, next(self.events.seq), rep))

    def _turned_away(self, r: Request, d: int, cap: int) -> bool:
        """Marks and returns True for a request deployment ``d`` cannot take (a negative ``d``: unrouted or
        refused; no replicas: unserved; longer than the ``cap`` KV tokens of a replica)."""
        if d < 0 or not self.replicas[d]:
            r.status = 3 if d == REJECTED else 2
            return True
        if r.isl + r.osl > cap:
            r.status = 1
            return True
        return False

    def _admit(self, r: Request, d: int, cap: int, t: float) -> None:
        """An arrived request for deployment ``d``: turned away (``_turned_away``) or queued on the replica
        the router picks (``least_request``)."""
        if self._turned_away(r, d, cap):
            return
        rep = least_request(self.replicas[d], self._route + r.rid)
        rep.enqueue(r)
        self._kick(rep, t)

    def run(self, progress: Callable[[float], None] | None = None) -> "Simulation":
        """Advance until every request is done (or t_stop); ``progress(fraction of arrivals)`` now and then.
        With a ``cache`` (the planner), or without P/D pairs and ``progress``, one event loop per deployment
        (``_run_split``, reusing runs from ``cache`` when given); otherwise one over all arrivals. Both give
        the same requests, replicas and end (trimtab.sim.reuse)."""
        if self.cache is not None or self.only is not None or (type(self) is Simulation and progress is None):
            self._run_split()
        else:
            self.t_end, self.stopped_early = self._loop(range(len(self.arrivals.t)), progress)
        self._after_run()
        if progress is not None:
            progress(1.0)
        return self

    def _loop(self, order, progress: Callable[[float], None] | None = None) -> tuple[float, bool]:
        """The one event loop over the arrivals ``order`` (indices, ascending): the next step end
        (``_on_event``) or the next arrival (``_on_arrival``), arrivals second on ties; subclasses
        (``trimtab.sim.disagg``) change what an event or an arrival does, not the loop. Returns (time of the
        last event or arrival, whether it stopped at t_stop with events left)."""
        ts = self._ts
        n = len(order)
        heap = self.events.heap
        t_stop = self.t_stop
        on_event, on_arrival = self._on_event, self._on_arrival
        j = 0
        t = 0.0
        tick = max(1, n // 100)
        i = order[0] if n else -1
        t_arr = self._horizon = ts[i] if n else math.inf
        self._t_seen = 0.0
        while True:
            if heap and heap[0][0] <= t_arr:
                t, _, item = heappop(heap)
                if t > t_stop:
                    return t, True
                on_event(t, item)
                continue
            if j >= n:
                return max(t, self._t_seen), False
            t = t_arr
            on_arrival(i, t)
            j += 1
            if j < n:
                i = order[j]
                t_arr = self._horizon = ts[i]
            else:
                t_arr = self._horizon = math.inf
            if progress is not None and j % tick == 0:
                progress(j / n)

    def _run_split(self) -> None:
        """One event loop per run unit over the arrivals routed to it, each taken from ``cache`` when the last
        simulation of this seed ran it with the same inputs (``trimtab.sim.reuse.run_key``); then the requests
        no replica serves (unrouted, refused, too long, a deployment of 0 replicas). A unit is a deployment,
        or a group of P/D pairs (``Scenario.pair_groups``: route targets past the deployments, whose
        deployments hand requests to each other) as the tuple of its deployments. Units ``only`` leaves out
        (none of their deployments named) do not run; their requests stay as drawn."""
        cache = self.cache
        kept, used = cache.begin(self._cache_slot) if cache is not None else ({}, {})
        dep = self.arrivals.dep
        n = len(dep)
        out: list = [None] * n
        ends = []
        nd = len(self.replicas)
        # arrival indices grouped by target (deployments, then pairs), ascending in each
        by_dep = np.argsort(dep, kind="stable")
        cuts = np.searchsorted(dep[by_dep], np.arange(nd + len(self.sc.pairs) + 1))
        groups = self.sc.pair_groups()
        paired = {d for deps, _ in groups for d in deps}
        units: list = [(d, by_dep[cuts[d]:cuts[d + 1]]) for d in range(nd)
                       if d not in paired and self.replicas[d]]
        targets = {d: [d] for d, _ in units}  # route targets per unit (a group's pairs: past the deployments)
        for deps, pis in groups:
            ts = targets[deps] = [*deps, *(nd + i for i in pis)]
            units.append((deps, np.sort(np.concatenate([by_dep[cuts[t]:cuts[t + 1]] for t in ts]))))
        names = [sd.view.name for sd in self.sc.deployments]
        skipped: list[int] = []  # deployments (and pair targets) ``only`` leaves out
        # (unit, its arrivals, cache key, its reused run or None: to run)
        todo: list[tuple[int | tuple, np.ndarray, str | None, DepRun | None]] = []
        for unit, idx in units:
            if not len(idx):
                continue
            key = run_key(self, unit, idx) if cache is not None else None
            if self.only is not None and not any(names[d] in self.only for d in self.unit_deployments(unit)):
                skipped += targets[unit]
                if key in kept:  # kept for a later round that needs it
                    used[key] = kept[key]
                continue
            todo.append((unit, idx, key, kept.get(key)))
        fresh = self._run_all({unit: idx.tolist() for unit, idx, _, run in todo if run is None})
        for unit, idx, key, run in todo:
            if run is None:
                live, t, stopped = fresh[unit]
                run = DepRun(live, self.unit_replicas(unit), t, stopped)
                if cache is not None:
                    cache.misses += 1
                    used[key] = run
            else:
                live = run.requests  # shared: nothing changes a request after its run (trimtab.sim.reuse)
                reps = iter(run.replicas)
                for d in self.unit_deployments(unit):
                    self.replicas[d] = [next(reps) for _ in self.replicas[d]]
                if type(unit) is int:
                    for r in live:
                        r.dep = unit
                cache.hits += 1
                used[key] = run
            for r in live:
                out[r.rid] = r
            ends.append((run.t_last, run.stopped))
        self.requests = []
        ts = self._ts
        # their requests: drawn, never run, left out (unmeasured: their workloads are not reported)
        gone = np.isin(dep, skipped) if skipped else None
        # The arrivals no loop took (each loop takes every arrival it is given: none comes after the drain
        # limit) and none left out: no replica serves them, a status and no event
        taken = np.zeros(n, bool) if gone is None else gone.copy()
        for _, idx, _, _ in todo:
            taken[idx] = True
        for i in np.flatnonzero(~taken).tolist():
            self._on_arrival(i, ts[i])
        for r in self.requests:
            out[r.rid] = r
        # In arrival order; indexed by request id unless deployments were skipped (then only what ran, and the
        # requests no deployment serves)
        self.requests = [r for r in out if r is not None] if gone is not None else out
        self.events = EventQueue()
        self.t_end, self.stopped_early = join_ends(self.t_last_arrival, ends)
        if cache is not None:
            cache.end(self._cache_slot, used)

    def unit_deployments(self, unit) -> tuple:
        """The deployments of a run unit (``_run_split``)."""
        return unit if type(unit) is tuple else (unit,)

    def unit_replicas(self, unit) -> list:
        """The replicas of a run unit, deployment by deployment."""
        return [r for d in self.unit_deployments(unit) for r in self.replicas[d]]

    def _run_one(self, order: list[int]) -> tuple[list[Request], float, bool]:
        """One run unit's event loop (a deployment's, or a group of P/D pairs': ``_run_split``) over its
        arrivals ``order``, from a fresh event queue: (its requests in arrival order, the time of its last
        event, whether it stopped at the drain limit). The compiled loop (``trimtab.sim.fast``) runs a
        deployment's where it gives exactly this loop's result."""
        got = fast.run(self, order) if self._base_run(order) else None
        if got is not None:
            return got
        self.requests = []
        self.events = EventQueue()
        t, stopped = self._loop(order)
        return self.requests, t, stopped

    def _base_run(self, order: list[int]) -> bool:
        """Whether the run of ``order`` (one deployment's arrivals) takes the base class's event hooks, so the
        compiled loop (``trimtab.sim.fast``) may run it."""
        return fast.base_hooks(type(self), Simulation)

    def _run_all(self, orders: dict) -> dict:
        """``_run_one`` for each run unit of ``orders`` (unit -> arrival indices: ``_run_split``), in forked
        processes where the run is large enough (``trimtab.sim.parallel``: the same floats, the same
        requests)."""
        # lazy: keeps import trimtab light (multiprocessing loads for parallel runs only)
        from trimtab.sim import parallel

        jobs = parallel.jobs_here(jobs_default())
        if parallel.worth_it(self, sum(map(len, orders.values())), len(orders), jobs):
            return parallel.run_deployments(self, orders, jobs)
        return {u: self._run_one(o) for u, o in orders.items()}

    def _prepare(self) -> None:
        """Per-run lookups the hooks use: the arrivals as lists (scalar access), each deployment's KV capacity
        (HBM plus a KV tier) and whether requests carry their trace row (prefix replay)."""
        a = self.arrivals
        # (arrays of machine numbers, not lists: made in one copy and freed at once, where a run of a few
        # deployments reads a few of 200,000 entries; each read gives the same Python float or int)
        self._ts = array("d", a.t.astype(np.float64).tobytes())
        self._ws, self._isl, self._osl, self._dep = (array("q", c.astype(np.int64).tobytes())
                                                     for c in (a.w, a.isl, a.osl, a.dep))
        self._rows = (a.row.tolist() if a.row is not None
                      and any(r.pfx is not None for g in self.replicas for r in g) else None)
        self._caps = [getattr(d.model, "kv_capacity_tokens", d.model.memory.kv_cache_tokens)
                      for d in self.sc.deployments]

    def _on_event(self, t: float, rep) -> None:
        """A step of ``rep`` ended at ``t``: emit its tokens, start its next step."""
        heap = self.events.heap
        limit = min(self._horizon, self.t_stop)
        apart = self.replicas_apart
        while True:
            rep.finish_step(t)
            t_next = rep.start_step(t)  # (``_next_step``, inlined: the loop's most frequent path)
            while True:
                if t_next < 0:
                    return
                top = heap[0][0] if heap and not apart else math.inf
                if t_next > limit or t_next >= top:
                    heappush(heap, (t_next, next(self.events.seq), rep))
                    return
                # The loop would pop this end next (before any other event, and before or with the next
                # arrival, arrivals second on ties): take it now, without the heap, and the decode-only steps
                # after it that change nothing but the clock (``Replica.coast``). Pushes keep their relative
                # order, so ties elsewhere break as before. With ``replicas_apart`` the other replicas' events
                # do not stop it: only the next arrival does.
                t, t_next = rep.coast(t_next, limit, top)
                if t > self._t_seen:  # (with replicas apart, another replica's steps may have run further)
                    self._t_seen = t
                if t_next is None:  # the step ending at t needs the general path
                    break

    def _on_arrival(self, i: int, t: float) -> None:
        """Arrival ``i`` at ``t``: a request for its target deployment (``_admit``)."""
        d = self._dep[i]
        r = Request(i, self._ws[i], d, t, self._isl[i], self._osl[i])
        if self._rows is not None:
            r.row = self._rows[i]
        self.requests.append(r)
        self._admit(r, d, self._caps[d] if d >= 0 else 0, t)

    def _after_run(self) -> None:
        """Bookkeeping once the loop ends (the P/D simulation attributes pair requests)."""
