"""``trimtab watch`` (docs/online.md, "Watching a deployment") against real HTTP endpoints.

Every replica of the plan is a ``benchmarks.watch.SyntheticEngine``: a ``prometheus_client`` registry with
vLLM's metric names and buckets, served on 127.0.0.1 by ``prometheus_client``'s own HTTP server in a thread,
its counters and histograms advanced as an engine's would be over each interval (Poisson arrivals at the
plan's routed rates, lengths from the plan's buckets). The watcher scrapes them over HTTP and parses the text
with ``prometheus_client``'s parser; only the clock is simulated (an interval is advanced at once). The
oracles: a stationary stretch raises nothing; a step of a workload's rate is proposed for within a few
intervals with its measured rate and a plan that passes check; an endpoint that dies is a failed replica whose
proposal replaces it; latencies over the SLO make it at risk. Plans by the cost model (``analytic``) so each
test is a few seconds.
"""
from __future__ import annotations

import functools
import json
import math
import os

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from benchmarks.watch import Fleet, first_proposal, run, setup
from tests.conftest import POLL_S
from trimtab.errors import InputError
from trimtab.online import drift
from trimtab.online.metrics import TTFT, parse, window


def watch_once(plan_path, spec_path, out, metrics: list[str]):
    """``trimtab watch --once`` (analytic, JSON) over these metrics endpoints, in process."""
    from trimtab.cli.main import app

    args = ["watch", "--plan", str(plan_path), "--spec", str(spec_path), "--out", str(out), "--once",
            "--interval", "0.2", "--analytic", "--format", "json"]
    for m in metrics:
        args += ["--metrics", m]
    return CliRunner().invoke(app, args)


def _text(values, buckets=(1.0, 2.0, 4.0)):
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

    reg = CollectorRegistry()
    h = Histogram(TTFT, "ttft", ["model_name"], buckets=buckets, registry=reg)
    c = Counter("vllm:request_success", "n", ["model_name", "finished_reason"], registry=reg)
    for v in values:
        h.labels("m").observe(v)
    c.labels("m", "stop").inc(len(values))
    return generate_latest(reg).decode()


def test_series_per_served_model():
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    reg = CollectorRegistry()
    c = Counter("vllm:request_success", "n", ["model_name", "finished_reason", "engine"], registry=reg)
    c.labels("base", "stop", "0").inc(5)
    c.labels("base", "length", "1").inc(2)
    c.labels("adapter-7", "stop", "0").inc(3)
    snap = parse(generate_latest(reg).decode(), 0.0)
    # summed over the other labels, kept apart by model_name (a served model or a LoRA adapter)
    per = {m: s.counters["vllm:request_success_total"] for m, s in snap.models.items()}
    assert per == {"base": 7, "adapter-7": 3}


def test_waiting_is_a_level_and_a_window_keeps_its_larger_end():
    from prometheus_client import CollectorRegistry, Gauge, generate_latest

    def scrape(running, waiting, t):
        reg = CollectorRegistry()
        Gauge("vllm:num_requests_running", "r", ["model_name"], registry=reg).labels("m").set(running)
        Gauge("vllm:num_requests_waiting", "w", ["model_name"], registry=reg).labels("m").set(waiting)
        return parse(generate_latest(reg).decode(), t)

    a, b, c = scrape(4, 0, 0.0), scrape(9, 3, 10.0), scrape(2, 0, 20.0)
    assert (a.models["m"].in_engine, b.models["m"].waiting) == (4, 3)
    # a request waiting at either scrape marks the window (the engine reached its admission limit in it)
    assert window(a, b).models["m"].waiting == 3 and window(b, c).models["m"].waiting == 3
    assert window(a, scrape(5, 0, 10.0)).models["m"].waiting == 0
    assert window(b, c).models["m"].in_engine == -10  # running and waiting: 12 -> 2


def test_a_steady_interval_neither_queues_nor_grows_nor_drains():
    from trimtab.online.metrics import REQUESTS, Series
    from trimtab.online.recalibrate import steady

    def interval(done, change, waiting=0.0):
        return Series({REQUESTS: done}, {}, change, waiting)

    # 20 finished, the engine's count up 3: about what a stable queue does in an interval (3 sd: 19)
    assert steady(interval(20, 3)) and steady(interval(20, -3)) and steady(interval(0, 0))
    # 20 finished while 30 more came than left (the batch grows: past capacity), or 30 fewer (draining)
    assert not steady(interval(20, 30)) and not steady(interval(50, -30))
    assert not steady(interval(20, 0, waiting=2))  # a request waited for admission


