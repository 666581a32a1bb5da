"""A small solver-neutral MILP: named variables, named constraints tagged with a family and a spec path.

Built by ``trimtab.milp.formulate``; translated by each backend. Names are stable and sorted, so the same
input
gives the same model (and, with a deterministic solver, the same plan).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol


@dataclass(frozen=True, slots=True)
class Var:
    name: str
    kind: Literal["integer", "continuous"]
    lb: float = 0.0
    ub: float | None = None
    # what the variable stands for ("route", "replicas", ...): stages after the solve select variables by it,
    # never by parsing the name, which is for display and the backends only
    family: str = ""


LinExpr = tuple[tuple[str, float], ...]  # ((var name, coefficient), ...)


class Origin(Protocol):
    """Provenance of a row, kept solver-neutral (nothing here reads a spec)."""

    @property
    def whatif(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Constraint:
    name: str  # "<family>[<key>]"
    family: str  # demand, capacity, inventory, budget, ...
    expr: LinExpr
    sense: Literal["<=", ">=", "=="]
    rhs: float
    # What of the problem's source the row comes from: any object whose str() names it and whose ``whatif`` is
    # the override path of the one number it names, or None (trimtab: trimtab.spec.paths.SpecPath)
    origin: Origin | None = None
    relaxable: bool = False  # may receive an elastic slack when explaining infeasibility
    # the domain object the row is about (an inventory row's GPU type), for stages that read a row's value or
    # dual back without parsing its name
    key: object = None


@dataclass
class MilpModel:
    name: str
    variables: dict[str, Var] = field(default_factory=dict)
    constraints: list[Constraint] = field(default_factory=list)
    objective: LinExpr = ()
    sense: Literal["min", "max"] = "min"

    def add_var(self, name: str, kind: Literal["integer", "continuous"], lb: float = 0.0,
                ub: float | None = None, family: str = "") -> str:
        if name in self.variables:
            raise ValueError(f"duplicate variable {name}")
        self.variables[name] = Var(name, kind, lb, ub, family)
        return name

    def add(self, c: Constraint) -> None:
        for v, _ in c.expr:
            if v not in self.variables:
                raise ValueError(f"constraint {c.name} uses unknown variable {v}")
        self.constraints.append(c)

    def relaxed(self) -> "MilpModel":
        """The LP relaxation: every integer variable continuous (same names, bounds and rows)."""
        cont = {n: Var(v.name, "continuous", v.lb, v.ub, v.family) for n, v in self.variables.items()}
        return MilpModel(self.name + ":relaxed", cont, list(self.constraints), self.objective, self.sense)

    def evaluate(self, expr: LinExpr, values: dict[str, float]) -> float:
        return sum(coef * values.get(v, 0.0) for v, coef in expr)

    def elastic(self, slack_name, integer_families: tuple[str, ...] = ("inventory",)) -> "MilpModel":
        """A copy in which every ``relaxable`` constraint takes a slack ``slack_name(constraint name)``
        (integer for ``integer_families``) and the objective minimises the slacks, each over its right-hand
        side, with the original objective at 1e-9 as a tie-break: the smallest relaxation that makes the model
        feasible. Bounds of variables are the caller's (loosen those that only the relaxed rows should
        limit)."""
        m = MilpModel(self.name + ":elastic", dict(self.variables), [], (), "min")
        objective = []
        for c in self.constraints:
            if not c.relaxable or c.sense == "==":
                m.constraints.append(c)
                continue
            top = sum(abs(a) * (m.variables[v].ub or 0.0) for v, a in c.expr)
            s = m.add_var(slack_name(c.name), "integer" if c.family in integer_families else "continuous",
                          0.0, max(top - c.rhs, 0.0) + 1.0)
            objective.append((s, 1.0 / max(abs(c.rhs), 1.0)))
            m.constraints.append(Constraint(c.name, c.family,
                                            c.expr + ((s, -1.0 if c.sense == "<=" else 1.0),),
                                            c.sense, c.rhs, c.origin, True))
        m.objective = tuple(objective) + tuple((v, 1e-9 * a) for v, a in self.objective)
        return m

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
