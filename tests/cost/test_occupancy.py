"""Seats and KV at the SLO percentile (``trimtab.cost.queueing.over_caps``): hand-computed cases, and a
replica whose mean batch fits ``max_num_seqs`` but whose batch at p99 does not is unstable."""
from __future__ import annotations

import math

import pytest

from trimtab.cost.model import TrafficClass
from trimtab.cost.queueing import batch_var, ctx_sq, over_caps

from tests.cost.test_cost_roofline import rm

Z99 = 2.326348  # standard normal quantile at 0.99


def test_seats_at_the_percentile_by_hand():
    # b = 240 running on average: at p99 240 + 2.3263 x sqrt(240) = 276.0 > 256 seats
    why = over_caps(240.0, 1.0, 1.0, 1.0, 99.0, 256, 1e9)
    assert "max_num_seqs 256" in why and "276" in why
    # b = 200: 200 + 2.3263 x 14.142 = 232.9 fits 256
    assert over_caps(200.0, 1.0, 1.0, 1.0, 99.0, 256, 1e9) == ""
    # at p95 (z = 1.6449) b = 230 needs 254.9: fits; b = 232 needs 257.1: does not
    assert over_caps(230.0, 1.0, 1.0, 1.0, 95.0, 256, 1e9) == ""
    assert "max_num_seqs" in over_caps(232.0, 1.0, 1.0, 1.0, 95.0, 256, 1e9)
    # a median (or lower) target asks nothing beyond the means
    assert over_caps(255.0, 1.0, 1.0, 1.0, 50.0, 256, 1e9) == ""


def test_kv_at_the_percentile_by_hand():
    # b = 200 requests of context X with E[X^2] = 1e6: KV in use 200,000 on average, sd sqrt(200 x 1e6) =
    # 14,142, at p99 200,000 + 2.3263 x 14,142 = 232,900 tokens
    kv_p = 200_000 + Z99 * math.sqrt(200 * 1e6)
    assert kv_p == pytest.approx(232_900, abs=5)
    assert "KV cache at p99" in over_caps(200.0, 200_000.0, 1000.0, 1e6, 99.0, 256, 230_000)
    assert over_caps(200.0, 200_000.0, 1000.0, 1e6, 99.0, 256, 240_000) == ""


def test_context_second_moment_by_hand():
    # prompt 1000 (cv^2 0.25), output 300: E[I^2] = 1.25e6, E[I] O = 3e5, O^2 / 3 = 3e4 -> 1.58e6
    a = TrafficClass(2.0, 1000, 300, isl_cv2=0.25)
    assert ctx_sq([a]) == pytest.approx(1_580_000)
    # a second class, prompt 100, output 100, cv^2 0: 1e4 + 1e4 + 3333.3 = 23,333.3; decoding shares by rate x
    # output: 2 x 300 = 600 and 3 x 100 = 300
    b = TrafficClass(3.0, 100, 100)
    assert ctx_sq([a, b]) == pytest.approx((600 * 1_580_000 + 300 * (20_000 + 10_000 / 3)) / 900)


def test_a_mean_batch_under_the_seats_is_not_enough_at_p99():
    m = rm(mbt=2048, max_num_seqs=64)  # the unit GPU of test_cost_roofline (1 GiB), 64 seats
    cls = lambda rate: TrafficClass(rate, 100, 400)  # noqa: E731

    # the mean decode batch (the fixed point does not depend on the percentile); inf: unstable
    def batch(rate):
        st = m.evaluate([cls(rate)], 50.0)
        return st.decode_batch if st.stable else math.inf

    lo, hi = 1.0, 1.0
    while batch(hi) < math.inf:
        lo, hi = hi, hi * 2
    for _ in range(30):  # the highest rate whose mean batch the seats hold
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if batch(mid) < math.inf else (lo, mid)
    b = batch(lo)
    assert 55 < b <= 64 and b + Z99 * math.sqrt(b) > 64  # the means fit, the 99th percentile does not
    st = m.evaluate([cls(lo)], 99.0)
    assert not st.stable and "max_num_seqs 64" in st.reason
    # at half that rate the percentile fits too, and the replica is stable at p99
    b_lo = batch(lo / 2)
    assert b_lo + Z99 * math.sqrt(b_lo) < 64
    assert m.evaluate([cls(lo / 2)], 99.0).stable


def test_batch_variance_by_hand():
    # Poisson when the step time does not grow with the batch; b / (1 - s) when the batch map's slope is s
    assert batch_var(100.0, 0.0) == 100.0
    assert batch_var(100.0, 0.5) == pytest.approx(200.0)
    assert batch_var(100.0, 0.75) == pytest.approx(400.0)
    assert batch_var(100.0, -0.1) == 100.0  # (a map that falls with the batch is taken as flat)
    assert batch_var(100.0, 1.0) == math.inf
    # b = 150 fits 256 seats at p99 as Poisson (150 + 2.33 x 12.2 = 178.5) and with slope 0.9 (150 + 2.33 x
    # 38.7 = 240.1), not with slope 0.95 (150 + 2.33 x 54.8 = 277.4)
    assert over_caps(150.0, 1.0, 1.0, 1.0, 99.0, 256, 1e9) == ""
    assert over_caps(150.0, 1.0, 1.0, 1.0, 99.0, 256, 1e9, slope=0.9) == ""
    assert "max_num_seqs" in over_caps(150.0, 1.0, 1.0, 1.0, 99.0, 256, 1e9, slope=0.95)
    assert "no steady state" in over_caps(150.0, 1.0, 1.0, 1.0, 99.0, 256, 1e9, slope=1.0)
    # KV: Var = b E[X^2] + (Var(N) - b) E[X]^2 = 200 x 1e6 + 200 x 1000^2 (slope 0.5) = 4e8; sd 20,000
    assert over_caps(200.0, 200_000.0, 1000.0, 1e6, 99.0, 512, 246_000) == ""  # Poisson: 232,900
    kv_p = 200_000 + Z99 * 20_000
    assert "KV cache at p99 needs 246527" in over_caps(200.0, 200_000.0, 1000.0, 1e6, 99.0, 512, 246_000, 0.5)
    assert kv_p == pytest.approx(246_527, abs=1)


