"""``trimtab watch`` against synthetic engines (docs/online.md, "Watching a deployment", "Measured").

    python benchmarks/watch.py [--seeds 5] [--stationary-h 2] [--simulated] [--out benchmarks/data/watch.json]
    python benchmarks/watch.py serve --plan plan.yaml --spec spec.yaml [--step 120:chat=1.6] \
        [--kill 300:DEP/1]

Each replica of the plan is a ``SyntheticEngine``: a ``prometheus_client`` registry with vLLM's metric names
and bucket bounds, served over HTTP on 127.0.0.1 (``prometheus_client``'s WSGI app), whose counters and
histograms advance as an engine's would over an interval: a Poisson number of finished requests at the
replica's share of the deployment's rate, prompt and output lengths drawn from the plan's length buckets
routed there, TTFT and TPOT lognormal around the plan's cost-model prediction at percentile 50 for the
workload (``trimtab.field.loadtest.predicted_at``): an engine that behaves as the model says, until ``slow``
stretches it. The watcher (``trimtab.online.watch.Watcher``) scrapes them over real HTTP; only the clock is
simulated (each interval is advanced at once), so hours of traffic take seconds.

Measured, per seed: false alarms (proposals, rate and length changes, SLOs at risk) over ``--stationary-h``
hours at the planned rates, 15 s intervals; the intervals from a step of one workload's rate (x0.5, x1.3,
x1.6, x2) to the proposal (the step half-way through an interval, counted from the end of that interval: 1 is
the first scrape after the step); the intervals from an endpoint's death to the proposal (1: the first scrape
after it). The spec is tests/online/test_replan.py's (8B workloads on h100-sxm and l40s; re-plans and checks
by the cost model, ``analytic``, unless ``--simulated``).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from wsgiref.simple_server import make_server

import numpy as np

# vLLM's bucket bounds (vllm/engine/metrics.py, V1 loggers): TTFT and TPOT in seconds, lengths in tokens
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0)
LEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000)
INTERVAL_S = 15.0
SIGMA_TTFT, SIGMA_TPOT = 0.25, 0.05  # lognormal spreads of a synthetic request's TTFT and TPOT
# A P/D request (trimtab.online.roles): its prefill engine observes it as a one-token request whose first
# token takes this share of the predicted TTFT; its decode engine observes the whole request, with the rest
# (the KV pull and first decode step) as its first-token time
PREFILL_TTFT = 0.8


POLL_S = 0.05  # the metrics server's serve_forever poll: stop() waits up to one poll (0.5 s by default)


def _serve(reg):
    """The registry's /metrics on an ephemeral 127.0.0.1 port, in a daemon thread: (server, thread).
    ``prometheus_client.start_http_server`` with a shorter poll, so that a fleet of them stops at once."""
    from prometheus_client import make_wsgi_app
    from prometheus_client.exposition import ThreadingWSGIServer, _SilentHandler

    server = make_server("127.0.0.1", 0, make_wsgi_app(reg), ThreadingWSGIServer,
                         handler_class=_SilentHandler)
    thread = threading.Thread(target=server.serve_forever, args=(POLL_S,), daemon=True)
    thread.start()
    return server, thread


class SyntheticEngine:
    """One replica's ``/metrics``, advanced interval by interval (module docstring)."""

    def __init__(self, model: str, seed: int):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.model = model
        self.rng = np.random.default_rng(seed)
        reg = CollectorRegistry()
        lab = ["model_name"]
        self.success = Counter("vllm:request_success", "finished requests", lab + ["finished_reason"],
                               registry=reg)
        self.prompt_total = Counter("vllm:prompt_tokens", "prompt tokens", lab, registry=reg)
        self.gen_total = Counter("vllm:generation_tokens", "generated tokens", lab, registry=reg)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "TTFT", lab, buckets=TTFT_BUCKETS,
                              registry=reg)
        self.tpot = Histogram("vllm:request_time_per_output_token_seconds", "TPOT", lab, buckets=TPOT_BUCKETS,
                              registry=reg)
        self.isl = Histogram("vllm:request_prompt_tokens", "prompt lengths", lab, buckets=LEN_BUCKETS,
                             registry=reg)
        self.osl = Histogram("vllm:request_generation_tokens", "output lengths", lab, buckets=LEN_BUCKETS,
                             registry=reg)
        self.waiting = Gauge("vllm:num_requests_waiting", "requests waiting", lab, registry=reg)
        self.server, self.thread = _serve(reg)
        self.url = f"http://127.0.0.1:{self.server.server_port}/metrics"

    def advance(self, seconds: float, rate_rps: float,
                classes: list[tuple[float, float, float, float, float]], waiting: float = 0.0) -> int:
        """``seconds`` of serving at ``rate_rps``: classes [(weight, prompt mean, output mean, TTFT median s,
        TPOT median s)]; lengths uniform +-20 % around their means, TTFT lognormal (sigma SIGMA_TTFT), a
        request's TPOT (a mean over its tokens) lognormal (SIGMA_TPOT); a TPOT median of 0 (a prefill side's
        one-token requests) observes none. ``waiting``: the requests waiting for admission at its end."""
        self.waiting.labels(self.model).set(waiting)
        n = int(self.rng.poisson(rate_rps * seconds))
        if n == 0:
            return 0
        w = np.array([x[0] for x in classes], dtype=float)
        pick = self.rng.choice(len(classes), size=n, p=w / w.sum())
        col = np.array(classes)[pick]
        isl = col[:, 1] * self.rng.uniform(0.8, 1.2, n)
        osl = col[:, 2] * self.rng.uniform(0.8, 1.2, n)
        ttft = col[:, 3] * np.exp(SIGMA_TTFT * self.rng.standard_normal(n))
        tpot = col[:, 4] * np.exp(SIGMA_TPOT * self.rng.standard_normal(n))
        m = self.model
        for i in range(n):
            self.isl.labels(m).observe(round(isl[i]))
            self.osl.labels(m).observe(round(osl[i]))
            self.ttft.labels(m).observe(ttft[i])
            if tpot[i] > 0:
                self.tpot.labels(m).observe(tpot[i])
        self.success.labels(m, "length").inc(n)
        self.prompt_total.labels(m).inc(float(np.round(isl).sum()))
        self.gen_total.labels(m).inc(float(np.round(osl).sum()))
        return n

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Fleet:
    """One SyntheticEngine per replica of a plan, each served its share of the routed traffic."""

    def __init__(self, plan, spec, seed: int):
        self.serve(plan, spec)
        self.engines: list[tuple[str, int, SyntheticEngine]] = []
        for d in plan.deployments:
            for i in range(d.replicas):
                self.engines.append((d.name, i, SyntheticEngine(d.model, seed * 1000 + len(self.engines))))
        self.scale: dict[str, float] = {}  # workload -> rate multiplier
        self.slow: dict[str, float] = {}  # deployment -> latency multiplier
        self.queued: dict[str, float] = {}  # deployment -> requests waiting for admission on each replica
        self.longer: dict[str, tuple[float, float]] = {}  # workload -> (prompt, output) length multipliers
        self.dead: set[tuple[str, int]] = set()

    def serve(self, plan, spec) -> None:
        """Serve ``plan``'s routes at ``spec``'s rates from now on (a schedule's next window: its static plan
        and spec); replicas it does not route to idle."""
        from trimtab.field.loadtest import predicted_at
        from trimtab.ir.lower import workload_rate

        rate = {w.name: workload_rate(w, spec.base_dir) for w in spec.workloads}
        self.p50 = {w: (t / 1e3, p / 1e3) for w, (t, p) in predicted_at(plan, spec, 50.0).items()}
        buckets = {(w, b.name): b for w, bs in plan.buckets.items() for b in bs}
        # dep -> (workload, rps, isl, osl (None: one token, a prefill side), share of the TTFT it takes)
        self.routes: dict[str, list[tuple[str, float, float, float | None, float]]] = {}
        for r in plan.routes:
            b = buckets[(r.workload, r.bucket)]
            rps, isl, osl = rate[r.workload] * r.share, b.input_tokens_mean, b.output_tokens_mean
            if r.prefill:
                self.routes.setdefault(r.prefill, []).append((r.workload, rps, isl, None, PREFILL_TTFT))
                self.routes.setdefault(r.decode, []).append((r.workload, rps, isl, osl, 1 - PREFILL_TTFT))
            else:
                self.routes.setdefault(r.deployment, []).append((r.workload, rps, isl, osl, 1.0))
        self.running = {d.name: d.replicas for d in plan.deployments}

    def metrics(self) -> list[str]:
        return [f"{d}={e.url}" for d, _, e in self.engines]

    def advance(self, seconds: float) -> None:
        for d, i, e in self.engines:
            if (d, i) in self.dead:
                continue
            if i >= self.running.get(d, 0):  # scaled down by the schedule: idle
                continue
            live = sum(1 for dd, j, _ in self.engines if dd == d and (dd, j) not in self.dead
                       and j < self.running.get(d, 0))
            rs = self.routes.get(d, [])
            rps = [r * self.scale.get(w, 1.0) / live for w, r, _, _, _ in rs]
            f = self.slow.get(d, 1.0)
            lf = {w: self.longer.get(w, (1.0, 1.0)) for w, _, _, _, _ in rs}
            e.advance(seconds, sum(rps), [
                (x, isl * lf[w][0], 1.0 if osl is None else osl * lf[w][1], self.p50[w][0] * f * part,
                 0.0 if osl is None else self.p50[w][1] * f) for x, (w, _, isl, osl, part) in zip(rps, rs)],
                self.queued.get(d, 0.0))

    def kill(self, d: str, i: int) -> None:
        for dd, j, e in self.engines:
            if (dd, j) == (d, i):
                e.stop()
        self.dead.add((d, i))

    def stop(self) -> None:
        for d, i, e in self.engines:
            if (d, i) not in self.dead:
                e.stop()


