"""The planner as a function (issue 35): the same spec gives the same bytes whatever the machine is doing, a
spec that only got easier never gets a dearer plan than the harder spec's plan costs on it, and offering
several GPU types never costs more than the best plan on one of them."""
from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trimtab.api import plan
from trimtab.contract.write import emit
from trimtab.spec.load import load_spec
from tests.conftest import QUICKSTART
from tests.conftest import GOLDEN, golden_plan

# A 7B short chat with four GPU types at the prices of issue 35 (L4, A10G, A100-80GB, H100): its first plan
# mixes types and misses in simulation, so the rounds' corrections decide the answer.
MIX = {
    "version": 1, "name": "mix-7b", "objective": "min_cost",
    "gpus": [{"type": "l4", "count": 64, "usd_per_hour": 0.70},
             {"type": "a10g", "count": 64, "usd_per_hour": 1.01},
             {"type": "a100-80gb", "count": 64, "usd_per_hour": 3.67},
             {"type": "h100-sxm", "count": 64, "usd_per_hour": 7.516}],
    "models": [{"name": "llama-2-7b"}],
    "workloads": [{"name": "chat", "model": "llama-2-7b", "rate_rps": 32,
                   "input_tokens": {"lognormal": {"median": 300, "p99": 1500}},
                   "output_tokens": {"lognormal": {"median": 150, "p99": 600}},
                   "slo": {"ttft_ms": 1000, "tpot_ms": 120, "percentile": 99}}],
}


def planned(d: dict):
    return plan(load_spec("spec.yaml", text=yaml.safe_dump(d, sort_keys=False))).plan


def cost_on(p, d: dict) -> float:
    """What plan ``p`` costs at spec ``d``'s prices."""
    price = {g["type"]: g["usd_per_hour"] for g in d["gpus"]}
    return sum(dep.replicas * dep.gpus_per_replica * price[dep.gpu] for dep in p.deployments)


# In the slow suite (one process, .ci/run): its busy loop holds a core for the whole plan, which in the quick
# suite is the other xdist worker's (about 10 s of the quick suite's 3 minutes); ../shared/acceptance/function
# plans every example beside a busy CPU too.
@pytest.mark.slow
def test_same_bytes_beside_a_busy_cpu():
    spec = load_spec(QUICKSTART)
    quiet = (GOLDEN / "quickstart.plan.yaml").read_text()  # the quiet machine's bytes (tests/golden)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        busy = emit(plan(spec).plan)
    finally:
        hog.kill()
        hog.wait()
    assert busy == quiet


def test_several_types_never_dearer_than_one():
    mixed = planned(MIX)
    assert not mixed.misses
    for g in MIX["gpus"]:
        alone = planned({**MIX, "gpus": [g]})
        if not alone.misses:
            assert mixed.cost_usd_per_hour <= alone.cost_usd_per_hour + 1e-6, g["type"]


BASE = {**MIX, "workloads": [{**MIX["workloads"][0], "rate_rps": 16}]}


@st.composite
def relaxations(draw) -> dict:
    """``BASE`` made easier in one to three ways: lower prices, more GPUs, a budget, looser SLOs, a lower
    rate."""
    d = copy.deepcopy(BASE)
    for kind in draw(st.lists(st.sampled_from(["price", "count", "budget", "slo", "rate"]), min_size=1,
                              max_size=3, unique=True)):
        if kind == "price":
            g = d["gpus"][draw(st.integers(0, len(d["gpus"]) - 1))]
            g["usd_per_hour"] = round(g["usd_per_hour"] * draw(st.sampled_from([0.5, 0.8, 0.95])), 4)
        elif kind == "count":
            d["gpus"][draw(st.integers(0, len(d["gpus"]) - 1))]["count"] += draw(st.sampled_from([1, 8]))
        elif kind == "budget":
            d["budget_usd_per_hour"] = 1000.0  # (BASE has none: a budget it does not reach)
        elif kind == "slo":
            slo = d["workloads"][0]["slo"]
            key = draw(st.sampled_from(["ttft_ms", "tpot_ms"]))
            slo[key] = round(slo[key] * draw(st.sampled_from([1.1, 1.5])), 1)
        else:
            d["workloads"][0]["rate_rps"] = round(16 * draw(st.sampled_from([0.5, 0.9])), 3)
    return d


@pytest.fixture(scope="module")
def base_plan():
    return planned(BASE)


# In the slow suite (about 36 s of one worker): the quick suite keeps the price relaxations of the quickstart
# (test_the_quickstart_with_a_cheaper_gpu_never_gets_a_dearer_plan) and the choice relaxation (more GPU
# types).
@pytest.mark.slow
@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(relaxations())
def test_a_relaxed_spec_never_gets_a_dearer_plan(base_plan, d):
    p = planned(d)
    assert not p.misses
    assert p.cost_usd_per_hour <= cost_on(base_plan, d) + 1e-6, (p.cost_usd_per_hour, cost_on(base_plan, d))


@pytest.fixture(scope="module")
def quickstart_plan():
    # the plan trimtab plan writes for the quickstart, held to its bytes by tests/golden: no need to plan it
    # again
    return golden_plan("quickstart")


@pytest.mark.parametrize("gpu", ["a100-80gb", "l4"])
def test_the_quickstart_with_a_cheaper_gpu_never_gets_a_dearer_plan(quickstart_plan, gpu):
    # The A100 price halved planned 27.30 $/h against 25.60 at the normal price (a first plan that missed on
    # TP2 A100s priced out every summarize shape; the lazy probes of trimtab.planning.driver look below the
    # confirmed plan with only each shape's own cuts), the L4 price halved 48.00 against 46.80 before that
    # (the probe round of trimtab.planning.rounds.probe_derates)
    d = yaml.safe_load(QUICKSTART.read_text())
    base = quickstart_plan
    for g in d["gpus"]:
        if g["type"] == gpu:
            g["usd_per_hour"] = g["usd_per_hour"] / 2
    p = planned(d)
    assert not p.misses
    assert p.cost_usd_per_hour <= cost_on(base, d) + 1e-6, (p.cost_usd_per_hour, cost_on(base, d))


@st.composite
def budget_pairs(draw) -> tuple[dict, float]:
    """``MIX`` as a ``max_goodput`` spec at a drawn rate and budget, and a larger budget."""
    d = copy.deepcopy(MIX)
    d["objective"] = "max_goodput"
    d["workloads"][0]["rate_rps"] = draw(st.sampled_from([12, 24, 40]))
    d["budget_usd_per_hour"] = draw(st.sampled_from([1.5, 3.0, 4.5, 6.0]))
    return d, round(d["budget_usd_per_hour"] * draw(st.sampled_from([1.3, 2.0])), 2)


# A larger budget is a relaxation for max_goodput too: the smaller budget's plan still fits it, so the larger
# one never serves less. In the slow suite (about 10 s of one worker).
@pytest.mark.slow
@settings(max_examples=5, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(budget_pairs())
def test_a_larger_budget_never_serves_less(pair):
    d, larger = pair
    small = planned(d)
    large = planned({**d, "budget_usd_per_hour": larger})
    assert not small.misses and not large.misses
    assert small.cost_usd_per_hour <= d["budget_usd_per_hour"] + 1e-6
    assert large.cost_usd_per_hour <= larger + 1e-6
    assert large.goodput.served_rps >= small.goodput.served_rps - 1e-9, \
        (d["budget_usd_per_hour"], larger, small.goodput.served_rps, large.goodput.served_rps)
