"""What deployments cost, in one place: a replica's price from its GPUs, and a fleet's from its replicas.

Every stage that prices a candidate, a deployment or a plan calls these (candidates, disaggregation, the
adapter planner, extraction, explain, decomposition, schedules, the gates, the CLI's table), so the arithmetic
is written once. Products and sums keep the order they are given in: the same inputs give the same bits, and
plans their bytes.
"""
from __future__ import annotations

from collections.abc import Iterable


def replica_usd_per_hour(gpu_usd_per_hour: float, *sizes: int) -> float:
    """One replica's $/h: its GPU type's price times each of its sizes in turn (tp, pp, dp; or its GPU
    count)."""
    usd = gpu_usd_per_hour
    for k in sizes:
        usd *= k
    return usd


def startup_usd(usd_per_hour: float, startup_s: float, starts: float = 1) -> float:
    """What ``starts`` replica starts cost: each holds its GPUs at ``usd_per_hour`` for ``startup_s`` seconds
    serving nothing (the start-up model: ``trimtab.cost.startup``). Schedules, their MILP and re-plans price
    switching with it."""
    return starts * usd_per_hour * startup_s / 3600.0


def fleet_usd_per_hour(priced: Iterable[tuple[float, float]]) -> float:
    """A fleet's $/h: the sum of count x $/h of one over (count, $/h of one) pairs, in the order given
    (replicas and a candidate's price, or GPUs and their type's price)."""
    cost = 0.0
    for n, usd in priced:
        cost += n * usd
    return cost
