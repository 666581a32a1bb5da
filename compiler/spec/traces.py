"""Request traces: arrival times and token lengths read from real serving logs.

Entry point: ``read_trace(path, fmt, columns=None) -> Trace``. Formats:

* ``azure``: the Azure LLM inference trace CSV, columns ``TIMESTAMP, ContextTokens, GeneratedTokens``;
  ``TIMESTAMP`` is a wall-clock time such as ``2023-11-16 18:15:46.6805900`` (7 fractional digits in the
  2023 files, ``+00:00`` offsets in the 2024 ones).
* ``mooncake``: the Mooncake JSONL trace, one object per line with ``timestamp`` (ms from the trace start),
  ``input_length``, ``output_length`` and ``hash_ids`` (one id per 512-token prefix block: requests that share
  a prompt prefix share the ids of its blocks; kept in ``Trace.hash_ids`` for prefix reuse, see below).
* ``csv``: a plain CSV with a header naming the columns ``timestamp`` (seconds, or ISO wall-clock times),
  ``input_tokens`` and ``output_tokens``; other names can be given with ``columns``.

Every row is checked. A malformed row (a missing column, a number that does not parse, a negative or zero
input length, a time going backwards) is reported with its line number, all of them at once, as
``InputError``: a trace is never silently truncated or reordered. Output lengths of 0 (failed requests in the
Azure 2024 files) are counted as 1 token.

Prefix reuse (docs/prefix-caching.md): ``prefix_stats(trace)`` measures, in arrival order with an unbounded
cache, the share of input tokens served from the prefix cache and the working set (distinct blocks x block
tokens); ``prefix_hit_curve(trace, capacities)`` the share an LRU cache of each size gets; ``BlockLRU`` is
that cache, which the simulator keeps per replica.
"""
from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from collections import OrderedDict
from functools import lru_cache

import numpy as np

from trimtab.errors import InputError, Problem

FORMATS = ("azure", "mooncake", "csv")
CSV_COLUMNS = {"timestamp": "timestamp", "input": "input_tokens", "output": "output_tokens"}
MAX_PROBLEMS = 20  # rows listed before "... and N more"
# Mooncake's hash block (FAST'25 release README; hash_ids has ceil(input / 512) ids)
PREFIX_BLOCK_TOKENS = 512


@dataclass(frozen=True)
class Trace:
    """Requests in file order: arrival seconds from the first request, input and output tokens."""

    source: str
    times_s: np.ndarray  # float64, non-decreasing, starts at 0
    input_tokens: np.ndarray  # int64 >= 1
    output_tokens: np.ndarray  # int64 >= 1
    # per row, prefix-block ids (Mooncake); None: not given
    hash_ids: tuple[tuple[int, ...], ...] | None = None

    def __len__(self) -> int:
        return len(self.times_s)

    @property
    def span_s(self) -> float:
        return float(self.times_s[-1] - self.times_s[0]) if len(self) else 0.0

    @property
    def rate_rps(self) -> float:
        """Mean arrival rate: (n - 1) gaps over the span; 0 when every request arrives at once."""
        return (len(self) - 1) / self.span_s if self.span_s > 0 else 0.0


class _Rows:
    """Collects parsed rows and per-line problems."""

    def __init__(self, path: str):
        self.path = path
        self.t: list[float] = []
        self.i: list[int] = []
        self.o: list[int] = []
        self.h: list[tuple[int, ...]] = []
        self.problems: list[Problem] = []
        self.bad = 0

    def problem(self, line: int, msg: str) -> None:
        self.bad += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(Problem("", msg, self.path, line))

    def add(self, line: int, t: float, isl, osl, hashes: tuple[int, ...] | None = None) -> bool:
        try:
            i = _int(isl)
        except ValueError:
            return self.problem(line, f"input length {isl!r} is not a whole number")
        try:
            o = _int(osl)
        except ValueError:
            return self.problem(line, f"output length {osl!r} is not a whole number")
        if not math.isfinite(t):
            return self.problem(line, f"timestamp {t!r} is not finite")
        if i < 1:
            return self.problem(line, f"input length {i} is not a positive token count")
        if o < 0:
            return self.problem(line, f"output length {o} is negative")
        if self.t and t < self.t[-1]:
            return self.problem(line, f"timestamp goes backwards ({t:.6f} s after {self.t[-1]:.6f} s on an "
                                      "earlier row); sort the trace by time")
        self.t.append(t)
        self.i.append(i)
        self.o.append(max(o, 1))
        if hashes is not None:
            self.h.append(hashes)
        return True

    def finish(self) -> Trace:
        if self.bad > len(self.problems):
            self.problems.append(Problem("", f"... and {self.bad - len(self.problems)} "
                                             "more malformed rows", self.path))
        if not self.t and not self.problems:
            self.problems.append(Problem("", "the trace has no requests", self.path))
        if self.problems:
            raise InputError(self.problems, "trace")
        t = np.asarray(self.t, float)
        hashes = tuple(self.h) if self.h and len(self.h) == len(self.t) else None
        return Trace(self.path, t - t[0], np.asarray(self.i, np.int64), np.asarray(self.o, np.int64), hashes)


