"""Rates per window: each workload's ``rate_profile`` resolved to one rate (and burstiness) per window of the
spec's ``schedule`` (docs/online.md). Foundation stage: reads the spec and files only.

    wr = window_rates(spec)        # WindowRates: .window_s, .n, .rates[w][t] (rps), .cv[w][t]
    wr.peak("chat")                # the rate a static plan is sized for

ServeGen rate files (``window_start_s, total_rate_rps, ...`` per 10 minutes, ../shared/traces/servegen) are a
shape: their 10-minute rates are averaged into the schedule's windows, optionally folded into one day (each
time of day the busiest over all days), and scaled so the busiest window is ``peak_rps``. A window with no
traffic in the file gets EMPTY_FLOOR x the peak (the planner keeps a route for every workload in every
window).
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

SERVEGEN_STEP_S = 600  # ServeGen's rate files: one row per 10 minutes
EMPTY_FLOOR = 0.01  # share of the peak a window without traffic is planned for
DAY_S = 86_400


@dataclass(frozen=True)
class WindowRates:
    window_s: int
    n: int
    rates: dict[str, tuple[float, ...]]  # per workload: rps per window
    # per workload: inter-arrival cv per window (None: the workload's)
    cv: dict[str, tuple[float | None, ...]]

    def peak(self, workload: str) -> float:
        return max(self.rates[workload])

    def at(self, t: int) -> dict[str, float]:
        return {w: r[t] for w, r in self.rates.items()}


class ProfileError(ValueError):
    """A rate profile that cannot be resolved; ``field`` names the spec path."""

    def __init__(self, field: str, msg: str):
        super().__init__(msg)
        self.field = field


def read_servegen(path: str | Path) -> list[float]:
    """The rate column of a ServeGen 10-minute rate file, in window order."""
    rows = []
    with open(path, newline="", encoding="utf-8") as f:
        for i, row in enumerate(csv.reader(f)):
            if not row or (i == 0 and not _is_number(row[0])):
                continue
            if len(row) < 2 or not _is_number(row[0]) or not _is_number(row[1]):
                raise ValueError(f"{path}:{i + 1}: expected window_start_s, rate (numbers), got {row[:2]}")
            rows.append((float(row[0]), max(0.0, float(row[1]))))
    if not rows:
        raise ValueError(f"{path}: no rate rows")
    rows.sort()
    return [r for _, r in rows]


def _is_number(s: str) -> bool:
    try:
        return math.isfinite(float(s))
    except ValueError:
        return False


def servegen_shape(rates_10min: list[float], window_s: int, fold: str) -> list[float]:
    """10-minute rates averaged into windows of ``window_s`` (a multiple of 600 s); ``fold='day'``: one day of
    windows, each the busiest of that time of day over the days in the file. Not yet scaled."""
    k = window_s // SERVEGEN_STEP_S
    wins = [sum(rates_10min[i:i + k]) / len(rates_10min[i:i + k]) for i in range(0, len(rates_10min), k)]
    if fold == "none":
        return wins
    per_day = DAY_S // window_s
    return [max(wins[t::per_day]) for t in range(min(per_day, len(wins)))]


def window_rates(spec) -> WindowRates:
    """Rates per window for every workload (constant ``rate_rps`` where a workload has no profile). Raises
    ProfileError naming the field when the profiles do not agree on the number of windows."""
    sched = spec.schedule
    window_s = sched.window_s if sched is not None else 3600
    prof: dict[str, tuple[list[float], list | None, str]] = {}
    for i, w in enumerate(spec.workloads):
        p = w.rate_profile
        if p is None:
            continue
        where = f"workloads[{i}] ({w.name}).rate_profile"
        if p.rps is not None:
            prof[w.name] = (list(p.rps), p.cv, where)
            continue
        if window_s % SERVEGEN_STEP_S or (p.fold == "day" and DAY_S % window_s):
            raise ProfileError(where + ".servegen", f"schedule.window_s ({window_s}) must divide a day and "
                                                    f"be a multiple of ServeGen's {SERVEGEN_STEP_S} s "
                                                    "windows")
        path = Path(spec.base_dir) / p.servegen
        if not path.is_file():
            raise ProfileError(where + ".servegen", f"file not found: {path}")
        try:
            shape = servegen_shape(read_servegen(path), window_s, p.fold)
        except (OSError, ValueError) as e:
            raise ProfileError(where + ".servegen", str(e)) from None
        top = max(shape)
        if top <= 0:
            raise ProfileError(where + ".servegen", f"{path}: every window is empty")
        rates = [max(r / top, EMPTY_FLOOR) * p.peak_rps for r in shape]
        if p.cv is not None and len(p.cv) != len(rates):
            raise ProfileError(where + ".cv", f"{len(p.cv)} values for the {len(rates)} "
                                              f"windows of {p.servegen}")
        prof[w.name] = (rates, p.cv, where)
    lengths = {len(r) for r, _, _ in prof.values()}
    if len(lengths) > 1:
        first = min(prof.values(), key=lambda v: len(v[0]))
        other = max(prof.values(), key=lambda v: len(v[0]))
        raise ProfileError(other[2], f"{len(other[0])} windows, but {first[2]} has {len(first[0])}; every "
                                     "rate profile covers the same windows")
    n = lengths.pop() if lengths else 1
    rates, cvs = {}, {}
    for w in spec.workloads:
        if w.name in prof:
            r, cv, _ = prof[w.name]
            rates[w.name] = tuple(round(x, 6) for x in r)
            cvs[w.name] = tuple(cv) if cv is not None else (None,) * n
        else:
            rates[w.name] = (float(w.rate_rps),) * n if w.rate_rps is not None else (None,) * n
            cvs[w.name] = (None,) * n
    return WindowRates(window_s, n, rates, cvs)


def profile_problems(spec) -> list[tuple[tuple, str, str]]:
    """(YAML path, field, message) for schedule/profile mistakes: a profile without a schedule, windows that
    do not agree, a missing ServeGen file."""
    out = []
    for i, w in enumerate(spec.workloads):
        if w.rate_profile is not None and spec.schedule is None:
            out.append((("workloads", i, "rate_profile"), f"workloads[{i}] ({w.name}).rate_profile",
                        "a rate profile needs a schedule: block (schedule: {window_s: 3600})"))
    if spec.schedule is not None and not out:
        if not any(w.rate_profile is not None for w in spec.workloads):
            out.append((("schedule",), "schedule", "no workload has a rate_profile; give one per window"))
        else:
            try:
                window_rates(spec)
            except ProfileError as e:
                idx = int(e.field.split("[", 1)[1].split("]", 1)[0])
                out.append((("workloads", idx, "rate_profile"), e.field, str(e)))
    if spec.schedule is not None and any(w.trace is not None for w in spec.workloads):
        i = next(i for i, w in enumerate(spec.workloads) if w.trace is not None)
        out.append((("workloads", i, "trace"), f"workloads[{i}].trace", "a schedule plans from rate "
                                                                        "profiles; a trace's own arrivals "
                                                                        "are not split into windows (give "
                                                                        "rate_profile instead)"))
    return out


def window_spec(spec, wr: WindowRates, t: int):
    """``spec`` as a static spec of window ``t``: each workload at its rate (and burstiness) there."""
    ws = []
    for w in spec.workloads:
        cv = wr.cv[w.name][t]
        ws.append(w.model_copy(update={"rate_rps": wr.rates[w.name][t], "rate_profile": None,
                                       "arrival_cv": cv if cv is not None else w.arrival_cv}))
    out = spec.model_copy(update={"workloads": ws, "schedule": None})
    out._base_dir = spec.base_dir
    return out
