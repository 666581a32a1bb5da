"""Watching a running deployment and proposing the next mapping (``trimtab watch``; docs/online.md,
"Watching a deployment").

    targets = targets_for(plan, ["chat-h100-sxm-tp4-t8k=http://10.0.0.5:8000"])
    w = Watcher(plan, spec, targets, out_dir="proposals")
    obs = w.step()  # one scrape of every endpoint, the tests, and a Proposal when one is due

Each step scrapes every endpoint (``trimtab.online.metrics``), adds each deployment's interval (requests and
histograms of its live endpoints) to its recent ``windows`` intervals, and runs the tests of
``trimtab.online.drift``: a rate change per group, a length-mix change per deployment, an SLO at risk per
workload. A group is a set of workloads that share deployments (the plan's routes connect them) with those
deployments: an engine counts requests per served model, not per workload, so a group is the finest unit whose
rate the metrics measure, and a change declared on it scales every deployment of the group alike (a workload's
rate moves all the deployments its routes split it over). An endpoint that fails ``dead_after`` scrapes in a
row is a failed replica (``replica=DEP/INDEX`` for ``trimtab.online.replan``). A change, a risk or a new
failure makes a proposal: ``replan`` from the running plan with the measured rates (only the groups whose rate
test rejected move off their reference) and the failures, checked (``trimtab.api.check``: simulated at unused
seeds, or the cost model with ``analytic``), written with its manifests (``trimtab emit --to k8s``) to
``out_dir/proposal-NNN``. Hysteresis: after a proposal the rate references become the proposal's rates (the
same change is not declared twice) and no proposal follows within ``min_lifetime`` intervals unless a replica
newly failed; a proposal whose moves and failures equal the last one's is not repeated.
"""
from __future__ import annotations

import json
import math
import time
from collections import deque
from pathlib import Path

import httpx

from trimtab.errors import InputError, Problem, TrimtabError
from trimtab.online import drift
from trimtab.online.proposal import Observation, Proposal, kubectl_apply
from trimtab.online.recalibrate import SteadyIntervals, recalibrate, steady
from trimtab.online.roles import FirstToken, prefill_of, route_refs
from trimtab.online.targets import Target, targets_for  # noqa: F401 (targets_for: part of this API)
from trimtab.online.metrics import (OUTPUT_LEN, PROMPT_LEN, QUERY, REQUESTS, TTFT, Series, Snapshot, parse,
                                    query_snapshots, window)
from trimtab.api import check
from trimtab.contract.write import emit
from trimtab.util.graph import components
from trimtab.deploy import render, write
from trimtab.field.loadtest import rescaled_spec
from trimtab.gate.analytic import plan_references
from trimtab.ir.lower import lower, workload_rate
from trimtab.online.replan import HORIZON_H, replan
from trimtab.spec.lengths import rescaled_lengths

SCRAPE_TIMEOUT_S = 5.0
DEAD_AFTER = 2  # failed scrapes in a row that make an endpoint a failed replica (one may be a hiccup)
MIN_LIFETIME = 6  # intervals after a proposal before the next one (a new failure excepted)


def _refuse(plan) -> None:
    if plan.schedule is not None:
        why = ("the plan is a schedule over windows; Watcher compares a static plan's rates "
               "(trimtab.online.schedule_watch.ScheduleWatcher watches a schedule window by window)")
        raise InputError([Problem("schedule", why)], "plan")


def _r(x: float, nd: int = 4):
    return None if x is None or not math.isfinite(x) else round(x, nd)


