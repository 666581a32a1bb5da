"""CPU seconds of one validating simulation of a generated spec's plan: the one event loop over all arrivals
against one loop per deployment (``trimtab.sim.reuse``), and a second simulation of the same seed taking every
deployment's run from the first (what a planning round pays for deployments it did not change).

    python benchmarks/sim_split_speed.py --size target --seed 0 --requests 60000

The plan is the analytic one (``validate=False``) of ``benchmarks/specgen.py``'s spec (size, seed). The three
results must be identical (checked: the script fails otherwise); the table gives CPU seconds (this process
only), engine steps and the speed-up. Runs in one process (``TRIMTAB_JOBS=1``): forked deployment runs
(``trimtab.sim.parallel``) would move CPU seconds to children this count does not see.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["TRIMTAB_JOBS"] = "1"  # (module docstring)

from benchmarks.specgen import family, parse_size  # noqa: E402
from trimtab.api import plan  # noqa: E402
from trimtab.sim import simulate  # noqa: E402
from trimtab.sim.reuse import RunCache  # noqa: E402
from trimtab.spec.load import load_spec  # noqa: E402


def _cpu(f):
    t = time.process_time()
    out = f()
    return out, time.process_time() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="target")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--requests", type=int, default=60_000)
    args = ap.parse_args()
    name, text = family(parse_size(args.size), 1, args.seed)[0]
    spec = load_spec(f"{name}.yaml", text=text)
    r = plan(spec, validate=False)
    kw = dict(ir=r.ir, seed=0, requests=args.requests, timeline=False)
    whole, t_whole = _cpu(lambda: simulate(r.plan, spec, progress=lambda f: None, **kw))
    cache = RunCache()
    split, t_split = _cpu(lambda: simulate(r.plan, spec, cache=cache, **kw))
    again, t_again = _cpu(lambda: simulate(r.plan, spec, cache=cache, **kw))
    same = [{k: v for k, v in x.to_dict().items() if k != "wall_s"} for x in (whole, split, again)]
    if not same[0] == same[1] == same[2]:
        sys.exit("per-deployment runs differ from the whole run")
    print(f"{name}: {len(r.plan.deployments)} deployments, {args.requests:,} requests, "
          f"{whole.steps:,} engine steps")
    print("| run | CPU s | speed-up |\n|---|---:|---:|")
    for label, t in (("one event loop over all arrivals", t_whole), ("one loop per deployment", t_split),
                     (f"same seed again, {cache.hits} of {cache.hits + cache.misses} runs reused", t_again)):
        print(f"| {label} | {t:.2f} | {t_whole / t:.1f}x |")


if __name__ == "__main__":
    main()