def test_histogram_quantile_share_and_reset():
    snap = parse(_text([0.5] * 10 + [1.5] * 10 + [3.0] * 20), 0.0)
    h = snap.models["m"].hists[TTFT]
    assert h.count == 40 and h.total == pytest.approx(80.0)
    # histogram_quantile: rank 20 ends bucket (1, 2]; rank 30 is half-way through (2, 4]
    assert h.quantile(0.5) == pytest.approx(2.0) and h.quantile(0.75) == pytest.approx(3.0)
    assert h.share_at_most(3.0) == pytest.approx(0.75) and h.share_at_most(1.0) == pytest.approx(0.25)
    assert h.share_at_most_upper(3.0) == 1.0 and h.share_at_most_upper(1.5) == pytest.approx(0.5)
    later = parse(_text([0.5] * 10 + [1.5] * 10 + [3.0] * 20 + [0.5] * 4), 15.0)
    w = window(snap, later)
    assert w.seconds == 15.0 and w.models["m"].hists[TTFT].count == 4
    assert w.models["m"].counters["vllm:request_success_total"] == 4
    restarted = parse(_text([3.0] * 3), 30.0)  # fewer than before: the engine restarted, its counts are new
    assert window(later, restarted).models["m"].counters["vllm:request_success_total"] == 3


def test_rate_test_false_alarms_within_alpha_and_power():
    rng = np.random.default_rng(7)
    alpha, looks, mu = 0.01, 3000, 40.0
    alarms = sum(drift.rate_test([(float(rng.poisson(mu)), mu) for _ in range(8)], alpha=alpha) is not None
                 for _ in range(looks))
    # at most alpha per look (Bonferroni over the suffixes): 30 expected at most, 3 sd of slack
    assert alarms <= alpha * looks + 3 * math.sqrt(alpha * looks)
    # a step to 1.6x in the last interval only is declared at once, its rate from that interval alone
    ch = drift.rate_test([(mu, mu)] * 7 + [(1.6 * mu * 3, mu * 3)], alpha=1e-4)
    assert ch is not None and ch.since_intervals == 1 and ch.factor == pytest.approx(1.6) and not ch.settled
    # a step to 2x half-way through an interval, 25 requests expected per interval: the last interval alone
    # does not reject, the last two do; the first of them reads 1.5x and is left out of the new rate
    ch = drift.rate_test([(25.0, 25.0)] * 6 + [(37.5, 25.0), (50.0, 25.0)], alpha=1e-4)
    assert ch.since_intervals == 2 and ch.settled and ch.factor == pytest.approx(2.0)


@pytest.fixture
def watched(tmp_path):
    made = []

    def make(seed=0, **kw):
        plan, spec, fleet, w = setup(seed, str(tmp_path / f"out{len(made)}"), **kw)
        made.append(fleet)
        return plan, spec, fleet, w

    yield make
    for f in made:
        f.stop()


@functools.lru_cache(maxsize=None)
def _rate_with_two_replicas() -> float:
    """Workload a's rate, raised from the spec's by halves, at which its plan runs some deployment on two
    replicas or more (one of them can fail while the other carries its share): the spec's own under older
    profiles, more where a replica serves more (30 rps with the H100 profile measured at 0.81 efficiency)."""
    from tests.online.test_replan import SPEC
    from trimtab.api import plan as make_plan
    from trimtab.spec.load import load_spec
    from trimtab.spec.overrides import apply_overrides

    spec = load_spec("small.yaml", text=SPEC)
    base = next(x.rate_rps for x in spec.workloads if x.name == "a")
    for k in (1.0, 1.5, 2.0, 2.5, 3.0, 4.0):
        plan = make_plan(apply_overrides(spec, {"workloads.a.rate_rps": base * k}), validate=False).plan
        if any(d.replicas >= 2 for d in plan.deployments):
            return base * k
    pytest.fail(f"no plan of a at up to 4x {base} rps runs a deployment on two replicas")


def _two_replicas() -> dict:
    return {"workloads.a.rate_rps": _rate_with_two_replicas()}