def setup(seed: int, out_dir: str, overrides: dict | None = None, **kwargs):
    """The test spec's plan, its fleet and a watcher on it, with a simulated clock; ``overrides`` (dotted
    paths, as ``what_if``'s) change the spec first."""
    from tests.online.test_replan import SPEC
    from trimtab.api import plan as make_plan
    from trimtab.online.watch import Watcher, targets_for
    from trimtab.spec.load import load_spec
    from trimtab.spec.overrides import apply_overrides

    spec = load_spec("small.yaml", text=SPEC)
    if overrides:
        spec = apply_overrides(spec, overrides)
    plan = make_plan(spec, validate=False).plan
    fleet = Fleet(plan, spec, seed)
    w = Watcher(plan, spec, targets_for(plan, fleet.metrics()), out_dir=out_dir,
                **{"analytic": True, "dead_after": 2, **kwargs})
    return plan, spec, fleet, w


ROOT = Path(__file__).resolve().parents[1]


def setup_pd(seed: int, out_dir: str, **kwargs):
    """The disaggregated example's golden plan (4 prefill replicas, 1 decode; rag at 6 rps), its fleet (each
    request counted on both sides, ``PREFILL_TTFT``) and a watcher on it."""
    from trimtab.api import load_spec
    from trimtab.gate.analytic import load_plan
    from trimtab.online.watch import Watcher, targets_for

    spec = load_spec(ROOT / "examples/disaggregated.yaml")
    plan = load_plan(ROOT / "tests/golden/disaggregated.plan.yaml")
    fleet = Fleet(plan, spec, seed)
    w = Watcher(plan, spec, targets_for(plan, fleet.metrics()), out_dir=out_dir,
                **{"analytic": True, "dead_after": 2, **kwargs})
    return plan, spec, fleet, w


