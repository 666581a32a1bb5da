"""Replay a spec's traffic against a running OpenAI-compatible server and compare with the plan
(``trimtab loadtest``).

Entry point: ``run_loadtest(plan, spec, endpoints, requests=..., duration_s=..., rate_scale=1, seed=0,
timeout_s=...) -> LoadtestResult``.

Why a small asyncio client and not aiperf or guidellm: the requests must be exactly the ones the simulator
replays (same arrivals, same lengths, same routing draw: ``trimtab.sim.engine.Simulation`` draws them from the
planner's length grids with the same seed), so measured, simulated and predicted numbers describe one request
stream; the existing load generators draw their own synthetic prompts and arrival times. The client is the
Python standard library only (``asyncio`` streams, HTTP/1.1, server-sent events), so ``trimtab loadtest`` adds
no dependency and timestamps are taken at the socket. docs/loadtest.md.

What is sent: ``POST {endpoint}/v1/completions`` with ``stream: true``, ``ignore_eos: true``, ``max_tokens`` =
the drawn output length and a prompt of the drawn input length given as token ids (random ids of the model's
vocabulary, seeded per request, so no prefix is shared and the prompt is exactly that many tokens whatever the
tokenizer); ``stream_options.include_usage`` makes the server report the prompt and completion token counts,
and requests whose counts differ from the drawn lengths are counted and reported.
What is measured: TTFT = first streamed token - send time; TPOT = (last token - first token) / (tokens - 1).
Requests that fail, time out or are cut short count as SLO misses. Only the addresses given are contacted.
"""
from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import numpy as np

from trimtab.errors import InputError, Problem
from trimtab.contract.schema import Plan
from trimtab.sim.metrics import WARMUP, _q, clean, min_requests, quantile_ci, summarise
from trimtab.spec.schema import Spec
from trimtab.gate.analytic import check, plan_references
from trimtab.ir.lower import lower, workload_rate
from trimtab.sim.engine import Simulation
from trimtab.sim.scenario import build_scenario
from trimtab.spec.overrides import apply_overrides

DEFAULT_REQUESTS = 200
DEFAULT_TIMEOUT_S = 900.0
CONNECT_TIMEOUT_S = 10.0


# --------------------------------------------------------------------------- endpoints
@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    path: str  # the completions path, e.g. /v1/completions

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{self.path}"


def parse_endpoint(url: str, where: str = "--endpoint") -> Endpoint:
    """``http://host:port`` (or ``.../v1``, ``.../v1/completions``) -> Endpoint; InputError naming
    ``where``."""
    try:
        u = urlsplit(url)
        port = u.port or 80
    except ValueError as exc:
        raise InputError([Problem(where, f"not a URL: {url!r} ({exc})")]) from None
    if u.scheme != "http" or not u.hostname:
        raise InputError([Problem(where, f"expected http://HOST:PORT, got {url!r} (plain HTTP only)")])
    path = u.path.rstrip("/")
    if not path.endswith("/completions"):
        path = (path if path.endswith("/v1") else path + "/v1") + "/completions"
    return Endpoint(u.hostname, port, path)


def endpoints_for(plan: Plan, values: list[str]) -> dict[str, Endpoint]:
    """Map each deployment of the plan to an endpoint: ``URL`` for every deployment, or ``DEPLOYMENT=URL``."""
    names = [d.name for d in plan.deployments if d.replicas > 0]
    out: dict[str, Endpoint] = {}
    default = None
    for v in values:
        name, sep, url = v.partition("=")
        if sep and not name.startswith("http"):
            if name not in names:
                raise InputError([Problem("--endpoint", f"deployment {name!r} is not in the plan "
                                                        f"(deployments: {', '.join(names)})")])
            out[name] = parse_endpoint(url, f"--endpoint {name}")
        else:
            default = parse_endpoint(v)
    missing = [n for n in names if n not in out and default is None]
    if missing:
        raise InputError([Problem("--endpoint", f"no endpoint for deployment(s) {', '.join(missing)}: give "
                                                "URL (all deployments) or DEPLOYMENT=URL for each")])
    return {n: out.get(n, default) for n in names}


# --------------------------------------------------------------------------- HTTP/1.1 + SSE client
class HttpError(Exception):
    pass


