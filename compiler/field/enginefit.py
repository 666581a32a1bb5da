"""Fit an engine profile's overheads to a real server, on one set of shapes, and evaluate it on another.

Entry points:
  * ``measure(url, shapes, vocab, ...) -> list[ShapeResult]``: closed-loop runs against a running server
    (``concurrency`` clients, each sending its next request when the last one ends), median TTFT and TPOT per
    shape, timed by the load-test client (``trimtab.field.loadtest.stream_completion``);
  * ``fit_engine(rows, model, gpu, engine, max_batched_tokens) -> EngineFit``: least squares over the engine's
    ``step_overhead_ms``, ``request_overhead_ms`` and ``kernel_efficiency`` of |log(predicted / measured)| for
    TTFT and TPOT, the predictions being the cost model's own modes (``zero_load`` for one client,
    ``predict_closed_loop`` for several), so the fitted numbers mean what the planner uses them for;
  * ``errors(rows, ...)``: per-shape relative errors of a profile (in-sample on the fit shapes, held out on
    the others: a fitted parameter cannot hide its own error);
  * ``engine_profile(base, fit, held_out, ...) -> dict``: the profile, every fitted number naming its data;
  * ``calibrate_engine`` (measure, fit, hold out) and ``calibrate_server`` (that, from profile names, written
    to a profile folder): the one calibration ``trimtab calibrate --engine URL`` and
    ``benchmarks/engine_fidelity.py`` run.
Why these three parameters: the device profile (``trimtab bench`` + ``calibrate``) prices the GEMMs as PyTorch
runs them; the engine's own kernels reach a share of that (``kernel_efficiency``), each step adds scheduling
and sampling time (``step_overhead_ms``), each request the HTTP front end, tokenisation and detokenisation
(``request_overhead_ms``). TPOT at concurrency 1 pins the step overhead, TTFT over prompt lengths the kernel
share and the front end.
"""
from __future__ import annotations

import asyncio
import datetime as _dt
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from trimtab.cost.model import ReplicaModel, TrafficClass
from trimtab.field.loadtest import HttpError, Outcome, get_json, parse_endpoint, stream_completion
from trimtab.profiles.loader import (EngineProfile, GpuProfile, ModelProfile, Q, load_profiles,
                                     model_from_hf_config)
from trimtab.errors import InputError, Problem
from trimtab.profiles import data_dir
from trimtab.spec.load import load_profile_folder

PARAMS = ("step_overhead_ms", "request_overhead_ms", "kernel_efficiency")


@dataclass(frozen=True)
class Shape:
    isl: int
    osl: int
    concurrency: int


@dataclass(frozen=True)
class ShapeResult:
    shape: Shape
    # median over the measured requests (other processes on a shared machine make rare long tails)
    ttft_ms: float
    tpot_ms: float
    requests: int


async def _closed_loop(url: str, shape: Shape, vocab: int, rounds: int, seed: int) -> ShapeResult:
    ep = parse_endpoint(url)
    model = (await get_json(ep, ep.path.rsplit("/", 1)[0] + "/models"))["data"][0]["id"]
    rng = np.random.default_rng([seed, shape.isl, shape.osl, shape.concurrency])
    outs: list[Outcome] = []

    async def client(c: int) -> None:
        for r in range(rounds + 1):  # round 0 warms the client's connection path and the engine's batch up
            body = {"model": model, "prompt": rng.integers(3, vocab, shape.isl).tolist(),
                    "max_tokens": shape.osl, "ignore_eos": True, "stream": True, "temperature": 0.0,
                    "stream_options": {"include_usage": True}}
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
            max_batched_tokens: int, dtype: str = "bf16") -> np.ndarray:
    """(n, 2) predicted mean TTFT and TPOT in ms. One client (concurrency 1) sends its next request when the
    last ends, so a request never waits for another: the cost model's lone-request time (``zero_load``);
    several clients: its closed-loop mode (``predict_closed_loop``, Little's law over the open-loop steady
    state)."""
    out = []
    for r in rows:
        rm = ReplicaModel(model, gpu, engine, 1, 1, dtype, max_batched_tokens=max_batched_tokens)
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


def errors(rows: list[ShapeResult], model, gpu, engine, max_batched_tokens: int, dtype: str = "bf16") -> dict:
    """Per-shape |predicted - measured| / measured in %, for TTFT and TPOT, plus their medians."""
    pred = predict(rows, model, gpu, engine, max_batched_tokens, dtype)
    meas = np.array([(r.ttft_ms, r.tpot_ms) for r in rows], float)
    e = np.abs(pred - meas) / meas * 100
    return {"ttft": e[:, 0].tolist(), "tpot": e[:, 1].tolist(), "ttft_median": float(np.median(e[:, 0])),
            "tpot_median": float(np.median(e[:, 1])), "predicted": pred.tolist()}