def run(fleet, w, steps: int, t0: float) -> tuple[list, float]:
    """``steps`` intervals: the fleet serves one, the watcher scrapes; returns the observations and the
    clock."""
    obs = []
    t = t0
    for _ in range(steps):
        fleet.advance(INTERVAL_S)
        t += INTERVAL_S
        obs.append(w.step(now=t))
    return obs, t


def first_proposal(obs) -> int | None:
    return next((k + 1 for k, o in enumerate(obs) if o.proposal is not None), None)


def measure(seed: int, stationary_h: float, analytic: bool = True, pd: bool = False) -> dict:
    """``pd``: the prefill/decode plan of ``setup_pd`` (workload rag at 6 rps) instead of the test spec's
    (workload a at 20 rps)."""
    res = {"seed": seed}
    make, wl, base = (setup_pd, "rag", 6.0) if pd else (setup, "a", 20.0)
    with tempfile.TemporaryDirectory() as tmp:
        _, _, fleet, w = make(seed, tmp, analytic=analytic)
        try:
            n = int(stationary_h * 3600 / INTERVAL_S)
            obs, _ = run(fleet, w, n + 1, 0.0)
            res["stationary"] = {"intervals": n, "proposals": sum(o.proposal is not None for o in obs),
                                 "rate_changes": sum(any(r["rate_change"] for r in o.groups.values())
                                                     for o in obs),
                                 "length_changes": sum(any(g.get("length_change") for g in o.groups.values())
                                                       for o in obs),
                                 "at_risk": sum(any(v["at_risk"] for v in o.workloads.values()) for o in obs)}
        finally:
            fleet.stop()
    res["step"] = {}
    for k in (0.5, 1.3, 1.6, 2.0):
        with tempfile.TemporaryDirectory() as tmp:
            _, _, fleet, w = make(seed, tmp, analytic=analytic)
            try:
                _, t = run(fleet, w, 9, 0.0)  # a baseline: the recent intervals at the planned rate
                w0 = time.perf_counter()
                # the step half-way through an interval (as a real one falls): that interval mixes both rates
                fleet.advance(INTERVAL_S / 2)
                fleet.scale[wl] = k
                fleet.advance(INTERVAL_S / 2)
                t += INTERVAL_S
                obs = [w.step(now=t)]
                more, _ = run(fleet, w, 19, t)
                obs += more
                at = first_proposal(obs)
                p = obs[at - 1].proposal if at else None
                res["step"][str(k)] = {"intervals_to_proposal": at, "true_rps": base * k,
                                       "rate_rps": p.rates_rps[wl] if p else None,
                                       "cost_usd_per_hour": list(p.cost_usd_per_hour) if p else None,
                                       "check_ok": p.check_ok if p else None,
                                       "proposals": sum(o.proposal is not None for o in obs),
                                       "wall_s": round(time.perf_counter() - w0, 1)}
            finally:
                fleet.stop()
    with tempfile.TemporaryDirectory() as tmp:
        plan, _, fleet, w = make(seed, tmp, analytic=analytic)
        try:
            _, t = run(fleet, w, 5, 0.0)
            d = max(plan.deployments, key=lambda x: x.replicas)
            fleet.kill(d.name, d.replicas - 1)
            obs, _ = run(fleet, w, 6, t)
            at = first_proposal(obs)
            p = obs[at - 1].proposal if at else None
            res["failure"] = {"intervals_to_proposal": at, "failures": p.failures if p else None,
                              "moves": {d: list(m) for d, m in p.moves.items()} if p else None,
                              "check_ok": p.check_ok if p else None}
        finally:
            fleet.stop()
    return res


