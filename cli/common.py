"""What every ``trimtab`` command shares: the consoles (tables on stdout, messages on stderr), the option enums,
and the handler that turns expected errors into their exit code (docs/errors.md) without a traceback."""
from __future__ import annotations

import sys
from enum import Enum
from functools import wraps

import typer
from rich.console import Console

from trimtab.errors import ExitCode, PlanMissesError, TrimtabError

# Wide enough for the plan tables when output goes to a file or a CI log (rich assumes 80 columns there).
out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, highlight=False, soft_wrap=True, width=None if sys.stderr.isatty() else 160)


class Fmt(str, Enum):
    yaml = "yaml"
    json = "json"


class TableOrJson(str, Enum):
    table = "table"
    json = "json"


class TraceFormat(str, Enum):
    azure = "azure"
    mooncake = "mooncake"
    csv = "csv"


class Solver(str, Enum):
    highs = "highs"
    cbc = "cbc"
    cpsat = "cpsat"


def _expected_errors(fn):
    """Print TrimtabError lines and exit with their code; anything else is a bug and keeps its traceback."""

    @wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except TrimtabError as exc:
            label = {ExitCode.INVALID_INPUT: "invalid input", ExitCode.INFEASIBLE: "infeasible",
                     ExitCode.NO_SOLUTION: "no solution", ExitCode.CHECK_FAILED: "check failed",
                     ExitCode.INTERNAL: "internal", ExitCode.PLAN_MISSES: "plan misses"}[exc.exit_code]
            err.print(f"[bold red]error[/] ({label}):", markup=True)
            for line in exc.lines:
                err.print(f"  {line}", markup=False)
            raise typer.Exit(int(exc.exit_code)) from None

    return wrapper


def misses_lines(p) -> list[str]:
    """The error lines of a plan its own validation found missing (``Plan.misses``)."""
    names = ", ".join(p.misses)
    return [f"the plan's own validation shows {len(p.misses)} workload(s) below their SLO: {names}"]


def refuse_misses(p, plan_path, allow_misses: bool) -> None:
    """``check`` and ``emit`` refuse a plan its planner found missing (``misses``: written by plan
    --allow-misses) unless told: exit 7 (docs/errors.md)."""
    if p.misses and not allow_misses:
        names = ", ".join(p.misses)
        raise PlanMissesError([f"{plan_path}: misses: the planner's own validation shows {names} below their "
                               "SLO; pass --allow-misses to use this plan anyway"])


def process_seconds() -> float:
    """Wall seconds since this process started (Linux: /proc; 0 elsewhere): the start-up that ``plan -v``
    reports before its own stages."""
    try:
        import os

        start = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19])  # starttime, clock ticks
        uptime = float(open("/proc/uptime").read().split()[0])
        return max(uptime - start / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError):
        return 0.0
