"""One simulation's deployment runs, and a plan's validating seeds, across processes (issue 16: the planner's
validating runs on 2+ cores).

Entry points: ``run_deployments(sim, orders, jobs) -> {unit: (requests, t_last, stopped)}``, called by
``Simulation._run_all`` for the run units it has to run (not reused from a former round): deployments, and
groups of P/D pairs (``Scenario.pair_groups``);
``seeds_in_processes``, called by ``trimtab.sim.validate.simulate_seeds`` for the seeds after the first.

Why this is exact: the units' event loops are independent (``trimtab.sim.reuse``; the deployments of a group
of P/D pairs hand requests to each other, and to no deployment outside the group): each starts from a fresh
event queue and touches only its own replicas and the requests routed to it. So a unit's loop run in a forked
child (which inherits the drawn arrivals, the replicas and their cost models) computes the same floats in the
same order as in the parent. The child sends back each request's fields and each replica's counters
(``pack_run``); the parent rebuilds the ``Request`` objects and sets the counters on its own replica objects
(which the child's run never touched). Only numbers travel. A seed's simulation is a function of its seed
and the plan alone, so seeds run side by side the same way, their deployment runs sent back into the
planner's ``RunCache``.

The parent and the children take units from one queue (the most arrivals first, a shared counter), so a
process that drew short runs takes more of them. A run that ends with requests still queued or in flight
(stopped at the drain limit) or on a replica with a prefix cache (an LRU of trace block hashes, too large to
send) is not sent: the parent runs it. What a child that fails (or is killed) took, the parent runs. Only runs
of at least ``MIN_ARRIVALS`` requests use children (forking and sending costs ~0.1 s; the test suite's small
runs stay in one process); ``TRIMTAB_JOBS=1`` turns it off, as for the candidate fan-out
(``trimtab.milp.fanout``).
"""
from __future__ import annotations

import multiprocessing
import pickle
import traceback
from collections import deque
from operator import attrgetter

from trimtab.sim.replica import Replica, Request, request_fields, unpack_request
from trimtab.sim.reuse import DepRun
from trimtab.util.jobs import jobs_default

MIN_ARRIVALS = 20_000  # arrivals to run below which one process is faster

# Replica fields that hold requests: empty after a drained run (checked), left as the parent has them
_QUEUES = ("waiting", "prefilling", "running", "dheap", "sched")
# Replica fields sent back: all but the cost model's bound method, the prefix cache, the queues and ``done``
# (sent as request ids)
REPLICA_FIELDS = tuple(s for s in Replica.__slots__ if s not in ("it", "pfx", "done") + _QUEUES)
_REP = attrgetter(*REPLICA_FIELDS)


def pack_replica(rep: Replica) -> tuple | None:
    """(``REPLICA_FIELDS`` values, ids of the requests done in order); None when it still holds requests or
    has a prefix cache."""
    if rep.pfx is not None or any(getattr(rep, q) for q in _QUEUES):
        return None
    return _REP(rep), [r.rid for r in rep.done]


def pack_run(requests: list[Request], replicas: list[Replica], t_last: float, stopped: bool) -> tuple | None:
    """A finished deployment run as numbers; None when it cannot travel (stopped at the drain limit, or a
    replica that ``pack_replica`` cannot send)."""
    reps = [pack_replica(r) for r in replicas]
    if stopped or any(x is None for x in reps):
        return None
    return [request_fields(r) for r in requests], reps, t_last, stopped


def unpack_run(packed: tuple, replicas: list[Replica]) -> tuple[list[Request], float, bool]:
    """``pack_run``'s run again: its requests rebuilt, the counters set on ``replicas`` (the parent's own, or
    blank ones); (requests, time of the last event, stopped)."""
    rows, reps, t_last, stopped = packed
    requests = [unpack_request(x) for x in rows]
    by_rid = {r.rid: r for r in requests}
    for rep, (vals, done) in zip(replicas, reps):
        for name, v in zip(REPLICA_FIELDS, vals):
            setattr(rep, name, v)
        rep.done = [by_rid[i] for i in done]
    return requests, t_last, stopped


