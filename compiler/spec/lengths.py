"""Token-length distributions: from a spec's ``TokenDist`` to a deterministic sample grid, then to buckets.

A distribution becomes ``GRID`` quantiles at probabilities (k + 0.5) / GRID, so the same spec always gives
the same numbers (no random sampling). Buckets split a workload's input lengths at quantiles and output
lengths never (a router cannot see them), so short and long prompts can be served by different candidates.
"""
from __future__ import annotations

import csv
import hashlib
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
from statistics import NormalDist

from trimtab.spec.schema import TokenDist, Workload
from trimtab.spec.traces import read_trace

GRID = 2000
_NORMAL = NormalDist()
# quantiles where input lengths are cut into buckets (routable prompt-length ranges)
INPUT_SPLITS = (0.5, 0.9)
# quantiles bounding LengthBucket.osl_points
OUTPUT_SLICES = (0.0, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0)


class LengthError(ValueError):
    """A distribution that cannot be turned into lengths (bad samples file, empty column...)."""


@cache
def _normal_grid() -> np.ndarray:
    """The standard normal quantiles of the grid's points, computed once (every simulation and lowering of a
    lognormal length needs them; read-only)."""
    u = (np.arange(GRID) + 0.5) / GRID
    z = np.array([_NORMAL.inv_cdf(p) for p in u])
    z.setflags(write=False)
    return z


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
        x = np.exp(mu + sigma * _normal_grid())
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
    """A range of prompt lengths of one workload, with the output lengths of the requests in it.

    Buckets cut input lengths only: a router sees a request's prompt at admission, never its output length
    (docs/routing.md). The output statistics are those of the requests in the range, each output cut where
    input + output would exceed the context window (``cut_outputs``)."""

    name: str
    prob: float  # share of the workload's requests
    isl_mean: float
    isl_cv2: float  # squared coefficient of variation of input length inside the bucket
    isl_tail: float  # input length used for the TTFT percentile (see docs/cost-model.md)
    isl_max: float
    isl_min: float
    osl_mean: float  # mean output length of the requests in the range (after the context cut)
    osl_max: float
    # ((mean output length, probability), ...) over slices of the output distribution, finer at short outputs
    # (whose TPOT is the noisiest): the cost model's TPOT tail mixes them (TrafficClass.osl_points)
    osl_points: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True, slots=True)
class Truncation:
    """What fitting a workload's (input, output) pairs into a context window cuts."""

    requests: float  # share of requests with their prompt or their output cut
    tokens: float  # share of all requested tokens (input + output) cut


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


def input_ranges(isl: np.ndarray) -> list[tuple[int, int]]:
    """The grid index ranges of a workload's routable prompt-length ranges (one bucket each)."""
    return _cuts(isl, INPUT_SPLITS)


def bucket_name(isl: np.ndarray, a: int, b: int) -> str:
    return f"in{int(isl[a])}-{int(isl[b - 1])}"


