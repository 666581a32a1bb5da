"""Fit an engine profile's overheads to a real server, on one set of shapes, and evaluate it on another.

Entry points:
  * ``measure(url, shapes, vocab, ...) -> list[ShapeResult]``: closed-loop runs against a running server
    (``concurrency`` clients, each sending its next request when the last one ends), median TTFT and TPOT per shape,
    timed by the load-test client (``trimtab.field.loadtest.stream_completion``);
  * ``fit_engine(rows, model, gpu, engine, max_batched_tokens) -> EngineFit``: least squares over the engine's
    ``step_overhead_ms``, ``request_overhead_ms`` and ``kernel_efficiency`` of |log(predicted / measured)| for TTFT
    and TPOT, the predictions being the cost model's own modes (``zero_load`` for one client,
    ``predict_closed_loop`` for several), so the fitted numbers mean what the planner uses them for;
  * ``errors(rows, ...)``: per-shape relative errors of a profile (in-sample on the fit shapes, held out on the
    others: a fitted parameter cannot hide its own error);
  * ``engine_profile(base, fit, held_out, ...) -> dict``: the profile, every fitted number naming its data.
Why these three parameters: the device profile (``trimtab bench`` + ``calibrate``) prices the GEMMs as PyTorch
runs them; the engine's own kernels reach a share of that (``kernel_efficiency``), each step adds scheduling and
sampling time (``step_overhead_ms``), each request the HTTP front end, tokenisation and detokenisation
(``request_overhead_ms``). TPOT at concurrency 1 pins the step overhead, TTFT over prompt lengths the kernel share
and the front end.
"""
from __future__ import annotations

import asyncio
import datetime as _dt
import math
import statistics
from dataclasses import dataclass

import numpy as np

from trimtab.cost.model import ReplicaModel, TrafficClass
from trimtab.field.loadtest import Outcome, get_json, parse_endpoint, stream_completion
from trimtab.profiles.loader import EngineProfile, GpuProfile, ModelProfile, Q

PARAMS = ("step_overhead_ms", "request_overhead_ms", "kernel_efficiency")


@dataclass(frozen=True)
class Shape:
    isl: int
    osl: int
    concurrency: int


@dataclass(frozen=True)
class ShapeResult:
    shape: Shape
    ttft_ms: float  # median over the measured requests (other processes on a shared machine make rare long tails)
    tpot_ms: float
    requests: int


async def _closed_loop(url: str, shape: Shape, vocab: int, rounds: int, seed: int) -> ShapeResult:
    ep = parse_endpoint(url)
    model = (await get_json(ep, ep.path.rsplit("/", 1)[0] + "/models"))["data"][0]["id"]
    rng = np.random.default_rng([seed, shape.isl, shape.osl, shape.concurrency])
    outs: list[Outcome] = []

    async def client(c: int) -> None:
        for r in range(rounds + 1):  # round 0 warms the client's connection path and the engine's batch up
            body = {"model": model, "prompt": rng.integers(3, vocab, shape.isl).tolist(), "max_tokens": shape.osl,
                    "ignore_eos": True, "stream": True, "temperature": 0.0, "stream_options": {"include_usage": True}}
            o = Outcome()
            await stream_completion(ep, body, o)
            if o.error:
                raise RuntimeError(f"{url}: {o.error}")
            if r > 0:
                outs.append(o)

    await asyncio.gather(*(client(c) for c in range(shape.concurrency)))
    ttft = [(o.first - o.sent) * 1e3 for o in outs]
    tpot = [(o.last - o.first) / (o.tokens - 1) * 1e3 for o in outs if o.tokens > 1]
    return ShapeResult(shape, statistics.median(ttft), statistics.median(tpot) if tpot else 0.0, len(outs))


def measure(url: str, shapes: list[Shape], vocab: int, rounds: int = 4, seed: int = 0) -> list[ShapeResult]:
    """Each shape in turn: ``concurrency`` closed-loop clients, ``rounds`` measured requests each (after one
    warm-up request), prompts of random token ids (no prefix reuse)."""
    return [asyncio.run(_closed_loop(url, s, vocab, rounds, seed)) for s in shapes]


def with_params(engine: EngineProfile, params: dict[str, float], source: str = "fit") -> EngineProfile:
    """``engine`` with some quantities replaced (in memory; the source key must be declared when written)."""
    return engine.model_copy(update={k: Q(value=float(v), source=source) for k, v in params.items()})


