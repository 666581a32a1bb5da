"""Serial against Ray for the same sweep: wall seconds, speed-up, and that the results are equal.

    python benchmarks/sweep_speed.py --spec examples/robust.yaml --scenarios 8 --workers 2 [--analytic]

Plans ``--scenarios`` sampled scenarios (``--rate-cv``, ``--length-cv``, ``--seed``) once serially in this
process and once as Ray tasks on a local Ray with ``--workers`` CPUs; prints the wall time of each (Ray's
start apart), the speed-up without and with the start, the load average before and after (on a shared machine
the speed-up is bounded by the idle cores, not by ``--workers``), and whether the two result lists are equal.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trimtab.spec.load import load_spec  # noqa: E402
from trimtab.study.sweep import RayExecutor, SerialExecutor, run_points, scenario_points  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", default="examples/robust.yaml")
    ap.add_argument("--scenarios", type=int, default=8)
    ap.add_argument("--rate-cv", type=float, default=0.3)
    ap.add_argument("--length-cv", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--analytic", action="store_true", help="plan without validation by simulation")
    args = ap.parse_args()
    spec = load_spec(args.spec)
    pts = scenario_points(spec, args.scenarios, args.rate_cv, args.length_cv, 0.0, args.seed)
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    serial = run_points(spec, pts, executor=SerialExecutor(), validate=not args.analytic)
    t_serial = time.perf_counter() - t0
    t0 = time.perf_counter()
    ex = RayExecutor(workers=args.workers)
    t_start = time.perf_counter() - t0
    t0 = time.perf_counter()
    on_ray = run_points(spec, pts, executor=ex, validate=not args.analytic)
    t_ray = time.perf_counter() - t0
    ex.close()
    load1 = os.getloadavg()
    print("| spec | points | CPUs | workers | serial s | Ray start s | Ray s | speed-up | "
          "with start | equal | "
          f"load before/after |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    print(f"| {spec.name} | {len(pts)} | {os.cpu_count()} | {args.workers} | "
          f"{t_serial:.1f} | {t_start:.1f} | "
          f"{t_ray:.1f} | {t_serial / t_ray:.2f} | {t_serial / (t_ray + t_start):.2f} | {on_ray == serial} | "
          f"{load0[0]:.1f} / {load1[0]:.1f} |")


if __name__ == "__main__":
    main()
