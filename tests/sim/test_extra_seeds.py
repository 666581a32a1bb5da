"""``simulate_seeds``'s extra seeds, driven through the real simulator (the Monte Carlo in test_interval.py
covers the statistics of ``combine``/``undecided``/``accepted``; this covers the loop that feeds them).

A plan of two deployments, one per workload: ``easy`` (a lax SLO, passes clearly on the first seed) and
``tight`` (its TTFT SLO set, from the simulated TTFTs themselves, so that its pooled attainment over the
PLAN_SEEDS seeds lies just above its target: at or above target, lower bound below it; ``_tight_undecided``).
The planner's call must then run further seeds on ``tight`` alone, pool them at SEQUENTIAL_CONFIDENCE, and
stop as soon as nothing is undecided; a miss on another deployment does not hold that back."""
from __future__ import annotations

import numpy as np

from trimtab.cost.factory import replica_model
from trimtab.ir.lower import lower
from trimtab.contract.schema import Deployment, Plan, Route, SolverInfo
from trimtab.sim import simulate
from trimtab.sim.validate import (EXTRA_SEEDS, LOOK_SEEDS, SEQUENTIAL_CONFIDENCE, combine, interval,
                                  simulate_seeds,
                                   undecided, validation_seeds)
from trimtab.spec.load import load_spec

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
BAD = """\
  - name: bad
    model: llama-3.1-8b
    rate_rps: 2
    input_tokens: {fixed: 256}
    output_tokens: {fixed: 32}
    slo: {ttft_ms: 1, tpot_ms: 10000, percentile: 90}
"""


def _setup(tmp_path, ttft_ms: float, bad: str | None = None):
    """The plan: tight on deployment d, easy on e; ``bad`` (a 1 ms TTFT SLO, missed by every request) on the
    deployment named, if any."""
    p = tmp_path / "spec.yaml"
    p.write_text(SPEC.format(ttft=f"{ttft_ms:.3f}") + (BAD if bad else ""))
    spec = load_spec(p)
    ir = lower(spec)
    deps, routes = [], []
    placed = {"tight": "d", "easy": "e", **({"bad": bad} if bad else {})}
    for name in sorted(set(placed.values())):
        w = ir.workload("easy")
        rm = replica_model(ir, w.model, "h100-sxm", 1, 1, "bf16", 256, 2048)
        deps.append(Deployment(name=name, model=w.model, gpu="h100-sxm", tensor_parallel=1,
                               pipeline_parallel=1,
                               replicas=1, role="unified", dtype="bf16", max_batch_size=256,
                               max_num_batched_tokens=2048, kv_cache_tokens=rm.memory.kv_cache_tokens,
                               load_rps_per_replica=0.0, utilization=0.0, engine_args=[]))
    for wname, name in placed.items():
        routes += [Route(workload=wname, bucket=b.name, deployment=name, share=b.prob)
                   for b in ir.workload(wname).buckets]
    price = ir.gpu("h100-sxm").usd_per_hour
    plan = Plan(spec=ir.name, input_hash=ir.input_hash, cost_usd_per_hour=len(deps) * price,
                gpus={"h100-sxm": len(deps)},
                solver=SolverInfo(backend="highs", status="optimal", gap=0.0, seconds=1.0, rounds=1),
                deployments=deps, routes=routes, predictions={}, buckets={})
    return plan, spec, ir


def _tight_undecided(tmp_path, bad: str | None = None):
    """The plan with ``tight``'s TTFT SLO set so that, on the base seeds, it is undecided (pooled attainment
    at or above its 90 % target, lower bound below it) and at or above target on the first seed alone: the
    first of a few pooled TTFT quantiles from 90.2 % up that gives both (the schedule does not depend on the
    SLO, so the quantiles of a lax run are the attainments the SLO gives)."""
    plan, spec, ir = _setup(tmp_path, 1e6, bad)
    base = validation_seeds(0)
    tt = np.concatenate([simulate(plan, spec, ir=ir, seed=s, requests=REQUESTS,
                                  timeline=False).samples["tight"][0]
                         for s in base])
    for q in (0.902, 0.904, 0.906, 0.908, 0.91, 0.913, 0.916):
        plan, spec, ir = _setup(tmp_path, float(np.quantile(tt, q)) * 1e3, bad)
        runs = [simulate(plan, spec, ir=ir, seed=s, requests=REQUESTS, timeline=False) for s in base]
        w0 = runs[0].workloads["tight"]
        if undecided(combine(base, runs)) == {"tight"} and w0.attainment >= w0.target:
            return plan, spec, ir, runs
    raise AssertionError("no SLO leaves tight undecided: the construction needs another look")