def serve(argv: list[str]) -> int:
    """``python benchmarks/watch.py serve --plan P --spec S [--step 120:a=1.6] [--kill 240:DEP/1]``: the
    plan's fleet of synthetic engines in real time (advanced every second), to point ``trimtab watch`` at;
    prints the ``--metrics`` arguments, then each event as it happens."""
    from trimtab.api import load_spec
    from trimtab.gate.analytic import load_plan

    ap = argparse.ArgumentParser(prog="watch.py serve")
    ap.add_argument("--plan", type=Path, required=True)
    ap.add_argument("--spec", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--step", action="append", default=[], help="T:WORKLOAD=FACTOR, from T seconds on")
    ap.add_argument("--kill", action="append", default=[], help="T:DEPLOYMENT/REPLICA, stopped at T seconds")
    a = ap.parse_args(argv)
    plan, spec = load_plan(a.plan), load_spec(a.spec)
    fleet = Fleet(plan, spec, a.seed)
    events = sorted([(float(x.split(":", 1)[0]), "step", x.split(":", 1)[1]) for x in a.step]
                    + [(float(x.split(":", 1)[0]), "kill", x.split(":", 1)[1]) for x in a.kill])
    print(" ".join(f"--metrics {m}" for m in fleet.metrics()), flush=True)
    t0 = time.monotonic()
    k = 0
    try:
        while k < a.seconds:
            k += 1
            time.sleep(max(0.0, t0 + k - time.monotonic()))
            while events and events[0][0] <= k:
                _, kind, what = events.pop(0)
                if kind == "step":
                    wl, f = what.split("=")
                    fleet.scale[wl] = float(f)
                else:
                    d, i = what.rsplit("/", 1)
                    fleet.kill(d, int(i))
                print(f"{k:.0f} s: {kind} {what}", flush=True)
            fleet.advance(1.0)
    finally:
        fleet.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        return serve(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--stationary-h", type=float, default=2.0)
    ap.add_argument("--simulated", action="store_true", help="re-plan and check by simulation (default: the "
                                                            "cost model)")
    ap.add_argument("--pd", action="store_true", help="the disaggregated example's prefill/decode plan")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    rows = [measure(s, a.stationary_h, not a.simulated, a.pd) for s in range(a.seeds)]
    out = {"interval_s": INTERVAL_S, "alpha": 1e-4, "windows": 8, "simulated": a.simulated, "pd": a.pd,
           "rows": rows,
           "wall_s": round(time.perf_counter() - t0, 1)}
    text = json.dumps(out, indent=2) + "\n"
    if a.out:
        a.out.write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
