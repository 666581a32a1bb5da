"""``trimtab watch`` on a prefill/decode plan (docs/online.md, "Prefill/decode plans"): the golden plan of
examples/disaggregated.yaml (4 prefill and 1 decode replica), each replica a ``benchmarks.watch``
SyntheticEngine on 127.0.0.1 whose metrics text the watcher fetches over HTTP and parses with
``prometheus_client``'s parser. Each request is counted by its prefill engine as a one-token request and by
its decode engine as the whole request, as vLLM engines behind a P/D router count them. The oracles: requests,
lengths and rate drift are read once (on the decode side), the client's first-token time is the two sides'
sum, a slow prefill side puts the SLO at risk, a dead prefill replica is a failed replica, and a step of the
rate is proposed with its measured rate and a plan that passes check (cost model)."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmarks.watch import Fleet, first_proposal, run
from trimtab.online.metrics import TTFT, Hist, parse
from trimtab.online.roles import FirstToken

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def pd(tmp_path):
    import trimtab
    from trimtab.online.watch import Watcher, targets_for

    spec = trimtab.load_spec(ROOT / "examples/disaggregated.yaml")
    plan = trimtab.load_plan(ROOT / "tests/golden/disaggregated.plan.yaml")
    fleets = []

    def make(seed: int):
        fleet = Fleet(plan, spec, seed)
        fleets.append(fleet)
        w = Watcher(plan, spec, targets_for(plan, fleet.metrics()), out_dir=tmp_path / f"out{seed}",
                    analytic=True, dead_after=2)
        return plan, fleet, w

    yield make
    for f in fleets:
        f.stop()


def _roles(plan):
    pre = next(d for d in plan.deployments if d.role == "prefill")
    dec = next(d for d in plan.deployments if d.role == "decode")
    return pre, dec


@pytest.mark.slow  # quick suite within 3 minutes; .ci/run runs the slow suite
def test_stationary_pd_reads_each_request_once(pd):
    plan, fleet, w = pd(11)
    pre, dec = _roles(plan)
    obs, _ = run(fleet, w, 121, 0.0)  # 30 minutes of 15 s intervals
    assert not any(o.proposal for o in obs)
    assert not any(g["rate_change"] or g.get("length_change") for o in obs for g in o.groups.values())
    assert not any(v["at_risk"] for o in obs for v in o.workloads.values())
    last = obs[-1]
    # the rate is tested on the decode side only: the prefill side's one-token requests are the same ones
    assert last.groups["rag"]["deployments"] == [dec.name]
    assert last.groups["rag"]["rate_rps"] == pytest.approx(6.0, rel=0.1)
    p, d = last.deployments[pre.name], last.deployments[dec.name]
    assert (p["role"], d["role"]) == ("prefill", "decode")
    assert p["rate_rps"] == pytest.approx(d["rate_rps"], rel=0.15)
    assert p["reference_rps"] == d["reference_rps"]
    assert p["output_mean"] is None and d["output_mean"] == pytest.approx(d["output_mean_planned"], rel=0.05)
    assert p["prompt_mean"] == pytest.approx(p["prompt_mean_planned"], rel=0.05)
    # the client's first token is the two sides' sum: at the median, about the synthetic engines' median
    lat = d["latency"]["rag"]
    assert lat["ttft_ms"] > 0 and last.workloads["rag"]["attainment"] > 0.98
    assert p["latency"] == {}  # its first-token time is a part of the decode side's figure


def test_slow_prefill_side_puts_the_slo_at_risk(pd):
    plan, fleet, w = pd(12)
    pre, _ = _roles(plan)
    _, t = run(fleet, w, 5, 0.0)
    # the prefill part of TTFT (median 0.75 s) x10, past vLLM's 7.5 s bucket bound and the 5 s SLO; the
    # decode side's own first-token time (0.19 s) alone would meet it
    fleet.slow[pre.name] = 10.0
    obs, _ = run(fleet, w, 6, t)
    assert any(o.workloads.get("rag", {}).get("at_risk") for o in obs)


def test_dead_prefill_replica_is_a_failed_replica(pd):
    plan, fleet, w = pd(13)
    pre, _ = _roles(plan)
    _, t = run(fleet, w, 5, 0.0)
    fleet.kill(pre.name, 2)
    obs, _ = run(fleet, w, 3, t)
    at = first_proposal(obs)
    assert at == 2
    p = obs[at - 1].proposal
    assert p.failures == [f"replica={pre.name}/2"] and p.check_ok
    assert not any(g["rate_change"] for o in obs for g in o.groups.values())


def test_rate_step_is_proposed_with_its_measured_rate_and_a_pd_router(pd, tmp_path):
    plan, fleet, w = pd(14)
    _, t = run(fleet, w, 9, 0.0)
    fleet.scale["rag"] = 1.6
    obs, _ = run(fleet, w, 4, t)
    at = first_proposal(obs)
    assert at is not None and at <= 2
    p = obs[at - 1].proposal
    assert p.rates_rps["rag"] == pytest.approx(9.6, rel=0.15) and p.check_ok and p.protects == ["rag"]
    assert p.cost_usd_per_hour[1] > p.cost_usd_per_hour[0]
    import trimtab

    proposed = trimtab.load_plan(Path(p.folder) / "plan.yaml")
    if any(d.role == "decode" and d.replicas > 0 for d in proposed.deployments):  # its pairs get a router
        assert "vllm-router" in (Path(p.folder) / "k8s" / "router.yaml").read_text()


def _hist_text(values, buckets):
    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    reg = CollectorRegistry()
    h = Histogram(TTFT, "ttft", ["model_name"], buckets=buckets, registry=reg)
    for v in values:
        h.labels("m").observe(v)
    return generate_latest(reg).decode()


def test_first_token_is_the_sum_of_the_two_sides():
    """From recorded exposition text: prefill first tokens in (0.5, 1.0] s, decode ones in (0.1, 0.25] s."""
    b = (0.1, 0.25, 0.5, 1.0, 2.5)
    pre = parse(_hist_text([0.6] * 30 + [0.9] * 10, b), 0.0).models["m"].hists[TTFT]
    dec = parse(_hist_text([0.2] * 20, b), 0.0).models["m"].hists[TTFT]
    ft = FirstToken(pre, dec)
    assert ft.count == 20
    # every prefill bucket counted at its lower bound (0.5) plus the decoder's whole bucket (<= 0.25)
    assert ft.share_at_most_upper(0.75) == 1.0 and ft.share_at_most_upper(0.55) == 0.0
    assert ft.share_at_most_upper(2.0) == 1.0
    # the median of the sum lies between the sums of the parts' bucket edges
    assert 0.5 + 0.1 <= ft.quantile(0.5) <= 1.0 + 0.25
    empty = Hist(dec.bounds, tuple(0.0 for _ in dec.bounds), 0.0, 0.0)  # no request finished yet
    assert math.isnan(FirstToken(pre, empty).quantile(0.5))
    assert math.isnan(FirstToken(pre, empty).share_at_most_upper(1.0))
