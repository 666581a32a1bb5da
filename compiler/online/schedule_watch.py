"""Watching a plan with a ``schedule`` (``trimtab watch``; docs/online.md, "Schedules"): the window the clock
is in is the plan. Its static plan (``trimtab.gate.windows.window_plan``: the window's replicas and routes)
and its spec (``trimtab.spec.rates.window_spec``: each workload at the window's rate) are watched by a
``Watcher`` as a static plan is; at a window boundary a new one takes over, so the rates and replicas the
schedule changes on purpose are not read as drift. Only the replicas the window runs are scraped (the others
are scaled down by the schedule's cron triggers, not failed), and the first interval of a window, which mixes
both windows' traffic, is not tested (the new watcher's first scrape only starts its intervals). Proposals
keep one numbering over the windows.

Windows are placed on the clock as ``trimtab emit`` places them (``trimtab.deploy.autoscale``: the period from
midnight UTC, window ``t`` from ``t x window_s``): the time of the period is UTC epoch seconds modulo the
period (windows x window_s), unless ``time_of_period`` says otherwise.
"""
from __future__ import annotations

import time

from trimtab.errors import InputError, Problem
from trimtab.online.watch import Watcher
from trimtab.gate.windows import window_plan
from trimtab.spec.rates import window_rates, window_spec


def _utc_time_of_period(period_s: int):
    return lambda _now: time.time() % period_s


class ScheduleWatcher:
    """``step`` and ``proposals`` as ``Watcher``'s, for a plan with a schedule (module docstring)."""

    def __init__(self, plan, spec, targets, *, out_dir, time_of_period=None, **kwargs):
        self.plan, self.spec, self.targets, self.out_dir, self.kwargs = plan, spec, targets, out_dir, kwargs
        self.sched = plan.schedule
        self.wr = window_rates(spec)
        if self.wr.n != len(self.sched.windows) or self.wr.window_s != self.sched.window_s:
            raise InputError([Problem("schedule", f"the plan has {len(self.sched.windows)} windows of "
                                                  f"{self.sched.window_s} s, the spec {self.wr.n} of "
                                                  f"{self.wr.window_s} s: was the plan made from another "
                                                  "spec?")], "plan")
        self.period_s = len(self.sched.windows) * self.sched.window_s
        self.time_of_period = time_of_period or _utc_time_of_period(self.period_s)
        self.window: int | None = None
        self.watcher: Watcher | None = None
        self.proposals: list = []

    def window_at(self, now: float) -> int:
        return int(self.time_of_period(now) % self.period_s // self.sched.window_s)

    def _enter(self, t: int) -> None:
        plan = window_plan(self.plan, t)
        running = {d.name: d.replicas for d in plan.deployments}
        targets = [x for x in self.targets if x.replica < running.get(x.deployment, 0)]
        old = self.watcher
        w = Watcher(plan, window_spec(self.spec, self.wr, t), targets, out_dir=self.out_dir, **self.kwargs)
        w.proposals = self.proposals  # one numbering (proposal-NNN) over the windows
        if old is not None:  # an endpoint failing across the boundary keeps its count
            w.fails = {u: n for u, n in old.fails.items() if any(x.url == u for x in targets)}
        self.window, self.watcher = t, w

    def step(self, now: float | None = None):
        now = (self.kwargs.get("clock") or time.monotonic)() if now is None else now
        t = self.window_at(now)
        entered = t != self.window
        if entered:
            self._enter(t)
        obs = self.watcher.step(now=now)
        w = self.sched.windows[t]
        if entered:
            hhmm = f"{w.start_s // 3600:02d}:{w.start_s % 3600 // 60:02d}"
            obs.notes.insert(0, f"schedule window {t} (from {hhmm} UTC, {sum(w.replicas.values())} "
                                "replica(s)) is the plan now: its rates and replicas are the reference")
        return obs