@pytest.mark.slow  # quick suite within 3 minutes; .ci/run runs the slow suite
def test_stationary_stretch_no_false_alarm(watched):
    plan, _, fleet, w = watched(seed=3)
    obs, _ = run(fleet, w, 121, 0.0)  # 30 minutes of 15 s intervals
    assert not any(o.proposal for o in obs)
    assert not any(g["rate_change"] for o in obs for g in o.groups.values())
    assert not any(v["at_risk"] for o in obs for v in o.workloads.values())
    last = obs[-1]
    assert set(last.groups) == {"a", "b"} and last.groups["a"]["rate_rps"] == pytest.approx(20.0, rel=0.1)
    assert last.workloads["a"]["attainment"] > 0.95
    # per served model (the engines' model_name label): the 8B model carries all of b's deployment
    b = {r.deployment for r in plan.routes if r.workload == "b"}
    assert b and all(last.deployments[d]["models_rps"] == {"llama-3.1-8b": last.deployments[d]["rate_rps"]}
                     for d in b)


def test_rate_step_up_is_proposed_with_its_measured_rate(watched, tmp_path):
    plan, _, fleet, w = watched(seed=1)
    _, t = run(fleet, w, 9, 0.0)
    fleet.advance(7.5)  # the step half-way through an interval, which then mixes both rates
    fleet.scale["a"] = 1.6
    obs, t = run(fleet, w, 4, t + 7.5)
    at = first_proposal(obs)
    assert at is not None and at <= 2
    p = obs[at - 1].proposal
    assert p.rates_rps["a"] == pytest.approx(32.0, rel=0.15) and p.rates_rps["b"] == pytest.approx(8.0)
    assert p.cost_usd_per_hour[1] > p.cost_usd_per_hour[0] and p.check_ok and p.protects == ["a"]
    assert any(a > 0 for a, _ in p.moves.values())
    folder = tmp_path / "out0" / "proposal-001"
    assert (folder / "plan.yaml").is_file() and list((folder / "k8s").iterdir())
    written = json.loads((folder / "proposal.json").read_text())
    assert written["rates_rps"]["a"] == pytest.approx(p.rates_rps["a"], abs=1e-4)
    # the reference moved to the proposal's rate: the same traffic raises nothing more
    later, _ = run(fleet, w, 16, t)
    assert not any(o.proposal for o in later)


def test_rate_step_down_proposes_fewer_replicas(watched):
    _, _, fleet, w = watched(seed=2)
    _, t = run(fleet, w, 9, 0.0)
    fleet.scale["a"] = 0.4
    obs, _ = run(fleet, w, 6, t)
    at = first_proposal(obs)
    assert at is not None and at <= 3
    p = obs[at - 1].proposal
    assert p.cost_usd_per_hour[1] < p.cost_usd_per_hour[0] and p.rates_rps["a"] == pytest.approx(8.0, rel=0.2)
    assert any(b > 0 for _, b in p.moves.values())


def test_dead_endpoint_is_a_failed_replica(watched):
    plan, _, fleet, w = watched(seed=4, overrides=_two_replicas())
    _, t = run(fleet, w, 5, 0.0)
    d = next(x for x in plan.deployments if x.replicas >= 2)
    fleet.kill(d.name, 1)
    obs, _ = run(fleet, w, 4, t)
    at = first_proposal(obs)
    assert at == 2  # dead_after=2: the second failed scrape
    p = obs[at - 1].proposal
    assert p.failures == [f"replica={d.name}/1"] and p.moves.get(d.name, (0, 0))[0] >= 1 and p.check_ok
    # the survivor carries the dead replica's share: no rate change is read into it
    assert not any(g["rate_change"] for o in obs for g in o.groups.values())
    assert obs[-1].errors and all(o.proposal is None for o in obs[at:])


def test_latency_over_the_slo_is_at_risk(watched):
    plan, _, fleet, w = watched(seed=5)
    _, t = run(fleet, w, 5, 0.0)
    d = next(x for x in plan.deployments if x.name.startswith("b-"))
    fleet.slow[d.name] = 4.0  # medians at 4 / 2.2 of the SLOs: most requests miss
    obs, _ = run(fleet, w, 4, t)
    risky = [o for o in obs if o.workloads.get("b", {}).get("at_risk")]
    assert risky and not any(o.workloads["a"]["at_risk"] for o in obs)
    # the same rates need the same replicas by the plan's model: no proposal, a note to calibrate
    assert any("calibrate" in n for o in risky for n in o.notes) and not any(o.proposal for o in obs)


