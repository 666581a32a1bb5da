"""Median time to plan a spec, in-process and as the CLI a user runs.

usage: python benchmarks/plan_speed.py [SPEC] [--repeats N]      (default: examples/quickstart.yaml, 7
repeats)

Reports the rounds and the median and min/max of: ``trimtab.plan`` in a warm process (per stage: lower,
candidates, solve, simulate, total), and ``trimtab plan`` as a
fresh process (imports included), which is what the "plans in under 5 s" target is about.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's compiler, not an installed one (as the CLI runs below)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("spec", nargs="?", default=str(ROOT / "examples" / "quickstart.yaml"))
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()

    import trimtab as tt

    spec = tt.load_spec(args.spec)
    tt.plan(spec)  # warm caches (profiles, imports)
    stages: dict[str, list[float]] = {}
    rounds = []
    for _ in range(args.repeats):
        r = tt.plan(spec)
        rounds.append(r.rounds)
        for k, v in r.seconds.items():
            stages.setdefault(k, []).append(v)
    print(f"spec: {args.spec}  ({args.repeats} repeats)  rounds: median {statistics.median(rounds):g}, "
          f"max {max(rounds)}")
    print("in-process, warm:")
    for k, v in stages.items():
        print(f"  {k:<11} median {statistics.median(v):7.3f} s   min {min(v):7.3f}   max {max(v):7.3f}")
    cli = []
    with tempfile.TemporaryDirectory() as d:
        for _ in range(args.repeats):
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "trimtab.cli.main", "plan", args.spec, "-o", f"{d}/p.yaml"],
                           cwd=ROOT, check=True, capture_output=True)
            cli.append(time.perf_counter() - t)
    print(f"CLI, fresh process: median {statistics.median(cli):.3f} s   min {min(cli):.3f}   "
          f"max {max(cli):.3f}")


if __name__ == "__main__":
    main()
