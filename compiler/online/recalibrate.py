"""Calibration from the field (``trimtab watch --calibrate``; docs/online.md, "Watching a deployment"): the
engines' measured time per output token and first-token time against the cost model's prediction at the
traffic measured, moving the engine profile's two overheads within stated bounds.

    updates = recalibrate(plan, spec_at_measured_rates, {"chat": (ttft_hist, tpot_hist)}, out_dir)

* ``step_overhead_ms`` from TPOT: each engine step emits one token per decoding request, so the mean TPOT is
  the mean step time and a step overhead more or less moves it by as much
  (``trimtab.cost.model.ReplicaModel.evaluate``). The evidence is the **mean** TPOT (exact: the histogram's
  sum over count) against the model's at percentile 50 (its mean), per workload with at least ``MIN_REQUESTS``
  requests, where the two differ by more than ``Z`` standard errors of the measured mean (the histogram's
  variance, ``Hist.variance``). The update is the request-weighted mean difference of those workloads.
* ``request_overhead_ms`` from TTFT, after the step overhead moved (a step's time is in every prefill too):
  the measured **median** TTFT (``histogram_quantile``) against the model's at percentile 50, where the
  prediction lies outside the median's confidence interval as the buckets resolve it: from the bucket that
  holds rank n/2 - Z sqrt(n)/2 to the one that holds rank n/2 + Z sqrt(n)/2 (the order statistics' normal
  bounds; inside it, neither the sample nor the buckets can tell the two apart).

The measurements are the watcher's steady intervals (``steady``, pooled by ``SteadyIntervals``: no request
waiting for admission, no batch growing or draining), and the prediction is made at the rate measured over
those intervals: past an engine's capacity the latencies hold a growing queue, not an overhead.

Bounds: one update moves a parameter by at most ``MAX_MOVE`` of the measured quantity it explains (a burst of
other load on a shared machine cannot rewrite the profile at once), and never outside ``BOUNDS``. Each update
is appended, with its evidence, to ``out_dir/calibration.jsonl``; the profile is written to
``out_dir/profiles/engines/<engine>.yaml`` with a ``watch_fit`` source naming it, and added to the profile
directories (``trimtab.profiles.loader.use_profile_dirs``), so the next re-plan and check in this process use
it.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path

from trimtab.online.metrics import REQUESTS, TTFT, Series
from trimtab.field.loadtest import predicted_at
from trimtab.ir.lower import workload_rate
from trimtab.profiles.loader import EngineProfile, profile_dirs, use_profile_dirs
from trimtab.spec.load import spec_profiles
from trimtab.util.yamlio import dump_canonical

STEADY = 4  # the evidence: the steady intervals among the last STEADY x windows
STEADY_Z = 3.0  # standard deviations of a stable queue's change in one interval (``steady``)
MIN_REQUESTS = 30  # per workload in the evidence (the normal bounds of the tests above need no fewer)
Z = 3.0  # standard errors of the measured mean TPOT a difference must exceed
MAX_MOVE = 0.5  # share of the measured quantity one update may move a parameter by
BOUNDS = {"step_overhead_ms": (0.0, 200.0), "request_overhead_ms": (0.0, 10_000.0)}


def steady(e: Series) -> bool:
    """One endpoint's interval ``e`` (a window's Series) as an engine within its capacity serves: no request
    waiting for admission at either scrape (its admission limit -- batch slots, token budget, KV -- reached),
    and its count of requests in the engine moved by no more than ``STEADY_Z`` standard deviations of a stable
    queue's (the interval's arrivals and finished requests, each Poisson-like: sqrt(arrived + finished)). An
    engine past its capacity grows its batch or its queue interval after interval, and one draining a backlog
    shrinks them: the latencies of either are the backlog's history, which no per-request or per-step
    overhead explains."""
    done = e.counters.get(REQUESTS, 0.0)
    return e.waiting <= 0 and abs(e.in_engine) <= STEADY_Z * math.sqrt(max(1.0, e.arrivals + done))


class SteadyIntervals:
    """The calibration's evidence (``trimtab.online.watch.Watcher``): per deployment, its steady intervals
    (``steady`` at every endpoint) among the last ``STEADY`` x ``windows`` rounds, each kept only where the
    interval before it was steady too (a request finishing in one may have arrived in the one before, and
    queued behind its backlog): (round, Series, requests, requests expected at the reference)."""

    def __init__(self, windows: int):
        self.keep = STEADY * windows
        self.per: dict[str, deque] = {}
        self.last: dict[str, int] = {}  # per deployment, the last round its interval was steady

    def add(self, d: str, rnd: int, ok: bool, tot: Series, n: float, expected: float) -> None:
        if ok and self.last.get(d) == rnd - 1:
            self.per.setdefault(d, deque(maxlen=self.keep)).append((rnd, tot, n, expected))
        if ok:
            self.last[d] = rnd

    def drop(self, d: str | None = None) -> None:
        """Forget deployment ``d``'s intervals (all with None): taken at a reference or on replicas gone."""
        if d is None:
            self.per = {}
        else:
            self.per.pop(d, None)

    def measured(self, groups: dict, ref: dict, pre_of: dict, rnd: int) -> tuple[dict, dict[str, float]]:
        """Per workload, its deployments' TTFT and TPOT histograms pooled over their intervals here, and its
        rate over them (its reference times the group's measured factor there), at which the cost model's
        prediction is compared. ``groups``: name -> (workloads, deployments); ``ref``: (workload, deployment)
        -> reference rate; ``pre_of``: decode deployments with prefill sides, whose TTFT is two engines' and
        not one profile's overhead (left out)."""
        out, rates = {}, {}
        recent = rnd - self.keep
        rows = {d: [x for x in xs if x[0] > recent] for d, xs in self.per.items()}
        for ws, deps in groups.values():
            n = sum(k for d in deps for _, _, k, _ in rows.get(d, ()))
            mu = sum(e for d in deps for _, _, _, e in rows.get(d, ()))
            if mu <= 0 or n <= 0 or any(d in pre_of for d in deps):
                continue
            for w in ws:
                tot = Series()
                for d in sorted({dd for (ww, dd) in ref if ww == w}):
                    for _, s, _, _ in rows.get(d, ()):
                        tot = tot.plus(s)
                out[w] = (tot.hists.get(TTFT), tot.tpot)
                rates[w] = sum(v for (ww, _), v in ref.items() if ww == w) * n / mu
        return out, rates


