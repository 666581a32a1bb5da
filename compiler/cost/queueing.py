"""Queueing and tail arithmetic of the cost model: the M/G/1 prefill queue, the TPOT tail of a request slowed
by the prompts that arrive while it decodes and the decision of that tail against a bound, Aitken acceleration
of the batch fixed point, seats and KV at the percentile, the regularised upper incomplete gamma function.
(The searches are in ``compiler/cost/search.py``.)
"""
from __future__ import annotations

import math
from functools import cache
from statistics import NormalDist

from trimtab.cost.records import UNSTABLE
from trimtab.cost.search import bisect_width


class _Aitken:
    """Aitken's delta-squared extrapolation of ``evaluate``'s decode-batch fixed point b = f(b), with a safe
    fallback. Plain iteration from 0 climbs to the fixed point from below (f grows with b), often slowly near
    saturation; every third plain iterate is replaced by the extrapolation of the last three (Steffensen's
    method), which lands on the fixed point in a few steps. Convergence is still judged on a plain step, to
    the same tolerance. An extrapolation may overshoot the fixed point: if a state looks unstable once any has
    been used, ``retreat`` goes back to the highest plain iterate known to lie below the fixed point (one with
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
        """A plain step b -> f(b) = ``b_new``; returns the batch to continue from instead of b_new, or
        None."""
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
    """Whether the percentile search of ``tpot_tail`` (bisection of the decreasing ``miss`` on [lo, hi] to
    ``width``) would end at or below ``bound``, from at most two evaluations of ``miss``; None when ``bound``
    is within ``width`` of the answer and only the search itself can tell."""
    if bound < lo:
        return False  # the search never returns less than lo (the mean TPOT)
    if bound >= hi:
        return True  # ... nor more than hi
    if miss(bound) > q:
        return False  # the answer lies above bound
    if bound - width >= lo and miss(bound - width) <= q:
        return True  # the answer lies at or below bound - width, and the search ends within width of it
    return None


def _prefill_queue(classes, s: list[float], lam: float, rho: float,
                   percentile: float) -> tuple[float, float, float]:
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
    """The standard normal distribution (made once: ``tpot_tail`` runs hundreds of thousands of times)."""
    return NormalDist()


@cache
def _z(percentile: float) -> float:
    """The standard normal quantile at ``percentile`` (0-100), made once per percentile (every evaluate
    asks)."""
    return _normal().inv_cdf(percentile / 100.0)


def ctx_sq(classes) -> float:
    """E[X^2] of the context X of a decoding request over ``classes``: a request of prompt length I (mean,
    cv^2 ``isl_cv2``) and output O is seen at context I + U O, U uniform on [0, 1], so
    E[X^2] = E[I^2] + E[I] O + O^2 / 3 per class, weighted by its share of decoding requests (rate x
    output)."""
    num = den = 0.0
    for c in classes:
        w, i, o = c.rate_rps * c.osl_mean, c.isl_mean, c.osl_mean
        num += w * (i * i * (1 + c.isl_cv2) + i * o + o * o / 3)
        den += w
    return num / den if den > 0 else 0.0


def batch_var(b: float, slope: float) -> float:
    """Variance of the number of requests decoding on a replica, mean ``b``, where ``slope`` is f'(b) of the
    batch map f(b) = (output tokens a second) x TPOT(b) at its fixed point.

    With a fixed step time the requests in the system form an M/G/inf population, Poisson: variance b. But a
    step takes longer the more requests it carries, so a burst slows every request in it and keeps them
    longer: the batch feeds on itself. With a step time a + c n at batch n (the decode roofline: weights once,
    KV per request), n requests decode at n / (a + c n) tokens a second shared equally: a symmetric
    (processor-sharing) queue, whose number in system does not depend on the output-length distribution
    (Kelly, "Reversibility and Stochastic Networks", 1979, ch. 3). Its balance equations give
    p(n) ~ prod_k (D a / k + D c), D the output tokens offered a second: a negative binomial with mean
    m = D (a + c) / (1 - D c) and variance m / (1 - D c). The slope of f(b) = D (a + c b) is D c, and its
    fixed point D a / (1 - D c) lies s / (1 - s) under m (a request's own seat slows its steps too: a few
    requests); so variance b / (1 - slope), which is b (Poisson) when steps do not slow with the batch and
    grows without bound as the slope reaches 1 (saturation). ``slope`` >= 1: inf.
    (tests/cost/test_occupancy.py checks both against the chain solved numerically.)"""
    s = slope if slope > 0.0 else 0.0
    return b / (1.0 - s) if s < 1.0 else math.inf


def map_slope(f, b_in: float, b: float) -> float:
    """The slope of the batch map ``f`` at its fixed point, where the iteration's last step was b = f(b_in):
    the secant from b_in to 1 % above b (for ``batch_var``). ``f`` returns None where the map has no value
    there (no token budget left for prompts, prefill saturated): slope 1, no steady state."""
    b2 = b + 0.01 * (b if b > 1.0 else 1.0)  # max(b, 1.0)
    f2 = f(b2)
    return 1.0 if f2 is None else (f2 - b) / (b2 - b_in)


def over_caps(b: float, kv_used: float, x_mean: float, x_sq: float, percentile: float, max_seqs: int,
              kv_cap: float, slope: float = 0.0) -> str:
    """Why a request at ``percentile`` waits for a seat or for KV room although the means fit ('' if it does
    not).

    The number N of requests running on a replica has mean b and variance ``batch_var(b, slope)`` (Poisson
    when the step time does not grow with the batch, more when it does), so at percentile p it is b + z sd(N)
    (normal approximation, z the standard normal quantile). Their KV in use is a sum of N contexts X (mean
    ``x_mean``, E[X^2] ``x_sq`` from ``ctx_sq``): mean ``kv_used``, variance b Var(X) + Var(N) E[X]^2 =
    b E[X^2] + (Var(N) - b) E[X]^2, so at p it is kv_used + z sqrt of that. An engine admits a request only
    while a seat (``max_num_seqs``) and its KV fit; near either cap the batch reaches it often, arrivals queue
    for a seat, and the queue drains only by the little headroom the mean leaves. A mean-only check let plans
    run a batch of 240-251 of 256 seats (the simulator's queue then grew for the whole run: 8-29 % attainment)
    or 59-66 % of the KV cache (41-89 %); a Poisson-only one a batch of 225 on a replica whose steps slow with
    the batch (10 %); docs/cost-model.md, "Under load"."""
    if percentile <= 50 or b <= 0:
        return ""
    var = batch_var(b, slope)
    if not math.isfinite(var):
        return (f"no steady state: the decode batch feeds on itself (slope {slope:.2f} of the batch map at "
                f"{b:.0f})")
    z = _z(percentile)
    seats = b + z * math.sqrt(var)
    if seats > max_seqs:
        return f"a decode batch of {seats:.0f} at p{percentile:g} > max_num_seqs {max_seqs}"
    kv = kv_used + z * math.sqrt(b * x_sq + (var - b) * x_mean * x_mean)
    if kv > kv_cap:
        return f"KV cache at p{percentile:g} needs {kv:.0f} tokens > capacity {kv_cap:.0f}"
    return ""


def tpot_tail(classes, s: list[float], nsteps: list[float], t_d: float, tpot: float, percentile: float,
              bound_s: float | None = None) -> float:
    """Per-request TPOT at ``percentile``. A request decoding k = osl - 1 tokens is slowed by the prompts
    that arrive while it decodes: each adds D = (its prefill time) - (its chunk steps x t_d), the excess of
    its prefill-carrying steps over decode-only steps. Over the request's window (k x mean TPOT) the prompts
    form a compound Poisson process, so its TPOT is t_d + Y / k with E[Y] = lambda k TPOT E[D] and
    Var[Y] = lambda k TPOT E[D^2] (length variation within a class included), skewness from E[D^3]. The
    rate-weighted mixture over classes, each a shifted gamma with those three moments, is solved for the
    percentile (long prompts are rare and large: the tail is skewed); the mean is the mean TPOT."""
    lam = sum(c.rate_rps for c in classes)
    if lam <= 0 or percentile <= 50:
        return tpot
    d = [max(si - k * t_d, 0.0) for si, k in zip(s, nsteps)]
    ed2 = sum(c.rate_rps * di ** 2 * (1 + c.isl_cv2) for c, di in zip(classes, d)) / lam
    ed3 = sum(c.rate_rps * di ** 3 * (1 + c.isl_cv2) ** 3 for c, di in zip(classes, d)) / lam
    parts = []  # (weight, sd of TPOT, skewness) per class and output length with more than one output token
    ed2_15 = ed2 ** 1.5 if ed2 > 0 else 0.0  # (used only where ed2 > 0)
    for c in classes:
        for o, share in c.osl_points or ((c.osl_mean, 1.0),):
            k = o - 1
            if k >= 1 and ed2 > 0:
                m = lam * k * tpot  # prompts arriving during the request's decode
                parts.append((c.rate_rps * share, math.sqrt(m * ed2) / k, ed3 / (math.sqrt(m) * ed2_15)))
    if not parts:
        return tpot
    wsum = lam  # requests with a single output token have no TPOT to miss
    q = 1 - percentile / 100.0
    nd = _normal()
    # per part: the gamma's shape a = 4 / g^2 and sqrt(a) (None: no skew), once, not at every ``miss``
    shapes = [(w, sd, None, 0.0) if g <= 1e-6 else (w, sd, 4.0 / (g * g), math.sqrt(4.0 / (g * g)))
              for w, sd, g in parts]

    def tail(x: float, a: float | None, sqrt_a: float) -> float:
        # P(Z > x) for a standardised variable with skewness g: a shifted gamma with the same three moments
        if a is None:
            return 1 - nd.cdf(x)
        v = a + x * sqrt_a
        return gamma_q(a, 0.0 if 0.0 > v else v)  # max(v, 0.0)

    def miss(t: float) -> float:
        return sum([w * tail((t - tpot) / sd, a, sqrt_a) for w, sd, a, sqrt_a in shapes]) / wsum

    lo, hi = tpot, tpot + 20 * max(p[1] for p in parts)
    if bound_s is not None:
        decided = _tail_decision(miss, q, lo, hi, 1e-4 * tpot, bound_s)
        if decided is not None:
            return tpot if decided else UNSTABLE
    # to 0.01 % of the mean TPOT: far below any SLO's resolution
    return bisect_width(lambda t: miss(t) > q, lo, hi, 1e-4 * tpot)


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
