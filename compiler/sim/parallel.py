"""One simulation's deployment runs across processes (issue 16: the planner's validating runs on 2+ cores).

Entry point: ``run_deployments(sim, todo, jobs) -> {d: (requests, t_last, stopped)}``, called by
``Simulation._run_split`` for the deployments it has to run (not reused from a former round).

Why this is exact: in a plan without P/D pairs the deployments' event loops are independent
(``compiler.sim.reuse``): each starts from a fresh event queue and touches only its own replicas and the requests
routed to it. So a deployment's loop run in a forked child (which inherits the drawn arrivals, the replicas and
their cost models) computes the same floats in the same order as in the parent. The child sends back each
request's fields and each replica's counters (``pack_replica``); the parent rebuilds the ``Request`` objects and
sets the counters on its own replica objects (which the child's run never touched here). Only numbers travel.

The parent and the children take deployments from one queue (the most arrivals first, a shared counter), so a
process that drew short runs takes more of them. A deployment whose run ends with requests still queued or in flight (stopped
at the drain limit) or that has a prefix cache (an LRU of trace block hashes, too large to send) is not sent: the
parent runs it. What a child that fails (or is killed) took, the parent runs. Only simulations of at least
``MIN_ARRIVALS`` arrivals to run use children (forking and sending costs ~0.1 s; the test suite's small runs stay
in one process); ``TRIMTAB_JOBS=1`` turns it off, as for the candidate fan-out (``compiler.fanout``).
"""
from __future__ import annotations

import multiprocessing
import pickle
import traceback
from operator import attrgetter

from compiler.sim.replica import Replica, Request

MIN_ARRIVALS = 20_000  # arrivals to run below which one process is faster

# Request fields in __slots__ order (tests/sim/test_parallel.py checks they are all of them)
_REQ = attrgetter(*Request.__slots__)
# Replica fields that hold requests: empty after a drained run (checked), left as the parent has them
_QUEUES = ("waiting", "prefilling", "running", "dheap", "sched")
# Replica fields sent back: all but the cost model's bound method, the prefix cache, the queues and ``done``
# (sent as request ids)
REPLICA_FIELDS = tuple(s for s in Replica.__slots__ if s not in ("it", "pfx", "done") + _QUEUES)
_REP = attrgetter(*REPLICA_FIELDS)


def unpack_request(t: tuple) -> Request:
    """A ``Request`` from its fields in ``__slots__`` order (``_REQ``)."""
    r = Request.__new__(Request)
    (r.rid, r.w, r.dep, r.rep, r.arrival, r.isl, r.osl, r.eosl, r.prompt, r.done, r.gen, r.start, r.c, r.epoch,
     r.t_sched, r.t_first, r.t_done, r.preempted, r.status, r.cached, r.row, r.host) = t
    return r


def pack_replica(rep: Replica) -> tuple | None:
    """(``REPLICA_FIELDS`` values, ids of the requests done in order); None when it still holds requests."""
    if any(getattr(rep, q) for q in _QUEUES):
        return None
    return _REP(rep), [r.rid for r in rep.done]


def _take(queue: list[int], counter):
    """The next deployment of ``queue`` no process has taken yet (None: none left)."""
    with counter.get_lock():
        i = counter.value
        counter.value = i + 1
    return queue[i] if i < len(queue) else None


def _child(sim, queue: list[int], orders: dict[int, list[int]], counter, conn) -> None:
    try:
        out = []
        while (d := _take(queue, counter)) is not None:
            requests, t, stopped = sim._run_one(orders[d])
            reps = [pack_replica(r) for r in sim.replicas[d]]
            if stopped or any(p is None for p in reps):
                out.append((d, None))  # the parent runs it
            else:
                out.append((d, ([_REQ(r) for r in requests], reps, t, stopped)))
        conn.send_bytes(pickle.dumps(("ok", out), protocol=pickle.HIGHEST_PROTOCOL))
    except BaseException:  # noqa: BLE001 - reported to the parent, which runs what it took
        conn.send_bytes(pickle.dumps(("error", traceback.format_exc())))
    finally:
        conn.close()


