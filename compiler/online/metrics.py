"""Reading an engine's Prometheus endpoint (``trimtab watch``; docs/online.md, "Watching a deployment").

One scrape of vLLM's ``/metrics`` is parsed with ``prometheus_client``'s text parser into a ``Snapshot``: per
``model_name`` label (the served model, or a LoRA adapter) the request counter, the token counters and the
request histograms, summed over the other labels (``finished_reason``, ``engine``). Two snapshots of one
endpoint give a ``Window``: the counts and histogram buckets observed between them (a counter that went down
is an engine restart: the later value is the window's, as Prometheus' ``rate`` does).

Names are vLLM's (0.6 to 0.11, V0 and V1 engines; docs/metrics of vLLM): ``vllm:request_success_total``,
``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``, and the histograms
``vllm:time_to_first_token_seconds``, ``vllm:request_prompt_tokens``, ``vllm:request_generation_tokens`` and
one of the per-output-token ones (``TPOT_NAMES``, the first present wins), and the gauges of requests running
and waiting (``GAUGES``), whose change over a window, with the requests finished in it, gives its arrivals.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

REQUESTS = "vllm:request_success_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
TTFT = "vllm:time_to_first_token_seconds"
PROMPT_LEN = "vllm:request_prompt_tokens"
OUTPUT_LEN = "vllm:request_generation_tokens"
# Per-request mean time per output token first (the SLO's TPOT); the per-token ones observe every gap between
# two tokens, whose tail is longer than the per-request mean's, so attainment read from them is conservative.
TPOT_NAMES = ("vllm:request_time_per_output_token_seconds", "vllm:time_per_output_token_seconds",
              "vllm:inter_token_latency_seconds")
HISTOGRAMS = (TTFT, PROMPT_LEN, OUTPUT_LEN) + TPOT_NAMES
COUNTERS = (REQUESTS, PROMPT_TOKENS, GENERATION_TOKENS)
# Requests in the engine (scheduled, and waiting to be): with the finished ones, the arrivals of a window
# (``Series.arrivals``)
WAITING = "vllm:num_requests_waiting"
GAUGES = ("vllm:num_requests_running", WAITING)
LABEL = "model_name"


@dataclass(frozen=True)
class Hist:
    """A cumulative histogram: upper bounds (the last is +inf), cumulative counts, sum and count."""

    bounds: tuple[float, ...]
    cum: tuple[float, ...]
    total: float
    count: float

    def minus(self, before: Hist | None) -> Hist:
        """The observations between ``before`` and this one; all of this one after a reset or a
        re-bucketing."""
        if before is None or before.bounds != self.bounds or self.count < before.count:
            return self
        cum = tuple(a - b for a, b in zip(self.cum, before.cum))
        return Hist(self.bounds, cum, self.total - before.total, self.count - before.count)

    def plus(self, other: Hist) -> Hist:
        if other.bounds != self.bounds:  # an engine with other buckets: cannot pool, keep the larger sample
            return self if self.count >= other.count else other
        return Hist(self.bounds, tuple(a + b for a, b in zip(self.cum, other.cum)), self.total + other.total,
                    self.count + other.count)

    def share_at_most(self, x: float) -> float:
        """Share of observations <= x, linear within the bucket holding x (the assumption Prometheus'
        ``histogram_quantile`` makes); nan without observations."""
        if self.count <= 0:
            return math.nan
        lo, below = 0.0, 0.0
        for b, c in zip(self.bounds, self.cum):
            if x < b:
                if math.isinf(b):
                    # beyond the last finite bound nothing is known: counted as over
                    return below / self.count
                return (below + (c - below) * (x - lo) / (b - lo)) / self.count
            lo, below = b, c
        return 1.0

    def share_at_most_upper(self, x: float) -> float:
        """The largest share of observations that can be <= x: all of x's bucket counted (its cumulative count
        at the first bound >= x). vLLM's buckets are coarse (TTFT 1 s, 2.5 s, 5 s): interpolating inside one
        reads a bucket of requests just over 1 s as 1/3 over a 2 s SLO, so a miss is shown only beyond it."""
        if self.count <= 0:
            return math.nan
        for b, c in zip(self.bounds, self.cum):
            if x <= b:
                return c / self.count
        return 1.0

    def quantile(self, q: float) -> float:
        """``histogram_quantile``: linear within the bucket; the last finite bound when the rank is in
        +Inf."""
        if self.count <= 0:
            return math.nan
        rank = q * self.count
        lo, below = 0.0, 0.0
        for b, c in zip(self.bounds, self.cum):
            if c >= rank and c > below:
                if math.isinf(b):
                    return lo
                return lo + (b - lo) * (rank - below) / (c - below)
            lo, below = b, c
        return lo

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count > 0 else math.nan

    def variance(self) -> float:
        """Variance as if each bucket's observations were uniform inside it (its midpoint's spread around the
        exact mean, sum / count, plus width squared / 12); the +Inf bucket at its lower bound. An estimate,
        used only to scale a test of the mean (``trimtab.online.drift.length_test``): observations inside one
        bucket may be spread over all of it."""
        if self.count <= 1:
            return math.nan
        lo, below, acc = 0.0, 0.0, 0.0
        for b, c in zip(self.bounds, self.cum):
            mid, width = (lo, 0.0) if math.isinf(b) else ((lo + b) / 2, b - lo)
            acc += (c - below) * ((mid - self.mean) ** 2 + width ** 2 / 12)
            lo, below = (lo if math.isinf(b) else b), c
        return acc / (self.count - 1)


@dataclass(frozen=True)
class Series:
    """One ``model_name`` of one endpoint: counters by name, histograms by name, the requests in the engine
    (``GAUGES`` summed: a level in a snapshot, its change in a window) and those waiting for admission
    (``WAITING``: a level in a snapshot, in a window the larger of its two ends' levels)."""

    counters: dict[str, float] = field(default_factory=dict)
    hists: dict[str, Hist] = field(default_factory=dict)
    in_engine: float = 0.0
    waiting: float = 0.0

    @property
    def arrivals(self) -> float:
        """Of a window: the requests that arrived in it, those finished plus the change of those in the
        engine (conservation). An engine past its capacity finishes requests at its own pace, not at the
        arrival rate; the waiting ones it holds say what came in. Without the gauges: the finished ones.
        Never below 0: requests that left unfinished (aborted, failed) are in neither count."""
        return max(0.0, self.counters.get(REQUESTS, 0.0) + self.in_engine)

    @property
    def tpot(self) -> Hist | None:
        return next((self.hists[n] for n in TPOT_NAMES if n in self.hists), None)

    def minus(self, before: Series | None) -> Series:
        b = before or Series()
        cnt = {}
        for k, v in self.counters.items():
            was = b.counters.get(k, 0.0)
            cnt[k] = v - was if v >= was else v  # down: the engine restarted
        restarted = any(v < b.counters.get(k, 0.0) for k, v in self.counters.items())
        # a restart lost the requests it held: the level now is what arrived since (as the counters)
        return Series(cnt, {k: h.minus(b.hists.get(k)) for k, h in self.hists.items()},
                      self.in_engine - (0.0 if restarted else b.in_engine), max(self.waiting, b.waiting))

    def plus(self, other: Series) -> Series:
        cnt = {k: self.counters.get(k, 0.0) + other.counters.get(k, 0.0) for k in set(self.counters) | set(
            other.counters)}
        hists = dict(self.hists)
        for k, h in other.hists.items():
            hists[k] = hists[k].plus(h) if k in hists else h
        return Series(cnt, hists, self.in_engine + other.in_engine, self.waiting + other.waiting)


@dataclass(frozen=True)
class Snapshot:
    t: float  # when it was taken, seconds on the watcher's clock
    models: dict[str, Series]


@dataclass(frozen=True)
class Window:
    """What one endpoint served between two snapshots."""

    t0: float
    t1: float
    models: dict[str, Series]

    @property
    def seconds(self) -> float:
        return self.t1 - self.t0

    def total(self) -> Series:
        out = Series()
        for s in self.models.values():
            out = out.plus(s)
        return out


def parse(text: str, t: float) -> Snapshot:
    """The exposition text of one scrape -> Snapshot (ValueError on text that is not the exposition
    format)."""
    from prometheus_client.parser import text_string_to_metric_families  # lazy: trimtab watch's alone

    return snapshot(((s.name, s.labels, s.value) for fam in text_string_to_metric_families(text)
                     for s in fam.samples), t)


# One instant query for every series watch reads, and each target's ``up`` (a scrape Prometheus saw fail)
QUERY = '{__name__=~"up|' + "|".join(list(COUNTERS) + list(GAUGES) + [f"{h}_{x}" for h in HISTOGRAMS
                                                       for x in ("bucket", "sum", "count")]) + '"}'


def query_snapshots(data: dict, t: float) -> dict[str, Snapshot | None]:
    """A Prometheus server's ``/api/v1/query`` answer to ``QUERY`` -> per ``instance`` label its Snapshot, or
    None where the server's own scrape of it failed (``up`` 0). ValueError on any other answer."""
    if data.get("status") != "success" or data.get("data", {}).get("resultType") != "vector":
        raise ValueError(f"not an instant vector: {str(data)[:200]}")
    per: dict[str, list] = {}
    down = set()
    for r in data["data"]["result"]:
        m = r["metric"]
        inst, name, value = m.get("instance", ""), m.get("__name__", ""), float(r["value"][1])
        if name == "up":
            if value < 1:
                down.add(inst)
            continue
        per.setdefault(inst, []).append((name, m, value))
    out: dict[str, Snapshot | None] = {i: snapshot(x, t) for i, x in per.items()}
    out.update({i: None for i in down})
    return out


def snapshot(samples, t: float) -> Snapshot:
    """Samples [(name, labels, value)] of one endpoint -> Snapshot: per ``model_name``, the counters and
    histograms watch reads, summed over the other labels."""
    counters: dict[str, dict[str, float]] = {}
    level: dict[str, float] = {}
    waiting: dict[str, float] = {}
    buckets: dict[str, dict[str, dict[float, float]]] = {}
    sums: dict[str, dict[str, float]] = {}
    counts: dict[str, dict[str, float]] = {}
    for name, labels, value in samples:
        model = labels.get(LABEL, "")
        if name in COUNTERS:
            counters.setdefault(model, {}).setdefault(name, 0.0)
            counters[model][name] += value
            continue
        if name in GAUGES:
            level[model] = level.get(model, 0.0) + value
            if name == WAITING:
                waiting[model] = waiting.get(model, 0.0) + value
            continue
        base, _, suffix = name.rpartition("_")
        if base not in HISTOGRAMS:
            continue
        if suffix == "bucket":
            le = float(labels["le"])
            per = buckets.setdefault(model, {}).setdefault(base, {})
            per[le] = per.get(le, 0.0) + value
        elif suffix == "sum":
            sums.setdefault(model, {}).setdefault(base, 0.0)
            sums[model][base] += value
        elif suffix == "count":
            counts.setdefault(model, {}).setdefault(base, 0.0)
            counts[model][base] += value
    models = {}
    for model in sorted(set(counters) | set(buckets) | set(level)):
        hists = {}
        for name, per in buckets.get(model, {}).items():
            bounds = tuple(sorted(per))
            hists[name] = Hist(bounds, tuple(per[b] for b in bounds), sums.get(model, {}).get(name, 0.0),
                               counts.get(model, {}).get(name, per[bounds[-1]]))
        models[model] = Series(dict(counters.get(model, {})), hists, level.get(model, 0.0),
                               waiting.get(model, 0.0))
    return Snapshot(t, models)


def window(before: Snapshot, after: Snapshot) -> Window:
    return Window(before.t, after.t, {m: s.minus(before.models.get(m)) for m, s in after.models.items()})