def test_targets_and_input_errors(watched):
    from trimtab.online.replan import parse_failures
    from trimtab.online.watch import targets_for

    plan, spec, fleet, _ = watched()
    urls = [e.url for _, _, e in fleet.engines]
    ts = targets_for(plan, urls)
    assert [(t.deployment, t.replica) for t in ts] == [(d, i) for d, i, _ in fleet.engines]
    assert targets_for(plan, ["http://127.0.0.1:1"])[0].url == "http://127.0.0.1:1/metrics"
    for bad in (urls + ["http://127.0.0.1:9/metrics"], ["nosuch=http://127.0.0.1:1"], ["ftp://x"],
                [f"{plan.deployments[0].name}={urls[0]}", urls[1]]):
        with pytest.raises(InputError):
            targets_for(plan, bad)
    d = plan.deployments[0].name
    f = parse_failures(plan, spec, [f"replica={d}/0"])
    assert f.lost_replicas == {d: 1} and f.lost_gpus == {}
    with pytest.raises(InputError):
        parse_failures(plan, spec, [f"replica={d}/9"])


def test_cli_once_json_and_exit_codes(tmp_path):
    from tests.online.test_replan import SPEC
    from trimtab.api import plan as make_plan
    from trimtab.contract.write import emit
    from trimtab.spec.load import load_spec

    spec_path = tmp_path / "small.yaml"
    spec_path.write_text(SPEC)
    spec = load_spec(spec_path)
    plan = make_plan(spec, validate=False).plan
    plan_path = tmp_path / "plan.yaml"
    plan_path.write_text(emit(plan))
    fleet = Fleet(plan, spec, 0)
    try:
        fleet.advance(15.0)
        res = watch_once(plan_path, spec_path, tmp_path / "p", fleet.metrics())
        assert res.exit_code == 0, res.output
        lines = [json.loads(x) for x in res.stdout.splitlines()]
        assert [x["round"] for x in lines] == [0, 1] and lines[1]["failed"] == []
        assert set(lines[1]["deployments"]) == {d.name for d in plan.deployments}
        bad = watch_once(plan_path, spec_path, tmp_path / "p",
                         [*fleet.metrics()[:-1], "nosuch=http://127.0.0.1:1"])
        assert bad.exit_code == 1 and "nosuch" in bad.output
    finally:
        fleet.stop()


def test_calibration_moves_the_overheads_toward_a_slower_engine(watched, tmp_path):
    from trimtab.profiles.loader import load_profiles, profile_dirs, use_profile_dirs

    before = profile_dirs()
    try:
        plan, _, fleet, w = watched(seed=6, calibrate=True)
        bundled = load_profiles().engines[plan.engine.name].step_overhead_ms.value
        _, t = run(fleet, w, 8, 0.0)
        # every engine twice as slow as its profile says
        fleet.slow.update({d.name: 2.0 for d in plan.deployments})
        obs, _ = run(fleet, w, 4, t)
        p = next(o.proposal for o in obs if o.proposal is not None)
        step = next(u for u in p.calibration if u["parameter"] == "step_overhead_ms")
        assert step["old"] == pytest.approx(bundled) and step["new"] > step["old"]
        assert all(e["measured_ms"] > e["predicted_ms"] for e in step["evidence"])
        # bounded: one update moves it by at most half the measured mean TPOT it explains
        assert step["new"] - step["old"] <= 0.5 * max(e["measured_ms"] for e in step["evidence"]) + 1e-9
        # the next re-plan priced replicas with it: more capacity, and the profile and its evidence are on
        # disk
        assert p.cost_usd_per_hour[1] > p.cost_usd_per_hour[0]
        assert load_profiles().engines[plan.engine.name].step_overhead_ms.value == pytest.approx(step["new"])
        log = (tmp_path / "out0" / "calibration" / "calibration.jsonl").read_text().splitlines()
        assert json.loads(log[0])["parameter"] == "step_overhead_ms"
    finally:
        use_profile_dirs(before)


