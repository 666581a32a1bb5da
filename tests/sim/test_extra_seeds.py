"""``simulate_seeds``'s extra seeds, driven through the real simulator (the Monte Carlo in test_interval.py covers
the statistics of ``combine``/``undecided``/``accepted``; this covers the loop that feeds them).

A plan of two deployments, one per workload: ``easy`` (a lax SLO, passes clearly on the first seed) and ``tight``
(its TTFT SLO set, from the simulated TTFTs themselves, so that its pooled attainment over the PLAN_SEEDS seeds
lies just above its target: at or above target, lower bound below it). The planner's call must then run further
seeds on ``tight`` alone, pool them at SEQUENTIAL_CONFIDENCE, and stop as soon as nothing is undecided."""
from __future__ import annotations

import numpy as np

from compiler.cost.factory import replica_model
from compiler.lower import lower
from compiler.plan.schema import Deployment, Plan, Route, SolverInfo
from compiler.sim import simulate
from compiler.sim.validate import (EXTRA_SEEDS, SEQUENTIAL_CONFIDENCE, combine, interval, simulate_seeds, undecided,
                                   validation_seeds)
from compiler.spec.load import load_spec

REQUESTS = 3000
SPEC = """\
version: 1
name: extra-seeds
gpus:
  - {{type: h100-sxm, count: 8}}
models:
  - name: llama-3.1-8b
workloads:
  - name: tight
    model: llama-3.1-8b
    rate_rps: 10
    input_tokens: {{lognormal: {{median: 1200, p99: 5000}}}}
    output_tokens: {{fixed: 32}}
    slo: {{ttft_ms: {ttft}, tpot_ms: 10000, percentile: 90}}
  - name: easy
    model: llama-3.1-8b
    rate_rps: 2
    input_tokens: {{fixed: 256}}
    output_tokens: {{fixed: 32}}
    slo: {{ttft_ms: 60000, tpot_ms: 10000, percentile: 90}}
"""


def _setup(tmp_path, ttft_ms: float):
    p = tmp_path / "spec.yaml"
    p.write_text(SPEC.format(ttft=f"{ttft_ms:.3f}"))
    spec = load_spec(p)
    ir = lower(spec)
    deps, routes = [], []
    for name, w in (("d", ir.workload("tight")), ("e", ir.workload("easy"))):
        rm = replica_model(ir, w.model, "h100-sxm", 1, 1, "bf16", 256, 2048)
        deps.append(Deployment(name=name, model=w.model, gpu="h100-sxm", tensor_parallel=1, pipeline_parallel=1,
                               replicas=1, role="unified", dtype="bf16", max_batch_size=256,
                               max_num_batched_tokens=2048, kv_cache_tokens=rm.memory.kv_cache_tokens,
                               load_rps_per_replica=0.0, utilization=0.0, engine_args=[]))
        routes += [Route(workload=w.name, bucket=b.name, deployment=name, share=b.prob) for b in w.buckets]
    price = ir.gpu("h100-sxm").usd_per_hour
    plan = Plan(spec=ir.name, input_hash=ir.input_hash, cost_usd_per_hour=2 * price, gpus={"h100-sxm": 2},
                solver=SolverInfo(backend="highs", status="optimal", gap=0.0, seconds=1.0, rounds=1),
                deployments=deps, routes=routes, predictions={}, buckets={})
    return plan, spec, ir


def _slo_just_above_target(tmp_path) -> float:
    """A TTFT SLO at which ``tight`` meets its 90 % target on the pooled base seeds with ~0.5 % to spare: the
    pooled 90.5th percentile of the TTFTs the base seeds simulate (the schedule does not depend on the SLO)."""
    plan, spec, ir = _setup(tmp_path, 1e6)
    tt = np.concatenate([simulate(plan, spec, ir=ir, seed=s, requests=REQUESTS, timeline=False).samples["tight"][0]
                         for s in validation_seeds(0)])
    return float(np.quantile(tt, 0.905)) * 1e3


def test_an_undecided_workload_gets_extra_seeds_alone_and_is_pooled_at_sequential_confidence(tmp_path):
    plan, spec, ir = _setup(tmp_path, _slo_just_above_target(tmp_path))
    base = validation_seeds(0)
    runs = [simulate(plan, spec, ir=ir, seed=s, requests=REQUESTS, timeline=False) for s in base]
    pooled = combine(base, runs)
    # The construction: tight undecided after the base seeds, easy accepted (else the test proves nothing).
    assert undecided(pooled) == {"tight"}, (pooled.describe("tight"), pooled.describe("easy"))
    assert pooled.accepted("easy")

    res = simulate_seeds(plan, spec, ir, base, REQUESTS, fail_fast=True)

    extra = res.seeds[len(base):]
    assert 1 <= len(extra) <= EXTRA_SEEDS
    assert extra == tuple(range(base[-1] + 1, base[-1] + 1 + len(extra)))  # the next seeds, in order
    # easy passed clearly on the first seed: every later run, extra seeds included, simulates tight's deployment only
    for r in res.runs[1:]:
        assert set(r.workloads) == {"tight"} and set(r.deployments) == {"d"}
    # tight's interval pools every run, at the stricter confidence; easy keeps its first-seed interval.
    full = [simulate(plan, spec, ir=ir, seed=s, requests=REQUESTS, timeline=False) for s in res.seeds]
    assert res.intervals["tight"] == interval([r.workloads["tight"].batches for r in full], SEQUENTIAL_CONFIDENCE)
    assert res.intervals["easy"] == interval([runs[0].workloads["easy"].batches])
    assert res.intervals["tight"].lower < interval([r.workloads["tight"].batches for r in full]).lower
    # It stops as soon as nothing is undecided, else after EXTRA_SEEDS.
    assert not undecided(res) or len(extra) == EXTRA_SEEDS
    for k in range(1, len(extra)):  # ... and not before: every earlier look left tight undecided
        assert undecided(combine(res.seeds[:len(base) + k], full[:len(base) + k], frozenset({"tight"}))) == {"tight"}


def test_no_extra_seeds_without_fail_fast_or_when_every_workload_is_decided(tmp_path):
    plan, spec, ir = _setup(tmp_path, _slo_just_above_target(tmp_path))
    base = validation_seeds(0)
    assert simulate_seeds(plan, spec, ir, base, REQUESTS).seeds == base  # check's replay: the seeds asked, no more
    lax, spec2, ir2 = _setup(tmp_path, 1e6)
    res = simulate_seeds(lax, spec2, ir2, base, REQUESTS, fail_fast=True)
    assert res.seeds == base[:len(res.runs)] and not undecided(res) and res.ok
