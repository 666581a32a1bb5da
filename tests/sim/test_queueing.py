"""Queueing cases against formulas: one replica serving one request at a time (max_num_seqs = 1, one output
token, so a request's whole service is one prefill step of ``per_token_s`` x input tokens) is a FIFO single
server, and Poisson arrivals make it M/G/1.

Tolerances (stated in docs/simulator.md): the sample path matches Lindley's recursion exactly (1e-9 s); mean
waits within 8 % of Pollaczek-Khinchine and the 90th-percentile wait within 10 % of the exact M/D/1
(Crommelin) or M/M/1 (rho x exp(-(mu - lambda) t)) value, with 60,000 requests at utilisation 0.6 to 0.7.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from trimtab.sim.engine import Simulation
from trimtab.sim.metrics import summarise
from tests.sim.helpers import LinearModel, single_server

N = 60_000


def waits(sim: Simulation) -> np.ndarray:
    return np.array([r.t_sched - r.arrival for r in sim.requests])


def lindley(arrivals: np.ndarray, service: np.ndarray) -> np.ndarray:
    w = np.zeros(len(arrivals))
    for i in range(1, len(arrivals)):
        w[i] = max(0.0, w[i - 1] + service[i - 1] - (arrivals[i] - arrivals[i - 1]))
    return w


def md1_cdf(t: float, lam: float, d: float) -> float:
    """P(W <= t) for M/D/1 (Crommelin 1932): (1 - rho) sum_{k=0}^{floor(t/D)} (lam(kD - t))^k / k!
    e^{-lam(kD - t)}."""
    rho = lam * d
    s = 0.0
    for k in range(int(math.floor(t / d)) + 1):
        x = lam * (k * d - t)
        s += x**k / math.factorial(k) * math.exp(-x)
    return (1 - rho) * s


def quantile(cdf, p: float, hi: float) -> float:
    lo = 0.0
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return hi


def test_md1_mean_and_p90_wait():
    d = 0.1  # 1000 tokens x 0.1 ms
    lam = 6.0  # rho = 0.6
    sim = Simulation(single_server(LinearModel(1e-4), lam, [1000]), seed=1, requests=N).run()
    w = waits(sim)[N // 20:]  # skip the empty-system start
    rho = lam * d
    mean_pk = rho * d / (2 * (1 - rho))
    assert w.mean() == pytest.approx(mean_pk, rel=0.08)
    p90 = quantile(lambda t: md1_cdf(t, lam, d), 0.9, 5.0)
    assert np.quantile(w, 0.9) == pytest.approx(p90, rel=0.10)


def test_mm1_like_mean_and_p90_wait():
    # Input lengths on an exponential quantile grid (mean 1000 tokens): service ~ exponential, mean 0.1 s.
    grid = np.maximum(1.0, np.round(-1000 * np.log(1 - (np.arange(2000) + 0.5) / 2000)))
    s = grid * 1e-4
    lam = 7.0 / (s.mean() * 10)  # rho = 0.7
    sim = Simulation(single_server(LinearModel(1e-4), lam, grid), seed=2, requests=N).run()
    w = waits(sim)[N // 20:]
    rho = lam * s.mean()
    assert rho == pytest.approx(0.7)
    mean_pk = lam * (s**2).mean() / (2 * (1 - rho))  # exact for M/G/1 with the grid's service moments
    assert w.mean() == pytest.approx(mean_pk, rel=0.08)
    mu = 1 / s.mean()
    p90_mm1 = math.log(rho / 0.1) / (mu - lam)  # P(W > t) = rho exp(-(mu - lam) t)
    assert np.quantile(w, 0.9) == pytest.approx(p90_mm1, rel=0.10)


def test_sample_path_is_lindley_recursion():
    grid = np.array([200.0, 800.0, 1500.0, 3000.0])
    sim = Simulation(single_server(LinearModel(1e-4), 5.0, grid), seed=3, requests=5_000).run()
    a = np.array([r.arrival for r in sim.requests])
    svc = np.array([r.isl * 1e-4 for r in sim.requests])
    np.testing.assert_allclose(waits(sim), lindley(a, svc), atol=1e-9)
    # TTFT = wait + service (one prefill step); E2E equals TTFT for one-token outputs.
    res = summarise(sim)
    tt = res.samples["w"][0]
    measured = a >= res.measured_from_s
    np.testing.assert_allclose(tt, (waits(sim) + svc)[measured], atol=1e-9)