def test_calibration_leaves_out_intervals_with_a_queue(watched):
    from trimtab.profiles.loader import profile_dirs, use_profile_dirs

    before = profile_dirs()
    try:
        plan, _, fleet, w = watched(seed=6, calibrate=True)
        _, t = run(fleet, w, 8, 0.0)
        # past its capacity: twice as slow as the profile says because requests queue for admission (an
        # engine's waiting gauge), not because its steps or front end are slower
        fleet.slow.update({d.name: 2.0 for d in plan.deployments})
        fleet.queued.update({d.name: 5.0 for d in plan.deployments})
        obs, _ = run(fleet, w, 4, t)
        risky = [o for o in obs if any(v["at_risk"] for v in o.workloads.values())]
        assert risky and w.calibrated, [o.notes for o in obs]
        # the evidence is the 8 steady intervals, where the engines served their planned TPOT (the fleet's
        # own, within a few per cent), never the queued ones at 2x. (The prediction beside it is the model's
        # at the rate those intervals measured, which near a deployment's capacity moves with the Poisson
        # noise of that rate.)
        ev = [e for u in w.calibrated for e in u["evidence"]]
        served = {x: tpot * 1e3 for x, (_, tpot) in fleet.p50.items()}
        assert ev and all(abs(e["measured_ms"] / served[e["workload"]] - 1) < 0.1 for e in ev), ev
        assert all(e["requests"] < 8 * 15 * 40 for e in ev)  # 8 intervals of 15 s, a and b below 40 rps
    finally:
        use_profile_dirs(before)


def test_calibration_predicts_at_the_rate_measured_with_the_latencies(watched):
    # alpha so small that the rate test declares nothing: the references stay the plan's
    plan, spec, fleet, w = watched(seed=8, calibrate=True, alpha=1e-12)
    fleet.scale["a"] = 1.1
    obs, _ = run(fleet, w, 9, 0.0)
    assert not any(g["rate_change"] for o in obs for g in o.groups.values())
    assert obs[-1].groups["a"]["reference_rps"] == pytest.approx(20.0)
    measured, rates = w.steady.measured(w.groups, w.ref, w.pre_of, w.round)
    assert set(measured) == {"a", "b"} and all(m[0].count > 0 and m[1].count > 0 for m in measured.values())
    # a's rate as those intervals measured it, not its reference
    assert rates["a"] > 1.05 * 20 and rates["a"] == pytest.approx(obs[-1].groups["a"]["rate_rps"], rel=0.02)
    fleet.queued.update({d.name: 1.0 for d in plan.deployments})  # from here on, no interval is steady
    run(fleet, w, 2, 15.0 * 9)
    assert w.steady.measured(w.groups, w.ref, w.pre_of, w.round)[1] == pytest.approx(rates)


def test_traffic_that_stops_is_not_planned_for_zero(watched):
    _, _, fleet, w = watched(seed=9)
    _, t = run(fleet, w, 9, 0.0)
    fleet.scale["a"] = 0.0
    obs, _ = run(fleet, w, 4, t)
    assert any(g["rate_change"] and g["rate_change"]["factor"] == 0 for o in obs for g in o.groups.values())
    notes = [n for o in obs for n in o.notes]
    assert any("no request arrived" in n for n in notes), notes
    assert not any(n.startswith("re-plan failed") for n in notes), notes


CPU_SPEC = """\
version: 1
name: cpu-watch
gpus:
  - {type: cpu-xeon-2c, count: 6, usd_per_hour: 1.0}
models:
  - {name: tiny, config: model/config.json}
defaults: {engine: vllm-cpu}
workloads:
  - name: chat
    model: tiny
    rate_rps: 20
    input_tokens: {fixed: 256}
    output_tokens: {fixed: 32}
    slo: {ttft_ms: 3000, tpot_ms: 100, percentile: 90}
"""


def test_a_proposal_stands_without_manifests_where_a_device_has_none(tmp_path):
    from tests.loadtest.test_loadtest import CONFIG
    from trimtab.api import plan as make_plan
    from trimtab.online.watch import Watcher, targets_for
    from trimtab.spec.load import load_spec

    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "spec.yaml").write_text(CPU_SPEC)
    spec = load_spec(tmp_path / "spec.yaml")
    plan = make_plan(spec, validate=False).plan
    fleet = Fleet(plan, spec, 0)
    try:
        w = Watcher(plan, spec, targets_for(plan, fleet.metrics()), out_dir=tmp_path / "out", analytic=True,
                    dead_after=2, apply=True)
        _, t = run(fleet, w, 6, 0.0)
        fleet.scale["chat"] = 4.0
        obs, _ = run(fleet, w, 6, t)
    finally:
        fleet.stop()
    p = next(o.proposal for o in obs if o.proposal is not None)
    # a CPU device has no Kubernetes resource: the plan is proposed, checked and written all the same
    assert p.check_ok and sum(b for _, b in p.replicas.values()) > sum(d.replicas for d in plan.deployments)
    assert p.manifests.startswith("not written") and "cpu-xeon-2c" in p.manifests
    assert (Path(p.folder) / "plan.yaml").is_file() and not (Path(p.folder) / "k8s").exists()
    assert p.applied.startswith("not applied: no manifests")
    assert json.loads((Path(p.folder) / "proposal.json").read_text())["manifests"] == p.manifests


