"""Queueing and tail arithmetic of the cost model, and its one search: the M/G/1 prefill queue, the decision
of a tail percentile against a bound, Aitken acceleration of the batch fixed point, the regularised upper
incomplete gamma function. (The searches are in ``compiler/cost/search.py``.)
"""
from __future__ import annotations

import math
from functools import cache


class _Aitken:
    """Aitken's delta-squared extrapolation of ``evaluate``'s decode-batch fixed point b = f(b), with a safe
    fallback. Plain iteration from 0 climbs to the fixed point from below (f grows with b), often slowly near
    saturation; every third plain iterate is replaced by the extrapolation of the last three (Steffensen's
    method), which lands on the fixed point in a few steps. Convergence is still judged on a plain step, to the
    same tolerance. An extrapolation may overshoot the fixed point: if a state looks unstable once any has been
    used, ``retreat`` goes back to the highest plain iterate known to lie below the fixed point (one with
    f(b) >= b) and plain iteration continues from there, unaccelerated, so instability is only ever concluded
    from plain iterates below the fixed point, as without acceleration."""

    __slots__ = ("hist", "safe", "on", "cap", "used")

    def __init__(self, cap: float, on: bool = True, start: float = 0.0):
        self.hist: list[float] = [start]
        self.safe = start
        self.on = on
        self.cap = cap  # extrapolations above this are not used
        self.used = False

    def step(self, b: float, b_new: float) -> float | None:
        """A plain step b -> f(b) = ``b_new``; returns the batch to continue from instead of b_new, or None."""
        if b_new >= b and b_new > self.safe:  # f(b) >= b: b and f(b) lie below the fixed point
            self.safe = b_new  # (max(self.safe, b_new) without the builtin's call)
        if not self.on:
            return None
        h = self.hist
        h.append(b_new)
        if len(h) < 3:
            return None
        b0, b1, b2 = h
        self.hist = [b2]
        den = b2 - 2 * b1 + b0
        if den == 0 or not (b1 - b0) * (b2 - b1) > 0:  # not a monotone run: leave it to plain iteration
            return None
        acc = b0 - (b1 - b0) ** 2 / den
        if not (math.isfinite(acc) and 0.0 <= acc <= self.cap):
            return None
        self.used = True
        self.hist = [acc]
        return acc

    def retreat(self) -> bool:
        if not (self.on and self.used):
            return False
        self.on = False
        return True


def _tail_decision(miss, q: float, lo: float, hi: float, width: float, bound: float) -> bool | None:
    """Whether the percentile search of ``_tpot_tail`` (bisection of the decreasing ``miss`` on [lo, hi] to
    ``width``) would end at or below ``bound``, from at most two evaluations of ``miss``; None when ``bound`` is
    within ``width`` of the answer and only the search itself can tell."""
    if bound < lo:
        return False  # the search never returns less than lo (the mean TPOT)
    if bound >= hi:
        return True  # ... nor more than hi
    if miss(bound) > q:
        return False  # the answer lies above bound
    if bound - width >= lo and miss(bound - width) <= q:
        return True  # the answer lies at or below bound - width, and the search ends within width of it
    return None


def _prefill_queue(classes, s: list[float], lam: float, rho: float, percentile: float) -> tuple[float, float, float]:
    """The M/G/1 prefill queue of ``evaluate`` and ``evaluate_prefill``: (waiting time at ``percentile``, mean
    waiting time, prompt tokens offered per second). Service times ``s`` per class, utilisation ``rho`` < 1;
    P(W > t) = rho exp(-t / theta), theta = E[S^2] / (2 E[S] (1 - rho)) (mean: Pollaczek-Khinchine)."""
    es = es2 = pre_tokens = 0.0
    for c, si in zip(classes, s):
        es += c.rate_rps * si
        es2 += c.rate_rps * si * si * (1 + c.isl_cv2)
        pre_tokens += c.rate_rps * c.isl_mean
    es /= lam
    es2 /= lam
    theta = es2 / (2 * es * (1 - rho))
    q = 1 - percentile / 100.0
    wait_p = theta * math.log(rho / q) if rho > q else 0.0
    return wait_p, rho * theta, pre_tokens


@cache
def _normal():
    """The standard normal distribution (made once: ``_tpot_tail`` runs hundreds of thousands of times)."""
    from statistics import NormalDist

    return NormalDist()


@cache
def _gammaincc():
    """scipy's regularised upper incomplete gamma, imported on first use (not at every command's start): the
    scalar ``cython_special`` entry point (the same routine as the ``scipy.special.gammaincc`` ufunc's float64
    loop, same values, ~0.2 us a call against ~1.2 us through the ufunc machinery)."""
    from scipy.special.cython_special import gammaincc

    return gammaincc


def gamma_q(a: float, x: float) -> float:
    """Regularised upper incomplete gamma Q(a, x) = Gamma(a, x) / Gamma(a), for a > 0, x >= 0:
    ``scipy.special.gammaincc`` (Cephes; ~3 us a call against ~14 us for the earlier hand-written series and
    continued fraction, which it matches to 5e-12 relative)."""
    if x <= 0:
        return 1.0
    return float(_gammaincc()(a, x))
