"""The one search module (compiler/cost/search.py): each variant against a hand-computed threshold."""
from __future__ import annotations

import math

from trimtab.cost.search import bisect_max, bisect_steps, bisect_width, bracket, grow, smallest_true


def test_bisect_max_returns_a_true_point_within_tolerance():
    x = bisect_max(lambda v: v <= 3.7, 0.0, 10.0, 1e-3)
    assert x <= 3.7 and 3.7 - x <= 1e-3 * 3.7 + 1e-12


def test_bisect_width_returns_a_false_point_within_width():
    x = bisect_width(lambda v: v < math.pi, 0.0, 4.0, 1e-6)
    assert x >= math.pi and x - math.pi <= 1e-6


def test_grow_then_steps_finds_the_threshold():
    pred = lambda v: v * v < 1234.5  # noqa: E731
    lo, hi = grow(pred, 0.0, 1.0, 1e6)
    assert (lo, hi) == (32.0, 64.0)
    assert abs(bisect_steps(pred, lo, hi, 60) - math.sqrt(1234.5)) < 1e-9


def test_bracket_from_a_guess_on_either_side():
    ok = lambda v: v <= 5.0  # noqa: E731
    for guess in (1.0, 4.99, 5.0, 9.0):
        lo, hi = bracket(ok, guess, 100.0, 0.005)
        assert ok(lo) or lo == 0.0
        assert not ok(hi) and lo <= 5.0 < hi


def test_smallest_true_integer_and_float():
    assert smallest_true(lambda v: v >= 37, 8.0, 4096.0, integer=True) == 37
    assert smallest_true(lambda v: v >= 5000, 8.0, 4096.0, integer=True) is None
    x = smallest_true(lambda v: v >= 2.5, 1.0, 100.0, integer=False)
    assert x >= 2.5 and x - 2.5 <= 0.02 * x
