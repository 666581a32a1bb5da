"""Imports at the top of their module (the library: compiler/, solvers/, profiles/). An import inside a
function is kept only for a reason: a heavy or optional third-party module (HEAVY: start-up time, or an
extra that may be missing), or one marked ``# lazy: <why>`` on the import's line or the line just above it
(a comment above a run of imports on consecutive lines covers the run): keeping ``import trimtab`` light, a
fork's child, an import cycle. cli/ is left out: its commands import their stage in the body by design
(cli/main.py).

    python -m pytest tests/architecture/test_lazy_imports.py -q
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ("compiler", "solvers", "profiles")
MARK = "# lazy:"

# Third-party top-level modules a function may import without a mark: optional extras (pyproject's
# optional-dependencies, or not a dependency at all) and dependencies whose import costs start-up time in a
# path most commands never take.
HEAVY = frozenset({
    "torch", "transformers", "tokenizers", "vllm", "sglang", "aiconfigurator", "pyarrow", "ray",  # extras
    "kubernetes", "kubernetes_validate",
    "scipy", "networkx", "ortools", "pulp", "highspy", "httpx", "prometheus_client",  # heavy to import
})


def _top(node: ast.Import | ast.ImportFrom) -> str:
    if isinstance(node, ast.ImportFrom):
        return "" if node.level else (node.module or "").split(".")[0]
    return node.names[0].name.split(".")[0]


def unmarked(source: str) -> list[tuple[int, str]]:
    """(line, text) of every function-level import in ``source`` that is neither of a HEAVY module nor
    marked."""
    lines = source.splitlines()

    def marked(node) -> bool:
        return any(MARK in lines[i] for i in range(node.lineno - 2, node.end_lineno) if i >= 0)

    bad: list[tuple[int, str]] = []

    def body(stmts, in_function: bool) -> None:
        run_marked, last = False, None  # the run of imports on consecutive lines this one is in has a mark
        for s in stmts:
            if isinstance(s, (ast.Import, ast.ImportFrom)):
                run_marked = (run_marked and last == s.lineno - 1) or marked(s)
                last = s.end_lineno
                if in_function and not run_marked and _top(s) not in HEAVY:
                    bad.append((s.lineno, lines[s.lineno - 1].strip()))
            else:
                run_marked = False
            walk(s, in_function)

    def walk(node, in_function: bool) -> None:
        inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            part = getattr(node, field, None)
            if isinstance(part, list) and part and isinstance(part[0], ast.stmt):
                body(part, inner)
            elif isinstance(part, list):
                for h in part:  # except handlers, match cases
                    walk(h, inner)

    walk(ast.parse(source), False)
    return bad


def test_function_level_imports_have_a_reason():
    bad = [f"{p.relative_to(ROOT)}:{line}: {text}"
           for folder in LIBRARY for p in sorted((ROOT / folder).rglob("*.py"))
           for line, text in unmarked(p.read_text(encoding="utf-8"))]
    assert bad == [], ("move these imports to the top of their module, or mark why they stay in the function "
                       f"('{MARK} ...' on the line or just above):\n" + "\n".join(bad))


def test_the_check_can_fail():
    """An unmarked standard-library or package import in a function is found (one after a blank line is not
    in the run above it); a marked one, a run under one mark, a HEAVY one and a module-level one are not."""
    src = '''import json


def f():
    import json
    from trimtab.sim import parallel
    return json, parallel


def g():
    # lazy: keeps import trimtab light
    from trimtab.sim import parallel
    from trimtab.milp import extract

    import os  # lazy: a reason on the line
    import scipy.special
    from networkx import DiGraph

    import time
    return parallel, extract, os, scipy, DiGraph, time


class C:
    def m(self):
        if True:
            import itertools
        return itertools
'''
    assert [line for line, _ in unmarked(src)] == [5, 6, 19, 26]