def _blank_replica() -> Replica:
    """A replica to hold a finished run's counters: read, never stepped again (no cost model, empty
    queues)."""
    rep = Replica.__new__(Replica)
    rep.it, rep.pfx = None, None
    rep.waiting, rep.prefilling, rep.running, rep.dheap, rep.sched = deque(), deque(), {}, [], []
    return rep


def _fork(ctx, target, *args):
    """``target(*args, conn)`` in a forked child; (the process, the end its one reply comes on)."""
    recv, send = ctx.Pipe(duplex=False)
    p = ctx.Process(target=target, args=(*args, send), daemon=True)
    p.start()
    send.close()
    return p, recv


def _reply(conn, work) -> None:
    """In a child: send ``("ok", work())``, or ``("error", traceback)`` when it raises; then close."""
    try:
        conn.send_bytes(pickle.dumps(("ok", work()), protocol=pickle.HIGHEST_PROTOCOL))
    except BaseException:  # noqa: BLE001 - reported to the parent, which does the work itself
        conn.send_bytes(pickle.dumps(("error", traceback.format_exc())))
    finally:
        conn.close()


def _collect(p, recv):
    """A child's reply (None when it failed, or ended without one); the child joined."""
    try:
        status, got = pickle.loads(recv.recv_bytes())
    except (EOFError, OSError):
        status, got = "error", None
    finally:
        recv.close()
        p.join()
    return got if status == "ok" else None


def _take(queue: list, counter):
    """The next run unit of ``queue`` no process has taken yet (None: none left)."""
    with counter.get_lock():
        i = counter.value
        counter.value = i + 1
    return queue[i] if i < len(queue) else None


def _child(sim, queue: list, orders: dict, counter, conn) -> None:
    """Run the units this child takes; replies (unit, ``pack_run`` of its run, or None: the parent runs
    it)."""
    def work() -> list:
        out = []
        while (u := _take(queue, counter)) is not None:
            requests, t, stopped = sim._run_one(orders[u])
            out.append((u, pack_run(requests, sim.unit_replicas(u), t, stopped)))
        return out

    _reply(conn, work)


def run_deployments(sim, orders: dict, jobs: int) -> dict:
    """Run the event loop of each run unit in ``orders`` (a deployment, or a group of P/D pairs as the tuple
    of its deployments -> its arrival indices, ascending: ``Simulation._run_split``) in this process and
    ``jobs - 1`` forked children, each taking the next unit not yet taken (the most arrivals first) until
    none is left: unit -> (its requests in arrival order, time of its last event, stopped at the drain
    limit), as ``Simulation._run_one`` returns them. Who runs which unit changes nothing in the result."""
    ctx = multiprocessing.get_context("fork")
    queue = sorted(orders, key=lambda u: (-len(orders[u]), type(u) is tuple, u))
    counter = ctx.Value("l", 0)
    kids = [_fork(ctx, _child, sim, queue, orders, counter) for _ in range(min(jobs, len(queue)) - 1)]
    out = {}
    while (u := _take(queue, counter)) is not None:
        out[u] = sim._run_one(orders[u])
    for p, recv in kids:
        for u, packed in _collect(p, recv) or ():
            out[u] = sim._run_one(orders[u]) if packed is None else unpack_run(packed, sim.unit_replicas(u))
    # What a failed child took and never sent: run here (every unit is in ``queue`` once)
    for u in queue:
        if u not in out:
            out[u] = sim._run_one(orders[u])
    return {u: out[u] for u in orders}


def jobs_here(jobs: int) -> int:
    """Processes a simulation may use: ``jobs``, or inside a seed ``run_seeds`` runs beside others, its share
    of them (on 2 CPUs and 2 seeds: 1, no further forking)."""
    return min(jobs, _SEED_JOBS[0]) if _SEED_JOBS[0] else jobs


def worth_it(sim, arrivals: int, units: int, jobs: int) -> bool:
    """Whether to use children (``jobs``: ``jobs_here``'s) for a run of ``arrivals`` arrivals over ``units``
    run units (deployments and groups of P/D pairs)."""
    return (jobs > 1 and units > 1 and arrivals >= MIN_ARRIVALS
            and "fork" in multiprocessing.get_all_start_methods()
            and not any(r.pfx is not None for g in sim.replicas for r in g))


