"""The autoscaling policy that realises a schedule (docs/online.md, docs/deploy.md): KEDA cron triggers on
each deployment's ScaledObject, one per run of windows with the same replicas, starting ahead of the run by
the deployment's start-up time; ``minReplicaCount`` is the fewest replicas any window runs, and the queue
trigger stays as the reactive backstop (KEDA scales to the largest of its triggers).

Cron expressions repeat daily, so a schedule realises this way when its period is one day (windows x window_s
= 86,400 s); for any other period ``cron_triggers`` returns None and the ScaledObject keeps the held replicas
as its minimum (a static plan), which ``trimtab emit`` states as a warning.
"""
from __future__ import annotations

import math

DAY_S = 86_400
TIMEZONE = "Etc/UTC"


def _cron(minute_of_day: int) -> str:
    m = minute_of_day % (DAY_S // 60)
    return f"{m % 60} {m // 60} * * *"


def min_replicas(schedule, deployment: str) -> int:
    return min(w.replicas.get(deployment, 0) for w in schedule.windows)


def cron_triggers(schedule, deployment: str, startup_s: float) -> list[dict] | None:
    """KEDA ``cron`` triggers (start, end, desiredReplicas) for the windows where ``deployment`` runs more
    than its minimum, started ``startup_s`` ahead (the one start-up model,
    ``trimtab.deploy.common.Target.startup_s``); None when the period is not one day."""
    ws = schedule.windows
    if len(ws) * schedule.window_s != DAY_S:
        return None
    low = min_replicas(schedule, deployment)
    lead_min = math.ceil(startup_s / 60.0)
    out = []
    t = 0
    while t < len(ws):
        n = ws[t].replicas.get(deployment, 0)
        end = t
        while end + 1 < len(ws) and ws[end + 1].replicas.get(deployment, 0) == n:
            end += 1
        if n > low:
            start_min = ws[t].start_s // 60 - lead_min
            end_min = (ws[end].start_s + schedule.window_s) // 60
            out.append({"type": "cron", "metadata": {"timezone": TIMEZONE, "start": _cron(start_min),
                                                     "end": _cron(end_min), "desiredReplicas": str(n)}})
        t = end + 1
    return out
