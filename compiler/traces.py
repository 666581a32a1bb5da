"""Request traces: arrival times and token lengths read from real serving logs.

Entry point: ``read_trace(path, fmt, columns=None) -> Trace``. Formats:

* ``azure``: the Azure LLM inference trace CSV, columns ``TIMESTAMP, ContextTokens, GeneratedTokens``;
  ``TIMESTAMP`` is a wall-clock time such as ``2023-11-16 18:15:46.6805900`` (7 fractional digits in the
  2023 files, ``+00:00`` offsets in the 2024 ones).
* ``mooncake``: the Mooncake JSONL trace, one object per line with ``timestamp`` (ms from the trace start),
  ``input_length``, ``output_length`` and ``hash_ids`` (prefix-block hashes; read past, not used).
* ``csv``: a plain CSV with a header naming the columns ``timestamp`` (seconds, or ISO wall-clock times), ``input_tokens`` and
  ``output_tokens``; other names can be given with ``columns``.

Every row is checked. A malformed row (a missing column, a number that does not parse, a negative or zero input
length, a time going backwards) is reported with its line number, all of them at once, as ``InputError``: a
trace is never silently truncated or reordered. Output lengths of 0 (failed requests in the Azure 2024 files)
are counted as 1 token.
"""
from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from compiler.errors import InputError, Problem

FORMATS = ("azure", "mooncake", "csv")
CSV_COLUMNS = {"timestamp": "timestamp", "input": "input_tokens", "output": "output_tokens"}
MAX_PROBLEMS = 20  # rows listed before "... and N more"


@dataclass(frozen=True)
class Trace:
    """Requests in file order: arrival seconds from the first request, input and output tokens."""

    source: str
    times_s: np.ndarray  # float64, non-decreasing, starts at 0
    input_tokens: np.ndarray  # int64 >= 1
    output_tokens: np.ndarray  # int64 >= 1

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
        self.problems: list[Problem] = []
        self.bad = 0

    def problem(self, line: int, msg: str) -> None:
        self.bad += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(Problem("", msg, self.path, line))

    def add(self, line: int, t: float, isl, osl) -> None:
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
            return self.problem(line, f"timestamp goes backwards ({t:.6f} s after {self.t[-1]:.6f} s on an earlier row); "
                                      "sort the trace by time")
        self.t.append(t)
        self.i.append(i)
        self.o.append(max(o, 1))

    def finish(self) -> Trace:
        if self.bad > len(self.problems):
            self.problems.append(Problem("", f"... and {self.bad - len(self.problems)} more malformed rows", self.path))
        if not self.t and not self.problems:
            self.problems.append(Problem("", "the trace has no requests", self.path))
        if self.problems:
            raise InputError(self.problems, "trace")
        t = np.asarray(self.t, float)
        return Trace(self.path, t - t[0], np.asarray(self.i, np.int64), np.asarray(self.o, np.int64))


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
            raise InputError([Problem("", "the trace is empty (no header row)", str(path), 1)], "trace") from None
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
            rows.add(line, float(ts) / 1000.0, d["input_length"], d["output_length"])
    return rows.finish()


def read_trace(path: str | Path, fmt: str, columns: dict[str, str] | None = None) -> Trace:
    """Read a trace file; ``InputError`` listing every malformed row (up to MAX_PROBLEMS) with its line."""
    path = Path(path)
    if fmt == "azure":
        return _csv(path, {"timestamp": "TIMESTAMP", "input": "ContextTokens", "output": "GeneratedTokens"}, _wallclock)
    if fmt == "mooncake":
        return _mooncake(path)
    if fmt == "csv":
        return _csv(path, {**CSV_COLUMNS, **(columns or {})}, _seconds)
    raise InputError([Problem("--trace-format", f"unknown trace format {fmt!r}; known: {', '.join(FORMATS)}")], "trace")
