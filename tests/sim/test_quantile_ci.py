"""The order-statistic interval loadtest reports beside each measured percentile
(trimtab.sim.metrics.quantile_ci).

Oracles that share nothing with the code: the textbook interval for a median of 10 (x_(2)..x_(9), coverage
1 - 2 x 11/1024 = 97.9 %), the exact binomial tail for when an end cannot be bounded, and the coverage of the
true p90 of an exponential distribution (ln 10 / rate) over many simulated load tests.
"""
from __future__ import annotations

import math

import numpy as np

from trimtab.sim.metrics import quantile_ci


def test_median_of_ten_is_bounded_by_the_second_and_ninth_order_statistics():
    x = np.array([7.0, 1.0, 9.0, 3.0, 10.0, 2.0, 8.0, 5.0, 4.0, 6.0])  # 1..10, shuffled
    assert quantile_ci(x, 50) == (2.0, 9.0)


def test_an_end_the_samples_cannot_bound_is_open():
    # P(all 35 below the true p90) = 0.9**35 = 2.5 % > 2.5 %-quantile budget: no sample bounds it from above.
    assert 0.9 ** 35 > 0.025 - 1e-3
    lo, hi = quantile_ci(np.arange(1.0, 36.0), 90)
    assert hi == math.inf and lo == 28.0
    lo, hi = quantile_ci(np.arange(1.0, 75.0), 90)  # 74 samples: the 61st and 72nd
    assert (lo, hi) == (61.0, 72.0)
    assert all(math.isnan(v) for v in quantile_ci(np.array([]), 90))


def test_covers_the_true_p90_of_an_exponential_at_least_95_percent_of_the_time():
    rng = np.random.default_rng(7)
    true_p90 = math.log(10.0)  # rate 1
    trials, hit = 4000, 0
    for _ in range(trials):
        lo, hi = quantile_ci(rng.exponential(1.0, 74), 90)
        hit += lo <= true_p90 <= hi
    se = math.sqrt(0.95 * 0.05 / trials)
    assert hit / trials >= 0.95 - 3 * se
    # ... and it is not vacuous: with 74 samples a prediction 2x the true p90 lies above the interval almost
    # always.
    above = sum(quantile_ci(rng.exponential(1.0, 74), 90)[1] < 2 * true_p90 for _ in range(500))
    assert above / 500 >= 0.9
