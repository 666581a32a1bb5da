"""Simulated requests per wall second (one core): the simulator's speed target is >= 50,000 for 100,000
requests over a plan with at least 20 replicas.

usage: python benchmarks/sim_speed.py [--requests N] [--replicas R ...] [--profile]

The plan is built by hand (no solver): one workload of Llama-3.1-8B chat-like traffic (lognormal prompts,
median 600 tokens; outputs median 120) on R H100 replicas, each at about 60 % prefill utilisation. Reports
wall time, requests per second and engine steps per second for each R; ``--profile`` prints the top of a
cProfile.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SPEC = """\
version: 1
name: bench
gpus:
  - {{type: h100-sxm, count: 1024}}
models:
  - name: llama-3.1-8b
workloads:
  - name: chat
    model: llama-3.1-8b
    rate_rps: {rate}
    input_tokens: {{lognormal: {{median: 600, p99: 6000}}}}
    output_tokens: {{lognormal: {{median: 120, p99: 800}}}}
    slo: {{ttft_ms: 1000, tpot_ms: 60, percentile: 99}}
"""
PER_REPLICA_RPS = 9.0


def make(replicas: int, folder: Path):
    from trimtab.cost.factory import replica_model
    from trimtab.ir.lower import lower
    from trimtab.contract.schema import Deployment, Plan, Route, SolverInfo
    from trimtab.spec.load import load_spec

    p = folder / f"bench{replicas}.yaml"
    p.write_text(SPEC.format(rate=PER_REPLICA_RPS * replicas))
    spec = load_spec(p)
    ir = lower(spec)
    rm = replica_model(ir, "llama-3.1-8b", "h100-sxm", 1, 1, "bf16", 256, 8192)
    dep = Deployment(name="chat-h100", model="llama-3.1-8b", gpu="h100-sxm", tensor_parallel=1,
                     pipeline_parallel=1,
                     replicas=replicas, role="unified", dtype="bf16", max_batch_size=256,
                     max_num_batched_tokens=8192,
                     kv_cache_tokens=rm.memory.kv_cache_tokens, load_rps_per_replica=PER_REPLICA_RPS,
                     utilization=0.0, engine_args=[])
    w = ir.workloads[0]
    plan = Plan(spec="bench", input_hash=ir.input_hash, cost_usd_per_hour=0.0, gpus={"h100-sxm": replicas},
                solver=SolverInfo(backend="highs", status="optimal", gap=0.0, seconds=1.0, rounds=1),
                deployments=[dep], routes=[Route(workload="chat", bucket=b.name, deployment="chat-h100",
                                                 share=b.prob)
                                           for b in w.buckets], predictions={}, buckets={})
    return plan, spec, ir


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--replicas", type=int, nargs="+", default=[24])
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    from trimtab.sim import simulate

    with tempfile.TemporaryDirectory() as tmp:
        for r in args.replicas:
            plan, spec, ir = make(r, Path(tmp))
            simulate(plan, spec, ir=ir, requests=2000, timeline=False)  # warm up
            prof = cProfile.Profile() if args.profile else None
            t0 = time.perf_counter()
            if prof:
                prof.enable()
            res = simulate(plan, spec, ir=ir, requests=args.requests, timeline=False)
            if prof:
                prof.disable()
            wall = time.perf_counter() - t0
            w = res.workloads["chat"]
            d = res.deployments["chat-h100"]
            print(f"replicas {r:4d}  requests {res.requests:8,d}  wall {wall:6.2f} s  "
                  f"{res.requests / wall:9,.0f} req/s  {res.steps / wall:9,.0f} steps/s  "
                  f"({res.steps / res.requests:.1f} steps/request; busy {d.utilization:.0%}, attainment "
                  f"{w.attainment:.1%})")
            if prof:
                pstats.Stats(prof).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