def test_an_undecided_workload_gets_extra_seeds_alone_and_is_pooled_at_sequential_confidence(tmp_path):
    plan, spec, ir, runs = _tight_undecided(tmp_path)
    base = validation_seeds(0)
    assert combine(base, runs).accepted("easy")

    res = simulate_seeds(plan, spec, ir, base, REQUESTS, fail_fast=True)

    extra = res.seeds[len(base):]
    assert 1 <= len(extra) <= EXTRA_SEEDS
    assert extra == tuple(range(base[-1] + 1, base[-1] + 1 + len(extra)))  # the next seeds, in order
    # easy passed clearly on the first seed: every later run, extra seeds included, simulates tight's
    # deployment only
    for r in res.runs[1:]:
        assert set(r.workloads) == {"tight"} and set(r.deployments) == {"d"}
    # tight's interval pools every run, at the stricter confidence; easy keeps its first-seed interval.
    full = [simulate(plan, spec, ir=ir, seed=s, requests=REQUESTS, timeline=False) for s in res.seeds]
    assert res.intervals["tight"] == interval([r.workloads["tight"].batches for r in full],
                                              SEQUENTIAL_CONFIDENCE)
    assert res.intervals["easy"] == interval([runs[0].workloads["easy"].batches])
    assert res.intervals["tight"].lower < interval([r.workloads["tight"].batches for r in full]).lower
    # It stops as soon as nothing is undecided, else after EXTRA_SEEDS; a look adds LOOK_SEEDS seeds.
    assert not undecided(res) or len(extra) == EXTRA_SEEDS
    assert len(extra) % LOOK_SEEDS == 0 or len(extra) == EXTRA_SEEDS
    # ... and not before: every earlier look left it undecided
    for k in range(LOOK_SEEDS, len(extra), LOOK_SEEDS):
        assert undecided(combine(res.seeds[:len(base) + k], full[:len(base) + k],
                                 frozenset({"tight"}))) == {"tight"}


def test_no_extra_seeds_without_fail_fast_or_when_every_workload_is_decided(tmp_path):
    plan, spec, ir, _ = _tight_undecided(tmp_path)
    base = validation_seeds(0)
    # check's replay: the seeds asked, no more
    assert simulate_seeds(plan, spec, ir, base, REQUESTS).seeds == base
    lax, spec2, ir2 = _setup(tmp_path, 1e6)
    res = simulate_seeds(lax, spec2, ir2, base, REQUESTS, fail_fast=True)
    assert res.seeds == base[:len(res.runs)] and not undecided(res) and res.ok


def test_a_shown_miss_elsewhere_does_not_hold_back_the_verdict_of_workloads_apart_from_it(tmp_path):
    """A workload missing on the first seed (``bad``, on its own deployment): the planner re-solves anyway,
    but tight, which shares no deployment with it, still gets its other seeds and its extra ones in this round
    (its deployment is not what the re-solve changes); bad keeps its one run. With bad on tight's deployment,
    tight's verdict waits: the runs stop after the first seed, as before."""
    from trimtab.planning.rounds import to_derate

    base = validation_seeds(0)
    plan, spec, ir, _ = _tight_undecided(tmp_path, "b")
    res = simulate_seeds(plan, spec, ir, base, REQUESTS, fail_fast=True)
    full = [simulate(plan, spec, ir=ir, seed=s, requests=REQUESTS, timeline=False) for s in res.seeds]
    assert res.missed("bad") and len(res.runs_of("bad")) == 1
    assert len(res.seeds) > len(base)  # the other seeds, and extra ones
    for r in res.runs[1:]:
        assert set(r.workloads) == {"tight"} and set(r.deployments) == {"d"}
    k = len(res.seeds)
    assert res.intervals["tight"] == interval([r.workloads["tight"].batches for r in full[:k]],
                                              SEQUENTIAL_CONFIDENCE)
    assert "bad" in to_derate(res, len(base))

    shared, spec2, ir2 = _setup(tmp_path, 1e6, bad="d")
    res = simulate_seeds(shared, spec2, ir2, base, REQUESTS, fail_fast=True)
    assert len(res.runs) == 1 and res.missed("bad")
    assert to_derate(res, len(base)) == ["bad"]  # tight, at or above target on its one seed, waits


