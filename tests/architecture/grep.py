"""The architecture tests' grep: source lines that match any of a list of idioms (regular expressions)."""
from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def matching_lines(text: str, idioms: list[re.Pattern]) -> list[str]:
    return [line.strip() for line in text.splitlines() if any(p.search(line) for p in idioms)]


def offenders(files: Iterable[Path], idioms: list[re.Pattern]) -> list[str]:
    """``path: line`` for every line of ``files`` that matches an idiom."""
    return [f"{p.relative_to(ROOT)}: {line}" for p in files
            for line in matching_lines(p.read_text(encoding="utf-8"), idioms)]
