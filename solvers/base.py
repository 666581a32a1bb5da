"""Backend protocol and the two-level solve status (outcome x why the solver stopped)."""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from enum import Enum

from trimtab.solvers.model import MilpModel


class Status(str, Enum):
    """Outcome: what we have."""

    OPTIMAL = "optimal"  # proven optimal (within the gap tolerance)
    FEASIBLE = "feasible"  # a solution, not proven optimal; see gap
    INFEASIBLE = "infeasible"
    NO_SOLUTION = "no_solution"  # stopped without a solution (limit) or unbounded
    ERROR = "error"


class Termination(str, Enum):
    """Why the solver stopped."""

    CONVERGED = "converged"
    TIME_LIMIT = "time_limit"
    INFEASIBLE = "infeasible"
    UNBOUNDED = "unbounded"
    SOLVER_ERROR = "solver_error"


@dataclass(frozen=True)
class SolveOptions:
    time_limit_s: float = 60.0
    mip_rel_gap: float = 1e-4
    threads: int = 1
    verbose: bool = False


@dataclass(frozen=True)
class SolveResult:
    status: Status
    termination: Termination
    values: dict[str, float] = field(default_factory=dict)
    objective: float | None = None
    gap: float | None = None  # relative MIP gap; 0 when proven optimal
    seconds: float = 0.0
    backend: str = ""
    message: str = ""

    @property
    def has_solution(self) -> bool:
        return self.status in (Status.OPTIMAL, Status.FEASIBLE)


class Backend:
    """A solver behind ``solve(MilpModel, SolveOptions) -> SolveResult``.

    ``required_modules`` are checked with ``importlib.util.find_spec`` (no native import to list backends);
    ``supports`` declares what the backend handles natively (docs/solvers.md has the table).
    """

    name: str = ""
    required_modules: tuple[str, ...] = ()
    supports: frozenset[str] = frozenset({"integer", "continuous", "linear", "time_limit", "gap"})

    def is_available(self) -> bool:
        return all(importlib.util.find_spec(m) is not None for m in self.required_modules)

    def solve(self, model: MilpModel, options: SolveOptions) -> SolveResult:  # pragma: no cover - interface
        raise NotImplementedError
