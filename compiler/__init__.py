"""trimtab: a constraint compiler for LLM inference deployments.

The public face, importable without the CLI: ``load_spec`` -> ``plan`` -> ``check`` (the same gate as
``trimtab check``), ``simulate``, ``what_if``, ``explain``, ``diff_plans``, ``load_plan``, ``emit`` (a plan's
canonical text), the records they return and the errors they raise (each with its exit code). The stages
behind them are this package's folders, lowest first: util, solvers, profiles, engines, spec, ir, cost,
deployment, contract, milp, sim, gate, deploy, planning, then api (these functions), study, field, online and
cli (docs/architecture.md).
"""
from __future__ import annotations

from trimtab.api import PlanResult, check, diff_plans, explain, load_spec, plan, simulate, what_if
from trimtab.contract.schema import Plan
from trimtab.contract.write import emit
from trimtab.errors import (CheckFailedError, ExitCode, InfeasibleError, InputError, InternalError,
                            NoSolutionError, TrimtabError)
from trimtab.gate.analytic import CheckReport, load_plan
from trimtab.spec.schema import Spec

__all__ = ["CheckFailedError", "CheckReport", "ExitCode", "InfeasibleError", "InputError", "InternalError",
           "NoSolutionError", "Plan", "PlanResult", "Spec", "TrimtabError", "check", "diff_plans", "emit",
           "explain", "load_plan", "load_spec", "plan", "simulate", "what_if"]