# --------------------------------------------------------------------------------------------- seeds in
# parallel
_SEED_JOBS = [0]  # while ``run_seeds`` runs seeds side by side: each one's share of the processes (0: not)


def _pack_cache(cache, slot, before: dict) -> list:
    """The deployment runs ``cache`` holds for ``slot``: (key, ``pack_run``); a run the parent already had for
    it (``before``: the slot's runs at the fork, the same objects) as (key, None). Runs that cannot travel are
    left out: the next round runs them again, with the same result."""
    out = []
    for key, run in cache.by_seed.get(slot, {}).items():
        if before.get(key) is run:
            out.append((key, None))  # the parent's own (reused here, unchanged)
        elif (packed := pack_run(run.requests, run.replicas, run.t_last, run.stopped)) is not None:
            out.append((key, packed))
    return out


def _unpack_cache(packed: list, before: dict) -> dict:
    """``_pack_cache``'s runs as ``DepRun``s again (``before``: the parent's runs of the slot, for the keys
    sent alone)."""
    used = {}
    for key, run in packed:
        if run is None:
            used[key] = before[key]
            continue
        replicas = [_blank_replica() for _ in run[1]]
        requests, t_last, stopped = unpack_run(run, replicas)
        used[key] = DepRun(requests, replicas, t_last, stopped)
    return used


def _seed_child(run_one, seed, cache, share, conn) -> None:
    """Run ``seed``; replies (its ``SimResult``, (this seed's slots packed, hits, misses) or None without a
    cache)."""
    def work():
        _SEED_JOBS[0] = share
        h, m = (cache.hits, cache.misses) if cache is not None else (0, 0)
        before = {s: dict(r) for s, r in cache.by_seed.items()} if cache is not None else {}
        res = run_one(seed)
        if cache is None:
            return res, None
        # the slots of this seed (``Simulation._cache_slot``: (seed, requests, duration))
        return res, ({slot: _pack_cache(cache, slot, before.get(slot, {})) for slot in cache.by_seed
                      if slot[0] == seed}, cache.hits - h, cache.misses - m)

    _reply(conn, work)


def run_seeds(run_one, seeds: list, cache, jobs: int) -> list:
    """``run_one(seed) -> SimResult`` for each of ``seeds``, the first here and the others in forked
    children (at most ``jobs`` processes at once, in seed order), each child's deployment runs put into
    ``cache`` (``trimtab.sim.reuse.RunCache``) as if run here; the results in seed order, the same as running
    them one after another (each seed's simulation is a function of its seed and the plan alone; one seed's
    runs never reuse another's). A seed whose child fails is run here."""
    ctx = multiprocessing.get_context("fork")
    results: dict = {}
    pending = list(seeds)
    while pending:
        batch, pending = pending[:jobs], pending[jobs:]
        share = max(1, jobs // len(batch))  # each seed's processes for its deployment runs
        kids = [(s, *_fork(ctx, _seed_child, run_one, s, cache, share)) for s in batch[1:]]
        _SEED_JOBS[0] = share
        try:
            results[batch[0]] = run_one(batch[0])
        finally:
            _SEED_JOBS[0] = 0
        for s, p, recv in kids:
            got = _collect(p, recv)
            if got is None:
                res = run_one(s)
            else:
                res, packed = got
                if packed is not None:
                    slots, hits, misses = packed
                    for slot, runs in slots.items():
                        cache.by_seed[slot] = _unpack_cache(runs, cache.by_seed.get(slot, {}))
                    cache.hits += hits
                    cache.misses += misses
            results[s] = res
    return [results[s] for s in seeds]


def seeds_in_processes(run_one, seeds: list, cache, requests: int) -> list:
    """``run_one`` over ``seeds``: spread over the processes (``run_seeds``) when there are two or more and
    each run draws at least ``MIN_ARRIVALS`` requests, one after another here otherwise."""
    jobs = jobs_default()
    if (len(seeds) < 2 or jobs < 2 or requests < MIN_ARRIVALS or _SEED_JOBS[0]
            or "fork" not in multiprocessing.get_all_start_methods()):
        return [run_one(s) for s in seeds]
    return run_seeds(run_one, seeds, cache, jobs)
