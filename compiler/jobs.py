"""How many processes one plan may use on this machine: the one reading of ``TRIMTAB_JOBS``.

Used by the candidate fan-out (``compiler.fanout``) and the simulator's forked runs (``compiler.sim.parallel``);
a foundation module so that neither stage imports the other.
"""
from __future__ import annotations

import os


def jobs_default() -> int:
    """``TRIMTAB_JOBS`` when it is a positive integer (1: one process), else the CPUs this process may use."""
    env = os.environ.get("TRIMTAB_JOBS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1