@dataclass(frozen=True)
class Evidence:
    workload: str
    requests: int
    measured_ms: float
    predicted_ms: float
    rate_rps: float | None = None  # the workload's, measured with the latencies: the prediction's


@dataclass(frozen=True)
class Update:
    engine: str
    parameter: str
    old: float
    new: float
    measured: str  # "mean TPOT" or "median TTFT"
    evidence: list[Evidence]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["evidence"] = [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in asdict(e).items()}
                         for e in self.evidence]
        d["old"], d["new"] = round(self.old, 3), round(self.new, 3)
        return d


def _move(name: str, old: float, diffs: list[tuple[float, float, float]]) -> float:
    """``old`` + the request-weighted mean of the differences [(requests, measured, predicted)], moved at most
    MAX_MOVE of the weighted measured value and kept within BOUNDS[name]."""
    n = sum(w for w, _, _ in diffs)
    delta = sum(w * (m - p) for w, m, p in diffs) / n
    cap = MAX_MOVE * sum(w * m for w, m, _ in diffs) / n
    lo, hi = BOUNDS[name]
    return min(hi, max(lo, old + max(-cap, min(cap, delta))))


def _write(engine, values: dict[str, float], note: str, out_dir: Path) -> Path:
    prof = engine.model_dump(mode="json", exclude_none=True)
    prof["sources"] = {**prof.get("sources", {}), "watch_fit": {"kind": "fit", "ref": note}}
    for k, v in values.items():
        prof[k] = {"value": round(v, 3), "source": "watch_fit"}
    EngineProfile.model_validate(prof)  # refuse to write what the loader would reject
    root = out_dir / "profiles"
    (root / "engines").mkdir(parents=True, exist_ok=True)
    (root / "engines" / f"{engine.name}.yaml").write_text(dump_canonical(prof), encoding="utf-8")
    dirs = tuple(d for d in profile_dirs() if Path(d) != root)
    use_profile_dirs(dirs + (root,))
    return root