class Watcher:
    """The state of ``trimtab watch`` between steps (module docstring)."""

    def __init__(self, plan, spec, targets: list[Target], *, out_dir: str | Path, alpha: float = drift.ALPHA,
                 windows: int = drift.WINDOWS, min_lifetime: int = MIN_LIFETIME, dead_after: int = DEAD_AFTER,
                 analytic: bool = False, horizon_h: float | None = None, max_moves: int | None = None,
                 apply: bool = False, calibrate: bool = False, prometheus: str | None = None, client=None,
                 clock=time.monotonic, replan_kwargs: dict | None = None):
        _refuse(plan)
        foreign = plan_references(plan, lower(spec))
        if foreign:
            raise InputError(foreign, "plan")
        if not 0 < alpha < 1:
            raise InputError([Problem("--alpha", f"must be in (0, 1), got {alpha}")], "arguments")
        self.plan, self.spec, self.targets = plan, spec, targets
        self.out_dir, self.alpha, self.windows = Path(out_dir), alpha, max(1, windows)
        self.min_lifetime, self.dead_after, self.analytic = min_lifetime, max(1, dead_after), analytic
        self.horizon_h, self.max_moves, self.apply, self.calibrate = horizon_h, max_moves, apply, calibrate
        self.replan_kwargs = dict(replan_kwargs or {})
        self.client = client or httpx.Client(timeout=SCRAPE_TIMEOUT_S)
        self.clock = clock
        # a Prometheus server's query API instead of the engines (targets' url: their instance labels)
        self.prometheus = prometheus.rstrip("/") if prometheus else None
        self.queried: dict | None = None  # this step's answer, per instance
        self.wl = {w.name: w for w in spec.workloads}
        self.spec_rate = {w.name: workload_rate(w, spec.base_dir) for w in spec.workloads}
        self.replicas = {d.name: d.replicas for d in plan.deployments}
        self.roles = {d.name: d.role for d in plan.deployments}
        # reference rate of each workload on each deployment its requests end on (unified, or a pair's decode
        # side: trimtab.online.roles), and on prefill sides (reported, not tested): what the plan routes
        # there, then each proposal's
        self.ref, self.pre_ref = route_refs(plan, self.spec_rate)
        self.pre_of = prefill_of(plan)
        self.ref0 = dict(self.ref)
        self.last: dict[str, Snapshot] = {}
        self.fails: dict[str, int] = {}
        self.errors: dict[str, str] = {}
        self.hist: dict[str, deque] = {d: deque(maxlen=self.windows) for d in self.replicas}
        # per deployment, its recent intervals: (round, requests, seconds, Series of all, [Series per
        # endpoint])
        self._group()
        self.round = 0
        self.proposals: list[Proposal] = []
        self.last_round = -10 ** 9
        self.last_key = None
        self.known_failed: set[str] = set()
        self.calibrated: list[dict] = []  # the last proposal attempt's calibration updates
        self.repeated = False  # the last re-plan repeated the last proposal
        self.short: set[tuple[str, int]] = set()  # (deployment, round) whose count misses an endpoint
        self.labels: dict[str, deque] = {}  # deployment -> recent (seconds, {model_name: requests})
        self.declared: dict[str, int] = {}  # group -> the last round its rate change was declared
        self.len_factor: dict[tuple[str, str], float] = {}  # (workload, prompt|output) -> re-fit so far
        self.len_changes: dict[str, list] = {}  # this step's length changes per group
        self.steady = SteadyIntervals(self.windows)  # the evidence --calibrate reads

    def _group(self) -> None:
        """Connected components of the routes' workload-deployment graph (module docstring); ``since``: the
        round from which each group's intervals count (moved past a proposal: the test starts over)."""
        self.groups = {}
        for members in components(("w:" + w, "d:" + d) for w, d in self.ref):
            ws = sorted(m[2:] for m in members if m.startswith("w:"))
            self.groups["+".join(ws)] = (ws, sorted(m[2:] for m in members if m.startswith("d:")))
        self.since = {g: getattr(self, "since", {}).get(g, 0) for g in self.groups}

    # ------------------------------------------------------------------ scraping
    def _query(self, now: float) -> str:
        """One instant query of the Prometheus server for every target (``trimtab.online.metrics.QUERY``);
        the error, or "" with ``self.queried`` set."""
        try:
            r = self.client.get(f"{self.prometheus}/api/v1/query", params={"query": QUERY})
            if r.status_code != 200:
                raise ValueError(f"HTTP {r.status_code}")
            self.queried = query_snapshots(r.json(), now)
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            self.queried = None
            return f"{type(exc).__name__}: {exc}"[:200]
        return ""

    def _scrape(self, t: Target, now: float | None) -> Snapshot | None:
        """``now``: the time the step is for (a replay's clock); None: each endpoint's counters are dated when
        it answered (the midpoint of the request), since an engine under load can take seconds to render them
        and a window dated by the step's start would then cover more than its seconds."""
        try:
            if self.prometheus:
                if t.url not in self.queried:
                    raise ValueError(f"no series of instance {t.url} on {self.prometheus}")
                snap = self.queried[t.url]
                if snap is None:
                    raise ValueError(f"Prometheus' scrape of {t.url} failed (up 0)")
            else:
                sent = self.clock() if now is None else now
                r = self.client.get(t.url)
                if r.status_code != 200:
                    raise ValueError(f"HTTP {r.status_code}")
                snap = parse(r.text, (sent + self.clock()) / 2 if now is None else now)
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            self.fails[t.url] = self.fails.get(t.url, 0) + 1
            self.errors[t.url] = f"{type(exc).__name__}: {exc}"[:200]
            return None
        self.fails[t.url] = 0
        self.errors.pop(t.url, None)
        return snap

    def failed(self) -> list[str]:
        return sorted(f"replica={t.deployment}/{t.replica}" for t in self.targets
                      if self.fails.get(t.url, 0) >= self.dead_after)

    # ------------------------------------------------------------------ references
    def _dep_ref(self, d: str) -> float:
        return sum(v for (_, dd), v in self.ref.items() if dd == d)

    def _watched_share(self, d: str) -> float:
        """Share of deployment ``d``'s traffic its live watched endpoints see (a router spreads it over the
        live replicas, the dead ones' share included)."""
        mine = [t for t in self.targets if t.deployment == d]
        live = [t for t in mine if self.fails.get(t.url, 0) < self.dead_after]
        dead = len(mine) - len(live)
        up = self.replicas.get(d, 0) - dead
        return len(live) / max(up, len(live)) if live else 0.0

    def _planned_means(self, d: str) -> tuple[float, float]:
        buckets = {(w, b.name): b for w, bs in self.plan.buckets.items() for b in bs}
        wsum = p = o = 0.0
        for r in self.plan.routes:
            b = buckets.get((r.workload, r.bucket))
            if d not in (r.deployment, r.decode, r.prefill) or b is None:
                continue
            wt = self.spec_rate[r.workload] * r.share
            wsum, p, o = wsum + wt, p + wt * b.input_tokens_mean, o + wt * b.output_tokens_mean
        return (p / wsum, o / wsum) if wsum > 0 else (math.nan, math.nan)

    # ------------------------------------------------------------------ one step
    def step(self, now: float | None = None) -> Observation:
        at = now
        now = self.clock() if now is None else now
        obs = Observation(self.round, now)
        if self.prometheus:
            err = self._query(now)
            if err:  # the server, not an engine, did not answer: no replica is judged by it
                obs.notes.append(f"Prometheus server {self.prometheus}: {err}; this step is skipped")
                obs.failed, obs.errors = self.failed(), dict(sorted(self.errors.items()))
                self.round += 1
                return obs
        per_dep: dict[str, list] = {}
        for t in self.targets:
            snap = self._scrape(t, at)
            if snap is None:
                continue
            prev = self.last.get(t.url)
            self.last[t.url] = snap
            if prev is not None:
                per_dep.setdefault(t.deployment, []).append(window(prev, snap))
        # An interval in which an endpoint of a deployment did not answer lost the requests it served since
        # its last scrape (an engine that died mid-interval; one failing, not yet declared dead): its count is
        # short, so the rate test skips it.
        for t in self.targets:
            f = self.fails.get(t.url, 0)
            if f == 1 or 1 <= f < self.dead_after:
                self.short.add((t.deployment, self.round))
        self.short = {(d, r) for d, r in self.short if r > self.round - self.windows}
        for d, wins in per_dep.items():
            eps = [w.total() for w in wins]
            tot = Series()
            for e in eps:
                tot = tot.plus(e)
            n = (tot.arrivals if REQUESTS in tot.counters
                 else tot.hists[TTFT].count if TTFT in tot.hists else 0.0)
            sec = sum(w.seconds for w in wins) / len(wins)
            self.hist.setdefault(d, deque(maxlen=self.windows)).append((self.round, n, sec, tot, eps))
            self.steady.add(d, self.round, self._is_steady(d, eps), tot, n,
                            self._dep_ref(d) * self._watched_share(d) * sec)
            per_label: dict[str, float] = {}  # served model or adapter -> requests (reported, not tested)
            for w in wins:
                for m, s in w.models.items():
                    per_label[m] = per_label.get(m, 0.0) + s.counters.get(REQUESTS, 0.0)
            self.labels.setdefault(d, deque(maxlen=self.windows)).append((sec, per_label))
        obs.failed, obs.errors = self.failed(), dict(sorted(self.errors.items()))
        self._deployments(obs)
        self.len_changes = {}
        changes = self._rates(obs)
        risks = self._workloads(obs)
        self._decide(obs, changes, risks)
        self.round += 1
        return obs

    def _is_steady(self, d: str, eps: list[Series]) -> bool:
        """An interval of deployment ``d`` whose latencies can calibrate the engine profile: every endpoint
        answered, and each one's interval is ``steady``."""
        live = [t for t in self.targets if t.deployment == d and self.fails.get(t.url, 0) == 0]
        return (len(eps) == len(live) and (d, self.round) not in self.short
                and all(steady(e) for e in eps))

    def _rates(self, obs: Observation) -> dict[str, drift.RateChange]:
        """The rate test per group over its recent intervals since its ``since`` round."""
        changes = {}
        for g, (ws, deps) in self.groups.items():
            per: dict[int, list[float]] = {}
            for d in deps:
                share = self._watched_share(d)
                for r, n, sec, _, _ in self.hist.get(d, ()):
                    if r >= self.since[g] and share > 0 and not any((dd, r) in self.short for dd in deps):
                        x = per.setdefault(r, [0.0, 0.0])
                        x[0] += n
                        x[1] += self._dep_ref(d) * share * sec
            if not per:
                continue
            counts = [tuple(per[r]) for r in sorted(per)]
            ch = drift.rate_test(counts, max(self.wl[w].arrival_cv or 1.0 for w in ws), self.alpha)
            ref = sum(v for (w, _), v in self.ref.items() if w in ws)
            n, mu = sum(c for c, _ in counts), sum(e for _, e in counts)
            obs.groups[g] = {"workloads": ws, "deployments": deps, "intervals": len(counts),
                             "reference_rps": _r(ref), "rate_rps": _r(ref * n / mu if mu > 0 else math.nan),
                             "rate_change": None}
            if ch is not None:
                changes[g] = ch
                obs.groups[g]["rate_change"] = {
                    "rate_rps": _r(ref * ch.factor), "factor": _r(ch.factor),
                    "since_intervals": ch.since_intervals, "p_value": float(f"{ch.p_value:.3g}"),
                    "requests": ch.requests, "expected": _r(ch.expected, 1)}
            if len(ws) == 1:  # lengths are re-fitted per workload: a group of one (module docstring)
                lens = self._length_test(g, ws[0], deps)
                obs.groups[g]["length_change"] = [
                    {"what": x.what, "planned_mean": _r(x.planned_mean, 1), "mean": _r(x.mean, 1),
                     "z": _r(x.z, 2), "requests": x.requests} for x in lens]
                if lens:
                    self.len_changes[g] = lens
        return changes

    def _length_test(self, g: str, w: str, deps: list[str]) -> list[drift.LengthChange]:
        """The prompt and output length means of workload ``w``'s deployments since the group's ``since``
        round against the plan's (times the proposals' re-fits)."""
        per: dict[int, Series] = {}
        for d in deps:
            for r, _, _, s, _ in self.hist.get(d, ()):
                if r >= self.since[g]:
                    per[r] = per.get(r, Series()).plus(s)
        rounds = [per[r] for r in sorted(per)]
        bs = self.plan.buckets.get(w, [])
        share = sum(b.share for b in bs)
        out = []
        for what, name, attr in (("prompt", PROMPT_LEN, "input_tokens_mean"),
                                 ("output", OUTPUT_LEN, "output_tokens_mean")):
            planned = (sum(b.share * getattr(b, attr) for b in bs) / share if share > 0 else math.nan)
            x = drift.length_change(what, planned * self.len_factor.get((w, what), 1.0),
                                    [s.hists.get(name) for s in rounds], self.alpha)
            if x is not None:
                out.append(x)
        return out

    def _deployments(self, obs: Observation) -> None:
        """Per deployment: its measured rate, lengths (with their test) and latencies."""
        for d in sorted(self.hist):
            h = list(self.hist[d])
            share = self._watched_share(d)
            if not h or share <= 0:
                continue
            prefill = self.roles.get(d) == "prefill"  # its output is the one prefill token
            ref = sum(v for (_, dd), v in self.pre_ref.items() if dd == d) if prefill else self._dep_ref(d)
            counts = [(n, s) for _, n, s, _, _ in h]
            tot = Series()
            for _, _, _, s, _ in h:
                tot = tot.plus(s)
            seconds = sum(s for _, s in counts)
            pm, om = self._planned_means(d)
            lens = [x for x in (drift.length_test("prompt", pm, tot.hists.get(PROMPT_LEN), self.alpha),
                                None if prefill else
                                drift.length_test("output", om, tot.hists.get(OUTPUT_LEN), self.alpha)) if x]
            by_label: dict[str, float] = {}
            for _, per in self.labels.get(d, ()):
                for m, n in per.items():
                    by_label[m] = by_label.get(m, 0.0) + n
            row = {"role": self.roles[d],
                   "rate_rps": _r(sum(n for n, _ in counts) / seconds / share if seconds > 0 else math.nan),
                   "models_rps": {m: _r(n / seconds / share) for m, n in sorted(by_label.items())
                                  if seconds > 0},
                   "reference_rps": _r(ref), "intervals": len(h), "watched_share": _r(share),
                   "prompt_mean": _r(tot.hists[PROMPT_LEN].mean, 1) if PROMPT_LEN in tot.hists else None,
                   "prompt_mean_planned": _r(pm, 1),
                   "output_mean": (_r(tot.hists[OUTPUT_LEN].mean, 1) if OUTPUT_LEN in tot.hists
                                   and not prefill else None),
                   "output_mean_planned": _r(om, 1),
                   # the distributions' shape, as histogram_quantile reads it (within the buckets' resolution)
                   "lengths_p50_p90": {k: [_r(tot.hists[h].quantile(q), 0) for q in (0.5, 0.9)]
                                       for k, h in (("prompt", PROMPT_LEN), ("output", OUTPUT_LEN))
                                       if h in tot.hists and not (prefill and k == "output")},
                   "latency": self._latency(d, tot, self._prefill_ttft(d)),
                   "length_change": [
                       {"what": x.what, "planned_mean": _r(x.planned_mean, 1), "mean": _r(x.mean, 1),
                        "z": _r(x.z, 2), "requests": x.requests} for x in lens]}
            obs.deployments[d] = row

    def _prefill_ttft(self, d: str, rnd: int | None = None):
        """The first-token times of decode deployment ``d``'s prefill sides, pooled over their endpoints, in
        round ``rnd`` (None: over the recent intervals); None for a unified deployment."""
        hs = [s.hists.get(TTFT) for p in self.pre_of.get(d, ()) for r, _, _, s, _ in self.hist.get(p, ())
              if rnd is None or r == rnd]
        hs = [h for h in hs if h is not None]
        if not hs:
            return None
        out = hs[0]
        for h in hs[1:]:
            out = out.plus(h)
        return out

    def _ttft(self, s: Series, pre):
        """A deployment's TTFT histogram as a client sees it: a decode side's plus its prefill sides'."""
        h = s.hists.get(TTFT)
        return FirstToken(pre, h) if h is not None and pre is not None else h

    def _latency(self, d: str, tot: Series, pre=None) -> dict:
        """Measured TTFT and TPOT at each routed workload's SLO percentile against the plan's prediction
        (ms); a decode side's TTFT with its prefill sides' (``trimtab.online.roles.FirstToken``)."""
        out = {}
        ttft = self._ttft(tot, pre) if d in self.pre_of else tot.hists.get(TTFT)
        for w in sorted({w for (w, dd) in self.ref if dd == d}):
            q = self.wl[w].slo.percentile / 100
            pred = self.plan.predictions.get(w)
            tp = tot.tpot
            out[w] = {"percentile": self.wl[w].slo.percentile,
                      "ttft_ms": _r(ttft.quantile(q) * 1e3, 1) if ttft is not None else None,
                      "ttft_ms_predicted": _r(pred.ttft_ms, 1) if pred and pred.ttft_ms is not None else None,
                      "tpot_ms": _r(tp.quantile(q) * 1e3, 2) if tp is not None else None,
                      "tpot_ms_predicted": _r(pred.tpot_ms, 2) if pred and pred.tpot_ms is not None else None}
        return out

    def _workloads(self, obs: Observation) -> dict[str, drift.Risk]:
        risks = {}
        for w in sorted(self.wl):
            slo = self.wl[w].slo
            per: dict[int, list] = {}  # round -> one batch per endpoint
            for d in sorted({dd for (ww, dd) in self.ref if ww == w}):
                for r, _, _, _, eps in self.hist.get(d, ()):
                    pre = self._prefill_ttft(d, r) if d in self.pre_of else None
                    if d in self.pre_of and pre is None:  # no prefill side answered: its part is unknown
                        continue
                    for s in eps:
                        ok, n = drift.met(self._ttft(s, pre), s.tpot, slo.ttft_ms / 1e3, slo.tpot_ms / 1e3)
                        if n > 0:
                            per.setdefault(r, []).append((ok, n))
            if not per:
                continue
            rk = drift.slo_risk(w, [per[r] for r in sorted(per)], slo.percentile / 100, self.alpha)
            obs.workloads[w] = {"attainment": _r(rk.attainment), "lower": _r(rk.lower), "upper": _r(rk.upper),
                                "target": rk.target, "requests": rk.requests, "at_risk": rk.at_risk,
                                "shown_over_intervals": rk.since_intervals, "upper_shown": _r(rk.upper_since)}
            if rk.at_risk:
                risks[w] = rk
        return risks

    # ------------------------------------------------------------------ proposals
    def _decide(self, obs: Observation, changes: dict, risks: dict) -> None:
        failed = obs.failed
        new_fail = sorted(set(failed) - self.known_failed)
        # A change shown by the last interval alone may have begun inside it (its rate diluted): its proposal
        # waits one interval; declared again then, the last interval is wholly after the change.
        pending = sorted(g for g, ch in changes.items()
                         if not ch.settled and self.declared.get(g) != self.round - 1)
        self.declared.update({g: self.round for g in changes})
        if pending:
            obs.notes.append(f"{', '.join(pending)}: rate change declared in the last interval; its rate is "
                             "measured over the next one before a proposal")
            changes = {g: ch for g, ch in changes.items() if g not in pending}
        lens = {g: xs for g, xs in self.len_changes.items()
                if all(x.settled for x in xs) or self.declared.get(("len", g)) == self.round - 1}
        self.declared.update({("len", g): self.round for g in self.len_changes})
        if len(lens) < len(self.len_changes):
            obs.notes.append("length change declared in the last interval; its mean is measured over the "
                             "next one before a proposal")
        idle = sorted(g for g, ch in changes.items() if ch.factor <= 0)
        if idle:  # a plan for no traffic has no replica: the reference stays until requests come again
            obs.notes.append(f"{', '.join(idle)}: no request arrived since the rate change; no re-plan "
                             "for it until requests arrive")
            changes = {g: ch for g, ch in changes.items() if g not in idle}
        if not (changes or risks or new_fail or lens):
            return
        if self.round - self.last_round < self.min_lifetime and not new_fail:
            obs.notes.append(f"a proposal was made {self.round - self.last_round} interval(s) ago; the next "
                             f"waits for {self.min_lifetime} (hysteresis)")
            return
        reasons = []
        factor = {}
        for g, ch in sorted(changes.items()):
            ws, deps = self.groups[g]
            ref = sum(v for (w, _), v in self.ref.items() if w in ws)
            factor.update({d: ch.factor for d in deps if math.isfinite(ch.factor)})
            reasons.append(f"{g}: arrival rate {ref * ch.factor:.3g} rps against {ref:.3g} rps referenced, "
                           f"shown by the last {ch.since_intervals} interval(s) (p = {ch.p_value:.2g} < "
                           f"alpha {self.alpha:g}); rate over the last {max(1, ch.since_intervals - 1)}: "
                           f"{ch.requests} requests, {ch.expected:.0f} expected, on {', '.join(deps)}")
        for w, rk in sorted(risks.items()):
            reasons.append(f"{w}: SLO at risk: over the last {rk.since_intervals} interval(s) the upper "
                           f"{1 - self.alpha / self.windows:.4%} bound of attainment is "
                           f"{rk.upper_since:.2%} < target {rk.target:.0%} (last {self.windows} intervals: "
                           f"{rk.attainment:.2%}, {rk.requests} requests)")
        for f in new_fail:
            reasons.append(f"{f.split('=', 1)[1]}: endpoint down ({self.dead_after} failed scrapes in a row)")
        len_factor = dict(self.len_factor)
        for g, xs in sorted(lens.items()):
            w = self.groups[g][0][0]
            for x in xs:
                len_factor[(w, x.what)] = len_factor.get((w, x.what), 1.0) * x.mean / x.planned_mean
                reasons.append(f"{w}: mean {x.what} length {x.mean:.0f} tokens against {x.planned_mean:.0f} "
                               f"referenced (z = {x.z:.1f}, {x.requests} requests, alpha {self.alpha:g}): "
                               f"its length distribution scaled by {x.mean / x.planned_mean:.3g}")
        ref = {k: v * factor.get(k[1], 1.0) for k, v in self.ref.items()}
        rates = {w: sum(v for (ww, _), v in ref.items() if ww == w) for w in self.wl}
        base = {w: sum(v for (ww, _), v in self.ref0.items() if ww == w) for w in self.wl}
        self.calibrated, self.repeated = [], False
        try:
            p = self._propose(reasons, rates, base, failed, risks, changes, len_factor)
        except TrimtabError as exc:  # e.g. infeasible with the GPUs left: said, and watching goes on
            obs.notes.append("re-plan failed: " + "; ".join(exc.lines))
            self.last_round = self.round
            self.known_failed = set(failed)
            return
        self.known_failed = set(failed)
        self.ref, self.len_factor = ref, len_factor
        for g in set(changes) | set(lens):  # the reference moved: the test starts over from it
            self.since[g] = self.round + 1
            for d in self.groups[g][1]:  # and the calibration's evidence, taken at the old one
                self.steady.drop(d)
        if p is None:
            where = self.out_dir / "calibration"
            obs.notes += [f"calibration: {u['parameter']} {u['old']:g} -> {u['new']:g} ms from "
                          f"{u['measured']} (evidence in {where})" for u in self.calibrated]
            if self.repeated:
                obs.notes.append("the re-plan repeats the last proposal (its moves and failures): not "
                                 "proposed again")
            else:
                hint = ("; an SLO at risk there is the model's error: --calibrate moves the engine profile "
                        "toward the measurements" if risks and not self.calibrate else "")
                obs.notes.append("re-plan at the measured traffic moves no replica: the plan's model says "
                                 "the running replicas suffice" + hint)
            self.last_round = self.round
            return
        self.last_round = self.round
        obs.proposal = p

    def _propose(self, reasons, rates, base, failed, risks, changes, len_factor) -> Proposal | None:
        factors = {w: rates[w] / base[w] for w in rates if base[w] > 0 and abs(rates[w] / base[w] - 1) > 1e-9}
        spec = rescaled_lengths(rescaled_spec(self.spec, factors), len_factor)
        cal = []
        if self.calibrate:  # before the re-plan, which then prices replicas with the moved overheads
            measured, at = self.steady.measured(self.groups, self.ref, self.pre_of, self.round)
            at_rates = {w: r / self.spec_rate[w] for w, r in at.items() if self.spec_rate[w] > 0}
            cal = recalibrate(self.plan, rescaled_lengths(rescaled_spec(self.spec, at_rates), len_factor),
                              measured, self.out_dir / "calibration")
            if cal:  # the evidence is spent: the next update needs intervals measured after this one
                self.steady.drop()
            self.calibrated = [u.to_dict() for u in cal]
            reasons = reasons + [
                f"calibration: {u.engine} {u.parameter} {u.old:.3g} -> {u.new:.3g} ms ({u.measured}: "
                + ", ".join(f"{e.workload} {e.measured_ms:.1f} measured vs {e.predicted_ms:.1f} predicted, "
                            f"{e.requests} requests" for e in u.evidence) + ")" for u in cal]
        r = replan(self.plan, spec, fail=failed, validate=not self.analytic, max_moves=self.max_moves,
                   horizon_h=self.horizon_h or HORIZON_H, **self.replan_kwargs)
        key = (tuple(sorted(r.moves.items())), tuple(failed))
        if not r.moves or key == self.last_key:
            self.repeated = bool(r.moves)
            return None
        self.last_key = key
        rep = check(r.plan, spec, analytic=self.analytic)
        now = {d.name: d.replicas - r.failure.lost_replicas.get(d.name, 0) for d in self.plan.deployments}
        new = {d.name: d.replicas for d in r.plan.deployments}
        reps = {d: (now.get(d, 0), new.get(d, 0)) for d in sorted(set(now) | set(new))
                if now.get(d, 0) != new.get(d, 0)}
        touched = {f.split("=", 1)[1].rsplit("/", 1)[0] for f in failed}
        protects = sorted(set(risks) | {w for g in changes for w in self.groups[g][0]}
                          | {w for (w, d) in self.ref if d in touched}) if rep.ok else []
        n = len(self.proposals) + 1
        folder = self.out_dir / f"proposal-{n:03d}"
        try:
            files, _ = render(r.plan, spec, "k8s")
            write(files, folder / "k8s")
            manifests = "k8s"
        except TrimtabError as exc:  # the plan stands without them (a device with no Kubernetes resource)
            manifests = "not written: " + "; ".join(exc.lines)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "plan.yaml").write_text(emit(r.plan))
        cost = (self.plan.cost_usd_per_hour, r.plan.cost_usd_per_hour)
        prop = Proposal(n, self.round, reasons, {w: rates[w] for w in sorted(rates)}, list(failed), r.moves,
                        reps, cost, r.transition_usd, rep.ok, list(rep.violations), protects, str(folder),
                        [u.to_dict() for u in cal], manifests=manifests)
        if self.apply and manifests != "k8s":
            prop.applied = f"not applied: no manifests ({manifests})"
        elif self.apply:
            prop.applied = kubectl_apply(folder / "k8s")
            if prop.applied == "applied":
                self._adopt(r.plan, rates)
        (folder / "proposal.json").write_text(json.dumps(prop.to_dict(), indent=2) + "\n")
        self.proposals.append(prop)
        return prop

    def _adopt(self, plan, rates: dict[str, float]) -> None:
        """After --apply: the proposal is what runs; its routes carry the measured rates from now on."""
        self.plan = plan
        self.replicas = {d.name: d.replicas for d in plan.deployments}
        self.roles = {d.name: d.role for d in plan.deployments}
        self.ref, self.pre_ref = route_refs(plan, rates)
        self.pre_of = prefill_of(plan)
        self.hist = {d: self.hist.get(d, deque(maxlen=self.windows)) for d in self.replicas}
        self.steady.drop()  # measured on the replicas and at the references that ran before
        # The endpoints of replicas the proposal stopped go away with them (not failures); replicas it started
        # have endpoints this watch was not given: restart it with them to watch them too.
        self.targets = [t for t in self.targets if t.replica < self.replicas.get(t.deployment, 0)]
        self.known_failed = {f for f in self.known_failed
                             if any(f == f"replica={t.deployment}/{t.replica}" for t in self.targets)}
        self._group()
