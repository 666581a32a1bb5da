"""Simulate only what a planning round changed (issue 16): per-deployment runs and their reuse across rounds.

In a plan without prefill/decode pairs the deployments of a simulation do not interact. A request's deployment
is fixed when the arrivals are drawn (``engine.draw_arrivals``: its route's share against a uniform draw), the
router then only picks among that deployment's replicas, and a step of a replica touches nothing but that
replica. So one simulation is exactly the union of one event loop per deployment over the arrivals routed to
it: the same events in the same order per replica (a deployment's own events keep their (time, sequence) order
when other deployments' events are taken out of the heap), the same floats, the same ``Request`` timestamps.
The one global quantity, the end of the run (``Simulation.t_end``), is recovered from the per-deployment ends
(``join_ends``).

The arrivals of a seed do not depend on the plan (the random draws are the same whatever the routes), so when
the planner re-solves and a deployment comes back with the same shape, the same replicas, the same prefix
cache and the same requests routed to it, its run is the one already done: ``RunCache`` keeps each deployment
run of the last simulation per seed under a key of all of that (``dep_key``), and the next round's simulation
takes it instead of running it again. Equivalence is exact, not approximate: the key holds every input of the
deployment's event loop (the replica model is a function of the shape and the spec's IR, fixed within one
``plan``), and ``tests/sim/test_reuse.py`` compares reused runs with full ones field by field.

A reused run hands out its ``Request`` objects again (only their deployment index is set anew), so nothing may
change a request once its run is over: what comes after the event loop replaces a request by a copy
(``clone``) before changing it (``trimtab.sim.lora.apply_adapters``: adapter loads delay a request's tokens).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields

import numpy as np

from trimtab.sim.replica import Request, request_fields, unpack_request


@dataclass
class DepRun:
    """One deployment's finished event loop: its requests (in arrival order; never changed after), its
    replicas, the time of its last event and whether it stopped at the drain limit (then that event's
    time)."""

    requests: list[Request]
    replicas: list
    t_last: float
    stopped: bool


class RunCache:
    """Deployment runs of the last simulation of each seed (``Simulation(cache=...)``), reused by the next one
    with the same seed. Only what the last simulation of a seed used is kept, so memory stays at one plan's
    runs per seed. Counts ``hits`` and ``misses`` (deployment runs reused and run)."""

    def __init__(self) -> None:
        self.by_seed: dict[object, dict[str, DepRun]] = {}
        self.hits = 0
        self.misses = 0
        # whole validations (trimtab.planning.rounds.simulate_and_derate): the deployments and routes of a
        # plan, its seeds and requests -> the SeedsResult, for a plan simulated again as it was (the drive of
        # one GPU type alone after the drive of every type: trimtab.planning.driver.single_types)
        self.verdicts: dict[str, object] = {}
        # ``draw_key`` -> (its Drawn, their digest, the generator's state after drawing them): ``drawn``
        self.draws: dict[tuple, tuple] = {}

    def drawn(self, sc, seed, requests: int | None, duration_s: float | None, counts: dict[int, int] | None,
              rng: np.random.Generator, make) -> tuple | None:
        """(the draws of a run, their digest: ``Simulation.draw_digest``), made once per ``draw_key`` by
        ``make()`` (drawing them with ``rng``, the run's own generator): every round simulates the same
        seeds, and only the routes differ between them. ``rng`` is left where drawing leaves it. None where
        ``draw_key`` is (traces)."""
        key = draw_key(sc, seed, requests, duration_s, counts)
        if key is None:
            return None
        got = self.draws.get(key)
        if got is None:
            d, digest = make()
            for c in (d.t, d.w, d.isl, d.osl, d.row, d.bucket, d.u, d.order):
                if c is not None:
                    c.setflags(write=False)  # shared by every run of this key: never changed
            got = self.draws[key] = (d, digest, rng.bit_generator.state)
        else:
            rng.bit_generator.state = got[2]
        return got[0], got[1]

    def begin(self, seed) -> tuple[dict[str, DepRun], dict[str, DepRun]]:
        """(the runs kept for ``seed``, an empty dict the new simulation fills); ``end`` swaps them."""
        return self.by_seed.get(seed, {}), {}

    def end(self, seed, used: dict[str, DepRun]) -> None:
        self.by_seed[seed] = used


def clone(r: Request) -> Request:
    """A copy of ``r`` sharing nothing mutable (a request's fields are numbers)."""
    return unpack_request(request_fields(r))


def own(requests: list[Request], r: Request) -> Request:
    """``r`` replaced in ``requests`` (a simulation's, indexed by request id) by a copy the caller may
    change."""
    if r.rid < len(requests) and requests[r.rid] is r:
        r = requests[r.rid] = clone(r)
    return r


def _deployment(sd) -> tuple:
    """What a run takes from a deployment of the scenario: its shape and replicas but its name (a deployment
    renamed between rounds runs the same), and its prefix cache."""
    v = sd.view
    return (tuple((f.name, getattr(v, f.name)) for f in fields(v) if f.name != "name"),
            (sd.prefix_reserved, sorted(sd.prefix_hits.items()), sd.prefix_host_tokens,
             sorted(sd.prefix_host_hits.items())))


def dep_key(sim, d: int, idx: np.ndarray) -> str:
    """Everything deployment ``d``'s event loop depends on: its shape and replicas (the replica model is a
    function of them within one spec), its prefix cache, the arrivals routed to it (their indices, and the
    run's drawn columns, times, lengths and trace rows, by their digest: ``Simulation.draw_digest``), the end
    of arrivals and the drain limit, and whether a timeline is kept. Its name is left out: a deployment
    renamed between rounds runs the same."""
    sd = sim.sc.deployments[d]
    shape, pfx = _deployment(sd)
    h = hashlib.blake2b(digest_size=20)
    h.update(repr((type(sim).__name__, shape, pfx, sim.t_last_arrival, sim.t_stop, sim.timeline_dt,
                   sd.workloads, sim.draw_digest())).encode())
    h.update(np.ascontiguousarray(idx, dtype=np.int64).tobytes())
    return h.hexdigest()


def run_key(sim, unit, idx: np.ndarray) -> str:
    """``dep_key`` of a deployment; of a group of P/D pairs (``Scenario.pair_groups``, ``unit`` its
    deployments), everything its one event loop depends on: each of its deployments' shape, replicas,
    workloads and prefix cache, its pairs (their indices and deployments, co-location groups, KV hand-off
    seconds per token), the arrivals routed to it (indices and targets, with the run's drawn columns by
    digest), the end of arrivals, the drain limit and the timeline."""
    if type(unit) is not tuple:
        return dep_key(sim, unit, idx)
    sc = sim.sc
    shapes = [(_deployment(sc.deployments[d]), sc.deployments[d].workloads) for d in unit]
    pairs = [(i, tuple(p), getattr(p, "group", None), sc.pair_xfer_s_per_token[i])
             for i, p in enumerate(sc.pairs) if p[0] in unit]
    h = hashlib.blake2b(digest_size=20)
    h.update(repr(("pairs", type(sim).__name__, unit, shapes, pairs, sim.t_last_arrival, sim.t_stop,
                   sim.timeline_dt, sim.draw_digest())).encode())
    idx = np.ascontiguousarray(idx, dtype=np.int64)
    h.update(idx.tobytes())
    h.update(np.ascontiguousarray(sim.arrivals.dep[idx], dtype=np.int64).tobytes())
    return h.hexdigest()


def draw_key(sc, seed, requests: int | None, duration_s: float | None,
             counts: dict[int, int] | None) -> tuple | None:
    """What a run's draws (``trimtab.sim.engine.Drawn``) are a function of: the seed, the run's length and
    every workload's rate, burstiness, stages, shared-prompt set, context window, bucket cuts and length grids
    (the grids by digest); None where a workload replays a trace (not remembered)."""
    ws = []
    for w in sc.workloads:
        if w.trace is not None:
            return None
        ws.append((w.rate_rps, w.arrival_cv, w.stages, w.prompt_set, w.ctx, tuple(map(tuple, w.in_ranges)),
                   *(hashlib.blake2b(np.ascontiguousarray(g).tobytes(), digest_size=20).digest() + g.dtype.str
                     .encode() for g in (w.isl_grid, w.osl_grid))))
    s = tuple(int(x) for x in seed) if isinstance(seed, (tuple, list)) else int(seed)
    return s, requests, duration_s, tuple(sorted(counts.items())) if counts is not None else None, tuple(ws)


def join_ends(t_last_arrival: float, runs: list[tuple[float, bool]]) -> tuple[float, bool]:
    """The end of the whole run (``Simulation.t_end``, ``stopped_early``) from each deployment run's (time of
    its last event, stopped at the drain limit): the one event loop stops at the first event beyond the limit,
    which is the earliest of the stopped runs' last events (every event before it, of every deployment, was
    processed); otherwise it ends at its last event or arrival, the latest of all."""
    stopped = [t for t, s in runs if s]
    if stopped:
        return min(stopped), True
    return max([t_last_arrival, *(t for t, _ in runs)]), False
