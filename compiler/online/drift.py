"""The tests ``trimtab watch`` decides with (docs/online.md, "Watching a deployment"): a change of arrival
rate, a change of length mix and an SLO at risk, each at a stated false-alarm rate ``alpha`` per look.

**Rate.** Requests arriving in an interval of ``dt`` seconds at rate ``r`` (``Series.arrivals``: finished plus
the change of those in the engine) are a Poisson count of mean ``r dt`` (a renewal process with inter-arrival
CV ``c`` has variance ``c**2 r dt`` over windows much longer than a gap: the counts are scaled by
``1 / c**2``, quasi-Poisson). Over the last ``W`` intervals each suffix (the
last 1, 2, ..., W intervals) is tested two-sided against the reference count at ``alpha / W`` (Bonferroni over
the suffixes), so one look declares a change under the reference rate with probability at most ``alpha``. A
short suffix catches a large step in one interval, a long one a small step. The change began at the latest
in the oldest interval of the shortest suffix that rejects (the most recent evidence: a longer suffix, such as
the one with the largest likelihood ratio, the CUSUM change point, takes in intervals before the change
whenever noise lifted them, and its rate is diluted); that interval mixes both rates (a step half-way through
it reads as half the step), so the new rate is measured over the intervals after it, and a change shown by the
last interval alone is not ``settled``: the watcher waits for the next one.

**Lengths.** The mean prompt and output length over the last ``W`` intervals (exact: the histograms' sum over
count) against the plan's, a two-sided z-test with the histogram's variance (bucket midpoints, plus each
bucket's own width squared / 12, as if uniform inside it: a length mix inside one bucket is not known to have
none), at ``alpha / 2`` for the two means.

**SLO at risk.** Per workload, each interval of each endpoint serving it is one batch (requests meeting the
SLO, requests) for ``trimtab.sim.validate.interval``, the batch-means interval ``check`` uses; over each
suffix of the recent intervals, as for the rate, at confidence ``1 - alpha / W``: the SLO is at risk when some
suffix's **upper** bound is below the target (a miss the measurements show, as ``check`` fails one). Few
batches give Student's t few degrees of freedom, so a miss is shown after a few intervals, not in one. A
request meets the SLO when both its TTFT and its TPOT do; the histograms are marginal, so the misses of the
two are added (the union bound: the joint attainment is at least this); inside the bucket that holds the SLO
every request is counted as meeting it (``Hist.share_at_most_upper``: the buckets cannot tell, and vLLM's are
coarse), so a miss is declared only where the buckets show it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from scipy.special import gammainc, gammaincc, ndtri

from trimtab.sim.validate import interval

ALPHA = 1e-4  # default false-alarm probability per look, per deployment and test
WINDOWS = 8  # default number of recent intervals the tests look at


def _poisson_tails(n: float, mu: float) -> tuple[float, float]:
    """P(X <= n), P(X >= n) for X ~ Poisson(mu), continued to non-integer n (the regularized incomplete gamma
    functions, whose integer values are the Poisson tails)."""
    if mu <= 0:
        return 1.0, (1.0 if n <= 0 else 0.0)
    lower = float(gammaincc(n + 1, mu))
    upper = 1.0 if n <= 0 else float(gammainc(n, mu))
    return lower, upper


@dataclass(frozen=True)
class RateChange:
    factor: float  # measured / reference rate after the change (``rate_test``: its oldest interval left out)
    since_intervals: int  # how many of the last intervals the change's suffix spans
    p_value: float  # the two-sided p-value of the shortest suffix that rejects (judged at alpha / W)
    requests: int  # in the intervals ``factor`` is measured over
    expected: float  # requests the reference rate gives them
    settled: bool  # at least one whole interval after the one the change may have begun in


def rate_test(counts: list[tuple[float, float]], cv: float = 1.0, alpha: float = ALPHA) -> RateChange | None:
    """``counts``: the recent intervals [(requests, requests expected at the reference rate)], oldest first. A
    RateChange when some suffix's count rejects the reference at ``alpha / len(counts)`` (module docstring),
    else None."""
    if not counts:
        return None
    phi = max(cv, 1e-6) ** 2
    k = len(counts)
    n = mu = 0.0
    for i in range(1, k + 1):
        c, e = counts[-i]
        n, mu = n + c, mu + e
        lo, hi = _poisson_tails(n / phi, mu / phi)
        p = min(1.0, 2 * min(lo, hi))
        if p < alpha / k:  # the shortest suffix that rejects: the most recent evidence of the change
            if i >= 2:  # the change began in its oldest interval, which mixes both rates: left out
                n, mu = n - c, mu - e
            return RateChange(n / mu if mu > 0 else math.inf, i, p, int(round(n)), mu, i >= 2)
    return None


@dataclass(frozen=True)
class LengthChange:
    what: str  # "prompt" or "output"
    planned_mean: float
    mean: float  # after the change (``length_change``: the suffix's oldest interval left out)
    z: float
    requests: int
    settled: bool = True  # as RateChange.settled


def _z(hist, planned_mean: float) -> float:
    var = hist.variance()
    se = math.sqrt(var / hist.count) if var > 0 else 0.0
    return (hist.mean - planned_mean) / se if se > 0 else (0.0 if hist.mean == planned_mean else math.inf)


def length_test(what: str, planned_mean: float, hist, alpha: float = ALPHA) -> LengthChange | None:
    """Two-sided z-test of the histogram's mean against ``planned_mean`` at ``alpha / 2`` (two means a
    look)."""
    if hist is None or hist.count < 2 or not planned_mean > 0:
        return None
    z = _z(hist, planned_mean)
    if abs(z) <= float(ndtri(1 - alpha / 4)):
        return None
    return LengthChange(what, planned_mean, hist.mean, z, int(hist.count))


def length_change(what: str, planned_mean: float, hists: list, alpha: float = ALPHA) -> LengthChange | None:
    """``hists``: the recent intervals' length histograms, oldest first. As ``rate_test``: each suffix's mean
    tested at ``alpha / (2 W)`` (two means a look), the shortest that rejects gives the change, its mean over
    the intervals after its oldest one."""
    hists = [h for h in hists if h is not None and h.count > 0]
    if not hists or not planned_mean > 0:
        return None
    k = len(hists)
    bound = float(ndtri(1 - alpha / (4 * k)))
    tot = None
    for i in range(1, k + 1):
        before = tot
        tot = hists[-i] if tot is None else tot.plus(hists[-i])
        if tot.count < 2:
            continue
        z = _z(tot, planned_mean)
        if abs(z) > bound:
            after = before if i >= 2 and before is not None and before.count > 0 else tot
            return LengthChange(what, planned_mean, after.mean, z, int(after.count), i >= 2)
    return None


def met(ttft, tpot, ttft_s: float, tpot_s: float) -> tuple[float, float]:
    """(requests meeting both SLOs, requests) of one interval from its TTFT and TPOT histograms: the union
    bound on the misses, each read at its bucket's upper bound (module docstring). Without a TPOT histogram
    only TTFT is judged."""
    if ttft is None or ttft.count <= 0:
        return 0.0, 0.0
    n = ttft.count
    miss = n * (1 - ttft.share_at_most_upper(ttft_s))
    if tpot is not None and tpot.count > 0:
        miss += n * (1 - tpot.share_at_most_upper(tpot_s))
    return max(0.0, n - miss), n


@dataclass(frozen=True)
class Risk:
    workload: str
    target: float
    attainment: float  # over all the recent intervals, with its bounds at 1 - alpha
    lower: float
    upper: float
    requests: int
    at_risk: bool
    since_intervals: int  # the suffix that showed the miss (0: none)
    upper_since: float  # its upper bound, at 1 - alpha / W


def slo_risk(workload: str, intervals: list[list[tuple[float, float]]], target: float,
             alpha: float = ALPHA) -> Risk:
    """``intervals``: the recent intervals, oldest first, each a list of batches (requests meeting the SLO,
    requests), one per endpoint. At risk when some suffix's batch-means interval
    (``trimtab.sim.validate.interval``) at 1 - alpha / W has its upper bound below ``target``: as the rate
    test, a recent miss is not diluted by the intervals before it, and one look errs with probability at most
    alpha."""
    # interval() counts requests: rounding the union bound's fractional met counts down keeps it a lower bound
    def iv(xs, conf):
        return interval([[(int(math.floor(ok)), int(round(n))) for ok, n in xs]], confidence=conf)

    k = len(intervals)
    whole = iv([b for x in intervals for b in x], 1 - alpha)
    since, up = 0, 1.0
    for i in range(1, k + 1):
        part = iv([b for x in intervals[-i:] for b in x], 1 - alpha / k)
        if part.requests > 0 and part.upper < target - 1e-12:
            since, up = i, part.upper
            break
    return Risk(workload, target, whole.mean, whole.lower, whole.upper, whole.requests, since > 0, since, up)
