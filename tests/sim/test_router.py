"""The simulator's router (``trimtab.sim.engine.least_request``): what a deployed router sees and does.

It sees the prompt length, never the output length (issue 11), and picks a replica as Envoy's least-request
load balancer does with its defaults (the default of Envoy Gateway, which realises the plan's ``HTTPRoute``
backends): two replicas sampled at random, the one with fewer active requests. The oracles here share nothing
with the simulator: the sampling probabilities of two choices out of n computed by hand, and the fixed point
of the supermarket model (Vvedenskaya, Dobrushin and Karpelevich 1996; Mitzenmacher 2001), checked on a queue
written here, not on the simulator's replicas.
"""
from __future__ import annotations

import heapq
from collections import deque

import numpy as np
import pytest

import trimtab as tt
from trimtab.ir.lower import lower
from trimtab.sim.engine import draw_arrivals, least_request, route_base
from trimtab.sim.scenario import build_scenario
from tests.conftest import QUICKSTART, planned


class _Server:
    """What the router reads of a replica: its running and waiting requests."""

    def __init__(self, running: int = 0, waiting: int = 0):
        self.running = dict.fromkeys(range(running))
        self.waiting = deque(range(waiting))


def test_routes_do_not_depend_on_output_lengths():
    spec = tt.load_spec(QUICKSTART)
    plan = planned("quickstart", validate=False).plan
    sc = build_scenario(plan, spec, lower(spec))
    a = draw_arrivals(sc, np.random.default_rng(11), 5000, None)
    for w in sc.workloads:  # the same traffic with every output length changed
        w.osl_grid = w.osl_grid[::-1] * 3 + 7
    b = draw_arrivals(sc, np.random.default_rng(11), 5000, None)
    assert not np.array_equal(a.osl, b.osl)
    assert np.array_equal(a.dep, b.dep) and np.array_equal(a.isl, b.isl)


def test_two_choices_pick_the_less_busy_of_a_uniform_pair():
    """Active requests 5, 0, 3 (counting waiting ones): the three pairs are equally likely; {0,1} and {1,2} go
    to replica 1, {0,2} to replica 2, so 2/3, 1/3 and never replica 0. With equal counts each pair goes to its
    first sampled replica: each replica 1/3."""
    base = route_base(7)
    n = 30_000
    busy = [_Server(running=5), _Server(), _Server(running=1, waiting=2)]
    picks = np.bincount([busy.index(least_request(busy, base + k)) for k in range(n)], minlength=3) / n
    sd = (2 / 9 / n) ** 0.5  # binomial, p = 1/3 or 2/3
    assert picks[0] == 0
    assert abs(picks[1] - 2 / 3) < 4 * sd and abs(picks[2] - 1 / 3) < 4 * sd
    even = [_Server(running=1) for _ in range(3)]
    picks = np.bincount([even.index(least_request(even, base + k)) for k in range(n)], minlength=3) / n
    assert np.all(np.abs(picks - 1 / 3) < 4 * sd)
    # never samples one replica twice: of two, always the less busy one, whatever the key
    pair = [_Server(running=2), _Server(running=1)]
    assert all(least_request(pair, base + k) is pair[1] for k in range(2000))
    assert least_request(busy[:1], base) is busy[0]


def test_the_keys_are_the_seeds_and_the_requests_own():
    """A request's sampled pair follows from (seed, request id) alone, so deployment runs done apart, in other
    processes or in an earlier round give the same choices; another seed samples other pairs."""
    group = [_Server(running=i % 3) for i in range(16)]
    one = [group.index(least_request(group, route_base(3) + k)) for k in range(500)]
    assert one == [group.index(least_request(group, route_base(3) + k)) for k in range(500)]
    assert one != [group.index(least_request(group, route_base(4) + k)) for k in range(500)]
    assert route_base(3, 1) != route_base(3)  # a P/D pair's decode side draws apart from its prefill side


def _supermarket(n: int, lam: float, arrivals: int, choose, seed: int = 5) -> np.ndarray:
    """n FIFO servers with exponential service of mean 1, Poisson arrivals at n x lam; ``choose(servers, k)``
    routes arrival k. Returns the time-average share of servers holding at least i requests, i = 0..8 (after a
    tenth of the arrivals as warm-up)."""
    rng = np.random.default_rng(seed)
    servers = [_Server() for _ in range(n)]
    gaps = rng.exponential(1.0 / (n * lam), arrivals)
    services = rng.exponential(1.0, arrivals)
    ends: list = []
    t, area, t0 = 0.0, np.zeros(9), None
    hist = np.zeros(9)
    hist[0] = n  # servers with at least i requests
    for k in range(arrivals):
        t_next = t + gaps[k]
        while ends and ends[0][0] <= t_next:
            te, _, s = heapq.heappop(ends)
            if t0 is not None:
                area += hist * (te - max(t, t0))
            t = te
            q = len(s.running) + len(s.waiting)
            if q <= 8:
                hist[q] -= 1
            if s.waiting:
                heapq.heappush(ends, (t + services[s.waiting.popleft()], id(s), s))
            else:
                s.running.clear()
        if k == arrivals // 10:
            t0 = t_next
        elif t0 is not None:
            area += hist * (t_next - max(t, t0))
        t = t_next
        s = choose(servers, k)
        q = len(s.running) + len(s.waiting)
        if q + 1 <= 8:
            hist[q + 1] += 1
        if s.running:
            s.waiting.append(k)
        else:
            s.running[k] = None
            heapq.heappush(ends, (t + services[k], id(s), s))
    return area / (n * (t - t0))


@pytest.mark.parametrize("lam", [0.7, 0.9])
def test_two_choices_give_the_supermarket_models_queue_lengths(lam):
    """Two choices out of many servers: the share of servers with at least i requests is lam^(2^i - 1) in the
    limit of many servers (doubly exponential), against lam^i for a random pick. 100 servers, 60,000 arrivals:
    within 0.03 of the limit for i = 1..4, and far from the random pick's from i = 2 on."""
    base = route_base(0)
    got = _supermarket(100, lam, 60_000, lambda g, k: least_request(g, base + k))
    for i in range(1, 5):
        assert abs(got[i] - lam ** (2 ** i - 1)) < 0.03, (i, got[i], lam ** (2 ** i - 1))
    assert got[2] < lam ** 2 - 0.05 and got[3] < lam ** 3 - 0.15
    rng = np.random.default_rng(1)
    rand = _supermarket(100, lam, 60_000, lambda g, k: g[rng.integers(len(g))])
    assert abs(rand[3] - lam ** 3) < 0.05  # the harness itself: a random pick gives M/M/1 queues