def _int(v) -> int:
    if isinstance(v, bool):
        raise ValueError(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        if not v.is_integer():
            raise ValueError(v)
        return int(v)
    s = str(v).strip()
    f = float(s)  # accepts "12" and "12.0"
    if not math.isfinite(f) or not f.is_integer():
        raise ValueError(v)
    return int(f)


def _open(path: Path):
    try:
        return open(path, newline="", encoding="utf-8")
    except OSError as exc:
        raise InputError([Problem("", f"cannot read trace: {exc.strerror}", str(path))], "trace") from None


def _csv(path: Path, cols: dict[str, str], timefn) -> Trace:
    rows = _Rows(str(path))
    with _open(path) as fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            raise InputError([Problem("", "the trace is empty (no header "
                                          "row)", str(path), 1)], "trace") from None
        header = [h.strip() for h in header]
        missing = [c for c in cols.values() if c not in header]
        if missing:
            raise InputError([Problem("", f"no column {', '.join(repr(m) for m in missing)} in the header "
                                          f"(columns: {', '.join(header)})", str(path), 1)], "trace")
        it, ii, io = (header.index(cols[k]) for k in ("timestamp", "input", "output"))
        for row in reader:
            line = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue  # blank line
            if len(row) != len(header):
                rows.problem(line, f"{len(row)} fields, the header has {len(header)}")
                continue
            try:
                t = timefn(row[it].strip())
            except ValueError:
                rows.problem(line, f"timestamp {row[it]!r} does not parse")
                continue
            rows.add(line, t, row[ii], row[io])
    return rows.finish()


def _wallclock(s: str) -> float:
    """Seconds since the epoch of an ISO-like wall-clock time (naive times are taken as UTC)."""
    d = datetime.fromisoformat(s)
    if d.tzinfo is None:
        return (d - datetime(1970, 1, 1)).total_seconds()
    return d.timestamp()


def _seconds(s: str) -> float:
    """Seconds (a number), or an ISO wall-clock time."""
    try:
        return float(s)
    except ValueError:
        return _wallclock(s)


def _mooncake(path: Path) -> Trace:
    rows = _Rows(str(path))
    with _open(path) as fh:
        for line, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            try:
                d = json.loads(text)
            except json.JSONDecodeError as exc:
                rows.problem(line, f"not a JSON object ({exc.msg})")
                continue
            if not isinstance(d, dict):
                rows.problem(line, "not a JSON object")
                continue
            missing = [k for k in ("timestamp", "input_length", "output_length") if k not in d]
            if missing:
                rows.problem(line, f"missing {', '.join(missing)}")
                continue
            ts = d["timestamp"]
            if isinstance(ts, bool) or not isinstance(ts, (int, float)):
                rows.problem(line, f"timestamp {ts!r} is not a number (ms)")
                continue
            hashes = None
            if "hash_ids" in d:
                h = d["hash_ids"]
                if not isinstance(h, list) or any(isinstance(x, bool) or not isinstance(x, int) for x in h):
                    rows.problem(line, "hash_ids is not a list of whole numbers")
                    continue
                hashes = tuple(h)
            rows.add(line, float(ts) / 1000.0, d["input_length"], d["output_length"], hashes)
    return rows.finish()


def read_trace(path: str | Path, fmt: str, columns: dict[str, str] | None = None) -> Trace:
    """Read a trace file; ``InputError`` listing every malformed row (up to MAX_PROBLEMS) with its line."""
    path = Path(path)
    if fmt == "azure":
        return _csv(path, {"timestamp": "TIMESTAMP", "input": "ContextTokens", "output": "GeneratedTokens"},
                    _wallclock)
    if fmt == "mooncake":
        return _mooncake(path)
    if fmt == "csv":
        return _csv(path, {**CSV_COLUMNS, **(columns or {})}, _seconds)
    raise InputError([Problem("--trace-format", f"unknown trace format {fmt!r}; known: "
                                                f"{', '.join(FORMATS)}")], "trace")


# ---------------------------------------------------------------------------------------------- prefix reuse
@dataclass(frozen=True)
class PrefixStats:
    """Prefix reuse of a trace, measured in arrival order with an unbounded cache."""

    hit_rate: float  # share of input tokens served from the cache
    working_set_tokens: int  # distinct blocks x block tokens: what the cache must hold for hit_rate
    input_tokens: int
    hit_tokens: int
    requests: int
    block_tokens: int = PREFIX_BLOCK_TOKENS


def cached_tokens(hit_blocks: int, isl: int, block: int = PREFIX_BLOCK_TOKENS) -> int:
    """Input tokens a request reuses when its first ``hit_blocks`` blocks are cached: at most isl - 1, because
    the engine computes at least the last prompt token to produce the first output token (vLLM does the
    same)."""
    return max(min(hit_blocks * block, isl - 1), 0)


class BlockLRU:
    """A prefix cache of ``capacity_tokens`` (whole blocks) with least-recently-used eviction, as vLLM's
    automatic prefix caching and SGLang's radix cache keep it. ``serve(hashes, isl)`` returns the tokens a
    request reuses (its leading blocks found in the cache: a prefix match stops at the first miss), then
    caches all its blocks as the most recently used. ``capacity_tokens=None``: unbounded."""

    __slots__ = ("cap", "blocks", "block")

    def __init__(self, capacity_tokens: float | None, block: int = PREFIX_BLOCK_TOKENS):
        self.block = block
        self.cap = None if capacity_tokens is None else int(capacity_tokens // block)
        self.blocks: OrderedDict[int, None] = OrderedDict()

    def serve(self, hashes: tuple[int, ...], isl: int) -> int:
        blocks = self.blocks
        if self.cap == 0:
            return 0
        hit = 0
        for h in hashes:
            if h not in blocks:
                break
            hit += 1
        for h in hashes:
            if h in blocks:
                blocks.move_to_end(h)
            else:
                blocks[h] = None
        if self.cap is not None:
            while len(blocks) > self.cap:
                blocks.popitem(last=False)
        return cached_tokens(hit, isl, self.block)


def _require_hashes(trace: Trace) -> tuple[tuple[int, ...], ...]:
    if trace.hash_ids is None:
        raise InputError([Problem("", "the trace has no hash_ids (prefix-block hashes); prefix reuse can "
                                      "only be measured from a Mooncake-format trace that has "
                                      "them", trace.source)], "trace")
    return trace.hash_ids


def prefix_stats(trace: Trace) -> PrefixStats:
    """Hit rate with an unbounded cache and the working set (distinct blocks), in arrival order."""
    hashes = _require_hashes(trace)
    lru = BlockLRU(None)
    hit = 0
    for hs, isl in zip(hashes, trace.input_tokens.tolist()):
        hit += lru.serve(hs, isl)
    total = int(trace.input_tokens.sum())
    return PrefixStats(hit / total if total else 0.0, len(lru.blocks) * PREFIX_BLOCK_TOKENS, total, hit,
                       len(trace))


def prefix_hit_curve(trace: Trace, capacities_tokens) -> tuple[float, ...]:
    """Share of input tokens an LRU prefix cache of each size (tokens) serves, replaying the trace in arrival
    order; non-decreasing in the size and at most ``prefix_stats(trace).hit_rate``."""
    hashes = _require_hashes(trace)
    isl = trace.input_tokens.tolist()
    total = float(sum(isl)) or 1.0
    out = []
    for cap in capacities_tokens:
        lru = BlockLRU(cap)
        out.append(sum(lru.serve(hs, n) for hs, n in zip(hashes, isl)) / total)
    return tuple(out)


def curve_sizes(working_set_tokens: int, points: int = 12) -> tuple[int, ...]:
    """Cache sizes at which the planner samples a trace's LRU curve: the working set halved down to one block
    (at most ``points`` sizes), ascending."""
    sizes = []
    s = float(working_set_tokens)
    while s >= PREFIX_BLOCK_TOKENS and len(sizes) < points:
        sizes.append(int(s // PREFIX_BLOCK_TOKENS) * PREFIX_BLOCK_TOKENS)
        s /= 2
    return tuple(sorted(set(sizes)))


@lru_cache(maxsize=16)
def measured_prefix(path: str, mtime_ns: int, size: int) -> tuple[PrefixStats, tuple[tuple[int, float], ...]]:
    """``prefix_stats`` and the LRU curve at ``curve_sizes`` of a Mooncake trace file, cached per file version
    (plan, check and the simulator lower the same spec several times in one process)."""
    tr = read_trace(path, "mooncake")
    st = prefix_stats(tr)
    sizes = curve_sizes(st.working_set_tokens)
    return st, tuple(zip(sizes, prefix_hit_curve(tr, sizes)))
