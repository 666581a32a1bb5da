"""No line of the project's code, tests or benchmarks passes the configured width (pyproject's
``[tool.ruff] line-length``).

A long line is rewrapped by hand (expressions split at natural points, strings by implicit concatenation,
comments and docstrings re-flowed), never left for a whole-file reformatter. A module that would pass
MAX_LINES is split into a cohesive new module, never kept short by widening lines.

    python -m pytest tests/architecture/test_line_length.py -q
"""
from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("compiler", "profiles", "solvers", "cli", "tests", "benchmarks")


def width() -> int:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["ruff"]["line-length"]


def long_lines(text: str, limit: int) -> list[int]:
    """1-based numbers of the lines longer than ``limit`` characters."""
    return [i for i, line in enumerate(text.splitlines(), 1) if len(line) > limit]


def over() -> dict[str, list[int]]:
    limit = width()
    out = {}
    for folder in FOLDERS:
        for p in sorted((ROOT / folder).rglob("*.py")):
            found = long_lines(p.read_text(encoding="utf-8"), limit)
            if found:
                out[p.relative_to(ROOT).as_posix()] = found
    return out


def test_no_line_past_the_configured_width():
    bad = {f"{path} ({len(lines)} lines over; first at line {lines[0]})" for path, lines in over().items()}
    assert not bad, f"lines over {width()} columns: " + "; ".join(sorted(bad))


def test_the_check_can_fail():
    assert long_lines("short\n" + "x" * 111 + "\n" + "y" * 110, 110) == [2]