def _chain(lam: float, osl: float, a: float, c: float) -> tuple[float, float]:
    """Mean and variance of the number of requests decoding, from the birth-death chain itself: arrivals at
    ``lam``; n requests each emit a token every a + c n seconds and stop after each token with probability 1 /
    osl (geometric lengths), so requests leave at n / (osl (a + c n)); p(n) = p(n - 1) lam / that."""
    p, weights = 1.0, [1.0]
    for n in range(1, 20_000):
        p *= lam / (n / (osl * (a + c * n)))
        weights.append(p)
        if p < 1e-300 * max(weights):
            break
    total = sum(weights)
    mean = sum(n * w for n, w in enumerate(weights)) / total
    return mean, sum((n - mean) ** 2 * w for n, w in enumerate(weights)) / total


@pytest.mark.parametrize("lam, osl, a, c", [(30.0, 20.0, 0.010, 0.001), (5.0, 400.0, 0.020, 0.0004),
                                            (2.0, 100.0, 0.015, 0.0001)])
def test_batch_variance_against_the_chain(lam, osl, a, c):
    # the batch map f(b) = D (a + c b), D = lam x osl tokens a second, has slope s = D c and fixed point
    # D a / (1 - s); the chain's mean is D (a + c) / (1 - s), s / (1 - s) more (a request's own seat slows its
    # steps too: the map leaves that out), and its variance that mean / (1 - s)
    D = lam * osl
    mean, var = _chain(lam, osl, a, c)
    assert mean == pytest.approx(D * (a + c) / (1 - D * c), rel=1e-9)
    assert mean - D * a / (1 - D * c) == pytest.approx(D * c / (1 - D * c), rel=1e-6)
    assert var == pytest.approx(batch_var(mean, D * c), rel=1e-9)


def test_batch_variance_holds_for_fixed_output_lengths():
    """A processor-sharing queue simulated event by event with every output exactly ``osl`` tokens (not
    geometric): its time-averaged batch has the variance ``batch_var`` gives (insensitivity), 2.5x the Poisson
    one here."""
    import heapq
    import random

    # D c = 0.6: mean 600 x 0.011 / 0.4 = 16.5, variance 16.5 / 0.4 = 41.25
    lam, osl, a, c = 30.0, 20, 0.010, 0.001
    rng = random.Random(7)
    t, v, n = 0.0, 0.0, 0  # time, tokens each running request has emitted so far (virtual time), requests
    finish: list[float] = []  # the virtual times at which the running requests finish
    s0 = s1 = s2 = 0.0
    next_arrival = rng.expovariate(lam)
    warmup = 50.0
    while t < 4000.0:
        step = a + c * n
        dt_done = (finish[0] - v) * step if finish else math.inf
        dt = min(next_arrival - t, dt_done)
        if t >= warmup:
            s0, s1, s2 = s0 + dt, s1 + n * dt, s2 + n * n * dt
        v += dt / step if n else 0.0
        t += dt
        if dt == dt_done:
            heapq.heappop(finish)
            n -= 1
        else:
            heapq.heappush(finish, v + osl)
            n += 1
            next_arrival = t + rng.expovariate(lam)
    mean = s1 / s0
    var = s2 / s0 - mean * mean
    assert mean == pytest.approx(16.5, rel=0.05)
    assert var == pytest.approx(batch_var(16.5, 0.6), rel=0.10)  # 41.25; Poisson would be 16.5


def test_the_replica_takes_its_own_slope():
    """``evaluate`` measures the batch map's slope itself; from the outside it follows from how the mean batch
    grows with the rate: b = lam O TPOT(b) gives db/dlam = (b / lam) / (1 - s). At a rate where the mean batch
    fits the seats at p99 as a Poisson count but not with that slope's variance, the replica is unstable."""
    m = rm(mbt=2048, max_num_seqs=64)
    cls = lambda rate: TrafficClass(rate, 100, 400)  # noqa: E731

    def batch(rate):
        st = m.evaluate([cls(rate)], 50.0)
        return st.decode_batch if st.stable else math.inf

    def slope(rate, h=1e-4):  # from the outside: 1 - (b / lam) / (db / dlam)
        db = (batch(rate * (1 + h)) - batch(rate * (1 - h))) / (2 * h * rate)
        return 1 - batch(rate) / rate / db

    top = 1.0
    while batch(top * 2) < math.inf:
        top *= 2
    seen = 0
    for k in range(40, 200):  # rates from half to twice the last power of two at which the mean batch fits
        rate = top * k / 80
        b = batch(rate)
        if b == math.inf or b + Z99 * math.sqrt(b) > 64:
            break
        s = slope(rate)
        wide = b + Z99 * math.sqrt(b / (1 - s))
        st = m.evaluate([cls(rate)], 99.0)
        if wide > 64 * 1.01:
            assert not st.stable and "max_num_seqs 64" in st.reason, (rate, b, s)
            seen += 1
        elif wide < 64 * 0.99:
            assert st.stable, (rate, b, s, st.reason)
    assert seen  # some rate fits as Poisson and not with the feedback