def test_apply_runs_kubectl_and_adopts_the_proposal(watched, tmp_path, monkeypatch):
    # kubectl is the cluster's, not the watcher's: a stand-in on PATH records what it was asked to apply
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "kubectl.log"
    (bindir / "kubectl").write_text(f"#!/bin/sh\necho \"$@\" >> {log}\n")
    (bindir / "kubectl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    plan, _, fleet, w = watched(seed=7, apply=True)
    _, t = run(fleet, w, 9, 0.0)
    fleet.scale["a"] = 1.6
    obs, _ = run(fleet, w, 4, t)
    p = next(o.proposal for o in obs if o.proposal is not None)
    assert p.applied == "applied" and log.read_text().split() == ["apply", "-f", f"{p.folder}/k8s"]
    # the proposal is what runs now: its replicas are the watcher's plan and its rates the references
    assert {d.name: d.replicas for d in w.plan.deployments} != {d.name: d.replicas for d in plan.deployments}
    assert sum(v for (wl, _), v in w.ref.items() if wl == "a") == pytest.approx(p.rates_rps["a"])
    # endpoints of replicas the proposal stopped are no longer watched (their going away is not a failure)
    assert all(t.replica < w.replicas.get(t.deployment, 0) for t in w.targets)


class _Prometheus:
    """A stand-in for a Prometheus server (the external service ``--prometheus`` reads): on each instant query
    it scrapes its targets' /metrics as Prometheus would and answers ``/api/v1/query`` with their series, an
    ``instance`` label each and ``up`` 0 for a target whose scrape fails. Only ``{__name__=~"a|b|..."}`` is
    understood, the one query watch sends."""

    def __init__(self, instances: list[str]):
        import re
        import threading
        import urllib.parse
        import urllib.request
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        from prometheus_client.parser import text_string_to_metric_families

        def answer(query: str) -> dict:
            names = set(re.fullmatch(r'\{__name__=~"(.*)"\}', query).group(1).split("|"))
            result = []
            for inst in instances:
                try:
                    text = urllib.request.urlopen(f"http://{inst}/metrics", timeout=5).read().decode()
                except OSError:
                    result.append({"metric": {"__name__": "up", "instance": inst}, "value": [0, "0"]})
                    continue
                result.append({"metric": {"__name__": "up", "instance": inst}, "value": [0, "1"]})
                for fam in text_string_to_metric_families(text):
                    for s in fam.samples:
                        if s.name in names:
                            result.append({"metric": {**s.labels, "__name__": s.name, "instance": inst},
                                           "value": [0, repr(s.value)]})
            return {"status": "success", "data": {"resultType": "vector", "result": result}}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                u = urllib.parse.urlsplit(self.path)
                q = urllib.parse.parse_qs(u.query).get("query", [""])[0]
                body = json.dumps(answer(q)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, args=(POLL_S,), daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def test_through_a_prometheus_server(tmp_path):
    from trimtab.online.watch import Watcher, targets_for

    rate = _rate_with_two_replicas()
    plan, spec, fleet, _ = setup(8, str(tmp_path / "unused"), overrides=_two_replicas())
    inst = {(d, i): e.url.split("//")[1].split("/")[0] for d, i, e in fleet.engines}
    prom = _Prometheus(list(inst.values()))
    try:
        targets = targets_for(plan, [f"{d}={v}" for (d, _), v in inst.items()], instances=True)
        w = Watcher(plan, spec, targets, out_dir=tmp_path / "p", analytic=True, prometheus=prom.url)
        _, t = run(fleet, w, 9, 0.0)
        fleet.scale["a"] = 1.6
        obs, t = run(fleet, w, 3, t)
        p = next(o.proposal for o in obs if o.proposal is not None)
        assert p.rates_rps["a"] == pytest.approx(1.6 * rate, rel=0.15) and p.check_ok
        d = next(x for x in plan.deployments if x.replicas >= 2)
        fleet.kill(d.name, 1)  # Prometheus' scrape of it fails: up 0
        obs, t = run(fleet, w, 2, t)
        assert obs[-1].failed == [f"replica={d.name}/1"] and "up 0" in "".join(obs[-1].errors.values())
        prom.stop()  # the server itself gone: steps are skipped, no replica is judged by it
        prom = None
        obs, _ = run(fleet, w, 3, t)
        assert all("this step is skipped" in " ".join(o.notes) for o in obs)
        # the replica failed before the server went stays failed; nothing else is judged or proposed
        assert all(o.failed == [f"replica={d.name}/1"] and o.proposal is None for o in obs)
    finally:
        fleet.stop()
        if prom is not None:
            prom.stop()


def test_longer_prompts_are_a_length_change_and_refit_the_spec(watched):
    from trimtab.spec.lengths import rescaled_lengths

    plan, spec, fleet, w = watched(seed=9)
    before, t = run(fleet, w, 6, 0.0)
    assert not any(o.groups.get("b", {}).get("length_change") for o in before)
    fleet.longer["b"] = (1.5, 1.0)  # b's prompts half as long again, its outputs as planned
    obs, _ = run(fleet, w, 3, t)
    hit = next(o for o in obs if o.groups["b"]["length_change"])
    assert [x["what"] for x in hit.groups["b"]["length_change"]] == ["prompt"]
    assert w.len_factor[("b", "prompt")] == pytest.approx(1.5, rel=0.03)
    assert ("b", "output") not in w.len_factor
    said = [r for o in obs for r in (o.proposal.reasons if o.proposal else []) + o.notes]
    assert any("mean prompt length" in r for r in said) or any("moves no replica" in r for r in said)
    # the re-plan's spec: b's fixed 1000-token prompts now 1500, its outputs and a's lengths as they were
    s2 = rescaled_lengths(spec, {("b", "prompt"): 1.5})
    b = next(x for x in s2.workloads if x.name == "b")
    assert b.input_tokens.fixed == 1500 and b.output_tokens.fixed == 300
    assert next(x for x in s2.workloads if x.name == "a") is next(x for x in spec.workloads if x.name == "a")


def test_a_slow_scrape_is_dated_when_the_engine_answered(watched):
    """Live (no ``now`` given): each endpoint's counters are dated at the midpoint of its request, not at the
    step's start. An engine under load took seconds to answer /metrics (tests/e2e/test_watch_vllm_cpu.py); a
    window dated by the step's start then held the requests of more seconds than it said, and a rate step read
    several times too large."""
    _, _, fleet, w = watched(seed=0)
    clock = {"t": 1000.0}
    real = w.client

    class Slow:
        def get(self, url):
            clock["t"] += 6.0  # the engine takes 6 s to answer
            return real.get(url)

    w.client, w.clock = Slow(), lambda: clock["t"]
    t = w.targets[0]
    snap = w._scrape(t, None)
    assert snap.t == pytest.approx(1003.0)
    assert w._scrape(t, 50.0).t == 50.0  # a replay's clock dates every scrape of its step


def test_arrivals_are_the_finished_plus_the_change_in_the_engine():
    """An engine past its capacity finishes requests at its own pace: the arrivals of a window are those it
    finished plus the growth of those running and waiting (vLLM's gauges); an engine that restarted lost what
    it held, so its level now is what arrived since."""
    def text(done, running, waiting):
        return ("# TYPE vllm:request_success_total counter\n"
                f'vllm:request_success_total{{model_name="m",finished_reason="length"}} {done}\n'
                "# TYPE vllm:num_requests_running gauge\n"
                f'vllm:num_requests_running{{model_name="m"}} {running}\n'
                "# TYPE vllm:num_requests_waiting gauge\n"
                f'vllm:num_requests_waiting{{model_name="m"}} {waiting}\n')

    a, b = parse(text(100, 4, 0), 0.0), parse(text(130, 8, 26), 10.0)
    w = window(a, b).total()
    assert w.counters["vllm:request_success_total"] == 30 and w.arrivals == 30 + (8 + 26) - 4
    after_restart = window(b, parse(text(5, 2, 1), 20.0)).total()
    assert after_restart.arrivals == 5 + 3
    plain = window(parse(text(100, 0, 0), 0.0), parse(text(120, 0, 0), 10.0)).total()
    assert plain.arrivals == 20