async def _read_headers(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    status_line = await reader.readline()
    if not status_line:
        raise HttpError("connection closed before a response")
    parts = status_line.decode("latin-1").split(" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise HttpError(f"bad status line {status_line[:80]!r}")
    headers = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        k, _, v = line.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    return int(parts[1]), headers


async def _body_chunks(reader: asyncio.StreamReader, headers: dict[str, str]):
    """Yield the response body as it arrives (chunked transfer coding, a length, or until close)."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            size_line = await reader.readline()
            if not size_line:
                return
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                await reader.readline()
                return
            data = await reader.readexactly(size)
            await reader.readline()  # CRLF after each chunk
            yield data
    elif "content-length" in headers:
        yield await reader.readexactly(int(headers["content-length"]))
    else:
        while True:
            data = await reader.read(65536)
            if not data:
                return
            yield data


async def http_request(ep: Endpoint, method: str, path: str, body: dict | None = None):
    """Open a connection, send one request; returns (status, headers, reader, writer)."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection(ep.host, ep.port), CONNECT_TIMEOUT_S)
    payload = json.dumps(body).encode() if body is not None else b""
    head = (f"{method} {path} HTTP/1.1\r\nHost: {ep.host}:{ep.port}\r\nAccept: text/event-stream\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\nConnection: close\r\n\r\n")
    writer.write(head.encode("latin-1") + payload)
    await writer.drain()
    status, headers = await _read_headers(reader)
    return status, headers, reader, writer


async def get_json(ep: Endpoint, path: str) -> dict:
    status, headers, reader, writer = await http_request(ep, "GET", path)
    try:
        body = b"".join([c async for c in _body_chunks(reader, headers)])
    finally:
        writer.close()
    if status != 200:
        raise HttpError(f"GET {path}: HTTP {status}")
    return json.loads(body)


@dataclass
class Outcome:
    """One request as the client saw it (times in seconds on the client's monotonic clock)."""

    sent: float = math.nan
    first: float = math.nan
    last: float = math.nan
    tokens: int = 0  # completion tokens (usage), else streamed chunks
    prompt_tokens: int = -1  # from usage; -1 when the server did not report it
    error: str = ""


async def stream_completion(ep: Endpoint, body: dict, out: Outcome) -> None:
    """POST a streaming completion and time its tokens into ``out`` (errors go to ``out.error``)."""
    out.sent = time.perf_counter()
    writer = None
    try:
        status, headers, reader, writer = await http_request(ep, "POST", ep.path, body)
        if status != 200:
            text = b"".join([c async for c in _body_chunks(reader, headers)])[:200]
            out.error = f"HTTP {status}: {text.decode('utf-8', 'replace')}"
            return
        buf = b""
        chunks = 0
        async for data in _body_chunks(reader, headers):
            now = time.perf_counter()
            buf += data
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                for line in event.splitlines():
                    if not line.startswith(b"data:"):
                        continue
                    d = line[5:].strip()
                    if d == b"[DONE]":
                        continue
                    msg = json.loads(d)
                    if msg.get("choices"):
                        ch = msg["choices"][0]
                        if ch.get("text") or ch.get("finish_reason") is None:
                            chunks += 1
                            if math.isnan(out.first):
                                out.first = now
                            out.last = now
                    usage = msg.get("usage")
                    if usage:
                        out.tokens = int(usage.get("completion_tokens") or 0)
                        out.prompt_tokens = int(usage.get("prompt_tokens") or -1)
        if out.tokens == 0:
            out.tokens = chunks
        if math.isnan(out.first):
            out.error = "no token streamed"
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, HttpError, ValueError) as exc:
        out.error = f"{type(exc).__name__}: {exc}"[:200]
    finally:
        if writer is not None:
            writer.close()


# --------------------------------------------------------------------------- the run
@dataclass
class WorkloadResult:
    name: str
    requests: int  # measured (after the warm-up share, as the simulator counts)
    completed: int
    errors: int
    target: float  # percentile / 100
    ttft_slo_ms: float
    tpot_slo_ms: float
    measured: dict  # ttft_p50/p90/pSLO (+ _ci: 95 % interval), tpot_..., attainment (ms; share)
    predicted: dict  # plan's cost-model prediction at the SLO percentile (scaled rate: recomputed)
    simulated: dict  # the simulator on the same request stream
    # requests whose reported prompt or completion tokens differ from the drawn lengths
    length_mismatches: int
    min_requests: int = 0  # measured requests its percentile needs to be called met (metrics.min_requests)

    @property
    def verdict(self) -> str:
        """missed (the measured attainment is below target, whatever the count), insufficient (at or above it,
        but from fewer requests than the percentile needs: a p99 of 9 requests is their maximum, and says
        nothing about the 99th percentile), or met."""
        if self.requests > 0 and self.measured["attainment"] < self.target - 1e-12:
            return "missed"
        if self.requests == 0 or self.requests < self.min_requests:
            return "insufficient"
        return "met"

    @property
    def passed(self) -> bool:
        return self.verdict == "met"


@dataclass
class LoadtestResult:
    workloads: dict[str, WorkloadResult]
    seed: int
    rate_scale: float
    sent: int
    wall_s: float
    late_s_p99: float  # how late the client sent requests against their scheduled times
    notes: list[str] = field(default_factory=list)
    samples: dict = field(default_factory=dict)  # workload -> {"ttft_ms": [...], "tpot_ms": [...]} (measured)

    @property
    def ok(self) -> bool:
        return all(w.passed for w in self.workloads.values())

    def failures(self) -> list[str]:
        out = []
        for w in self.workloads.values():
            if w.verdict == "insufficient":
                out.append(f"workload {w.name}: insufficient: {w.requests} measured request(s); a "
                           f"p{w.target * 100:g} needs at least {w.min_requests} to be called met (below "
                           "that its 95 % interval has no upper bound); send more with --requests or "
                           "--duration")
            elif not w.passed:
                out.append(f"workload {w.name}: measured SLO attainment {w.measured['attainment']:.1%} < "
                           f"{w.target:.0%} (TTFT p{w.target * 100:g} {w.measured['ttft_pslo']:.0f} ms "
                           f"vs SLO {w.ttft_slo_ms:g}, TPOT p{w.target * 100:g} "
                           f"{w.measured['tpot_pslo']:.1f} ms vs SLO {w.tpot_slo_ms:g}; {w.errors} failed)")
        return out

    def to_dict(self) -> dict:
        return {"ok": self.ok, "seed": self.seed, "rate_scale": self.rate_scale, "sent": self.sent,
                "wall_s": round(self.wall_s, 3), "late_s_p99": clean(self.late_s_p99), "notes": self.notes,
                "workloads": {k: {"requests": w.requests, "completed": w.completed, "errors": w.errors,
                                  "target": w.target, "slo_met": w.passed, "verdict": w.verdict,
                                  "min_requests": w.min_requests, "ttft_slo_ms": w.ttft_slo_ms,
                                  "tpot_slo_ms": w.tpot_slo_ms, "measured": clean(w.measured),
                                  "predicted": clean(w.predicted), "simulated": clean(w.simulated),
                                  "length_mismatches": w.length_mismatches}
                              for k, w in self.workloads.items()},
                "failures": self.failures()}


def scaled_spec(spec: Spec, rate_scale: float) -> Spec:
    """The spec with every workload's arrival rate multiplied by ``rate_scale`` (rate_rps, or
    trace.rate_scale)."""
    if rate_scale == 1.0:
        return spec
    return rescaled_spec(spec, {w.name: rate_scale for w in spec.workloads})


def rescaled_spec(spec: Spec, factors: dict[str, float]) -> Spec:
    """The spec with workload ``name``'s arrival rate multiplied by ``factors[name]`` (rate_rps, or
    trace.rate_scale; ``trimtab watch`` gives measured rates this way). A rate profile is not rescaled (exit
    1)."""
    over: dict[str, object] = {}
    for w in spec.workloads:
        f = factors.get(w.name, 1.0)
        if f == 1.0:
            continue
        if w.rate_rps is not None:
            over[f"workloads.{w.name}.rate_rps"] = w.rate_rps * f
        elif w.trace is not None:
            over[f"workloads.{w.name}.trace.rate_scale"] = (w.trace.rate_scale or 1.0) * f
            workload_rate(w, spec.base_dir)  # a malformed trace fails here, with its file name
        else:
            raise InputError([Problem(f"workloads ({w.name}).rate_profile", "a rate profile is a schedule's; "
                                      "its rates are not rescaled")], "spec")
    return apply_overrides(spec, over) if over else spec


def predicted_at(plan: Plan, spec: Spec, percentile: float | None = None) -> dict[str, tuple[float, float]]:
    """Cost-model TTFT and TPOT (ms) per workload for ``spec``'s traffic, at ``percentile`` (default: each
    SLO's): the assessment ``check --analytic`` makes (trimtab.gate.analytic), with the percentile
    substituted."""
    s = spec
    if percentile is not None:
        s = apply_overrides(spec, {f"workloads.{w.name}.slo.percentile": float(percentile)
                                   for w in spec.workloads})
    rep = check(plan, s)
    return {k: (v.ttft_ms, v.tpot_ms) for k, v in rep.assessment.workloads.items()}


def _prompt(rng: np.random.Generator, n: int, vocab: int) -> list[int]:
    # Ids from 3 up: 0-2 are the special tokens of common vocabularies (unk/pad, bos, eos).
    return rng.integers(3, max(vocab, 4), n).tolist()


async def _drive(arrivals, dep_names: list[str], eps: dict[str, Endpoint], models: dict[str, str],
                 vocab: dict[str, int], seed: int, timeout_s: float) -> tuple[list[Outcome], list[float]]:
    n = len(arrivals.t)
    outs = [Outcome() for _ in range(n)]
    late: list[float] = []
    tasks = []
    t0 = time.perf_counter() + 0.05
    for i in range(n):
        di = int(arrivals.dep[i])
        if di < 0:
            outs[i].error = "no route in the plan"
            continue
        dep = dep_names[di]
        if dep not in eps:
            outs[i].error = f"routed to {dep}, which has no replicas"
            continue
        body = {"model": models[dep],
                "prompt": _prompt(np.random.default_rng([seed, i]), int(arrivals.isl[i]), vocab[dep]),
                "max_tokens": int(arrivals.osl[i]), "ignore_eos": True, "stream": True, "temperature": 0.0,
                "stream_options": {"include_usage": True}}
        delay = t0 + float(arrivals.t[i]) - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        late.append(max(0.0, -delay))
        tasks.append(asyncio.ensure_future(stream_completion(eps[dep], body, outs[i])))
        if time.perf_counter() - t0 > timeout_s:
            break
    if tasks:
        left = max(1.0, timeout_s - (time.perf_counter() - t0))
        done, pending = await asyncio.wait(tasks, timeout=left)
        for p in pending:
            p.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    for o in outs:
        if not o.error and (math.isnan(o.first) or math.isnan(o.sent)):
            o.error = "not sent or not finished within the time limit"
    return outs, late


def _quantiles(x: np.ndarray, pct: float) -> dict:
    """p50, p90 and the SLO's percentile (ms), each with its 95 % order-statistic interval (``<key>_ci``)."""
    out = {}
    for k, p in (("p50", 50.0), ("p90", 90.0), ("pslo", pct)):
        out[k] = _q(x, p) * 1e3
        out[k + "_ci"] = [v * 1e3 for v in quantile_ci(x, p)]
    return out


def run_loadtest(plan: Plan, spec: Spec, endpoint_values: list[str], *, requests: int | None = None,
                 duration_s: float | None = None, rate_scale: float = 1.0, seed: int = 0,
                 timeout_s: float = DEFAULT_TIMEOUT_S, model_names: dict[str, str] | None = None,
                 simulate: bool = True, progress=None) -> LoadtestResult:
    """Send the spec's traffic (rates x ``rate_scale``) to the endpoints and measure it; the same request
    stream is simulated and the cost model re-evaluated at the scaled rate, for comparison. ``progress``: told
    each step as it starts (a run can last minutes: ``--timeout`` defaults to 900 s)."""
    say = progress or (lambda _: None)

    if requests is not None and duration_s is not None:
        raise InputError([Problem("--requests/--duration", "give one of them, not both")])
    if requests is None and duration_s is None:
        requests = DEFAULT_REQUESTS
    if not rate_scale > 0:
        raise InputError([Problem("--rate-scale", f"must be positive, got {rate_scale}")])
    pd = [d.name for d in plan.deployments if d.role != "unified"]
    if pd:
        raise InputError([Problem("--plan", f"prefill/decode deployments ({', '.join(pd)}) are served behind "
                                            "a P/D router whose endpoint trimtab does not emit yet; "
                                            "loadtest replays unified deployments only")])
    eps = endpoints_for(plan, endpoint_values)
    s = scaled_spec(spec, rate_scale)
    ir = lower(s)

    foreign = plan_references(plan, ir)
    if foreign:  # a plan from another spec: say so before sending anything (exit 1, as check does)
        raise InputError(foreign, "plan")
    sc = build_scenario(plan, s, ir)
    sim = Simulation(sc, seed, requests, duration_s, timeline=False)
    arrivals = sim.arrivals
    dep_names = [d.view.name for d in sc.deployments]
    vocab = {d.name: int(ir.models[d.model].vocab_size.value) for d in plan.deployments
             if d.model in ir.models}
    models = dict(model_names or {})
    notes: list[str] = []

    async def main():
        for dep in eps:
            if dep in models:
                continue
            try:
                data = await get_json(eps[dep], eps[dep].path.rsplit("/", 1)[0] + "/models")
                models[dep] = data["data"][0]["id"]
            except (OSError, asyncio.TimeoutError, HttpError, ValueError, KeyError, IndexError) as exc:
                raise InputError([Problem("--endpoint", f"{eps[dep].url}: no OpenAI-compatible server "
                                                        f"answers GET /v1/models ({type(exc).__name__}: "
                                                        f"{exc})")]) from None
        return await _drive(arrivals, dep_names, eps, models, vocab, seed, timeout_s)

    w0 = time.perf_counter()
    span = float(arrivals.t[-1]) if len(arrivals.t) else 0.0
    say(f"sending {int((arrivals.dep >= 0).sum())} requests over {span:.0f} s")
    outs, late = asyncio.run(main())
    wall = time.perf_counter() - w0
    pred = predicted_at(plan, s)
    simres = None
    if simulate:
        say("simulating the same request stream")
        sim.run()
        simres = summarise(sim)
    t_last = float(arrivals.t[-1]) if len(arrivals.t) else 0.0
    measured_mask = arrivals.t >= WARMUP * t_last
    results: dict[str, WorkloadResult] = {}
    samples: dict[str, dict] = {}
    for wi, wl in enumerate(sc.workloads):
        idx = np.nonzero((arrivals.w == wi) & measured_mask)[0]
        ttft = np.full(len(idx), np.inf)
        tpot = np.full(len(idx), np.inf)
        errors = mism = completed = 0
        for j, i in enumerate(idx):
            o = outs[i]
            if o.error:
                errors += 1
                continue
            completed += 1
            ttft[j] = o.first - o.sent
            tpot[j] = (o.last - o.first) / (o.tokens - 1) if o.tokens > 1 else 0.0
            if o.tokens != int(arrivals.osl[i]) or (o.prompt_tokens >= 0
                                                    and o.prompt_tokens != int(arrivals.isl[i])):
                mism += 1
        ok = (ttft <= wl.ttft_s) & (tpot <= wl.tpot_s)
        m = {"attainment": float(ok.mean()) if len(idx) else 0.0}
        m.update({f"ttft_{k}": v for k, v in _quantiles(ttft, wl.percentile).items()})
        m.update({f"tpot_{k}": v for k, v in _quantiles(tpot, wl.percentile).items()})
        p = pred.get(wl.name, (math.nan, math.nan))
        simd = {}
        if simres is not None and wl.name in simres.workloads:
            st = simres.workloads[wl.name]
            simd = {"attainment": st.attainment, "ttft_p50": st.ttft_ms["p50"], "ttft_p90": st.ttft_ms["p90"],
                    "ttft_pslo": st.ttft_at_target_ms, "tpot_p50": st.tpot_ms["p50"],
                    "tpot_p90": st.tpot_ms["p90"], "tpot_pslo": st.tpot_at_target_ms}
        results[wl.name] = WorkloadResult(wl.name, len(idx), completed, errors, wl.percentile / 100.0,
                                          wl.ttft_s * 1e3, wl.tpot_s * 1e3, m,
                                          {"ttft_pslo": p[0], "tpot_pslo": p[1]}, simd, mism,
                                          min_requests(wl.percentile))
        samples[wl.name] = {"ttft_ms": (ttft * 1e3).tolist(), "tpot_ms": (tpot * 1e3).tolist()}
        if mism:
            notes.append(f"{wl.name}: {mism} request(s) reported prompt or completion token counts other "
                         "than the drawn lengths (server-side context limit, or a proxy that re-tokenises)")
        errs = sorted({outs[i].error for i in idx if outs[i].error})
        if errs:
            notes.append(f"{wl.name}: {errors} request(s) failed: {'; '.join(errs[:3])}")
    lat = np.array(late) if late else np.zeros(1)
    if float(np.quantile(lat, 0.99)) > 0.1:
        notes.append(f"the client sent 1 % of requests more than {np.quantile(lat, 0.99) * 1e3:.0f} ms late "
                     f"(a busy machine): measured TTFT is from the actual send time")
    return LoadtestResult(results, seed, rate_scale, int((arrivals.dep >= 0).sum()), wall,
                          float(np.quantile(lat, 0.99)), notes, samples)
