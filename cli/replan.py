"""``trimtab replan``: re-plan a running deployment after drift or failures, keeping as much of it as pays
(logic in ``trimtab.online.replan``; docs/online.md)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from trimtab.cli.common import (ProfilesOpt, Solver, TableOrJson, err, exit_misses, out, plan_path,
                                refuse_to_write, steps)
from trimtab.api import load_spec
from trimtab.contract.write import emit
from trimtab.gate.analytic import load_plan


def replan_cmd(
    spec: Annotated[Path, typer.Option("--spec",
                                       help="The spec as it is now (rates, lengths, prices, GPUs).")],
    plan_opt: Annotated[Optional[Path], typer.Option("--plan", help="The running plan (written by trimtab "
                                                     "plan).")] = None,
    current: Annotated[Optional[Path], typer.Option("--current", help="Deprecated spelling of "
                                                                      "--plan.")] = None,
    max_moves: Annotated[Optional[int], typer.Option("--max-moves", min=0, help="At most this many replicas "
                                                     "started plus stopped.")] = None,
    fail: Annotated[Optional[list[str]], typer.Option("--fail", help="node=NAME (a node of the "
                                                      "running plan's placement), gpus.TYPE=-N (N "
                                                      "GPUs lost) or replica=DEPLOYMENT/INDEX (one replica "
                                                      "gone, its GPUs kept); repeatable.")] = None,
    horizon: Annotated[float, typer.Option(min=0.01, help="Hours the re-plan runs: a cheaper plan "
                                                          "must pay back its start-ups within them.")] = 24.0,
    stop_usd: Annotated[float, typer.Option(min=0, help="Cost charged per replica stopped, $.")] = 0.0,
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Write the re-plan here.")] = None,
    fmt: Annotated[TableOrJson, typer.Option("--format", help="Report format.")] = TableOrJson.table,
    solver: Annotated[Optional[Solver],
                      typer.Option(help="MILP backend; overrides the spec's solver.backend.")] = None,
    time_limit: Annotated[Optional[float],
                          typer.Option(min=0.01, help="Wall-clock safety net per plan (solves and "
                                                      "simulations), seconds.")] = None,
    analytic: Annotated[bool, typer.Option("--analytic", help="Cost model only (no validation by "
                                                              "simulation).")] = False,
    profiles: ProfilesOpt = None,
    allow_misses: Annotated[bool, typer.Option("--allow-misses", help="Write the re-plan even when its own "
                                               "validation still shows a workload below its SLO (marked with "
                                               "misses; exit 7 all the same).")] = False,
) -> None:
    """Re-plan a running plan for the spec as it is now, with the fewest replica moves that pay; reports the
    moves and start-up cost next to a from-scratch plan's. A re-plan whose own validation still shows a miss
    is refused (exit 7) unless --allow-misses.

    Example: trimtab replan --plan plan.yaml --spec examples/quickstart.yaml --fail node=h100-sxm-0
    """
    from trimtab.online.replan import count_moves, replan

    cur = load_plan(plan_path(plan_opt, current, "--current"))
    s = load_spec(spec, profile_dir=profiles)
    with steps(err, "replan") as say:
        r = replan(cur, s, max_moves=max_moves, fail=list(fail or []), horizon_h=horizon, stop_usd=stop_usd,
                   backend=solver.value if solver else None, time_limit_s=time_limit, validate=not analytic,
                   progress=say)
    refuse_to_write([("re-plan", r.plan)], allow_misses, "re-plan")
    if output is not None:
        output.write_text(emit(r.plan))
    rows = {"replan": (r.plan, r.moves, r.transition_usd), "from scratch": (r.fresh, r.fresh_moves,
                                                                            r.fresh_transition_usd)}
    if fmt is TableOrJson.json:
        sys.stdout.write(json.dumps({
            "failure": {"lost_gpus": r.failure.lost_gpus, "lost_replicas": r.failure.lost_replicas,
                        "nodes": list(r.failure.nodes)},
            **{k.replace(" ", "_"): {"cost_usd_per_hour": p.cost_usd_per_hour, "moves": count_moves(mv),
                                     "transition_usd": usd,
                                     "diff": {d: {"started": a, "stopped": b} for d, (a, b) in mv.items()}}
               for k, (p, mv, usd) in rows.items()}}, indent=2) + "\n")
        return
    if r.failure.lost_replicas or r.failure.lost_gpus:
        out.print(f"failure: lost {', '.join(f'{n} x {g}' for g, n in r.failure.lost_gpus.items())} "
                  "GPUs; replicas gone: "
                  f"{', '.join(f'{d} x{n}' for d, n in r.failure.lost_replicas.items()) or 'none'}",
                  markup=False)
    for k, (p, mv, usd) in rows.items():
        out.print(f"{k}: {p.cost_usd_per_hour:.2f} $/h, {count_moves(mv)} replica move(s), "
                  f"start-ups {usd:.2f} $",
                  markup=False)
        for d, (a, b) in mv.items():
            out.print(f"  {d}: " + ", ".join(x for x in (f"+{a} started" if a else "",
                                                         f"-{b} stopped" if b else "")
                                            if x), markup=False)
    if output is not None:
        err.print(f"re-plan written to {output}", markup=False)
    exit_misses([("re-plan", r.plan)], "re-plan")
