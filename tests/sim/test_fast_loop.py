"""The compiled event loop (compiler/sim/_loop.c, ``trimtab.sim.fast``) gives exactly the Python loop's run:
every field of every request and every replica counter, on the real cost model and on stand-in models that
take its other paths (no ``prefill_seqs``, a decode step not linear in the context), with preemptions, chunked
prompts, async scheduling and several replicas behind the router."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import trimtab.sim.fast as fast
from tests.conftest import planned
from tests.sim.helpers import one_deployment_plan, single_server, write_spec
from trimtab.ir.lower import lower
from trimtab.sim.disagg import DisaggSimulation
from trimtab.sim.engine import Simulation
from trimtab.sim.replica import Request
from trimtab.sim.reuse import RunCache
from trimtab.sim.scenario import build_scenario
from trimtab.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[2]
COUNTERS = fast.COUNTERS


def test_the_compiled_loop_is_built():
    """`pip install` builds it (pyproject's ext-modules); without it every run takes the Python loop, slower,
    and this test says so rather than letting CI pass on the slow path."""
    assert fast._loop is not None, "trimtab.sim._loop was not built: install with a C compiler"


def test_the_environment_switches_it_off():
    """``TRIMTAB_SIM_LOOP=python`` (docs/simulator.md) leaves every run to the Python loop."""
    code = "import trimtab.sim.fast as f; print(f.available())"
    for env, want in (("python", "False"), ("", "True")):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, "TRIMTAB_SIM_LOOP": env})
        assert out.stdout.strip() == want


def _run(sc, seed: int, requests: int, compiled: bool, monkeypatch,
         cls: type = Simulation) -> tuple[Simulation, int]:
    """The run of ``sc``, by the compiled loop where it applies (``compiled``) or by Python alone; (the
    simulation, how many deployment runs the compiled loop made)."""
    monkeypatch.setattr(fast, "ENABLED", compiled)
    done = [0]
    real = fast._loop

    def spy(*a):
        done[0] += 1
        return real.run(*a)

    monkeypatch.setattr(fast, "_loop", SimpleNamespace(run=spy))
    # (a cache: the planner's runs, one loop per deployment for every class)
    sim = cls(sc, seed, requests=requests, timeline=False, cache=RunCache())
    sim.run()
    return sim, done[0]


def _fields(sim: Simulation) -> tuple:
    """Every request field, every replica's counters and completion order, the end of the run."""
    reqs = [tuple(getattr(r, s) for s in Request.__slots__) for r in sim.requests]
    reps = [(tuple(getattr(rep, c) for c in COUNTERS), [r.rid for r in rep.done])
            for g in sim.replicas for rep in g]
    return reqs, reps, sim.t_end, sim.stopped_early


def _same(sc, monkeypatch, seed: int = 3, requests: int = 4000,
          cls: type = Simulation) -> tuple[Simulation, int]:
    py, _ = _run(sc, seed, requests, False, monkeypatch, cls)
    c, runs = _run(sc, seed, requests, True, monkeypatch, cls)
    a, b = _fields(py), _fields(c)
    assert len(a[0]) == len(b[0])
    for x, y in zip(a[0], b[0]):
        assert x == y, (x, y)
    assert a[1] == b[1]
    assert a[2:] == b[2:]
    return c, runs


@pytest.mark.parametrize("example", ["quickstart", "moe"])
def test_examples_run_the_same(example, monkeypatch):
    res = planned(example, validate=False)
    sc = build_scenario(res.plan, load_spec(ROOT / "examples" / f"{example}.yaml"), res.ir)
    sim, runs = _same(sc, monkeypatch)
    assert runs == sum(1 for g in sim.replicas if g)  # every deployment ran compiled


def test_unified_deployments_of_a_pd_simulation_run_the_same(monkeypatch):
    """In a simulation with P/D pairs, the deployments apart from the pairs run as in the base class (its
    ``_base_run``): compiled, the same fields as its own Python loop and as the base class's."""
    res = planned("quickstart", validate=False)
    sc = build_scenario(res.plan, load_spec(ROOT / "examples" / "quickstart.yaml"), res.ir)
    sim, runs = _same(sc, monkeypatch, cls=DisaggSimulation)
    assert runs == sum(1 for g in sim.replicas if g)
    base, _ = _run(sc, 3, 4000, False, monkeypatch)
    assert _fields(sim) == _fields(base)


def _pressed(tmp_path, rate: float, replicas: int):
    """Llama-3.1-8B on L4s with long outputs and few KV tokens: preemptions, chunked prompts, a router."""
    path = write_spec(tmp_path, rate=rate, isl="{uniform: {min: 200, max: 6000}}",
                      osl="{uniform: {min: 100, max: 1500}}",
                      gpu="l4", tpot=1000, ttft=100000)
    plan = one_deployment_plan(path, replicas=replicas, gpu="l4", mbt=2048, max_seqs=64)
    spec = load_spec(path)
    return build_scenario(plan, spec, lower(spec))


def test_preemptions_and_chunks_run_the_same(tmp_path, monkeypatch):
    sim, runs = _same(_pressed(tmp_path, 0.4, 3), monkeypatch, requests=1500)
    assert runs == 1
    reps = sim.replicas[0]
    assert sum(r.preemptions for r in reps) > 0  # the case this test is for
    # prompts longer than the 2,048-token budget: chunked over several steps
    assert max(r.isl for r in sim.requests) > 2048 and sum(r.prefill_s for r in reps) > 0


def test_a_run_stopped_at_the_drain_limit_stops_as_python_does(tmp_path, monkeypatch):
    """Overloaded: the run stops at the first event past the drain limit with requests in flight, each as
    the Python loop leaves it."""
    sim, runs = _same(_pressed(tmp_path, 0.8, 1), monkeypatch, requests=1500)
    assert sim.stopped_early and runs == 1
    assert any(r.t_first < 0 for r in sim.requests) and any(r.t_done < 0 <= r.t_first for r in sim.requests)


class CurvedModel:
    """A stand-in cost model whose decode step is not linear in the context (the Python loop then calls it
    every step) and which takes no ``prefill_seqs``."""

    def __init__(self, kv_tokens: int):
        self.max_num_seqs, self.max_batched_tokens = 16, 512
        self.memory = SimpleNamespace(kv_cache_tokens=kv_tokens)
        self.request_overhead = 0.0

    def iteration_s(self, decode_batch, decode_ctx, prefill_tokens=0.0, prefill_ctx=0.0):
        return (1e-3 + 2e-6 * prefill_tokens * (1.0 + prefill_ctx / 4096)
                + (4e-3 + 1e-4 * math.sqrt(decode_ctx) * decode_batch if decode_batch > 0 else 0.0))


@pytest.mark.parametrize("kv_tokens", [6000, 10**9])
def test_a_curved_cost_model_without_prefill_seqs_runs_the_same(kv_tokens, monkeypatch):
    sc = single_server(CurvedModel(kv_tokens), 1.0, np.array([64.0, 700.0, 1500.0]), osl=200)
    sim, runs = _same(sc, monkeypatch, requests=3000)
    assert runs == 1
    assert (sim.replicas[0][0].preemptions > 0) == (kv_tokens < 10**6)