def predict(rows: list[ShapeResult], model: ModelProfile, gpu: GpuProfile, engine: EngineProfile,
            max_batched_tokens: int) -> np.ndarray:
    """(n, 2) predicted mean TTFT and TPOT in ms. One client (concurrency 1) sends its next request when the last
    ends, so a request never waits for another: the cost model's lone-request time (``zero_load``); several
    clients: its closed-loop mode (``predict_closed_loop``, Little's law over the open-loop steady state)."""
    out = []
    for r in rows:
        rm = ReplicaModel(model, gpu, engine, 1, 1, "bf16", max_batched_tokens=max_batched_tokens)
        if r.shape.concurrency == 1:
            out.append(rm.zero_load(TrafficClass(1e-9, r.shape.isl, r.shape.osl)))
            continue
        p = rm.predict_closed_loop(r.shape.isl, r.shape.osl, r.shape.concurrency)
        out.append((p.ttft_ms, p.tpot_ms))
    return np.array(out, float)


@dataclass
class EngineFit:
    params: dict[str, float]
    engine: EngineProfile
    fit_errors: dict  # in-sample: {"ttft": [...%], "tpot": [...%]}


def errors(rows: list[ShapeResult], model, gpu, engine, max_batched_tokens: int) -> dict:
    """Per-shape |predicted - measured| / measured in %, for TTFT and TPOT, plus their medians."""
    pred = predict(rows, model, gpu, engine, max_batched_tokens)
    meas = np.array([(r.ttft_ms, r.tpot_ms) for r in rows], float)
    e = np.abs(pred - meas) / meas * 100
    return {"ttft": e[:, 0].tolist(), "tpot": e[:, 1].tolist(), "ttft_median": float(np.median(e[:, 0])),
            "tpot_median": float(np.median(e[:, 1])), "predicted": pred.tolist()}


def fit_engine(rows: list[ShapeResult], model: ModelProfile, gpu: GpuProfile, engine: EngineProfile,
               max_batched_tokens: int) -> EngineFit:
    """Least squares of log(predicted / measured) TTFT and TPOT over ``rows`` in the three ``PARAMS``."""
    from scipy.optimize import least_squares

    meas = np.log(np.array([(r.ttft_ms, r.tpot_ms) for r in rows], float))

    def resid(x):
        e = with_params(engine, dict(zip(PARAMS, x)))
        pred = predict(rows, model, gpu, e, max_batched_tokens)
        return (np.log(np.maximum(pred, 1e-9)) - meas).ravel()

    x0 = [engine.step_overhead_ms.value, (engine.request_overhead_ms.value if engine.request_overhead_ms else 10.0),
          engine.kernel_efficiency.value if engine.kernel_efficiency else 0.8]
    res = least_squares(resid, x0, bounds=([0.0, 0.0, 0.02], [1000.0, 5000.0, 1.0]), diff_step=1e-3)
    params = {k: float(v) for k, v in zip(PARAMS, res.x)}
    e = with_params(engine, params)
    return EngineFit(params, e, errors(rows, model, gpu, e, max_batched_tokens))


def _shapes_txt(rows: list[ShapeResult]) -> str:
    return ", ".join(f"({r.shape.isl}, {r.shape.osl}, {r.shape.concurrency})" for r in rows)


def engine_profile(base: dict, fit: EngineFit, fit_rows: list[ShapeResult], held: dict,
                   held_rows: list[ShapeResult], command: str, device: str) -> dict:
    """The engine profile as written to profiles/engines: ``base`` (raw YAML dict) with the fitted numbers and a
    source that names the command, date, device, shapes and both errors."""
    today = _dt.date.today().isoformat()
    fe = fit.fit_errors
    prof = dict(base)
    sources = {k: v for k, v in base.get("sources", {}).items() if k != "guess"}
    sources["server_fit"] = {"kind": "fit", "ref": (
        f"{command} ({today}, {device}): least squares of |log(predicted / measured)| median TTFT and TPOT of the "
        f"real vLLM server, closed loop, over (isl, osl, concurrency) = {_shapes_txt(fit_rows)}; in-sample median "
        f"error TTFT {fe['ttft_median']:.1f} %, TPOT {fe['tpot_median']:.1f} %; held out on "
        f"{_shapes_txt(held_rows)}: TTFT {held['ttft_median']:.1f} %, TPOT {held['tpot_median']:.1f} %")}
    prof["sources"] = sources
    for k, v in fit.params.items():
        nd = 3 if k == "kernel_efficiency" else 2
        prof[k] = {"value": round(v, nd) if not math.isclose(v, 0.0) else 0.0, "source": "server_fit"}
    EngineProfile.model_validate(prof)  # refuse to write what the loader would reject
    return prof