def test_an_adapter_plans_extra_look_is_a_whole_run_counting_the_undecided_workload_only(monkeypatch):
    """Adapter loads tie an adapter plan's workloads' replicas together, so it never simulates part of one: an
    undecided workload's further seed is a whole run of the plan, which reports that workload only and is
    pooled into its interval; the other workloads keep their intervals. (Which workload is undecided is forced
    here; the loop and the pooling are the real ones.)"""
    from pathlib import Path

    import trimtab as tt
    import trimtab.sim.validate as v

    from trimtab.gate.analytic import load_plan

    root = Path(__file__).resolve().parents[2]
    spec = tt.load_spec(root / "examples" / "multi-lora.yaml")
    # validated: no miss on the first seed
    plan = load_plan(root / "tests" / "golden" / "multi-lora.plan.yaml")
    ir = lower(spec)
    assert plan.adapter_routes
    names = [w.name for w in ir.workloads]
    pick = names[0]
    looks = iter([frozenset({pick})])
    monkeypatch.setattr(v, "undecided", lambda res: next(looks, frozenset()))
    monkeypatch.setattr(v, "apart", lambda plan, res, names: names)
    monkeypatch.setattr(v, "clear_pass", lambda res: False)
    base = validation_seeds(0)
    res = v.simulate_seeds(plan, spec, ir, base, REQUESTS, fail_fast=True)
    look = tuple(range(base[-1] + 1, base[-1] + 1 + LOOK_SEEDS))  # one look: LOOK_SEEDS seeds
    assert res.seeds == base + look
    wholes = []
    for s, last in zip(look, res.runs[len(base):], strict=True):
        assert set(last.workloads) == {pick}
        whole = simulate(plan, spec, ir=ir, seed=s, requests=REQUESTS, timeline=False)
        assert set(whole.workloads) == set(names)  # the run itself was the whole plan
        assert last.workloads[pick].batches == whole.workloads[pick].batches
        wholes.append(whole)
    three = res.runs[:len(base)]
    assert res.intervals[pick] == interval([r.workloads[pick].batches for r in three + wholes],
                                           SEQUENTIAL_CONFIDENCE)
    for n in names[1:]:
        assert res.intervals[n] == interval([r.workloads[n].batches for r in three])


def test_an_adapter_plan_runs_every_seed_when_the_first_shows_a_miss(tmp_path):
    """An adapter plan's runs are whole, so a miss on the first seed does not stop the round: the other seeds
    run too, and a workload at target on the first seed is judged on all of them in this round (derated now if
    they show it missing) instead of waiting for the next. Here ``qwen-base`` gets a TTFT SLO of 1 ms, which
    every request misses: the result still holds PLAN_SEEDS whole runs, each reporting every workload, and
    each the very run ``simulate`` gives for that seed."""
    from pathlib import Path

    import trimtab as tt
    import trimtab.sim.validate as v
    from trimtab.gate.analytic import load_plan
    from trimtab.planning.rounds import to_derate

    root = Path(__file__).resolve().parents[2]
    text = (root / "examples" / "multi-lora.yaml").read_text()
    old = "slo: {ttft_ms: 2000, tpot_ms: 60, percentile: 99}"
    assert text.count(old) == 1
    p = tmp_path / "multi-lora.yaml"
    p.write_text(text.replace(old, "slo: {ttft_ms: 1, tpot_ms: 60, percentile: 99}"))
    spec = tt.load_spec(p)
    plan = load_plan(root / "tests" / "golden" / "multi-lora.plan.yaml")
    ir = lower(spec)
    assert plan.adapter_routes
    base = validation_seeds(0)
    first = simulate(plan, spec, ir=ir, seed=base[0], requests=REQUESTS, timeline=False)
    assert combine(base[:1], [first]).missed("qwen-base")  # the first seed shows the miss
    res = v.simulate_seeds(plan, spec, ir, base, REQUESTS, fail_fast=True)
    assert res.seeds[:len(base)] == base and len(res.runs) >= len(base)
    names = {w.name for w in ir.workloads}
    for s, r in zip(base, res.runs):
        assert set(r.workloads) == names
        whole = simulate(plan, spec, ir=ir, seed=s, requests=REQUESTS, timeline=False)
        assert {n: w.batches for n, w in r.workloads.items()} \
            == {n: w.batches for n, w in whole.workloads.items()}
    for n in names:  # every workload judged on the three seeds: none waits for the next round
        assert len(res.runs_of(n)) >= len(base)
    assert "qwen-base" in to_derate(res, len(base))