def capped_output_mean(osl: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """E[min(O, cap)] for each cap, O uniform over the sorted grid ``osl``: O(n log n) with prefix sums."""
    cs = np.concatenate([[0.0], np.cumsum(osl)])
    k = np.searchsorted(osl, cap, side="left")  # outputs below the cap keep their length
    return (cs[k] + (len(osl) - k) * cap) / len(osl)


def cut_inputs(isl: np.ndarray, ctx: int) -> np.ndarray:
    """Prompts cut to the context window (one token left for the output)."""
    return np.minimum(isl, ctx - 1)


def cut_outputs(isl_cut: np.ndarray | int, osl: np.ndarray | int, ctx: int):
    """Outputs cut only where prompt + output exceeds the window (at least one token)."""
    return np.maximum(1, np.minimum(osl, ctx - isl_cut))


# Results of ``truncation`` and ``make_buckets`` by the value of their arguments (``by_value``)
_BY_VALUE: dict = {}
BY_VALUE_MAX = 4096  # entries kept before the memo starts afresh


def by_value(fn):
    """``fn(isl, osl, *numbers)`` remembered by the value of its arguments (the grids by dtype, shape and a
    digest of their bytes): a plan lowers the same workloads once for the spec and again for each GPU type
    alone (``trimtab.planning.driver.single_types``), and these two are most of a lowering's time. Exact: they
    are functions of those values alone and return frozen objects, handed out again as they are."""
    def remembered(isl: np.ndarray, osl: np.ndarray, *numbers, **named):
        grids = []
        for a in (isl, osl):
            a = np.ascontiguousarray(a)
            grids.append((a.dtype.str, a.shape, hashlib.blake2b(a.tobytes(), digest_size=20).digest()))
        key = (fn.__name__, *grids, numbers, tuple(sorted(named.items())))
        got = _BY_VALUE.get(key)
        if got is None:
            if len(_BY_VALUE) >= BY_VALUE_MAX:
                _BY_VALUE.clear()
            got = _BY_VALUE[key] = fn(isl, osl, *numbers, **named)
        return got

    remembered.__doc__, remembered.__name__, remembered.__wrapped__ = fn.__doc__, fn.__name__, fn
    return remembered


@by_value
def truncation(isl: np.ndarray, osl: np.ndarray, ctx: int) -> Truncation:
    """Shares of requests and of tokens cut when inputs and outputs pair independently (every input grid point
    with every output grid point, as the simulator draws them)."""
    isl_c = cut_inputs(isl, ctx)
    cap = (ctx - isl_c).astype(float)
    kept_out = capped_output_mean(osl, cap)  # per input: mean output kept
    cut_out = float(np.mean(osl)) - kept_out
    n_over = len(osl) - np.searchsorted(osl, cap, side="right")  # outputs beyond the cap, per input
    req = np.where(isl >= ctx, 1.0, n_over / len(osl))
    total = float(np.mean(isl)) + float(np.mean(osl))
    cut = float(np.mean(isl - isl_c)) + float(np.mean(cut_out))
    return Truncation(float(np.mean(req)), cut / total if total else 0.0)


@by_value
def make_buckets(isl: np.ndarray, osl: np.ndarray, percentile: float, ctx: int | None = None
                 ) -> tuple[LengthBucket, ...]:
    """Slice the sorted input grid (already cut to the window) into prompt-length ranges; each range's outputs
    are every output paired with every prompt in it (inputs and outputs are taken as independent), cut to the
    window pair by pair. ``ctx`` None: no window."""
    p = percentile / 100.0
    isl_p = float(np.quantile(isl, p, method="inverted_cdf"))
    out = []
    for ia, ib in input_ranges(isl):
        xi = isl[ia:ib]
        mean = float(xi.mean())
        tail = min(float(np.quantile(xi, p, method="inverted_cdf")), max(isl_p, float(xi[0])))
        points = []
        for a, b in _cuts(osl, OUTPUT_SLICES[1:-1]):
            kept = (osl[a:b].mean() if ctx is None
                    else capped_output_mean(osl[a:b], (ctx - xi).astype(float)).mean())
            points.append((float(kept), (b - a) / len(osl)))
        osl_mean = sum(o * q for o, q in points)
        osl_max = float(osl[-1] if ctx is None else cut_outputs(xi[0], osl[-1], ctx))
        out.append(LengthBucket(
            name=bucket_name(isl, ia, ib),
            prob=(ib - ia) / len(isl),
            isl_mean=mean,
            isl_cv2=float(xi.var() / mean**2),
            isl_tail=tail,
            isl_max=float(xi[-1]),
            isl_min=float(xi[0]),
            osl_mean=osl_mean,
            osl_max=osl_max,
            osl_points=tuple(points),
        ))
    return tuple(out)


def length_grids(w: Workload, base_dir: str = ".") -> tuple[np.ndarray, np.ndarray]:
    """A workload's input and output length grids: from its distributions, or from its trace's lengths.
    Raises LengthError, or InputError for a malformed trace."""
    tr = None
    if w.trace is not None and (w.input_tokens is None or w.output_tokens is None):
        tr = read_trace(Path(base_dir) / w.trace.path, w.trace.format)
    isl = quantile_grid(w.input_tokens, base_dir) if w.input_tokens is not None else grid_of(tr.input_tokens)
    osl = (quantile_grid(w.output_tokens, base_dir) if w.output_tokens is not None
           else grid_of(tr.output_tokens))
    return isl, osl


def scaled_tokens(dist: TokenDist, f: float) -> TokenDist | None:
    """``dist`` with every length multiplied by ``f`` (its shape kept: a measured mean against the planned
    one; ``trimtab watch``), or None for ``samples`` (a file's column, not rescaled here)."""
    def n(x: float) -> int:
        return max(1, int(round(x * f)))

    if dist.fixed is not None:
        return TokenDist(fixed=n(dist.fixed))
    if dist.uniform is not None:
        return TokenDist(uniform={"min": n(dist.uniform.min), "max": max(n(dist.uniform.min),
                                                                         n(dist.uniform.max))})
    if dist.lognormal is not None:
        ln = dist.lognormal
        if ln.median is not None:
            return TokenDist(lognormal={"median": ln.median * f, "p99": ln.p99 * f})
        return TokenDist(lognormal={"mu": ln.mu + math.log(f), "sigma": ln.sigma})
    if dist.histogram is not None:
        edges = [int(round(e * f)) for e in dist.histogram.edges]
        for i in range(1, len(edges)):  # rounding must not merge two edges
            edges[i] = max(edges[i], edges[i - 1] + 1)
        return TokenDist(histogram={"edges": edges, "weights": list(dist.histogram.weights)})
    return None


def rescaled_lengths(spec, factors: dict[tuple[str, str], float]):
    """``spec`` with workload w's input (output) lengths scaled by ``factors[(w, "prompt" ("output"))]``
    (``scaled_tokens``: the shape kept, the mean moved to the measured one; ``trimtab watch``); a ``samples``
    distribution or a trace's lengths are kept as they are."""
    ws = []
    for w in spec.workloads:
        upd = {}
        for what, attr in (("prompt", "input_tokens"), ("output", "output_tokens")):
            f = factors.get((w.name, what), 1.0)
            dist = getattr(w, attr)
            if dist is not None and abs(f - 1.0) > 1e-9:
                new = scaled_tokens(dist, f)
                if new is not None:
                    upd[attr] = new
        ws.append(w.model_copy(update=upd) if upd else w)
    if all(a is b for a, b in zip(ws, spec.workloads)):
        return spec
    out = spec.model_copy(update={"workloads": ws})
    out._base_dir = spec.base_dir
    return out