def _adopt(sim, d: int, packed) -> tuple[list[Request], float, bool]:
    """A child's run of deployment ``d`` made the parent's: requests rebuilt, counters set on its replicas."""
    rows, reps, t, stopped = packed
    requests = [unpack_request(x) for x in rows]
    by_rid = {r.rid: r for r in requests}
    for rep, (vals, done) in zip(sim.replicas[d], reps):
        for name, v in zip(REPLICA_FIELDS, vals):
            setattr(rep, name, v)
        rep.done = [by_rid[i] for i in done]
    return requests, t, stopped


def run_deployments(sim, orders: dict[int, list[int]], jobs: int) -> dict[int, tuple[list[Request], float, bool]]:
    """Run the event loop of each deployment in ``orders`` (d -> its arrival indices, ascending) in this process
    and ``jobs - 1`` forked children, each taking the next deployment not yet taken (the most arrivals first)
    until none is left; d -> (its requests in arrival order, time of its last event, stopped at the drain limit),
    as ``Simulation._run_one`` returns them. Who runs which deployment changes nothing in the result."""
    ctx = multiprocessing.get_context("fork")
    queue = sorted(orders, key=lambda d: (-len(orders[d]), d))
    counter = ctx.Value("l", 0)
    kids = []
    for _ in range(min(jobs, len(queue)) - 1):
        recv, send = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_child, args=(sim, queue, orders, counter, send), daemon=True)
        p.start()
        send.close()
        kids.append((p, recv))
    out = {}
    while (d := _take(queue, counter)) is not None:
        out[d] = sim._run_one(orders[d])
    for p, recv in kids:
        try:
            status, got = pickle.loads(recv.recv_bytes())
        except (EOFError, OSError):
            status, got = "error", "child ended without a result"
        finally:
            recv.close()
            p.join()
        if status == "ok":
            for d, packed in got:
                out[d] = sim._run_one(orders[d]) if packed is None else _adopt(sim, d, packed)
    # What a failed child took and never sent: run here (every deployment is in ``queue`` once)
    for d in queue:
        if d not in out:
            out[d] = sim._run_one(orders[d])
    return {d: out[d] for d in orders}


def jobs_here(jobs: int) -> int:
    """Processes a simulation may use: ``jobs``, or inside a seed ``run_seeds`` runs beside others, its share of
    them (on 2 CPUs and 2 seeds: 1, no further forking)."""
    return min(jobs, _SEED_JOBS[0]) if _SEED_JOBS[0] else jobs


def worth_it(sim, arrivals: int, deployments: int, jobs: int) -> bool:
    """Whether to use children (``jobs``: ``jobs_here``'s) for a run of ``arrivals`` arrivals over
    ``deployments`` deployments."""
    return (jobs > 1 and deployments > 1 and arrivals >= MIN_ARRIVALS
            and "fork" in multiprocessing.get_all_start_methods()
            and not any(r.pfx is not None for g in sim.replicas for r in g))


# --------------------------------------------------------------------------------------------- seeds in parallel
_SEED_JOBS = [0]  # while ``run_seeds`` runs seeds side by side: each one's share of the processes (0: not)


def _pack_cache(cache, slot, before: dict) -> list:
    """The deployment runs ``cache`` holds for ``slot``, as numbers; a run the parent already had for it (``before``:
    the slot's runs at the fork, the same objects) as its key alone. Runs whose replicas still hold requests or have
    a prefix cache are left out: the next round runs them again, with the same result."""
    out = []
    for key, run in cache.by_seed.get(slot, {}).items():
        if before.get(key) is run:
            out.append((key, None))  # the parent's own (reused here, unchanged)
            continue
        reps = [None if r.pfx is not None else pack_replica(r) for r in run.replicas]
        if run.stopped or any(x is None for x in reps):
            continue
        out.append((key, ([_REQ(r) for r in run.requests], reps, run.t_last, run.stopped)))
    return out


