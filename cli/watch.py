"""``trimtab watch``: read a running deployment's engine metrics, test them against the plan and the SLOs, and
propose the next mapping (logic in ``trimtab.online.watch``; docs/online.md, "Watching a deployment")."""
from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from trimtab.cli.common import ProfilesOpt, TableOrJson, err, out
from trimtab.api import load_spec
from trimtab.errors import InputError, Problem
from trimtab.gate.analytic import load_plan


def _table(obs) -> None:
    parts = []
    for g, row in obs.groups.items():
        rate = row["rate_rps"]
        parts.append(f"{g} {rate if rate is not None else '-'} rps (ref {row['reference_rps']})"
                     + (" CHANGED" if row["rate_change"] else ""))
    risk = [w for w, v in obs.workloads.items() if v["at_risk"]]
    out.print(f"[{obs.round}] " + "; ".join(parts) + (f"; at risk: {', '.join(risk)}" if risk else "")
              + (f"; down: {', '.join(obs.failed)}" if obs.failed else ""), markup=False)
    for n in obs.notes:
        out.print(f"  note: {n}", markup=False)
    p = obs.proposal
    if p is None:
        return
    out.print(f"proposal {p.number} ({p.folder}):", markup=False)
    for r in p.reasons:
        out.print(f"  why: {r}", markup=False)
    for d, (a, b) in p.replicas.items():
        out.print(f"  {d}: {a} -> {b} replica(s)", markup=False)
    out.print(f"  cost {p.cost_usd_per_hour[0]:.2f} -> {p.cost_usd_per_hour[1]:.2f} $/h, start-ups "
              f"{p.transition_usd:.2f} $; rates planned: "
              + ", ".join(f"{w} {v:.3g} rps" for w, v in p.rates_rps.items()), markup=False)
    out.print(f"  check: {'passed' if p.check_ok else 'FAILED'}"
              + (f"; protects {', '.join(p.protects)}" if p.protects else ""), markup=False)
    for v in p.check_violations:
        out.print(f"    {v}", markup=False)
    if p.manifests != "k8s":
        out.print(f"  manifests {p.manifests}", markup=False)
    if p.applied:
        out.print(f"  apply: {p.applied}", markup=False)


def watch_cmd(
    plan_path: Annotated[Path, typer.Option("--plan", help="The running plan (written by trimtab plan).")],
    spec: Annotated[Path, typer.Option("--spec", help="The spec it was made from (SLOs, GPUs, prices).")],
    metrics: Annotated[list[str], typer.Option("--metrics", help="An engine's Prometheus endpoint "
                                               "(http://HOST:PORT, or its /metrics URL), one per replica: "
                                               "DEPLOYMENT=URL (repeat for its replicas), or bare URLs in "
                                               "the plan's order of deployments and replicas; "
                                               "repeatable.")],
    prometheus: Annotated[Optional[str], typer.Option("--prometheus", help="Read the engines' metrics from "
                                                      "this Prometheus server's query API "
                                                      "(http://HOST:9090); --metrics then gives instance "
                                                      "labels (HOST:PORT), DEPLOYMENT=INSTANCE or in the "
                                                      "plan's order.")] = None,
    output: Annotated[Path, typer.Option("--out", help="Folder for the proposals (plan.yaml, k8s/, "
                                                       "proposal.json each).")] = Path("proposals"),
    interval: Annotated[float, typer.Option(min=0.05, help="Seconds between scrapes.")] = 15.0,
    iterations: Annotated[Optional[int], typer.Option("--iterations", min=1, help="Stop after this many "
                                                      "scrapes (default: run until interrupted).")] = None,
    once: Annotated[bool, typer.Option("--once", help="Two scrapes one interval apart, then stop.")] = False,
    alpha: Annotated[float, typer.Option(help="False-alarm probability per look of each test (rate and "
                                              "length per deployment, SLO per workload).")] = 1e-4,
    windows: Annotated[int, typer.Option(min=1, help="Recent intervals the tests look at.")] = 8,
    min_lifetime: Annotated[int, typer.Option(min=0, help="Intervals after a proposal before the next (a new "
                                                          "failure excepted).")] = 6,
    dead_after: Annotated[int, typer.Option(min=1, help="Failed scrapes in a row that make a replica "
                                                        "failed.")] = 2,
    max_moves: Annotated[Optional[int], typer.Option("--max-moves", min=0, help="At most this many replicas "
                                                     "started plus stopped per proposal.")] = None,
    horizon: Annotated[float, typer.Option(min=0.01, help="Hours a proposal runs: a cheaper plan must pay "
                                                          "back its start-ups within them.")] = 24.0,
    analytic: Annotated[bool, typer.Option("--analytic", help="Re-plan and check with the cost model only "
                                                              "(no simulation).")] = False,
    calibrate: Annotated[bool, typer.Option("--calibrate", help="Before each proposal, move the engine "
                                                                "profile's step and request overheads toward "
                                                                "the measured TPOT and TTFT (bounded; logged "
                                                                "in OUT/calibration).")] = False,
    apply: Annotated[bool, typer.Option("--apply", help="kubectl apply -f each proposal's manifests (off by "
                                                        "default: proposals only).")] = False,
    fmt: Annotated[TableOrJson, typer.Option("--format", help="json: one JSON object per line and "
                                                              "scrape.")] = TableOrJson.table,
    profiles: ProfilesOpt = None,
) -> None:
    """Watch a running plan's engines (vLLM /metrics) and propose the next mapping on a rate change, an SLO at
    risk or a failed replica: the re-plan, its check, its manifests.

    Example: trimtab watch --plan plan.yaml --spec spec.yaml --metrics chat-l4-tp1-t2k=http://10.0.0.5:8000
    """
    from trimtab.online.schedule_watch import ScheduleWatcher
    from trimtab.online.watch import Watcher, targets_for

    if apply and shutil.which("kubectl") is None:
        raise InputError([Problem("--apply", "kubectl is not on PATH")], "arguments")
    plan = load_plan(plan_path)
    if prometheus is not None and not prometheus.startswith(("http://", "https://")):
        raise InputError([Problem("--prometheus", f"expected http://HOST:PORT, got {prometheus!r}")],
                         "arguments")
    targets = targets_for(plan, metrics, instances=prometheus is not None)
    # a schedule: the window the UTC clock is in is the plan (trimtab.online.schedule_watch)
    make = Watcher if plan.schedule is None else ScheduleWatcher
    w = make(plan, load_spec(spec, profile_dir=profiles), targets, out_dir=output, alpha=alpha,
             windows=windows, min_lifetime=min_lifetime, dead_after=dead_after, analytic=analytic,
             horizon_h=horizon, max_moves=max_moves, apply=apply, calibrate=calibrate,
             prometheus=prometheus)
    n = 2 if once else iterations
    start = time.monotonic()
    i = 0
    try:
        while n is None or i < n:
            obs = w.step()
            if fmt is TableOrJson.json:
                sys.stdout.write(json.dumps({**obs.to_dict(), "t": round(obs.t - start, 3)}) + "\n")
                sys.stdout.flush()
            else:
                _table(obs)
            i += 1
            if n is None or i < n:
                # the next scrape on the interval's grid: a slow re-plan shortens the wait, never shifts it
                time.sleep(max(0.0, start + i * interval - time.monotonic()))
    except KeyboardInterrupt:  # stopping a watch is its normal end (exit 0), not an error
        err.print(f"stopped after {i} scrape(s)", markup=False)
    if w.proposals:
        err.print(f"{len(w.proposals)} proposal(s) written to {output}", markup=False)
