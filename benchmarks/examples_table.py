"""The README's and docs' example figures, re-measured.

Every bundled example planned as ``trimtab plan`` plans it (validated on three seeds), with the comparison
each doc quotes, and ``check`` at seeds the planner did not use.

    python benchmarks/examples_table.py [--seeds 2000,2001,2002]

Prints one row per (example, variant): $/h, GPUs, solve rounds, wall seconds, the pooled attainment per
workload at the unused seeds and whether check passes.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import trimtab as tt
from trimtab.milp import disagg
from trimtab.errors import InfeasibleError
from trimtab.gate.simulated import check_simulated
from trimtab.spec.overrides import apply_overrides

ROOT = Path(__file__).resolve().parent.parent
EX = ROOT / "examples"

# (example, variant name, overrides, P/D enabled)
VARIANTS = [
    ("quickstart", "mixed fleet", {}, True),
    ("quickstart", "H100 only", {"gpus.a100-80gb.count": 0, "gpus.l40s.count": 0, "gpus.l4.count": 0}, True),
    ("disaggregated", "with P/D", {}, True),
    ("disaggregated", "unified only", {}, False),
    ("long-context", "kv_tiers: auto", {}, True),
    ("long-context", "kv_tiers: off", {"defaults.kv_tiers": "off"}, True),
    ("long-context", "experimental-live", {"defaults.kv_tiers": "experimental-live"}, True),
    ("shared-prefix", "with prefix", {}, True),
    ("multi-lora", "as given", {}, True),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="2000,2001,2002", help="check seeds (unused by plan)")
    ap.add_argument("--only", default="", help="comma-separated example names")
    args = ap.parse_args()
    first = int(args.seeds.split(",")[0])
    n = len(args.seeds.split(","))
    only = set(filter(None, args.only.split(",")))
    print(f"{'example':<15} {'variant':<15} {'$/h':>8} {'rounds':>6} {'s':>6}  gpus; attainment at "
          f"seeds {args.seeds}")
    for name, variant, over, pd in VARIANTS:
        if only and name not in only:
            continue
        spec = tt.load_spec(EX / f"{name}.yaml")
        if over:
            spec = apply_overrides(spec, over)
        disagg.ENABLED = pd
        try:
            t0 = time.perf_counter()
            try:
                r = tt.plan(spec)
            except InfeasibleError as exc:
                print(f"{name:<15} {variant:<15} infeasible: {str(exc).splitlines()[0]}")
                continue
            dt = time.perf_counter() - t0
            rep, res = check_simulated(r.plan, spec, seed=first, seeds=n)
        finally:
            disagg.ENABLED = True
        att = ", ".join(f"{k} {iv.mean:.2%}" for k, iv in res.intervals.items())
        gpus = " + ".join(f"{c} x {g}" for g, c in r.plan.gpus.items())
        print(f"{name:<15} {variant:<15} {r.plan.cost_usd_per_hour:>8.2f} {r.rounds:>6} "
              f"{dt:>6.1f}  {gpus}; {att}; "
              f"check {'passes' if rep.ok else 'FAILS'}", flush=True)


if __name__ == "__main__":
    main()
