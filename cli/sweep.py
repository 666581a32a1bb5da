"""``trimtab sweep``: a spec planned over a grid of what-if overrides or sampled traffic scenarios, as Ray
tasks when Ray is installed, or the robust plan over the scenarios (logic in ``trimtab.study.sweep``;
docs/scale.md)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from trimtab.cli.common import AddressOpt, ProfilesOpt, SerialOpt, Solver, TableOrJson, WorkersOpt, err, out
from trimtab.errors import ExitCode, InputError, Problem
from trimtab.api import load_spec
from trimtab.contract.write import emit


def sweep_cmd(
    spec: Annotated[Path, typer.Argument(help="Spec YAML.")],
    sets: Annotated[Optional[list[str]], typer.Option("--set", help="PATH=V1,V2,... over what-if paths, e.g. "
                                                      "workloads.chat.rate_rps=2,4,8 "
                                                      "(repeatable: a grid).")] = None,
    scenarios: Annotated[Optional[int], typer.Option(min=1, help="Plan N sampled traffic scenarios "
                                                                 "instead of a grid.")] = None,
    rate_cv: Annotated[float, typer.Option(min=0, help="Scenarios: CV of each workload's rate (lognormal, "
                                                       "mean 1).")] = 0.0,
    length_cv: Annotated[float, typer.Option(min=0,
                                             help="Scenarios: CV of each workload's output lengths.")] = 0.0,
    input_cv: Annotated[float, typer.Option(min=0, help="Scenarios: CV of each workload's prompt lengths "
                                                        "(not with --robust).")] = 0.0,
    seed: Annotated[int, typer.Option(help="Scenario sampling seed.")] = 0,
    robust: Annotated[Optional[float], typer.Option(help="With --scenarios: the cheapest plan that "
                                                         "passes check in at least this share of them "
                                                         "(docs/scale.md).")] = None,
    check: Annotated[bool, typer.Option("--check",
                                        help="Also check each point's plan by simulation.")] = False,
    check_seeds: Annotated[int, typer.Option(min=1, help="Simulation seeds per check.")] = 1,
    serial: SerialOpt = False,
    address: AddressOpt = None,
    workers: WorkersOpt = None,
    csv_path: Annotated[Optional[Path], typer.Option("--csv", help="Write one row per point here.")] = None,
    plot: Annotated[Optional[Path], typer.Option(help="Write cost per point as a PNG here.")] = None,
    output: Annotated[Optional[Path], typer.Option("-o", "--output",
                                                   help="--robust: write the plan here.")] = None,
    solver: Annotated[Optional[Solver],
                      typer.Option(help="MILP backend; overrides the spec's solver.backend.")] = None,
    time_limit: Annotated[Optional[float], typer.Option(min=0.01,
                                                        help="Wall-clock safety net per plan (solves and "
                                                             "simulations), seconds.")] = None,
    analytic: Annotated[bool, typer.Option("--analytic", help="Plan points with the cost model only (no "
                                                              "validation by simulation).")] = False,
    fmt: Annotated[TableOrJson, typer.Option("--format", help="table, or json (the document alone on stdout: "
                                                              "every point, or the robust choice and its "
                                                              "plan).")] = TableOrJson.table,
    profiles: ProfilesOpt = None,
) -> None:
    """Plan a spec over a grid of overrides or sampled traffic scenarios (Ray tasks when Ray is installed), or
    find a robust plan (--robust q --scenarios N). A point whose plan's own validation still shows a miss is
    reported with status misses and the sweep exits 7; such a plan is never the robust one.

    Example: trimtab sweep examples/robust.yaml --scenarios 50 --rate-cv 0.5 --robust 0.95 -o robust.plan.yaml
    """
    from trimtab.study import sweep as sw
    from trimtab.cli.sweep_report import plot as do_plot, progress_bar, results_table, robust_lines, write_csv

    if sets and scenarios:
        raise InputError([Problem("--set/--scenarios", "give a grid (--set) or scenarios "
                                                       "(--scenarios), not both")])
    if robust is not None and not scenarios:
        raise InputError([Problem("--robust", "needs --scenarios N (the scenarios the plan must hold in)")])
    if robust is not None and (csv_path or plot or analytic or check):
        raise InputError([Problem("--robust", "prints every candidate's cost and share and writes the "
                                              "plan with -o; --csv, --plot, --analytic and --check "
                                              "do not apply")])
    s = load_spec(spec, profile_dir=profiles)
    if robust is None:  # build (and validate) every point before starting Ray
        points = (sw.scenario_points(s, scenarios, rate_cv, length_cv, input_cv, seed) if scenarios
                  else sw.grid_points(s, sw.parse_sets(sets or [])))
    ex = sw.make_executor("serial" if serial else "auto", address, workers)
    try:
        with progress_bar(err, "planning") as progress:
            if robust is not None:
                r = sw.robust_plan(s, robust, scenarios, rate_cv=rate_cv, length_cv=length_cv,
                                   input_cv=input_cv, seed=seed, check_seeds=check_seeds, executor=ex,
                                   backend=solver.value if solver else None, time_limit_s=time_limit,
                                   progress=lambda lab, d, t: progress(d, t, lab))
            else:
                res = sw.run_points(s, points, executor=ex, check=check, check_seeds=check_seeds,
                                    backend=solver.value if solver else None, time_limit_s=time_limit,
                                    validate=not analytic, progress=progress)
    finally:
        ex.close()
    js = fmt == TableOrJson.json
    log = err if js else out  # under --format json stdout holds the document alone
    if robust is not None:
        if js:
            sys.stdout.write(json.dumps({"spec": s.name, "robust": r.to_dict()}, indent=2) + "\n")
        else:
            for line in robust_lines(r):
                out.print(line, markup=False)
        if output is not None:
            output.parent.mkdir(parents=True, exist_ok=True)
            output.write_text(emit(r.plan), encoding="utf-8")
            log.print(f"plan written to {output}", markup=False)
        return
    if js:
        sys.stdout.write(json.dumps({"spec": s.name, "executor": ex.name,
                                     "points": [x.to_dict(p) for x, p in zip(res, points)]}, indent=2) + "\n")
    else:
        out.print(results_table(res, f"sweep of {s.name} ({ex.name}, {len(points)} points)"))
    if csv_path is not None:
        write_csv(res, points, csv_path)
        log.print(f"results written to {csv_path}", markup=False)
    if plot is not None:
        do_plot(res, points, plot, f"{s.name}: plan cost per point")
        log.print(f"plot written to {plot}", markup=False)
    missing = [r for r in res if r.status == "misses"]
    if missing:  # a plan its own validation shows missing is not a success (plan's exit 7)
        err.print("[bold red]error[/] (plan misses):", markup=True)
        for r in missing:
            err.print(f"  point {r.index} ({r.label}): {r.message}", markup=False)
        raise typer.Exit(int(ExitCode.PLAN_MISSES))
