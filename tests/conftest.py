"""Shared fixtures: the quickstart spec and small specs written as text (tests never read ../shared)."""
from __future__ import annotations

import os
import sys
from functools import lru_cache
from pathlib import Path

import pytest

# Bytecode caching on for the test run, also where the environment turns it off (PYTHONDONTWRITEBYTECODE, as
# on the development machine): otherwise every xdist worker and every CLI subprocess rewrites and compiles
# each test module and the package again (collection: 7.4 s a process, 2.4 s from the cache). The caches go
# to the __pycache__ folders .gitignore leaves out.
sys.dont_write_bytecode = False

# Each xdist worker its share of the CPUs for the planner's own processes (simulation, candidates, workload
# MILPs; trimtab.util.jobs), unless the environment sets it: two workers that each fork two children on two
# cores ran four processes on two, each test slower for it. The answers do not depend on it (tests/sim/
# test_parallel.py, tests/unit/test_scale_paths.py set it themselves where they test that).
if os.environ.get("PYTEST_XDIST_WORKER") and not os.environ.get("TRIMTAB_JOBS"):
    from trimtab.util.jobs import jobs_default

    _workers = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")), 1)
    os.environ["TRIMTAB_JOBS"] = str(max(1, jobs_default() // _workers))

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "examples" / "quickstart.yaml"


@lru_cache(maxsize=None)
def planned(example: str, validate: bool = True):
    """``trimtab.plan`` of ``examples/EXAMPLE.yaml`` (its ``PlanResult``), once per test session: a plan of an
    example takes 1-12 s and many tests read the same one (tests/golden holds each to its bytes). Shared, so a
    test copies what it changes (``model_copy``) and never edits the result in place."""
    import trimtab

    return trimtab.plan(trimtab.load_spec(ROOT / "examples" / f"{example}.yaml"), validate=validate)


GOLDEN = ROOT / "tests" / "golden"
# The test servers' serve_forever poll, the synthetic engines' own: shutdown() waits up to one poll (0.5 s by
# default, per server)
from benchmarks.watch import POLL_S  # noqa: E402


def golden_plan(example: str):
    """The plan ``trimtab plan`` writes for ``examples/EXAMPLE.yaml``, read from its golden (tests/golden
    holds each example's plan to those bytes): for tests that need the emitted plan, not the planning."""
    import trimtab

    return trimtab.load_plan(GOLDEN / f"{example}.plan.yaml")

SMALL_SPEC = """\
version: 1
name: small
budget_usd_per_hour: 100
gpus:
  - {type: h100-sxm, count: 8, usd_per_hour: 4.0}
  - {type: l4, count: 8, usd_per_hour: 0.8}
models:
  - name: llama-3.1-8b
workloads:
  - name: short
    model: llama-3.1-8b
    rate_rps: 5
    input_tokens: {fixed: 512}
    output_tokens: {fixed: 64}
    slo: {ttft_ms: 1000, tpot_ms: 100, percentile: 90}
"""


# 8B RAG at 20 rps with 8k-20k-token prompts: heavy KV per request, where prefill/decode pairs pay
# (tests/disagg)
HEAVY_KV_SPEC = """\
version: 1
name: heavy-kv
gpus:
  - {type: h100-sxm, count: 32, usd_per_hour: 3.90}
models:
  - name: llama-3.1-8b
workloads:
  - name: rag
    model: llama-3.1-8b
    rate_rps: 20
    input_tokens: {lognormal: {median: 8000, p99: 20000}}
    output_tokens: {lognormal: {median: 300, p99: 1000}}
    slo: {ttft_ms: 3000, tpot_ms: 15, percentile: 99}
"""


@pytest.fixture
def update_golden() -> bool:
    return os.environ.get("UPDATE_GOLDEN") == "1"


@pytest.fixture
def small_spec_path(tmp_path: Path) -> Path:
    p = tmp_path / "small.yaml"
    p.write_text(SMALL_SPEC)
    return p


def unit(name: str, gpu: str, tp: int, pp: int, replicas: int):
    """A deployment view for placement tests: only the GPU footprint matters there."""
    from trimtab.deployment.shape import DeploymentSpecView

    return DeploymentSpecView(name=name, replicas=replicas, model="llama-3.1-8b", gpu=gpu, tp=tp, pp=pp,
                              dtype="bf16", max_num_seqs=256, max_batched_tokens=2048)


def run_cli(*args):
    """``trimtab ARGS`` in process (typer's runner), failing the test on a traceback or an unexpected
    exception; the result keeps stdout and stderr apart."""
    from typer.testing import CliRunner

    from trimtab.cli.main import app

    res = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in res.output, res.output
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res
