"""A schedule simulated over time (docs/online.md, "Transitions"): consecutive windows as one run of the one
event loop (``trimtab.sim.engine.Simulation.run``), the rate changing at window boundaries and the fleet
following the schedule.

    sim = ScheduleSimulation(held, segments, events, seed).run()
    summarise(sim, span=(a, b))          # the requests arriving in [a, b): one window's part, its first
    minutes

* **Arrivals** are non-homogeneous: one segment per window (``Segment``), each drawn as that window's static
  scenario draws them (its rates, burstiness and routes; ``trimtab.sim.engine.draw_arrivals``) and shifted to
  its start. Within a segment the process is the window's renewal process; at a boundary it restarts.
* **Replicas** are the fleet held (every deployment of the plan at its most replicas); which of them serve
  follows the schedule (``ScaleEvent``). A replica added for a window becomes available when its start-up ends
  (a start issued ``lead_s`` before the boundary and taking ``startup_s``); a replica removed at a boundary
  takes no new request from then on and drains the ones it holds (queued and running).
* **Routing**: a request goes to a serving replica (``least_request``) of the deployment its window routes it
  to; with none serving (the deployment's first replica is still starting) it waits at the router and is
  dispatched, in arrival order, to the first replica that comes up. Nothing is migrated between replicas.

Simulate stage: it reads scenarios (``trimtab.sim.scenario``) and imports no planner.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from trimtab.sim.engine import Arrivals, Simulation, draw_arrivals, least_request
from trimtab.sim.replica import Request
from trimtab.sim.scenario import Scenario


@dataclass(frozen=True)
class Segment:
    """Arrivals in [start_s, end_s) drawn from ``scenario`` (a window's rates, burstiness and routes; its
    deployments are the held scenario's, in the same order, so deployment indices agree)."""

    start_s: float
    end_s: float
    scenario: Scenario


@dataclass(frozen=True)
class ScaleEvent:
    """At ``t_s`` replica ``index`` of deployment ``dep`` starts serving (``up``) or stops taking requests and
    drains (not ``up``)."""

    t_s: float
    dep: int
    index: int
    up: bool


def scale_events(counts: list[list[int]], boundaries: list[float], startup_s: list[float],
                 lead_s: list[float]) -> tuple[list[list[int]], list[ScaleEvent]]:
    """The replicas serving at time 0 per deployment, and the events that follow: ``counts[k][d]`` replicas of
    deployment ``d`` in segment ``k`` (``boundaries[k - 1]`` its start); replicas ``counts[k-1][d] ..
    counts[k][d] - 1`` come up at boundary - lead + startup (never before time 0), those above
    ``counts[k][d]`` drain from the boundary. Replicas are numbered so that the lowest serve longest (as
    ``trimtab.gate.windows.window_plan`` keeps the first ones)."""
    events: list[ScaleEvent] = []
    for k in range(1, len(counts)):
        b = boundaries[k - 1]
        for d, (was, now) in enumerate(zip(counts[k - 1], counts[k])):
            for i in range(now, was):
                events.append(ScaleEvent(b, d, i, False))
            for i in range(was, now):
                events.append(ScaleEvent(max(b - lead_s[d] + startup_s[d], 0.0), d, i, True))
    events.sort(key=lambda e: (e.t_s, e.up, e.dep, e.index))
    return [list(range(n)) for n in counts[0]], events


class ScheduleSimulation(Simulation):
    """One run over consecutive windows (module docstring). ``held``: the scenario of the fleet held (replicas
    = the most at once); ``segments``: the windows' arrivals; ``serving``: per deployment, the replica indices
    serving at time 0; ``events``: what changes after (``scale_events``)."""

    replicas_apart = False  # a scale event dispatches waiting requests by the replicas' active requests

    def __init__(self, held: Scenario, segments: list[Segment], serving: list[list[int]],
                 events: list[ScaleEvent], seed: int = 0, timeline: bool = False):
        self.segments = segments
        self._serving_at_0 = serving
        self._scale = events
        super().__init__(held, seed, duration_s=segments[-1].end_s, timeline=timeline)
        self.serving = [[self.replicas[d][i] for i in idx] for d, idx in enumerate(serving)]
        self.pending: list[deque] = [deque() for _ in self.replicas]  # requests waiting for a first replica
        for e in events:
            self.events.push(e.t_s, e)

    def _draw_arrivals(self, requests, duration_s) -> Arrivals:
        """One segment per window, each drawn from its own scenario and shifted to its start."""
        parts = []
        for s in self.segments:
            a = draw_arrivals(s.scenario, self.rng, None, s.end_s - s.start_s)
            keep = a.t < s.end_s - s.start_s
            parts.append(Arrivals(a.t[keep] + s.start_s, a.w[keep], a.isl[keep], a.osl[keep], a.dep[keep],
                                  a.row[keep] if a.row is not None else None))
        cat = [np.concatenate([getattr(p, f) for p in parts]) for f in ("t", "w", "isl", "osl", "dep")]
        rows = np.concatenate([p.row for p in parts]) if all(p.row is not None for p in parts) else None
        return Arrivals(*cat, rows)

    def _on_event(self, t: float, item) -> None:
        """A scale event (``ScaleEvent``) or, as in every simulation, the end of a replica's step."""
        if not isinstance(item, ScaleEvent):
            super()._on_event(t, item)
            return
        rep = self.replicas[item.dep][item.index]
        group = self.serving[item.dep]
        if not item.up:
            if rep in group:
                group.remove(rep)
            return
        if rep not in group:
            group.append(rep)
            group.sort(key=lambda r: r.index)
        heap = self.events.heap
        if heap and heap[0][0] == t and isinstance(heap[0][2], ScaleEvent) and heap[0][2].up \
                and heap[0][2].dep == item.dep:
            return  # another replica of it comes up at the same instant: the waiting requests go to both
        waiting = self.pending[item.dep]
        while waiting:
            self._dispatch(waiting.popleft(), item.dep, t)

    def _admit(self, r: Request, d: int, cap: int, t: float) -> None:
        """As ``Simulation._admit``, among the replicas serving now; with none serving, wait at the router."""
        if self._turned_away(r, d, cap):
            return
        if not self.serving[d]:
            self.pending[d].append(r)
            return
        self._dispatch(r, d, t)

    def _dispatch(self, r: Request, d: int, t: float) -> None:
        rep = least_request(self.serving[d], self._route + r.rid)
        rep.enqueue(r)
        self._kick(rep, t)
