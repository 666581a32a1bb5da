"""Output of ``trimtab sweep``: the results table, CSV, a PNG plot, the robust summary and a progress bar.

Kept apart from ``trimtab.study.sweep`` (what to plan and where) so the command in ``cli/main.py`` stays a few
lines and the sweep logic stays free of rich and matplotlib.
"""
from __future__ import annotations

import csv
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from trimtab.cli.common import steps
from trimtab.study.sweep import Point, PointResult, RobustResult
from trimtab.cli.plots import pyplot

CSV_FIELDS = ("index", "label", "status", "cost_usd_per_hour", "gpus", "rounds", "validated", "checked",
              "min_attainment", "seconds", "message")


@contextmanager
def progress_bar(console: Console, what: str):
    """Yields a ``progress(done, total)`` callback drawing a rich bar on ``console`` (stderr), or, when it is
    not a terminal (CI logs), writing one line per point done (``trimtab.cli.common.steps``)."""
    if not console.is_terminal:
        with steps(console, what) as say:
            yield lambda done, total, label=what: say(f"{label}: {done}/{total} done")
        return

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as prog:
        tasks: dict[str, int] = {}

        def update(done: int, total: int, label: str = what) -> None:
            if label not in tasks:
                tasks[label] = prog.add_task(label, total=total)
            prog.update(tasks[label], completed=done)

        yield update


def _gpus(r: PointResult) -> str:
    return ", ".join(f"{n} {g}" for g, n in r.gpus.items())


def results_table(results: list[PointResult], title: str) -> Table:
    t = Table(title=title)
    for c in ("#", "point", "status", "$/h", "GPUs", "rounds", "validated", "check", "min attainment", "s"):
        t.add_column(c, justify="right" if c in ("#", "$/h", "rounds", "min attainment", "s") else "left")
    for r in results:
        att = f"{min(r.attainment.values()):.2%}" if r.attainment else ""
        t.add_row(str(r.index), r.label, r.status if r.status == "ok" else f"{r.status}: {r.message[:60]}",
                  f"{r.cost_usd_per_hour:.2f}" if r.cost_usd_per_hour is not None else "", _gpus(r),
                  str(r.rounds or ""), {True: "yes", False: "NO", None: ""}[r.validated],
                  {True: "pass", False: "FAIL", None: ""}[r.checked], att, f"{r.seconds:.1f}")
    return t


def write_csv(results: list[PointResult], points: list[Point], path: Path) -> None:
    """One row per point, with every override as its own column (``set:<path>``) and, for scenarios, each
    workload's sampled multipliers (``rate:<w>``, ``output:<w>``, ``input:<w>``)."""
    paths = sorted({k for p in points for k in p.overrides if not isinstance(p.overrides[k], dict)})
    wl = sorted({w for p in points for w in p.multipliers})
    mcols = [f"{k}:{w}" for w in wl for k in ("rate", "output", "input")]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow(list(CSV_FIELDS) + [f"set:{p}" for p in paths] + mcols)
        for r, p in zip(results, points):
            row = [r.index, r.label, r.status, r.cost_usd_per_hour, _gpus(r), r.rounds, r.validated,
                   r.checked,
                   min(r.attainment.values()) if r.attainment else "", round(r.seconds, 3), r.message]
            row += [p.overrides.get(k, "") for k in paths]
            row += [round(p.multipliers[w][i], 6) if w in p.multipliers else "" for w in wl for i in range(3)]
            out.writerow(row)


def plot(results: list[PointResult], points: list[Point], path: Path, title: str) -> None:
    """Cost per point: against the value of a single numeric --set axis, against the total sampled rate for
    scenarios, else against the point index. Infeasible points are marked on the x axis."""
    plt = pyplot()

    axes = sorted({k for p in points for k in p.overrides})
    ok = [(r, p) for r, p in zip(results, points) if r.cost_usd_per_hour is not None]
    bad = [(r, p) for r, p in zip(results, points) if r.cost_usd_per_hour is None]
    fig, ax = plt.subplots(figsize=(7, 4))
    if points and points[0].multipliers:
        def x(p: Point) -> float:
            return sum(float(v) for k, v in p.overrides.items() if k.endswith(".rate_rps"))
        xlabel = "total rate of the scenario's rate overrides, rps"
        ax.scatter([x(p) for _, p in ok], [r.cost_usd_per_hour for r, _ in ok], s=18)
    elif len(axes) == 1 and all(isinstance(p.overrides[axes[0]], (int, float)) for p in points):
        def x(p: Point) -> float:
            return float(p.overrides[axes[0]])
        xlabel = axes[0]
        ax.plot([x(p) for _, p in ok], [r.cost_usd_per_hour for r, _ in ok], marker="o")
    else:
        def x(p: Point) -> float:
            return float(p.index)
        xlabel = "point (see the table)"
        ax.bar([x(p) for _, p in ok], [r.cost_usd_per_hour for r, _ in ok])
    if bad:
        ax.scatter([x(p) for _, p in bad], [0] * len(bad), marker="x", color="red", label="no plan")
        ax.legend()
    ax.set_xlabel(xlabel)
    ax.set_ylabel("plan cost, $/h")
    ax.set_title(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def robust_lines(r: RobustResult) -> list[str]:
    """The summary of a robust plan: chosen candidate, its share, the mean plan's, and every candidate."""
    n = r.scenarios
    lines = [f"robust plan ({r.chosen_level}): {r.plan.cost_usd_per_hour:.2f} $/h, check passed in "
             f"{r.passed}/{n} scenarios ({r.share:.0%}; required {r.q:.0%})"]
    if r.mean_plan is not None:
        d = r.plan.cost_usd_per_hour - r.mean_plan.cost_usd_per_hour
        lines.append(f"plan for the mean scenario: {r.mean_plan.cost_usd_per_hour:.2f} $/h, check passed in "
                     f"{r.mean_passed}/{n} scenarios; the robust plan costs {d:+.2f} $/h "
                     f"({d / r.mean_plan.cost_usd_per_hour:+.0%})")
    lines.append("candidates (planned at quantiles of the sampled rate and output-length multipliers):")
    for c in r.candidates:
        cost = (f"{c.cost_usd_per_hour:8.2f} $/h" if c.cost_usd_per_hour is not None
                else f"no plan: {c.message}")
        passed = (f"passed {c.passed}/{n}" if c.passed is not None
                  else "not checked (no cheaper than the chosen plan)")
        lines.append(f"  {c.level:>6}: {cost}  {passed if c.cost_usd_per_hour is not None else ''}".rstrip())
    return lines
