"""Token-length distributions: from a spec's ``TokenDist`` to a deterministic sample grid, then to buckets.

A distribution becomes ``GRID`` quantiles at probabilities (k + 0.5) / GRID, so the same spec always gives
the same numbers (no random sampling). Buckets split a workload's input lengths at quantiles and output
lengths likewise, so short and long requests can be served by different candidates.
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from statistics import NormalDist

from compiler.spec.schema import TokenDist

GRID = 2000
_NORMAL = NormalDist()
INPUT_SPLITS = (0.5, 0.9)  # quantiles where input lengths are cut into buckets
OUTPUT_SPLITS = (0.8,)


class LengthError(ValueError):
    """A distribution that cannot be turned into lengths (bad samples file, empty column...)."""


def quantile_grid(dist: TokenDist, base_dir: str = ".") -> np.ndarray:
    """Sorted float array of GRID token counts (each >= 1) following ``dist``."""
    u = (np.arange(GRID) + 0.5) / GRID
    kind = dist.kind
    if kind == "fixed":
        x = np.full(GRID, float(dist.fixed))
    elif kind == "uniform":
        d = dist.uniform
        x = d.min + u * (d.max - d.min)
    elif kind == "lognormal":
        d = dist.lognormal
        if d.median is not None:
            mu = math.log(d.median)
            sigma = (math.log(d.p99) - mu) / _NORMAL.inv_cdf(0.99)
        else:
            mu, sigma = d.mu, d.sigma
        # Lognormal quantiles: exp(mu + sigma z_u), with z_u the standard normal quantile (stdlib: importing
        # scipy.stats would cost a second of start-up on every command).
        x = np.exp(mu + sigma * np.array([_NORMAL.inv_cdf(p) for p in u]))
    elif kind == "histogram":
        d = dist.histogram
        w = np.asarray(d.weights, float) / sum(d.weights)
        cdf = np.concatenate([[0.0], np.cumsum(w)])
        idx = np.clip(np.searchsorted(cdf, u, side="right") - 1, 0, len(w) - 1)
        lo, hi = np.asarray(d.edges[:-1], float)[idx], np.asarray(d.edges[1:], float)[idx]
        frac = (u - cdf[idx]) / np.where(w[idx] > 0, w[idx], 1.0)
        x = lo + np.clip(frac, 0, 1) * (hi - lo)
    else:
        x = np.sort(read_samples(Path(base_dir) / dist.samples.path, dist.samples.column))
        x = np.quantile(x, u, method="inverted_cdf")
    return np.maximum(1.0, np.round(np.sort(x)))


def grid_of(samples: np.ndarray) -> np.ndarray:
    """GRID quantiles of observed token counts (a samples column, a trace's lengths)."""
    u = (np.arange(GRID) + 0.5) / GRID
    x = np.quantile(np.sort(np.asarray(samples, float)), u, method="inverted_cdf")
    return np.maximum(1.0, np.round(np.sort(x)))


def read_samples(path: Path, column: str) -> np.ndarray:
    try:
        fh = open(path, newline="", encoding="utf-8")
    except OSError as exc:
        raise LengthError(f"cannot read samples file {path}: {exc.strerror}") from None
    with fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames is None or column not in reader.fieldnames:
            raise LengthError(f"{path}: no column {column!r} (columns: {', '.join(reader.fieldnames or [])})")
        vals = []
        for lineno, row in enumerate(reader, start=2):
            try:
                v = float(row[column])
            except (TypeError, ValueError):
                raise LengthError(f"{path}:{lineno}: {column}={row[column]!r} is not a number") from None
            if not math.isfinite(v) or v < 1:
                raise LengthError(f"{path}:{lineno}: {column}={row[column]!r} is not a positive token count")
            vals.append(v)
    if not vals:
        raise LengthError(f"{path}: column {column!r} has no rows")
    return np.asarray(vals)


@dataclass(frozen=True, slots=True)
class LengthBucket:
    """A slice of a workload's requests with similar input and output lengths."""

    name: str
    prob: float  # share of the workload's requests
    isl_mean: float
    isl_cv2: float  # squared coefficient of variation of input length inside the bucket
    isl_tail: float  # input length used for the TTFT percentile (see docs/cost-model.md)
    isl_max: float
    isl_min: float
    osl_mean: float
    osl_max: float


def _cuts(x: np.ndarray, splits: tuple[float, ...]) -> list[tuple[int, int]]:
    """Index ranges [a, b) of the sorted grid, merged where a cut would make an empty or degenerate bucket."""
    idx = sorted({int(round(s * len(x))) for s in splits})
    bounds = [0] + [i for i in idx if 0 < i < len(x)] + [len(x)]
    ranges = [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]
    merged: list[tuple[int, int]] = []
    for a, b in ranges:
        if merged and x[a] == x[b - 1] == x[merged[-1][1] - 1]:
            merged[-1] = (merged[-1][0], b)  # a slice holding only the previous slice's top value
        else:
            merged.append((a, b))
    return merged


def make_buckets(isl: np.ndarray, osl: np.ndarray, percentile: float) -> tuple[LengthBucket, ...]:
    """Cross the input and output quantile slices (inputs and outputs are taken as independent)."""
    p = percentile / 100.0
    isl_p = float(np.quantile(isl, p, method="inverted_cdf"))
    out = []
    for ia, ib in _cuts(isl, INPUT_SPLITS):
        xi = isl[ia:ib]
        for oa, ob in _cuts(osl, OUTPUT_SPLITS):
            xo = osl[oa:ob]
            mean = float(xi.mean())
            tail = min(float(np.quantile(xi, p, method="inverted_cdf")), max(isl_p, float(xi[0])))
            out.append(LengthBucket(
                name=f"in{int(xi[0])}-{int(xi[-1])}_out{int(xo[0])}-{int(xo[-1])}",
                prob=(ib - ia) / len(isl) * (ob - oa) / len(osl),
                isl_mean=mean,
                isl_cv2=float(xi.var() / mean**2),
                isl_tail=tail,
                isl_max=float(xi[-1]),
                isl_min=float(xi[0]),
                osl_mean=float(xo.mean()),
                osl_max=float(xo[-1]),
            ))
    return tuple(out)
