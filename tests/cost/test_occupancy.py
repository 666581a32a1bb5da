"""Seats and KV at the SLO percentile (``compiler.cost.queueing.over_caps``): hand-computed cases, and a replica
whose mean batch fits ``max_num_seqs`` but whose batch at p99 does not is unstable."""
from __future__ import annotations

import math

import pytest

from compiler.cost.model import TrafficClass
from compiler.cost.queueing import ctx_sq, over_caps

from tests.cost.test_cost_roofline import rm

Z99 = 2.326348  # standard normal quantile at 0.99


def test_seats_at_the_percentile_by_hand():
    # b = 240 running on average: at p99 240 + 2.3263 x sqrt(240) = 276.0 > 256 seats
    why = over_caps(240.0, 1.0, 1.0, 99.0, 256, 1e9)
    assert "max_num_seqs 256" in why and "276" in why
    # b = 200: 200 + 2.3263 x 14.142 = 232.9 fits 256
    assert over_caps(200.0, 1.0, 1.0, 99.0, 256, 1e9) == ""
    # at p95 (z = 1.6449) b = 230 needs 254.9: fits; b = 232 needs 257.1: does not
    assert over_caps(230.0, 1.0, 1.0, 95.0, 256, 1e9) == ""
    assert "max_num_seqs" in over_caps(232.0, 1.0, 1.0, 95.0, 256, 1e9)
    # a median (or lower) target asks nothing beyond the means
    assert over_caps(255.0, 1.0, 1.0, 50.0, 256, 1e9) == ""


def test_kv_at_the_percentile_by_hand():
    # b = 200 requests of context X with E[X^2] = 1e6: KV in use 200,000 on average, sd sqrt(200 x 1e6) = 14,142,
    # at p99 200,000 + 2.3263 x 14,142 = 232,900 tokens
    kv_p = 200_000 + Z99 * math.sqrt(200 * 1e6)
    assert kv_p == pytest.approx(232_900, abs=5)
    assert "KV cache at p99" in over_caps(200.0, 200_000.0, 1e6, 99.0, 256, 230_000)
    assert over_caps(200.0, 200_000.0, 1e6, 99.0, 256, 240_000) == ""


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

    def batch(rate):  # the mean decode batch (the fixed point does not depend on the percentile); inf: unstable
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