def recalibrate(plan, spec, measured: dict, out_dir: str | Path) -> list[Update]:
    """``measured``: workload -> (TTFT histogram, TPOT histogram) over the watcher's steady intervals;
    ``spec`` at the rates measured over them. The updates made (none without evidence); module docstring."""
    if plan.engine is None:
        return []
    name = plan.engine.name
    out = Path(out_dir)
    engine = spec_profiles(spec).engines.get(name)  # the user's own engine profile, where the spec names one
    if engine is None:
        return []
    updates: list[Update] = []
    values: dict[str, float] = {}
    today = _dt.date.today().isoformat()

    rate = {w.name: workload_rate(w, spec.base_dir) for w in spec.workloads}
    pred = predicted_at(plan, spec, 50.0)
    ev, diffs = [], []
    for w, (_, tp) in sorted(measured.items()):
        if tp is None or tp.count < MIN_REQUESTS or w not in pred or not math.isfinite(pred[w][1]):
            continue
        m, p = tp.mean * 1e3, pred[w][1]
        se = math.sqrt(max(tp.variance(), 0.0) / tp.count) * 1e3
        if abs(m - p) > Z * se:
            ev.append(Evidence(w, int(tp.count), m, p, rate.get(w)))
            diffs.append((tp.count, m, p))
    if diffs:
        old = engine.step_overhead_ms.value
        values["step_overhead_ms"] = _move("step_overhead_ms", old, diffs)
        updates.append(Update(name, "step_overhead_ms", old, values["step_overhead_ms"], "mean TPOT", ev))
        _write(engine, values, f"trimtab watch ({today}): mean TPOT measured vs predicted", out)
        pred = predicted_at(plan, spec, 50.0)  # with the step overhead moved
    ev, diffs = [], []
    for w, (tt, _) in sorted(measured.items()):
        if tt is None or tt.count < MIN_REQUESTS or w not in pred or not math.isfinite(pred[w][0]):
            continue
        m, p = tt.quantile(0.5) * 1e3, pred[w][0]
        half = Z * math.sqrt(tt.count) / 2
        lo, hi = _bucket(tt, tt.count / 2 - half)[0], _bucket(tt, tt.count / 2 + half)[1]
        if not lo * 1e3 <= p <= hi * 1e3:
            ev.append(Evidence(w, int(tt.count), m, p, rate.get(w)))
            diffs.append((tt.count, m, p))
    if diffs:
        old = engine.request_overhead_ms.value
        values["request_overhead_ms"] = _move("request_overhead_ms", old, diffs)
        new = values["request_overhead_ms"]
        updates.append(Update(name, "request_overhead_ms", old, new, "median TTFT", ev))
    if updates:
        note = (f"trimtab watch ({today}): " + "; ".join(
            f"{u.parameter} {u.old:.3g} -> {u.new:.3g} ms from {u.measured} of "
            + ", ".join(f"{e.workload} ({e.requests} requests: {e.measured_ms:.1f} measured, "
                        f"{e.predicted_ms:.1f} predicted)" for e in u.evidence) for u in updates))
        _write(engine, values, note, out)
        with (out / "calibration.jsonl").open("a", encoding="utf-8") as f:
            for u in updates:
                f.write(json.dumps(u.to_dict(), sort_keys=True) + "\n")
    return updates


def _bucket(h, rank: float) -> tuple[float, float]:
    """The bounds of the bucket of histogram ``h`` that holds the observation of ``rank`` (1-based)."""
    lo = 0.0
    for b, c in zip(h.bounds, h.cum):
        if c >= rank:
            return lo, b
        lo = b
    return lo, math.inf
