"""A small solver-neutral MILP: named variables, named constraints tagged with a family and a spec path.

Built by ``compiler.formulate``; translated by each backend. Names are stable and sorted, so the same input
gives the same model (and, with a deterministic solver, the same plan).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True, slots=True)
class Var:
    name: str
    kind: Literal["integer", "continuous"]
    lb: float = 0.0
    ub: float | None = None


LinExpr = tuple[tuple[str, float], ...]  # ((var name, coefficient), ...)


@dataclass(frozen=True, slots=True)
class Constraint:
    name: str  # "<family>[<key>]"
    family: str  # demand, capacity, inventory, budget, ...
    expr: LinExpr
    sense: Literal["<=", ">=", "=="]
    rhs: float
    origin: str = ""  # spec path the constraint comes from, e.g. "gpus[0] (h100-sxm).count"
    relaxable: bool = False  # may receive an elastic slack when explaining infeasibility


@dataclass
class MilpModel:
    name: str
    variables: dict[str, Var] = field(default_factory=dict)
    constraints: list[Constraint] = field(default_factory=list)
    objective: LinExpr = ()
    sense: Literal["min", "max"] = "min"

    def add_var(self, name: str, kind: Literal["integer", "continuous"], lb: float = 0.0,
                ub: float | None = None) -> str:
        if name in self.variables:
            raise ValueError(f"duplicate variable {name}")
        self.variables[name] = Var(name, kind, lb, ub)
        return name

    def add(self, c: Constraint) -> None:
        for v, _ in c.expr:
            if v not in self.variables:
                raise ValueError(f"constraint {c.name} uses unknown variable {v}")
        self.constraints.append(c)

    def evaluate(self, expr: LinExpr, values: dict[str, float]) -> float:
        return sum(coef * values.get(v, 0.0) for v, coef in expr)

    def violations(self, values: dict[str, float], tol: float = 1e-6) -> list[str]:
        """Constraints the assignment breaks (a check independent of any solver)."""
        out = []
        for v in self.variables.values():
            x = values.get(v.name, 0.0)
            if x < v.lb - tol or (v.ub is not None and x > v.ub + tol):
                out.append(f"{v.name}={x} outside bounds")
            if v.kind == "integer" and abs(x - round(x)) > tol:
                out.append(f"{v.name}={x} not integer")
        for c in self.constraints:
            lhs = self.evaluate(c.expr, values)
            scale = tol * max(1.0, abs(c.rhs))
            if (c.sense == "<=" and lhs > c.rhs + scale) or (c.sense == ">=" and lhs < c.rhs - scale) or (
                    c.sense == "==" and abs(lhs - c.rhs) > scale):
                out.append(f"{c.name}: {lhs:.6g} {c.sense} {c.rhs:.6g} violated")
        return out
