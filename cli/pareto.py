"""``trimtab pareto``: the cost vs latency frontier, its points planned as Ray tasks when Ray is installed
(logic in ``trimtab.study.pareto``; docs/solvers.md "Pareto", docs/scale.md)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
import yaml

from trimtab.cli.common import (AddressOpt, ProfilesOpt, SerialOpt, Solver, TableOrJson, WorkersOpt, err,
                                exit_misses, out, refuse_to_write)
from trimtab.errors import InfeasibleError
from trimtab.api import load_spec
from trimtab.contract.write import emit


def pareto_cmd(
    spec: Annotated[Path, typer.Argument(help="Spec YAML.")],
    metric: Annotated[str, typer.Option(help="ttft_p99 (TTFT at each workload's SLO percentile), "
                                             "ttft or tpot.")] = "ttft_p99",
    workload: Annotated[Optional[list[str]], typer.Option(help="Tighten only this workload's SLO "
                                                               "(repeatable; default all).")] = None,
    points: Annotated[int, typer.Option(min=1, max=50, help="SLO levels to try.")] = 8,
    plot: Annotated[Optional[Path], typer.Option(help="Write the frontier as a PNG here.")] = None,
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Write point-NN.yaml (plan) and "
                                                                          "point-NN.spec.yaml here.")] = None,
    solver: Annotated[Optional[Solver],
                      typer.Option(help="MILP backend; overrides the spec's solver.backend.")] = None,
    analytic: Annotated[bool, typer.Option("--analytic", help="Plan each point with the cost model "
                                                              "only (fast; points are not validated by "
                                                              "simulation).")] = False,
    serial: SerialOpt = False,
    address: AddressOpt = None,
    workers: WorkersOpt = None,
    fmt: Annotated[TableOrJson, typer.Option("--format",
                                             help="table, or json (the document "
                                                  "alone on stdout).")] = TableOrJson.table,
    profiles: ProfilesOpt = None,
    allow_misses: Annotated[bool, typer.Option("--allow-misses", help="Write the points even when its own "
                                               "validation still shows a workload below its SLO (marked with "
                                               "misses; exit 7 all the same).")] = False,
) -> None:
    """Cost vs latency frontier: the cheapest plan at each tighter SLO (each point planned as trimtab plan
    plans, validated by simulation, unless --analytic), non-dominated points only (one whose own validation
    still shows a miss is refused, exit 7, unless --allow-misses). The points are planned as Ray tasks when
    Ray is installed (local, or --address), as trimtab sweep's; --serial: in this process.

    Example: trimtab pareto examples/quickstart.yaml --metric ttft_p99 --plot frontier.png
    """
    from trimtab.study import sweep as sw
    from trimtab.cli.plots import plot_frontier as do_plot
    from trimtab.study.pareto import pareto as do_pareto
    from trimtab.cli.sweep_report import progress_bar

    s = load_spec(spec, profile_dir=profiles)
    ex = sw.make_executor("serial" if serial else "auto", address, workers)
    try:
        with progress_bar(err, "planning points") as progress:
            pts = do_pareto(s, metric, workload or None, points, solver.value if solver else None,
                            validate=not analytic, executor=ex, progress=progress)
    finally:
        ex.close()
    if not pts:
        raise InfeasibleError(["no point of the frontier is feasible (see trimtab explain)"])
    named = [(f"point {i}", p.plan) for i, p in enumerate(pts, 1)]
    refuse_to_write(named, allow_misses, "point")
    log = err if fmt == TableOrJson.json else out
    log.print("analytic: cost model only; points are not validated by simulation (check them before use)"
              if analytic else "each point is a plan as trimtab plan makes it (validated by simulation)",
              markup=False)
    if fmt == TableOrJson.json:
        sys.stdout.write(json.dumps({"metric": metric, "validated": not analytic, "points": [
            {"slo_factor": p.factor, "cost_usd_per_hour": p.cost_usd_per_hour, "metric_ms": p.metric_ms}
            for p in pts]}, indent=2) + "\n")
    else:
        out.print(f"{'#':>3} {'SLO factor':>10} {'cost $/h':>10} {metric + ' ms':>14}", markup=False)
        for i, p in enumerate(pts, 1):
            out.print(f"{i:>3} {p.factor:>10.3f} {p.cost_usd_per_hour:>10.2f} {p.metric_ms:>14.1f}",
                      markup=False)
    if output is not None:
        output.mkdir(parents=True, exist_ok=True)
        for i, p in enumerate(pts, 1):
            (output / f"point-{i:02d}.yaml").write_text(emit(p.plan), encoding="utf-8")
            (output / f"point-{i:02d}.spec.yaml").write_text(
                yaml.safe_dump(p.spec.model_dump(mode="json", exclude_none=True), sort_keys=False),
                encoding="utf-8")
        log.print(f"{len(pts)} plans written to {output}", markup=False)
    if plot is not None:
        do_plot(pts, str(plot), metric, f"{s.name}: cost vs {metric}")
        log.print(f"plot written to {plot}", markup=False)
    exit_misses(named, "points")
