"""What every ``trimtab`` command shares: the consoles (tables on stdout, messages on stderr), the option
enums, the handler that turns expected errors into their exit code (docs/errors.md) without a traceback (as
JSON on stdout under ``--format json``), progress on stderr, and the one way to name a plan (``--plan``)."""
from __future__ import annotations

import json
import os
import sys
import time
from contextlib import contextmanager
from enum import Enum
from functools import wraps
from pathlib import Path
from typing import Annotated, Callable, Iterator, Optional

import typer
from rich.console import Console

from trimtab.errors import ExitCode, InputError, PlanMissesError, TrimtabError

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


class MarginStat(str, Enum):
    median = "median"
    p90 = "p90"


class Solver(str, Enum):
    highs = "highs"
    cbc = "cbc"
    cpsat = "cpsat"


KINDS = {ExitCode.INVALID_INPUT: "invalid input", ExitCode.INFEASIBLE: "infeasible",
         ExitCode.NO_SOLUTION: "no solution", ExitCode.CHECK_FAILED: "check failed",
         ExitCode.INTERNAL: "internal", ExitCode.PLAN_MISSES: "plan misses"}


def error_document(exc: TrimtabError) -> dict:
    """What ``--format json`` prints on stdout for an expected error (docs/errors.md): a script reading stdout
    gets a document whatever happened, and tells an error from a report by ``ok`` and ``exit_code``."""
    doc = {"ok": False, "exit_code": int(exc.exit_code), "kind": KINDS[exc.exit_code], "problems": exc.lines}
    if isinstance(exc, InputError):  # where each problem is, for a script that points at the line
        doc["where"] = [{"where": p.where, "message": p.message, "file": p.file, "line": p.line}
                        for p in exc.problems]
    return doc


def _expected_errors(fn):
    """Print TrimtabError lines on stderr and exit with their code (under ``--format json`` also the error's
    document on stdout); anything else is a bug and keeps its traceback."""

    @wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except TrimtabError as exc:
            err.print(f"[bold red]error[/] ({KINDS[exc.exit_code]}):", markup=True)
            for line in exc.lines:
                err.print(f"  {line}", markup=False)
            if getattr(kwargs.get("fmt"), "value", None) == "json":
                sys.stdout.write(json.dumps(error_document(exc), indent=2) + "\n")
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


def with_misses(plans) -> list[str]:
    """The error lines of the plans (``(name, Plan)`` pairs) marked ``misses``: their planner's own validation
    still shows a workload below its SLO; [] when none is."""
    return [f"{n}: {misses_lines(p)[0]}" for n, p in plans if p is not None and p.misses]


def refuse_to_write(plans, allow_misses: bool, what: str) -> bool:
    """What a command other than ``plan`` that writes plans (``replan``, ``what-if``, ``pareto``, ``sweep
    --robust``) does before reporting or writing any, as ``plan`` does: exit 7 (docs/errors.md) when one is
    marked ``misses`` and not ``allow_misses``, nothing written; True when one is marked and allowed (the
    command reports and writes them, marked, then calls ``exit_misses``)."""
    lines = with_misses(plans)
    if lines and not allow_misses:
        raise PlanMissesError(lines + [f"no {what} written; --allow-misses writes it, marked"])
    return bool(lines)


def exit_misses(plans, what: str) -> None:
    """Exit 7 after a command reported (and wrote) plans marked ``misses``: the lines on stderr, no error
    document (under ``--format json`` stdout already holds the command's own, which carries the plans)."""
    lines = with_misses(plans)
    if lines:
        err.print("[bold red]error[/] (plan misses):", markup=True)
        for line in lines + [f"{what} written with --allow-misses, marked with its misses"]:
            err.print(f"  {line}", markup=False)
        raise typer.Exit(int(ExitCode.PLAN_MISSES))


def process_seconds() -> float:
    """Wall seconds since this process started (Linux: /proc; 0 elsewhere): the start-up that ``plan -v``
    reports before its own stages."""
    try:
        start = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19])  # starttime, clock ticks
        uptime = float(open("/proc/uptime").read().split()[0])
        return max(uptime - start / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError):
        return 0.0


@contextmanager
def steps(console: Console, what: str) -> Iterator[Callable[[str], None]]:
    """Progress of a command that can run for minutes (``plan`` of a day-long schedule: 50-90 s), on
    ``console`` (stderr), never on stdout: yields ``say(step)``. On a terminal a spinner shows the step and
    the seconds so far; elsewhere (CI logs, pipes) one line per step, so a log shows where the time went."""
    t0 = time.perf_counter()
    if console.is_terminal:
        with console.status(f"{what}...") as status:
            yield lambda step: status.update(f"{what}: {step} ({time.perf_counter() - t0:.0f} s)")
        return
    last = [""]

    def say(step: str) -> None:
        if step != last[0]:
            last[0] = step
            console.print(f"{what}: {step} ({time.perf_counter() - t0:.1f} s)", markup=False)

    yield say


def plan_path(option: Path | None, old: Path | None, old_spelling: str) -> Path:
    """The plan file of a command, given as ``--plan PLAN`` (every command that reads a plan; README,
    "Command-line conventions"). The spelling the command used before (``old_spelling``: a positional PLAN,
    replan's ``--current``) still works, with a note on stderr, until it is removed."""
    if option is not None and old is not None:
        raise typer.BadParameter(f"give the plan once: --plan, not also {old_spelling}", param_hint="--plan")
    if option is not None:
        return option
    if old is None:
        raise typer.BadParameter("the plan file is required: --plan PLAN", param_hint="--plan")
    err.print(f"note: {old_spelling} is deprecated; name the plan with --plan {old}", markup=False)
    return old


# The commands that plan many points (sweep, pareto) run them on Ray, or in this process.
SerialOpt = Annotated[bool, typer.Option("--serial", help="Plan in this process, one point after another.")]
AddressOpt = Annotated[Optional[str], typer.Option(help="Ray cluster to join (default: a local Ray).")]
WorkersOpt = Annotated[Optional[int], typer.Option(min=1, help="Ray tasks in flight (default: the CPUs).")]

# Every command that reads a spec takes the user's own profile folder (docs/spec-reference.md, `profiles`).
ProfilesOpt = Annotated[Optional[Path], typer.Option(
    "--profiles", metavar="DIR",
    help="Folder of your own profiles (gpus/, models/, engines/ inside, e.g. written by trimtab calibrate): "
         "each replaces the bundled profile of the same name; replaces the spec's profiles field.")]