def _unpack_cache(packed: list, before: dict) -> dict:
    """``_pack_cache``'s runs as ``DepRun``s again (``before``: the parent's runs of the slot, for the keys sent
    alone)."""
    from collections import deque

    from compiler.sim.reuse import DepRun

    used = {}
    for key, run in packed:
        if run is None:
            used[key] = before[key]
            continue
        rows, reps, t_last, stopped = run
        requests = [unpack_request(x) for x in rows]
        by_rid = {r.rid: r for r in requests}
        replicas = []
        for vals, done in reps:
            rep = Replica.__new__(Replica)
            for name, v in zip(REPLICA_FIELDS, vals):
                setattr(rep, name, v)
            rep.it = None  # a finished run's replica is read, never stepped again
            rep.pfx = None
            rep.waiting, rep.prefilling, rep.running, rep.dheap, rep.sched = deque(), deque(), {}, [], []
            rep.done = [by_rid[i] for i in done]
            replicas.append(rep)
        used[key] = DepRun(requests, replicas, t_last, stopped)
    return used


def _seed_child(run_one, seed, cache, share, conn) -> None:
    try:
        _SEED_JOBS[0] = share
        h, m = (cache.hits, cache.misses) if cache is not None else (0, 0)
        before = {s: dict(r) for s, r in cache.by_seed.items()} if cache is not None else {}
        res = run_one(seed)
        packed = None
        if cache is not None:  # the slots of this seed (``Simulation._cache_slot``: (seed, requests, duration))
            packed = ({slot: _pack_cache(cache, slot, before.get(slot, {})) for slot in cache.by_seed
                       if slot[0] == seed}, cache.hits - h, cache.misses - m)
        conn.send_bytes(pickle.dumps(("ok", res, packed), protocol=pickle.HIGHEST_PROTOCOL))
    except BaseException:  # noqa: BLE001 - the parent runs the seed itself
        conn.send_bytes(pickle.dumps(("error", traceback.format_exc(), None)))
    finally:
        conn.close()


def run_seeds(run_one, seeds: list, cache, jobs: int) -> list:
    """``run_one(seed) -> SimResult`` for each of ``seeds``, the first here and the others in forked
    children (at most ``jobs`` processes at once, in seed order), each child's deployment runs put into
    ``cache`` (``compiler.sim.reuse.RunCache``) as if run here; the results in seed order, the same as running
    them one after another (each seed's simulation is a function of its seed and the plan alone; one seed's runs
    never reuse another's). A seed whose child fails is run here."""
    ctx = multiprocessing.get_context("fork")
    results: dict = {}
    pending = list(seeds)
    while pending:
        batch, pending = pending[:jobs], pending[jobs:]
        share = max(1, jobs // len(batch))  # each seed's processes for its deployment runs
        kids = []
        for s in batch[1:]:
            recv, send = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_seed_child, args=(run_one, s, cache, share, send), daemon=True)
            p.start()
            send.close()
            kids.append((s, p, recv))
        _SEED_JOBS[0] = share
        try:
            results[batch[0]] = run_one(batch[0])
        finally:
            _SEED_JOBS[0] = 0
        for s, p, recv in kids:
            try:
                status, res, packed = pickle.loads(recv.recv_bytes())
            except (EOFError, OSError):
                status, res, packed = "error", None, None
            finally:
                recv.close()
                p.join()
            if status != "ok":
                res = run_one(s)
            elif packed is not None:
                slots, hits, misses = packed
                for slot, runs in slots.items():
                    cache.by_seed[slot] = _unpack_cache(runs, cache.by_seed.get(slot, {}))
                cache.hits += hits
                cache.misses += misses
            results[s] = res
    return [results[s] for s in seeds]


def seeds_in_processes(run_one, seeds: list, cache, requests: int) -> list:
    """``run_one`` over ``seeds``: spread over the processes (``run_seeds``) when there are two or more and each
    run draws at least ``MIN_ARRIVALS`` requests, one after another here otherwise."""
    from compiler.jobs import jobs_default

    jobs = jobs_default()
    if (len(seeds) < 2 or jobs < 2 or requests < MIN_ARRIVALS or _SEED_JOBS[0]
            or "fork" not in multiprocessing.get_all_start_methods()):
        return [run_one(s) for s in seeds]
    return run_seeds(run_one, seeds, cache, jobs)
