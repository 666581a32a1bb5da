"""The simulator's two exact speed-ups, off and on, on the same runs (one core): decode-only stretches taken
with numpy (``trimtab.sim.replica._bulk``, from BULK_MIN steps) and replicas that run apart between arrivals
(``Simulation.replicas_apart``). Each pair of runs must give the same ``SimResult`` (wall time aside); the
script stops with an error if not.

usage: python benchmarks/sim_exact_speedups.py [--repeats 2] [--target-seeds 0 12]

Runs: ``benchmarks/sim_speed.py``'s hand-built plan (Llama-3.1-8B chat on R H100 replicas, 100,000 requests)
at R = 8, 24, 64; and for specgen's target family (100 workloads / 8 types / 4,096 GPUs) at each given seed,
the plan without validation simulated whole (``default_requests``) and as the planner's run of its rare
workloads (``trimtab.sim.aim_counts`` over two seeds). Prints the median wall seconds off and on and their
ratio.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TRIMTAB_JOBS", "1")  # one core: the runs in this process
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


ON_BULK_MIN = None  # trimtab.sim.replica.BULK_MIN as the code sets it (read at the first toggle)


def _toggle(on: bool) -> None:
    import trimtab.sim.replica as replica
    from trimtab.sim.engine import Simulation

    global ON_BULK_MIN
    if ON_BULK_MIN is None:
        ON_BULK_MIN = replica.BULK_MIN
    replica.BULK_MIN = ON_BULK_MIN if on else 10 ** 9
    Simulation.replicas_apart = on


def _same(a, b) -> bool:
    da, db = a.to_dict(), b.to_dict()
    da.pop("wall_s")
    db.pop("wall_s")
    return da == db


def _ab(label: str, run, repeats: int) -> None:
    times = {False: [], True: []}
    results = {}
    for _ in range(repeats):
        for on in (False, True):
            _toggle(on)
            t = time.perf_counter()
            results[on] = run()
            times[on].append(time.perf_counter() - t)
    if not _same(results[False], results[True]):
        raise SystemExit(f"{label}: the runs differ with the speed-ups on")
    off, on = statistics.median(times[False]), statistics.median(times[True])
    print(f"| {label} | {results[True].steps:,} | {off:.2f} | {on:.2f} | {off / on:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--target-seeds", type=int, nargs="*", default=[0, 12])
    args = ap.parse_args()
    import sim_speed
    from benchmarks.specgen import family, parse_size
    from trimtab.api import plan
    from trimtab.sim import aim_counts, default_requests, simulate
    from trimtab.spec.load import load_spec

    print("| run | engine steps | off s | on s | off / on |")
    print("|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for r in (8, 24, 64):
            p, spec, ir = sim_speed.make(r, Path(tmp))
            _ab(f"sim_speed, {r} replicas, 100,000 requests",
                lambda: simulate(p, spec, ir=ir, requests=100_000,
                                                                               timeline=False), args.repeats)
    specs = family(parse_size("target"), max(args.target_seeds, default=-1) + 1, 0)
    for k in args.target_seeds:
        name, text = specs[k]
        spec = load_spec(f"{name}.yaml", text=text)
        res = plan(spec, validate=False)
        n = default_requests(res.ir)
        counts = aim_counts(res.plan, res.ir, n, [w.name for w in res.ir.workloads], 2)
        _ab(f"target s{k}, whole run ({n:,} requests)",
            lambda: simulate(res.plan, spec, ir=res.ir, seed=1, requests=n, timeline=False), args.repeats)
        _ab(f"target s{k}, rare workloads' run ({len(counts)} workloads, {sum(counts.values()):,} requests)",
            lambda: simulate(res.plan, spec, ir=res.ir, seed=1, counts=counts, timeline=False), args.repeats)


if __name__ == "__main__":
    main()
