"""Solver backends over one solver-neutral model (``trimtab.solvers.model.MilpModel``).

``get_backend(name)`` returns a backend; ``available_backends()`` lists those whose libraries are installed
(checked with ``importlib.util.find_spec``, so listing does not import native code).
"""
from __future__ import annotations

from trimtab.solvers.base import (Backend, NetExpired, NettedBackend, SafetyNet, SolveOptions, SolveResult,
                                  Status, Termination, spec_options)
from trimtab.solvers.model import Constraint, LinExpr, MilpModel, Var
from trimtab.solvers.cpsat import CpSatBackend
from trimtab.solvers.pulp_backend import PulpBackend

# Default: highs (trimtab.spec.schema.SolverOptions). cbc and cpsat cross-check it (tests/crosscheck).
BACKENDS: dict[str, type] = {"highs": PulpBackend, "cbc": PulpBackend, "cpsat": CpSatBackend}


def get_backend(name: str) -> Backend:
    if name not in BACKENDS:
        raise ValueError(f"unknown solver backend {name!r}; choose from {', '.join(sorted(BACKENDS))}")
    return BACKENDS[name](name)


def available_backends() -> list[str]:
    return [n for n in sorted(BACKENDS) if get_backend(n).is_available()]


__all__ = ["Backend", "Constraint", "LinExpr", "MilpModel", "NetExpired", "NettedBackend", "SafetyNet",
           "SolveOptions",
           "SolveResult", "Status", "Termination", "Var", "available_backends", "get_backend", "spec_options"]
