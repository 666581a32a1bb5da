"""Error taxonomy and exit codes.

Expected outcomes (bad input, an infeasible spec, a solver that ran out of time, a failed check) are
``TrimtabError`` subclasses: the CLI prints their ``lines`` and exits with their ``exit_code``, never a
traceback. Anything else is a bug and keeps its traceback.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class ExitCode(IntEnum):
    """Documented in docs/errors.md; one place, so the CLI and the docs cannot disagree."""

    OK = 0
    INVALID_INPUT = 1
    USAGE = 2
    INFEASIBLE = 3
    NO_SOLUTION = 4
    CHECK_FAILED = 5
    INTERNAL = 6
    PLAN_MISSES = 7


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem with the user's input: where it is and what is wrong."""

    where: str  # field path, e.g. "workloads[0] (chat).rate_rps"
    message: str
    file: str | None = None
    line: int | None = None

    def render(self) -> str:
        loc = ""
        if self.file:
            loc = f"{self.file}:{self.line}: " if self.line else f"{self.file}: "
        return f"{loc}{self.where}: {self.message}" if self.where else f"{loc}{self.message}"


class TrimtabError(Exception):
    """Base of expected, user-facing outcomes."""

    exit_code: ExitCode = ExitCode.INVALID_INPUT

    def __init__(self, lines: list[str] | str):
        self.lines = [lines] if isinstance(lines, str) else list(lines)
        super().__init__("\n".join(self.lines))


class InputError(TrimtabError):
    """A spec, plan or profile that does not validate; one line per problem."""

    exit_code = ExitCode.INVALID_INPUT

    def __init__(self, problems: list[Problem], what: str = "input"):
        self.problems = problems
        super().__init__([p.render() for p in problems])
        self.what = what


class InfeasibleError(TrimtabError):
    """No deployment can meet the spec; the lines say which constraint and by how much."""

    exit_code = ExitCode.INFEASIBLE


class NoSolutionError(TrimtabError):
    """The solver stopped (time limit, failure) without a feasible plan."""

    exit_code = ExitCode.NO_SOLUTION


class SafetyNetError(NoSolutionError):
    """The wall-clock safety net (``--time-limit``) expired during a planning run, which stopped at the next
    step (before a solve or a simulation): no plan, the lines say how far it got and what was not validated.
    ``where``: the step not taken; ``sims``: the validating simulations run."""

    def __init__(self, lines: list[str] | str, where: str = "", sims: int = 0):
        super().__init__(lines)
        self.where = where
        self.sims = sims


class CheckFailedError(TrimtabError):
    """A plan violates its spec (raised only by the CLI; the API returns a CheckReport)."""

    exit_code = ExitCode.CHECK_FAILED


class PlanMissesError(TrimtabError):
    """The plan's own validation (cost model or simulation) still shows a workload below its SLO: not a plan
    to deploy unless the user says so (``plan --allow-misses``, which writes it with ``misses`` set)."""

    exit_code = ExitCode.PLAN_MISSES


class InternalError(TrimtabError):
    """trimtab produced something impossible (e.g. a plan above the speed-of-light bound): a bug to report,
    never a plan to deploy."""

    exit_code = ExitCode.INTERNAL
