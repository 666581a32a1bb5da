"""Backend protocol and the two-level solve status (outcome x why the solver stopped)."""
from __future__ import annotations

import importlib.util
import os
import time
from dataclasses import dataclass, field, replace
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
    WORK_LIMIT = "work_limit"  # a deterministic limit (nodes, deterministic time): the same answer anywhere
    TIME_LIMIT = "time_limit"  # the wall-clock safety net: never an answer (it depends on the machine's load)
    INFEASIBLE = "infeasible"
    UNBOUNDED = "unbounded"
    SOLVER_ERROR = "solver_error"


# Deterministic work limits: what stops a solve short of its gap, so that the answer is a function of the
# model. HiGHS: branch-and-bound nodes (mip_max_nodes; one thread). CP-SAT: deterministic time
# (max_deterministic_time; one worker, a fixed seed). CBC: nodes (maxNodes). The wall-clock ``time_limit_s``
# is only a safety net: a solve it stops has no answer (Termination.TIME_LIMIT), whatever incumbent it held
# (docs/solvers.md).
NODE_LIMIT = 50_000
DETERMINISTIC_TIME = 30.0


@dataclass(frozen=True)
class SolveOptions:
    time_limit_s: float = 60.0
    mip_rel_gap: float = 1e-4
    threads: int = 1
    verbose: bool = False
    node_limit: int = NODE_LIMIT
    deterministic_time: float = DETERMINISTIC_TIME
    # A small MILP solved many times over (the workload parts of trimtab.milp.parts): HiGHS without its
    # sub-MIP heuristics and restarts, which are built for large MILPs and are most of the time a part of a
    # few dozen integers takes; its branch-and-bound proves such a part in a few nodes (docs/solvers.md)
    small: bool = False

    def after(self, spent_s: float, **changes) -> "SolveOptions":
        """These options for a solve after others took ``spent_s`` seconds of the wall-clock safety net (at
        least 0.01 s left), with ``changes``; the work limits carry over."""
        return replace(self, time_limit_s=max(self.time_limit_s - spent_s, 0.01), **changes)


# Tests only: the number of safe points (``SafetyNet.expired``) the net lets pass before it counts as expired,
# whatever the clock says, so that a test stops a real planning run at a chosen point on any machine
NET_SAFE_POINTS_ENV = "TRIMTAB_TEST_NET_SAFE_POINTS"


class NetExpired(Exception):
    """Raised inside a step that checks the net itself (a schedule's validation, window by window) to its
    caller, which says what was not done; ``str``: where it stopped; ``sims``: the validating simulations the
    step ran before it stopped."""

    def __init__(self, where: str, sims: int = 0):
        super().__init__(where)
        self.sims = sims


class SafetyNet:
    """The wall-clock safety net of one planning run (``--time-limit``, ``solver.time_limit_s``): ``limit_s``
    seconds from ``start`` (``time.perf_counter``) for everything the run does, solves and validating
    simulations alike. A solve gets what is left as its own limit (``options``); between steps (before a
    solve, before a simulation, between a schedule's windows) the run asks ``expired`` and stops there, with
    no plan: a step is never cut mid-way, and a run the net stopped is said as such (exit 4), never as a plan,
    whose bytes would then depend on the machine's load. A run that ends within the net is unchanged by it:
    the net is read, never acted on, until it expires."""

    def __init__(self, limit_s: float, start: float | None = None):
        self.limit_s = limit_s
        self.start = time.perf_counter() if start is None else start
        self.passed = 0  # safe points passed (NET_SAFE_POINTS_ENV)
        forced = os.environ.get(NET_SAFE_POINTS_ENV, "").strip()
        self.forced = int(forced) if forced.isdigit() else None

    def spent(self) -> float:
        return time.perf_counter() - self.start

    def left(self) -> float:
        return self.limit_s - self.spent()

    def expired(self) -> bool:
        """Whether the run must stop at this safe point (each call is one)."""
        self.passed += 1
        if self.forced is not None and self.passed > self.forced:
            return True
        return self.left() <= 0

    def options(self, options: SolveOptions) -> SolveOptions:
        """``options`` for a solve starting now: the net's time left as its wall-clock limit (at least
        0.01 s)."""
        return replace(options, time_limit_s=max(self.left(), 0.01))


def spec_options(spec, time_limit_s: float | None = None) -> SolveOptions:
    """The solve options of a spec (``solver``), the wall-clock safety net overridden by ``time_limit_s``."""
    nodes = spec.solver.node_limit
    return SolveOptions(time_limit_s=time_limit_s or spec.solver.time_limit_s,
                        node_limit=NODE_LIMIT if nodes is None else nodes)


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
    # an LP's row duals by row name, the objective's change per unit of the row's right-hand side (a binding
    # <= row of a minimisation: <= 0); empty for a MILP or where the backend gives none
    duals: dict[str, float] = field(default_factory=dict)
    # the bound the solver proved on the objective (below it when minimising, above when maximising): no
    # solution of the model is better; None where the solver gives none
    bound: float | None = None

    @property
    def has_solution(self) -> bool:
        return self.status in (Status.OPTIMAL, Status.FEASIBLE)


def bound_within(objective: float, rel_gap: float, sense: str) -> float:
    """The bound a solve that stopped within ``rel_gap`` of it proves, where the solver does not say its own
    (CBC through PuLP, CP-SAT's scaled bound): the objective less the gap's share of it (more, maximising)."""
    slack = rel_gap * max(abs(objective), 1.0)
    return objective - slack if sense == "min" else objective + slack


def safety_net(backend: str, options: SolveOptions, secs: float) -> SolveResult:
    """A solve the wall-clock time limit stopped: no answer, whatever incumbent the solver held (it would
    depend on the machine's load)."""
    why = f"the wall-clock time limit ({options.time_limit_s:g} s, a safety net) expired; raise --time-limit"
    return SolveResult(Status.NO_SOLUTION, Termination.TIME_LIMIT, seconds=secs, backend=backend, message=why)


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


class NettedBackend:
    """``backend`` with every solve under a run's safety net (``SafetyNet``), for steps that run many solves
    of their own (``explain``'s, the relaxations of an infeasible spec): before each solve the net is asked
    (``NetExpired`` once it expired: a solve is never started past it), each solve gets what is left of it as
    its limit, and a solve the net stopped raises ``NetExpired`` instead of handing back its missing answer,
    which the step would read as "no plan at this relaxation" and so word its lines by the machine's load.
    ``where``: the step, for ``NetExpired``'s message. Everything else is the backend's."""

    def __init__(self, backend: Backend, net: SafetyNet, where: str):
        self.backend, self.net, self.where = backend, net, where

    def __getattr__(self, name: str):
        return getattr(self.backend, name)

    def solve(self, model, options: SolveOptions) -> SolveResult:
        if self.net.expired():
            raise NetExpired(f"before a solve of {self.where}")
        res = self.backend.solve(model, self.net.options(options))
        if res.termination == Termination.TIME_LIMIT:
            raise NetExpired(f"in a solve of {self.where}, stopped after {res.seconds:.1f} s")
        return res
