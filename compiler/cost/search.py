"""The one search of the project: where a monotone predicate turns from true to false.

Every capacity, percentile and threshold search calls one of these (issue 12): the per-replica capacity
(``ReplicaModel.capacity_rps``, the P/D roles, the adapter mixes, the P/D prefill pool), the TPOT percentile
of the tail (``trimtab.cost.queueing.tpot_tail``), the closed-loop rate of ``predict`` and the smallest
relaxation of ``explain``. All assume ``pred`` holds below some point and fails above it; they differ only in
when they stop and which end of the final interval they return:

* ``bisect_max``: the last point known true, to a relative tolerance (capacities: a rate known to meet
  the SLO);
* ``bisect_width``: the first point known false, to an absolute width (a percentile: at or above the answer);
* ``bisect_steps``: a fixed number of halvings, the last point known true;
* ``grow``: the bracket, stepping up geometrically until ``pred`` fails;
* ``bracket``: a bracket around a guess (a sibling shape's capacity), searched outward from it;
* ``smallest_true``: the least value at which a predicate that is false below and true above holds, over
  floats or integers (``explain``'s relaxations).
"""
from __future__ import annotations


def _halve(pred, lo: float, hi: float, narrow_enough) -> tuple[float, float]:
    """The one bisection: halve [lo, hi], keeping ``pred(lo)`` true and ``pred(hi)`` false (both assumed),
    until ``narrow_enough(lo, hi, halvings done)``; returns the final (lo, hi)."""
    k = 0
    while not narrow_enough(lo, hi, k):
        mid = (lo + hi) / 2
        if pred(mid):
            lo = mid
        else:
            hi = mid
        k += 1
    return lo, hi


def bisect_max(ok, lo: float, hi: float, rel_tol: float) -> float:
    """Largest x in [lo, hi] with ok(x), to ``rel_tol``, for a predicate that holds below some point and fails
    above it (``ok(lo)`` is assumed, ``ok(hi)`` is not)."""
    # (1e-6 if 1e-6 > a else a): max(a, 1e-6) without the builtin's call
    return _halve(ok, lo, hi, lambda a, b, _k: b - a <= rel_tol * (1e-6 if 1e-6 > a else a))[0]


def bisect_width(pred, lo: float, hi: float, width: float) -> float:
    """The first point known false: [lo, hi] halved until narrower than ``width`` (``pred(lo)`` assumed true,
    ``pred(hi)`` false); returns hi, an upper end within ``width`` of the turning point."""
    return _halve(pred, lo, hi, lambda a, b, _k: b - a <= width)[1]


def bisect_steps(pred, lo: float, hi: float, steps: int) -> float:
    """``steps`` halvings of [lo, hi]; returns the last point known true (lo)."""
    return _halve(pred, lo, hi, lambda _a, _b, k: k >= steps)[0]


def grow(pred, lo: float, hi: float, limit: float) -> tuple[float, float]:
    """A bracket (lo, hi) from doubling hi while ``pred(hi)`` holds and hi < ``limit`` (lo: the last hi that
    held)."""
    while pred(hi) and hi < limit:
        lo, hi = hi, hi * 2
    return lo, hi


def bracket(ok, guess: float, bound: float, rel_tol: float) -> tuple[float, float]:
    """(lo, hi) around the rate where the monotone ``ok`` turns false, searched outward from ``guess``: ok(lo)
    holds (or lo is 0: not known), ok(hi) does not (or hi is ``bound``). Steps grow 4-fold from just under
    rel_tol, so a guess right to the tolerance costs two evaluations."""
    step = 0.999 * rel_tol
    if ok(guess):
        lo = guess
        while True:
            t = lo * (1 + step)
            if t >= bound:
                return lo, bound
            if not ok(t):
                return lo, t
            lo, step = t, step * 4
    hi = guess
    while True:
        t = hi / (1 + step)
        if t < 1e-6 * guess:
            return 0.0, hi
        if ok(t):
            return t, hi
        hi, step = t, step * 4


def smallest_true(ok, lo: float, hi: float, integer: bool, rel: float = 0.02) -> float | None:
    """Smallest value in (lo, hi] with ok(value), for ``ok`` false below some point and true above it: hi
    grows geometrically from lo (doubling; integers by at least one) until ok holds, then bisection to ``rel``
    of the value (integers: to one). None when ok(hi) does not hold."""
    x = lo
    top = None
    while True:
        x = max(x * 2, x + 1) if integer else x * 2
        x = min(x, hi)
        if ok(x):
            top = x
            break
        if x >= hi:
            return None
        lo = x
    while (top - lo > 1) if integer else (top - lo > rel * top):
        mid = (lo + top) // 2 if integer else (lo + top) / 2
        if ok(mid):
            top = mid
        else:
            lo = mid
    return top
