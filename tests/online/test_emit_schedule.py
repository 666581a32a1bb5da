"""``trimtab emit --to k8s`` of a daily schedule: the ScaledObjects carry the cron triggers of the schedule
and validate against KEDA's CRD schema (tests/engines/schemas), like every other manifest."""
from __future__ import annotations

import pytest
import yaml

from trimtab.api import plan
from trimtab.deploy import render
from trimtab.spec.load import load_spec
from tests.online.test_schedule import TINY

pytest.importorskip("kubernetes_validate")


def test_daily_schedule_emits_valid_cron_scaled_objects():
    from tests.engines.test_emit_k8s import validate

    text = TINY.format(extra="").replace("window_s: 3600", "window_s: 21600")
    spec = load_spec("tiny.yaml", text=text)
    p = plan(spec, validate=False).plan
    files, _ = render(p, spec, "k8s", allow_experimental=True)
    scalers = {}
    for body in files.values():
        for obj in yaml.safe_load_all(body):
            validate(obj)
            if obj["kind"] == "ScaledObject":
                scalers[obj["metadata"]["name"]] = obj["spec"]
    by_dep = {d: [w.replicas.get(d, 0) for w in p.schedule.windows] for d in (x.name for x in p.deployments)}
    for name, reps in by_dep.items():
        s = scalers[name]
        assert s["minReplicaCount"] == min(reps)
        crons = [t for t in s["triggers"] if t["type"] == "cron"]
        runs = [r for i, r in enumerate(reps) if r > min(reps) and (i == 0 or reps[i - 1] != r)]
        assert [int(t["metadata"]["desiredReplicas"]) for t in crons] == runs and runs
        assert s["triggers"][-1]["type"] == "prometheus"  # the queue trigger stays as the backstop


def test_one_start_up_model_for_schedule_and_probe():
    """The cron triggers start replicas ahead by the schedule's start-up time and the start-up probe allows a
    fixed multiple of the same number (they disagreed: 3 min ahead, 590 s allowed); the queue trigger reads a
    scraped gauge and an empty result is an error, not 0."""
    import math

    from trimtab.deploy.common import PROBE_SLACK

    text = TINY.format(extra="").replace("window_s: 3600", "window_s: 21600")
    spec = load_spec("tiny.yaml", text=text)
    p = plan(spec, validate=False).plan
    files, _ = render(p, spec, "k8s")
    objs = [o for body in files.values() for o in yaml.safe_load_all(body)]
    for o in objs:
        if o["kind"] == "Deployment":
            st = p.schedule.startup_s[o["metadata"]["name"]]
            probe = o["spec"]["template"]["spec"]["containers"][0]["startupProbe"]
            assert probe["failureThreshold"] * probe["periodSeconds"] == 10 * math.ceil(
                math.ceil(PROBE_SLACK * st) / 10)
            ann = o["spec"]["template"]["metadata"]["annotations"]
            assert ann["prometheus.io/scrape"] == "true" and ann["prometheus.io/path"] == "/metrics"
        if o["kind"] == "ScaledObject":
            prom = next(t for t in o["spec"]["triggers"] if t["type"] == "prometheus")
            assert prom["metadata"]["ignoreNullValues"] == "false"
