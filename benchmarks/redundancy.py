"""The cost of ``redundancy: n+1`` against none (docs/online.md, "Redundancy"), and both plans checked with
each node removed.

    python benchmarks/redundancy.py examples/quickstart.yaml [--scale-gpus 4] [--out
    benchmarks/data/redundancy.json]

For each spec: ``plan`` with redundancy none and n+1 (both validated by simulation, as ``trimtab plan``), then
``check --fail-each-node`` of both (simulated, 3 unused seeds per kind of node loss). ``--scale-gpus K``
multiplies every GPU count (more nodes per type: the spare of n+1 is about 1 / nodes).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trimtab.api import load_spec, plan  # noqa: E402
from trimtab.gate.nodeloss import check_each_node, worst_loss  # noqa: E402
from trimtab.gate.simulated import check_simulated  # noqa: E402
from trimtab.spec.overrides import apply_overrides  # noqa: E402


def one(spec, label: str) -> dict:
    t0 = time.perf_counter()
    r = plan(spec)
    plan_s = time.perf_counter() - t0
    whole, _ = check_simulated(r.plan, spec)
    losses = check_each_node(r.plan, spec)
    worst = worst_loss(losses)
    return {"label": label, "usd_per_hour": r.plan.cost_usd_per_hour, "gpus": r.plan.gpus,
            "plan_s": round(plan_s, 1), "rounds": r.rounds, "plan_check_ok": whole.ok,
            "node_loss_ok": all(x.report.ok for x in losses), "kinds": len(losses),
            "failing_kinds": sum(not x.report.ok for x in losses),
            "worst_node": worst.nodes[0] if worst else None,
            "worst_margin": round(worst.margin, 4) if worst and worst.margin > -1e9 else None,
            "worst_violations": worst.report.violations[:3] if worst else []}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("specs", nargs="+")
    ap.add_argument("--scale-gpus", type=int, default=1)
    ap.add_argument("--out")
    a = ap.parse_args()
    rows = []
    for path in a.specs:
        base = load_spec(path)
        if a.scale_gpus != 1:
            base = apply_overrides(base, {f"gpus.{g.type}.count": g.count * a.scale_gpus for g in base.gpus})
        for red in ("none", "n+1"):
            spec = apply_overrides(base, {"redundancy": red})
            row = one(spec, f"{Path(path).stem} x{a.scale_gpus} {red}")
            rows.append(row)
            print(json.dumps(row), flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
