"""Arrival processes: Poisson, Gamma with a coefficient of variation, fixed intervals (cv 0), load in stages,
and trace replay.

All take a ``numpy.random.Generator`` (or none, for replay) and return sorted arrival times in seconds from 0.
A count ``n`` or a horizon ``duration_s`` bounds the stream (exactly one of them).
"""
from __future__ import annotations

import math

import numpy as np


def _gaps_to_times(gen, n: int | None, duration_s: float | None, rate: float) -> np.ndarray:
    if n is not None:
        return np.cumsum(gen(n))
    want = max(16, int(rate * duration_s * 1.1 + 6 * math.sqrt(rate * duration_s + 1)))
    t = np.cumsum(gen(want))
    while t[-1] <= duration_s:
        t = np.concatenate([t, t[-1] + np.cumsum(gen(want))])
    return t[t <= duration_s]


def poisson(rng: np.random.Generator, rate: float, n: int | None = None,
            duration_s: float | None = None) -> np.ndarray:
    """Exponential gaps of mean 1 / rate."""
    return _gaps_to_times(lambda m: rng.exponential(1.0 / rate, m), n, duration_s, rate)


def gamma(rng: np.random.Generator, rate: float, cv: float, n: int | None = None,
          duration_s: float | None = None) -> np.ndarray:
    """Gamma gaps of mean 1 / rate and coefficient of variation ``cv`` (shape 1 / cv^2); cv = 1 is Poisson,
    cv > 1 is bursty (many short gaps, a few long ones), cv < 1 is smoother than Poisson, cv = 0 fixed
    gaps."""
    if abs(cv - 1.0) < 1e-12:
        return poisson(rng, rate, n, duration_s)
    if cv == 0:  # fixed intervals: a load generator's constant rate (no random draw)
        return _gaps_to_times(lambda m: np.full(m, 1.0 / rate), n, duration_s, rate)
    shape = 1.0 / (cv * cv)
    scale = 1.0 / (rate * shape)
    return _gaps_to_times(lambda m: rng.gamma(shape, scale, m), n, duration_s, rate)


def staged(rng: np.random.Generator, stages, cv: float, n: int | None = None,
           duration_s: float | None = None) -> np.ndarray:
    """Arrivals in load stages ((rate, seconds), in order; run again from the first past their end), each
    stage's gaps as ``gamma`` draws them; a stage starts afresh at its start (a load generator's stage)."""
    parts, t0, count = [], 0.0, 0
    while (n is None or count < n) and (duration_s is None or t0 < duration_s):
        for rate, dur in stages:
            t = gamma(rng, rate, cv, duration_s=dur)
            t = t[t < dur] + t0
            parts.append(t)
            count += len(t)
            t0 += dur
            if (n is not None and count >= n) or (duration_s is not None and t0 >= duration_s):
                break
    t = np.concatenate(parts) if parts else np.zeros(0)
    return t[:n] if n is not None else t[t <= duration_s]


def replay(times_s: np.ndarray, rate: float | None, n: int | None = None, duration_s: float | None = None,
           offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Replay a trace's arrival pattern from row ``offset``, wrapping around at its end.

    ``rate`` rescales time so the mean rate is ``rate`` (None keeps the trace's own times). Returns
    (arrival times, trace row of each arrival), so lengths can be taken from the same rows.
    """
    m = len(times_s)
    gaps = np.diff(times_s)
    # The gap that closes the loop (last row -> first row of the next pass): the trace's mean gap.
    wrap = float(gaps.mean()) if m > 1 and gaps.mean() > 0 else 1.0
    gaps = np.concatenate([gaps, [wrap]])
    scale = 1.0
    if rate is not None:
        mean_gap = float(gaps.mean())
        scale = 1.0 / (rate * mean_gap) if mean_gap > 0 else 1.0
    if n is None:
        per_pass = gaps.sum() * scale
        n = int(math.ceil(duration_s / per_pass * m)) + m if per_pass > 0 else m
    rows = (offset + np.arange(n)) % m
    g = gaps[(rows - 1) % m] * scale  # gap before each row
    t = np.concatenate([[0.0], np.cumsum(g[1:])])
    if duration_s is not None:
        keep = t <= duration_s
        t, rows = t[keep], rows[keep]
    return t, rows
