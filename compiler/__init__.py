"""trimtab: a constraint compiler for LLM inference deployments.

Public API (importable without the CLI): ``load_spec``, ``plan``, ``check``, ``what_if``, ``diff_plans``,
``load_plan``, ``emit``. See compiler/api.py for the pipeline.
"""
from __future__ import annotations

from compiler.api import PlanResult, check, diff_plans, load_spec, plan, what_if
from compiler.check import CheckReport, load_plan
from compiler.plan.emit import emit

__all__ = ["CheckReport", "PlanResult", "check", "diff_plans", "emit", "load_plan", "load_spec", "plan", "what_if"]