# What ``trimtab calibrate --engine`` fits by default: the device profile prices the kernels.
OVERHEADS = PARAMS[:2]
_START = {"step_overhead_ms": 1.0, "request_overhead_ms": 10.0, "kernel_efficiency": 0.8}
_BOUNDS = {"step_overhead_ms": (0.0, 1000.0), "request_overhead_ms": (0.0, 5000.0),
           "kernel_efficiency": (0.02, 1.0)}


def fit_engine(rows: list[ShapeResult], model: ModelProfile, gpu: GpuProfile, engine: EngineProfile,
               max_batched_tokens: int, params: tuple[str, ...] = PARAMS, dtype: str = "bf16") -> EngineFit:
    """Least squares of log(predicted / measured) TTFT and TPOT over ``rows`` in ``params`` (a subset of
    ``PARAMS``; the others keep ``engine``'s values)."""
    from scipy.optimize import least_squares

    meas = np.log(np.array([(r.ttft_ms, r.tpot_ms) for r in rows], float))

    def resid(x):
        e = with_params(engine, dict(zip(params, x)))
        pred = predict(rows, model, gpu, e, max_batched_tokens, dtype)
        return (np.log(np.maximum(pred, 1e-9)) - meas).ravel()

    x0 = [getattr(engine, k).value if getattr(engine, k) is not None else _START[k] for k in params]
    lo, hi = zip(*(_BOUNDS[k] for k in params))
    x0 = [min(max(v, a), b) for v, a, b in zip(x0, lo, hi)]
    res = least_squares(resid, x0, bounds=(list(lo), list(hi)), diff_step=1e-3)
    params = {k: float(v) for k, v in zip(params, res.x)}
    e = with_params(engine, params)
    return EngineFit(params, e, errors(rows, model, gpu, e, max_batched_tokens, dtype))


# Fit: lone requests over prompt lengths (prefill rate, front end, step overhead) and one batched shape;
# held out: other lengths and concurrencies. Prompts stay under any engine's step budget (one prefill
# step each).
FIT_SHAPES = (Shape(64, 32, 1), Shape(512, 16, 1), Shape(192, 24, 1), Shape(256, 32, 4))
HELD_SHAPES = (Shape(256, 32, 1), Shape(384, 16, 1), Shape(128, 32, 4), Shape(320, 24, 2))


@dataclass
class EngineCalibration:
    fit: EngineFit
    fit_rows: list[ShapeResult]
    held: dict  # ``errors`` of the fitted profile on the held-out shapes
    held_rows: list[ShapeResult]

    def table(self) -> list[dict]:
        """One row per measured shape: measured and predicted TTFT and TPOT, error %, fit or held-out."""
        out = []
        sets = (("fit", self.fit_rows, self.fit.fit_errors), ("held-out", self.held_rows, self.held))
        for tag, rr, err in sets:
            for r, p, et, ep in zip(rr, err["predicted"], err["ttft"], err["tpot"]):
                out.append({"set": tag, "isl": r.shape.isl, "osl": r.shape.osl,
                            "concurrency": r.shape.concurrency, "ttft_ms": r.ttft_ms, "ttft_pred_ms": p[0],
                            "ttft_err_pct": et, "tpot_ms": r.tpot_ms, "tpot_pred_ms": p[1],
                            "tpot_err_pct": ep})
        return out


def calibrate_engine(url: str, model: ModelProfile, gpu: GpuProfile, engine: EngineProfile,
                     max_batched_tokens: int, params: tuple[str, ...] = OVERHEADS, scale: int = 1,
                     rounds: int = 4, dtype: str = "bf16") -> EngineCalibration:
    """Measure ``FIT_SHAPES`` and ``HELD_SHAPES`` (lengths x ``scale``) against the server at ``url``, fit
    ``params`` on the first, evaluate the fitted profile on the second, the cost model's replica in ``dtype``
    (the server's precision). The one fit ``trimtab calibrate --engine`` and ``benchmarks/engine_fidelity.py``
    run."""
    vocab = int(model.vocab_size.value)
    fit_shapes = [Shape(s.isl * scale, s.osl * scale, s.concurrency) for s in FIT_SHAPES]
    held_shapes = [Shape(s.isl * scale, s.osl * scale, s.concurrency) for s in HELD_SHAPES]
    fit_rows = measure(url, fit_shapes, vocab, rounds)
    held_rows = measure(url, held_shapes, vocab, rounds)
    f = fit_engine(fit_rows, model, gpu, engine, max_batched_tokens, params, dtype)
    held = errors(held_rows, model, gpu, f.engine, max_batched_tokens, dtype)
    return EngineCalibration(f, fit_rows, held, held_rows)


def write_engine_profile(cal: EngineCalibration, base: dict, path, command: str, device: str) -> dict:
    """``engine_profile`` of a calibration, written to ``path`` (a profile folder's engines/NAME.yaml) with a
    header naming the command; returns the profile."""
    prof = engine_profile(base, cal.fit, cal.fit_rows, cal.held, cal.held_rows, command, device)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = (f"# Engine profile: {prof.get('description', prof['name'])}.\n"
              f"# {', '.join(cal.fit.params)} fitted to the real server by {command} (docs/fidelity.md).\n")
    path.write_text(header + yaml.safe_dump(prof, sort_keys=False, width=10**6), encoding="utf-8")
    return prof


def calibrate_server(url: str, model: str, gpu: str, engine: str, out_dir, *, profile_dir=None,
                     max_batched_tokens: int = 8192, kernel_share: bool = False, scale: int = 1,
                     rounds: int = 4, dtype: str = "bf16") -> tuple[EngineCalibration, "Path"]:
    """``trimtab calibrate --engine URL``: the server's overheads fitted on the model (a profile name or a
    ``config.json``) and GPU (profile names, the bundled ones or ``profile_dir``'s), written as
    ``out_dir``/engines/``engine``.yaml: a profile folder to plan with (``--profiles``, the spec's
    ``profiles``), where it replaces the bundled engine of that name. Unknown names are invalid input."""
    profs = load_profile_folder(profile_dir) if profile_dir is not None else load_profiles()
    problems = []
    if model.endswith(".json") or Path(model).is_file():
        mprof = model_from_hf_config(model, Path(model).parent.name or "model")
    else:
        mprof = profs.models.get(model)
        if mprof is None:
            problems.append(Problem("--model", f"unknown model {model!r}; known: "
                                               f"{', '.join(sorted(profs.models))}"))
    for opt, name, known in (("--gpu", gpu, profs.gpus), ("--engine-profile", engine, profs.engines)):
        if name not in known:
            problems.append(Problem(opt, f"unknown profile {name!r}; known: {', '.join(sorted(known))}"))
    if problems:
        raise InputError(problems)

    try:
        cal = calibrate_engine(url, mprof, profs.gpus[gpu], profs.engines[engine], max_batched_tokens,
                               PARAMS if kernel_share else OVERHEADS, scale, rounds, dtype)
    except (OSError, HttpError, RuntimeError, ValueError, KeyError) as exc:  # refused, reset, HTTP, JSON
        raise InputError([Problem("--engine", f"{url}: no OpenAI-compatible server answers timed completions "
                                              f"there ({type(exc).__name__}: {exc})")]) from None
    own = Path(profile_dir) / "engines" / f"{engine}.yaml" if profile_dir is not None else None
    src = own if own is not None and own.is_file() else data_dir() / "engines" / f"{engine}.yaml"
    base = yaml.safe_load(src.read_text(encoding="utf-8"))
    path = Path(out_dir) / "engines" / f"{engine}.yaml"
    cmd = (f"trimtab calibrate --engine {url} --model {model} --gpu {gpu} --engine-profile {engine}"
           + (" --kernel-share" if kernel_share else ""))
    write_engine_profile(cal, base, path, cmd, f"{gpu}, model {mprof.name}")
    return cal, path


def _shapes_txt(rows: list[ShapeResult]) -> str:
    return ", ".join(f"({r.shape.isl}, {r.shape.osl}, {r.shape.concurrency})" for r in rows)


def engine_profile(base: dict, fit: EngineFit, fit_rows: list[ShapeResult], held: dict,
                   held_rows: list[ShapeResult], command: str, device: str) -> dict:
    """The engine profile as written to profiles/engines: ``base`` (raw YAML dict) with the fitted numbers and
    a source that names the command, date, device, shapes and both errors."""
    today = _dt.date.today().isoformat()
    fe = fit.fit_errors
    prof = dict(base)
    sources = dict(base.get("sources", {}))
    sources["server_fit"] = {"kind": "fit", "ref": (
        f"{command} ({today}, {device}): least squares in {', '.join(fit.params)} of "
        f"|log(predicted / measured)| "
        f"median TTFT and TPOT of the real server, closed loop, over (isl, osl, concurrency) = "
        f"{_shapes_txt(fit_rows)}; in-sample median error TTFT {fe['ttft_median']:.1f} %, TPOT "
        f"{fe['tpot_median']:.1f} %; held out on {_shapes_txt(held_rows)}: TTFT {held['ttft_median']:.1f} %, "
        f"TPOT {held['tpot_median']:.1f} %")}
    for k, v in fit.params.items():
        nd = 3 if k == "kernel_efficiency" else 2
        prof[k] = {"value": round(v, nd) if not math.isclose(v, 0.0) else 0.0, "source": "server_fit"}
    used = set(_source_keys(prof))  # a source the fitted numbers replaced (a guess) is no longer declared
    prof["sources"] = {k: v for k, v in sources.items() if k in used}
    EngineProfile.model_validate(prof)  # refuse to write what the loader would reject
    return prof


def _source_keys(node) -> list[str]:
    """Every ``source`` a profile's quantities name, nested ones (releases) included."""
    if isinstance(node, dict):
        own = [node["source"]] if isinstance(node.get("source"), str) and "value" in node else []
        return own + [k for k2, v in node.items() if k2 != "sources" for k in _source_keys(v)]
    if isinstance(node, list):
        return [k for v in node for k in _source_keys(v)]
    return []
