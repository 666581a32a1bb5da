"""Prediction error of the cost model against published measurements.

usage: python benchmarks/accuracy.py [CSV] [-v] [--markdown] [--fit] [--cv]
       (default CSV: ../shared/groundtruth/dev.csv, relative to the repository root)
       python benchmarks/accuracy.py --write-error-bars profiles/error_bars.yaml
       (the error bars per class of deployment over this table, blis-dev and the CPU load tests:
       benchmarks/error_bars.py)

For every row of a table in the format of ``dev.csv`` (source, model, gpu, num_gpus, tp, pp, engine, isl, osl,
concurrency_or_rate, metric, value, unit, notes) this runs the same prediction ``trimtab predict`` makes
(``trimtab.cost.predict.replica``), in the benchmark's mode, and prints per metric the median and p90
absolute percentage error, and the worst rows with their setups. ``-v`` prints every row. ``--fit`` refits
FIT_PARAMS on the table first (in-sample); ``--cv`` also refits them once per source with that source's rows
left out and prints the held-out error next to the in-sample one (``cross_validate``).

How a row becomes a prediction (the setup only; no per-row parameters):
  * engine family from the engine column: TensorRT-LLM and NeMo (which serves through TensorRT-LLM) ->
    ``trt-llm``, SGLang -> ``sglang``, vLLM -> ``vllm``;
  * precision from the notes: "FP8" -> fp8 weights; TensorRT-LLM FP8 rows also use an fp8 KV cache (the
    TRT-LLM performance docs' FP8 setting), "FP8 weights" rows keep a bf16 KV cache;
  * mode from concurrency_or_rate: ``batch=B`` -> static batch (gptSessionBenchmark, vLLM benchmark_latency,
    NeMo), ``max concurrency=C`` -> closed loop, ``R qps Poisson`` -> open loop, ``N prompts at once`` or
    ``offline (N prompts)`` -> saturated closed loop at min(N, max_num_seqs, what fits in the KV cache); a
    burst served over HTTP (``N ... prompts at once``, not ``offline``) streams its tokens through the
    engine's front end (``predict_burst(streaming=True)``: the engine profile's ``stream_tokens_per_s``,
    docs/cost-model.md);
  * ShareGPT rows without lengths use 217 in / 201 out tokens (the ShareGPT means reported in the same table);
  * per-GPU throughput: ``output_throughput_per_gpu`` rows and the TensorRT-LLM A100 ``out tok/s`` table are
    compared per GPU (the A100 table's header omits /GPU; per GPU is the reading consistent with the H100
    table of the same document and with the hardware's roofline: the total for the whole TP group would be 4x
    lower); serving rows (tp 1) are per replica;
  * vLLM defaults by version: v0.10 and v0.11 ``vllm serve`` use max_num_seqs 1024 / max_num_batched_tokens
    8192 on GPUs with 70 GiB or more except A100, 256 / 2048 otherwise (vllm/engine/arg_utils.py; read for
    v0.11, and the branch cites vLLM PR #17885 of May 2025, before v0.10); the 2024 nightly used 256;
  * the engine's release from the engine column (``engine_version``: "vLLM v0.11.0" -> 0.11; the 2024 nightly
    -> 0.6): the engine profile as that release behaves (``EngineProfile.at``: vLLM up to 0.11 has its own
    front end and no async scheduling);
  * values the notes state win over defaults: TensorRT-LLM ``max_batch_size N`` / ``max_num_tokens N`` and
    vLLM ``--max-num-batched-tokens N`` (per attention-DP rank, as the engines' flags and ``replica(dp=)``
    take them);
  * MoE table (benchmarks/data/moe_groundtruth.csv): optional ``dp``, ``ep``, ``dtype`` columns; ``dp``/``ep``
    go to ``replica`` when its signature has them (the MoE cost model); ``dtype`` wins over the notes;
    KV-cache dtype from the notes (``benchmarks.groundtruth.precision``). Rows this checkout cannot predict
    (no model or GPU profile, speculative decoding, dp/ep without the MoE API, a setup the profiles cannot
    run) are listed as skipped with the reason and their line numbers.
"""
from __future__ import annotations

import csv
import inspect
import math
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.groundtruth import (check_file, engine_family, gpu_profile, model_profile,  # noqa: E402
                                    precision)
from benchmarks.groundtruth import mode as parse_mode  # noqa: E402
from trimtab.cost.predict import replica  # noqa: E402
from trimtab.profiles.loader import load_profiles  # noqa: E402

SHAREGPT = (217, 201)
GROUPS = {"throughput": ("output_throughput_per_gpu", "output_throughput", "request_throughput",
                         "total_token_throughput"),
          "ttft": ("ttft_ms", "ttft_mean_ms"),
          "tpot": ("tpot_mean_ms", "itl_mean_ms"),
          "e2e latency": ("e2e_latency_mean_ms",)}
TARGET = {"throughput": 15.0, "ttft": 20.0, "tpot": 20.0, "e2e latency": 20.0}
# Keyword parameters of trimtab.cost.predict.replica in this checkout (dp and ep arrive with the MoE cost
# model).
REPLICA_PARAMS = set(inspect.signature(replica).parameters)


@dataclass
class Row:
    n: int
    raw: dict
    model: str
    gpu: str
    engine: str
    tp: int
    pp: int
    dtype: str
    kv_dtype: str
    isl: int
    osl: int
    mode: str  # static | closed | open | saturated
    amount: float  # batch, concurrency, rate or number of requests
    metric: str
    value: float
    sharegpt: bool = False
    predicted: float = float("nan")
    dp: int = 1
    ep: int = 1
    skip: str = ""  # why this row is not predicted ("" = predicted)

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted - self.value) / self.value

    def setup(self) -> str:
        par = f"tp{self.tp}" + (f" pp{self.pp}" if self.pp > 1 else "") \
            + (f" dp{self.dp}" if self.dp > 1 else "") + (f" ep{self.ep}" if self.ep > 1 else "")
        return (f"{self.raw['model']} {self.raw['gpu']} {par} {self.engine} {self.dtype}"
                + (f"/kv {self.kv_dtype}" if self.kv_dtype != self.dtype else "")
                + f" isl {self.isl} osl {self.osl} {self.mode} {self.amount:g}")


def _skip_reason(r: dict, model: str | None, gpu: str | None, dp: int, ep: int, profiles) -> str:
    """Why a row cannot be predicted by this checkout (empty when it can)."""
    if model is None:
        return f"no model mapping for {r['model']!r}"
    if profiles is not None and model not in profiles.models:
        return f"no model profile {model!r} yet"
    if gpu is None or (profiles is not None and gpu not in profiles.gpus):
        return f"no GPU profile for {r['gpu']!r}"
    if re.search(r"speculative|\bmtp\b|eagle", r["notes"].lower()):
        return "speculative decoding (MTP/EAGLE) is not modelled"
    for name, v in (("dp", dp), ("ep", ep)):
        if v > 1 and name not in REPLICA_PARAMS:
            return f"{name}={v} needs the MoE predict API (replica(..., {name}=)), not in this checkout"
    return ""


def parse(path: Path, profiles=None) -> list[Row]:
    """Every row of the table; rows this checkout cannot predict carry ``skip`` (the reason)."""
    rows = []
    with open(path, newline="", encoding="utf-8") as fh:
        for i, r in enumerate(csv.DictReader(fh), start=2):
            notes = r["notes"]
            engine = engine_family(r["engine"])
            dtype, kv = precision(notes, engine, r.get("dtype") or "")
            mode, amount = parse_mode(r["concurrency_or_rate"])
            isl = int(r["isl"]) if r["isl"].strip() else SHAREGPT[0]
            osl = int(r["osl"]) if r["osl"].strip() else SHAREGPT[1]
            sharegpt = "sharegpt" in (r["concurrency_or_rate"] + notes).lower()
            dp = int(r.get("dp") or 1)
            ep = int(r.get("ep") or 1)
            model, gpu = model_profile(r["model"]), gpu_profile(r["gpu"])
            rows.append(Row(i, r, model or r["model"], gpu or r["gpu"], engine, int(r["tp"]), int(r["pp"]),
                            dtype,
                            kv, isl, osl, mode, amount, r["metric"], float(r["value"]), sharegpt, dp=dp,
                            ep=ep, skip=_skip_reason(r, model, gpu, dp, ep, profiles)))
    return rows


def _stated_limits(row: Row) -> tuple[int | None, int | None]:
    """(max_num_seqs, max_batched_tokens) where the notes state them: TensorRT-LLM's ``max_batch_size N`` /
    ``max_num_tokens N``, vLLM's ``--max-num-batched-tokens N``. Per attention-DP rank, as the engines' flags
    are and as ``replica(..., dp=)`` takes them."""
    low = row.raw["notes"].lower()
    seqs = re.search(r"max_batch_size (\d+)", low)
    mbt = re.search(r"(?:max_num_tokens|--max-num-batched-tokens) (\d+)", low)
    return (int(seqs.group(1)) if seqs else None), (int(mbt.group(1)) if mbt else None)


def _engine_limits(row: Row, eng) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) the benchmark ran with (engine defaults of that version)."""
    text = row.raw["engine"].lower()
    if row.engine == "vllm":
        if (m := re.search(r"v0\.(\d+)", text)) and int(m.group(1)) >= 10:
            big = row.gpu in ("h100-sxm", "h200", "b200")
            seqs, mbt = (1024, 8192) if big else (256, 2048)
        else:
            seqs, mbt = 256, 8192
        stated = _stated_limits(row)
        return stated[0] or seqs, stated[1] or mbt
    seqs = int(eng.max_num_seqs.value)
    mbt = int(eng.max_num_batched_tokens.value) if eng.max_num_batched_tokens is not None else 8192
    seqs, mbt = _stated_limits(row)[0] or seqs, _stated_limits(row)[1] or mbt
    if row.engine == "trt-llm" and row.mode == "static":
        mbt = max(mbt, int(row.amount) * row.isl)  # gptSessionBenchmark runs the whole context batch at once
    return seqs, mbt


def engine_version(text: str) -> str | None:
    """The release a row's engine column names ("vLLM v0.11.0" -> "0.11"); a 2024 build (vLLM's 2024 nightly
    perf CI) predates v0.7 (January 2025): "0.6"; None where it says nothing."""
    if m := re.search(r"v?(\d+)\.(\d+)", text):
        return f"{m.group(1)}.{m.group(2)}"
    return "0.6" if "2024" in text else None


def predict_row(row: Row, profiles) -> float:
    eng = profiles.engines[row.engine]
    at = eng.at(engine_version(row.raw["engine"]))
    if at is not eng:  # the release the row ran: its own front end and scheduling
        from trimtab.profiles.loader import ProfileSet

        profiles = ProfileSet(profiles.gpus, profiles.models, {**profiles.engines, row.engine: at})
        eng = at
    seqs, mbt = _engine_limits(row, eng)
    par = {k: v for k, v in (("dp", row.dp), ("ep", row.ep)) if k in REPLICA_PARAMS}
    rm = replica(profiles, row.model, row.gpu, row.engine, row.tp, row.pp, row.dtype, row.kv_dtype,
                 max_num_seqs=max(seqs, int(row.amount) if row.mode == "static" else 0),
                 max_batched_tokens=mbt, **par)
    if row.mode == "static":
        p = rm.predict_static_batch(row.isl, row.osl, int(row.amount))
        return {"output_throughput_per_gpu": p.output_tokens_per_s_per_gpu,
                "output_throughput": p.output_tokens_per_s_per_gpu,
                "ttft_ms": p.ttft_ms, "e2e_latency_mean_ms": p.e2e_ms}[row.metric]
    if row.mode == "open":
        p = rm.predict_open_loop(row.isl, row.osl, row.amount)
    elif row.mode == "closed":
        p = rm.predict_closed_loop(row.isl, row.osl, int(row.amount))
    else:
        n = int(row.amount)
        if row.sharegpt:
            isl, osl = [float(row.isl)] * n, exponential_lengths(n, row.osl)
        else:
            isl, osl = [float(row.isl)] * n, [float(row.osl)] * n
        # served bursts stream every token over HTTP (vllm bench serve); offline ones (trtllm-bench) do not
        b = rm.predict_burst(isl, osl, streaming="offline" not in row.raw["concurrency_or_rate"].lower())
        return {"tpot_mean_ms": b.tpot_ms, "itl_mean_ms": b.tpot_ms,
                "output_throughput": b.output_tokens_per_s,
                "request_throughput": b.requests_per_s,
                "total_token_throughput": b.total_tokens_per_s}[row.metric]
    return {"ttft_mean_ms": p.ttft_ms, "ttft_ms": p.ttft_ms, "tpot_mean_ms": p.tpot_ms,
            "itl_mean_ms": p.tpot_ms,
            "output_throughput": p.output_tokens_per_s, "request_throughput": p.requests_per_s,
            "total_token_throughput": p.requests_per_s * (row.isl + row.osl)}[row.metric]


def exponential_lengths(n: int, mean: float) -> list[float]:
    """``n`` output lengths with the given mean: the expected order statistics of an exponential distribution
    (the maximum-entropy distribution for a known mean; ShareGPT's reply lengths are long-tailed), interleaved
    so that long and short requests arrive mixed. Deterministic."""
    ordered, s = [], 0.0
    for k in range(1, n + 1):  # E[k-th smallest of n] = mean x sum_{j=n-k+1}^{n} 1/j
        s += 1.0 / (n - k + 1)
        ordered.append(max(1.0, round(mean * s)))
    step = next(k for k in range(int(n * 0.618) or 1, 2 * n + 2) if math.gcd(k, n) == 1)
    return [ordered[(i * step) % n] for i in range(n)]


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def report(rows: list[Row], verbose: bool = False, markdown: bool = False, worst: int = 8) -> dict[str, dict]:
    summary = {}
    lines = []
    if verbose:
        for r in rows:
            lines.append(f"  row {r.n:3d} {r.metric:26s} meas {r.value:10.4g} pred {r.predicted:10.4g} "
                         f"err {r.error_pct:+7.1f}%  {r.setup()}")
    head = "| metric | rows | median abs % error | p90 abs % error | target (median) |"
    lines += ["", head, "|---|---:|---:|---:|---:|"] if markdown else ["",
              f"{'metric':28s} {'rows':>4s} {'median|%|':>10s} {'p90|%|':>8s}"]
    for g, metrics in GROUPS.items():
        for m in metrics + ("ALL",):
            sel = [abs(r.error_pct) for r in rows if (r.metric in metrics if m == "ALL" else r.metric == m)]
            if not sel or (m == "ALL" and len(metrics) == 1):
                continue
            name = f"{g} (all)" if m == "ALL" else m
            med, p90 = statistics.median(sel), _pct(sel, 0.9)
            if m == "ALL" or len(metrics) == 1:
                summary[g] = {"rows": len(sel), "median": med, "p90": p90, "target": TARGET[g]}
            tgt = f"<= {TARGET[g]:g} %" if (m == "ALL" or len(metrics) == 1) else ""
            if markdown:
                lines.append(f"| {'**' + name + '**' if tgt else name} | {len(sel)} | {med:.1f} | "
                             f"{p90:.1f} | {tgt} |")
            else:
                lines.append(f"{name:28s} {len(sel):4d} {med:10.1f} {p90:8.1f}  {tgt}")
    allerr = [abs(r.error_pct) for r in rows]
    lines.append(("| all rows | " if markdown else f"{'all rows':28s} ")
                 + (f"{len(allerr)} | {statistics.median(allerr):.1f} | {_pct(allerr, 0.9):.1f} | |"
                    if markdown else
                    f"{len(allerr):4d} {statistics.median(allerr):10.1f} {_pct(allerr, 0.9):8.1f}"))
    lines.append("")
    lines.append(f"worst {worst} rows:")
    for r in sorted(rows, key=lambda r: -abs(r.error_pct))[:worst]:
        lines.append(f"  row {r.n:3d} {r.metric:24s} measured {r.value:9.4g} predicted {r.predicted:9.4g} "
                     f"({r.error_pct:+.0f}%)  {r.setup()}")
    print("\n".join(lines))
    return summary


# Parameters ``--fit`` adjusts: (kind, profile, field, lower, upper) and which rows inform each.
FIT_PARAMS = [
    ("engines", "vllm", "step_overhead_ms", 0.1, 10.0),
    ("engines", "vllm", "request_overhead_ms", 0.0, 150.0),
    ("engines", "sglang", "step_overhead_ms", 0.1, 10.0),
    ("engines", "sglang", "request_overhead_ms", 0.0, 150.0),
    ("engines", "trt-llm", "step_overhead_ms", 0.1, 10.0),
    ("engines", "trt-llm", "request_overhead_ms", 0.0, 150.0),
    ("gpus", "h100-sxm", "fp8_compute_efficiency", 0.1, 1.0),
    ("gpus", "l40s", "fp8_compute_efficiency", 0.1, 1.0),
]


def _affects(param, row: Row) -> bool:
    kind, name, fld, *_ = param
    if kind == "engines":
        if fld == "request_overhead_ms":
            return row.engine == name and row.mode in ("closed", "open") and row.metric != "tpot_mean_ms"
        return row.engine == name
    return row.gpu == name and row.dtype == "fp8"


def _with(profiles, kind: str, name: str, fld: str, value: float):
    from trimtab.profiles.loader import ProfileSet, Q, Source

    prof = getattr(profiles, kind)[name]
    src = dict(prof.sources)
    key = getattr(prof, fld).source if getattr(prof, fld) is not None else "dev_fit"
    src.setdefault(key, Source(kind="fit", ref="benchmarks/accuracy.py --fit"))
    new = prof.model_copy(update={fld: Q(value=value, source=key), "sources": src})
    d = {k: dict(getattr(profiles, k)) for k in ("gpus", "models", "engines")}
    d[kind][name] = new
    return ProfileSet(d["gpus"], d["models"], d["engines"])


def fit(rows: list[Row], profiles, sweeps: int = 2, log=print):
    """Coordinate descent on FIT_PARAMS: each in turn minimises the summed |log(predicted / measured)| over
    the rows it affects (bounded, Brent). Few, physical parameters; the same values for every row."""
    from scipy.optimize import minimize_scalar

    for _ in range(sweeps):
        for prm in FIT_PARAMS:
            kind, name, fld, lo, hi = prm
            sel = [r for r in rows if _affects(prm, r)]
            if not sel:
                continue

            def loss(v):
                ps = _with(profiles, kind, name, fld, float(v))
                return sum(abs(math.log(max(predict_row(r, ps), 1e-12) / r.value)) for r in sel)

            res = minimize_scalar(loss, bounds=(lo, hi), method="bounded",
                                  options={"xatol": (hi - lo) * 2e-3})
            profiles = _with(profiles, kind, name, fld, float(res.x))
            log(f"  {kind}/{name}.{fld} = {res.x:.4g}  (rows {len(sel)}, sum |log err| {res.fun:.3f})")
    return profiles


def source_of(row: Row) -> str:
    """The publication a row comes from (the source column up to its first bracket): rows of one document
    share its setup, so leaving one row out would still let its siblings inform the fit."""
    return row.raw["source"].split("[")[0].strip()


def cross_validate(rows: list[Row], profiles) -> tuple[dict[int, float], dict[str, list[str]]]:
    """Leave one source out: for each source, fit FIT_PARAMS on the other sources' rows and predict this
    source's rows. Returns (row number -> out-of-sample prediction, source -> parameters no other source
    informs). A parameter only this source's rows inform keeps the profile's value, which was itself fitted
    with these rows in: that leak is reported, not hidden."""
    out: dict[int, float] = {}
    leaks: dict[str, list[str]] = {}
    for src in sorted({source_of(r) for r in rows}):
        train = [r for r in rows if source_of(r) != src]
        mine = [r for r in rows if source_of(r) == src]
        leaks[src] = [f"{p[1]}.{p[2]}" for p in FIT_PARAMS
                      if any(_affects(p, r) for r in mine) and not any(_affects(p, r) for r in train)]
        ps = fit(train, profiles, log=lambda m: None)
        for r in mine:
            out[r.n] = predict_row(r, ps)
    return out, leaks


def cv_report(rows: list[Row], cv: dict[int, float], leaks: dict[str, list[str]]) -> None:
    """In-sample (fitted on every row) next to leave-one-source-out error, per metric group and per source."""
    def err(r, pred):
        return abs(100.0 * (pred - r.value) / r.value)

    print("\nleave-one-source-out (fit on the other sources) vs in-sample (fit on all rows), |% error|:")
    print(f"{'group':28s} {'rows':>4s} {'in-sample med':>14s} {'p90':>6s} {'held-out med':>13s} {'p90':>6s}")
    for g, metrics in list(GROUPS.items()) + [("all rows", None)]:
        sel = [r for r in rows if metrics is None or r.metric in metrics]
        if not sel:
            continue
        a = [err(r, r.predicted) for r in sel]
        b = [err(r, cv[r.n]) for r in sel]
        print(f"{g:28s} {len(sel):4d} {statistics.median(a):14.1f} {_pct(a, 0.9):6.1f} "
              f"{statistics.median(b):13.1f} "
              f"{_pct(b, 0.9):6.1f}")
    print(f"\n{'source':60s} {'rows':>4s} {'in-sample med':>14s} {'held-out med':>13s}")
    for src in sorted({source_of(r) for r in rows}):
        sel = [r for r in rows if source_of(r) == src]
        print(f"{src[:60]:60s} {len(sel):4d} {statistics.median(err(r, r.predicted) for r in sel):14.1f} "
              f"{statistics.median(err(r, cv[r.n]) for r in sel):13.1f}"
              + (f"  (only this source informs {', '.join(leaks[src])}: held out at its fitted value)"
                 if leaks.get(src) else ""))


def by_model(rows: list[Row], markdown: bool = False) -> None:
    """Median |error| per model and metric group (the MoE table of docs/fidelity.md)."""
    models = sorted({r.raw["model"] for r in rows})
    head = ["model", "rows"] + list(GROUPS)
    print("\nper model, median |% error| (rows):")
    if markdown:
        print("| " + " | ".join(head) + " |\n|---|---:|" + "---:|" * len(GROUPS))
    for m in models:
        sel = [r for r in rows if r.raw["model"] == m]
        cells = []
        for metrics in GROUPS.values():
            e = [abs(r.error_pct) for r in sel if r.metric in metrics]
            cells.append(f"{statistics.median(e):.1f} ({len(e)})" if e else "-")
        print(("| " + " | ".join([m, str(len(sel))] + cells) + " |") if markdown else
              f"  {m:20s} {len(sel):4d}  " + "  ".join(f"{g} {c}" for g, c in zip(GROUPS, cells)))


def report_skipped(skipped: list[Row]) -> None:
    """Rows not predicted, grouped by reason, with their line numbers: nothing is dropped silently."""
    if not skipped:
        return
    print(f"\nskipped {len(skipped)} rows (not predicted by this checkout):")
    reasons: dict[str, list[int]] = {}
    for r in skipped:
        reasons.setdefault(r.skip, []).append(r.n)
    for why, lines in sorted(reasons.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        shown = ", ".join(map(str, lines[:12])) + (", ..." if len(lines) > 12 else "")
        print(f"  {len(lines):4d}  {why}  (lines {shown})")


def main(argv: list[str]) -> int:
    """Exit codes: 0 report printed; 1 no such file; 2 malformed table (each problem named with file:line)."""
    from benchmarks.error_bars import flag, write

    if flag(argv):  # the error bars per class over both benchmarks' data (benchmarks/error_bars.py)
        write(flag(argv))
        return 0
    args = [a for a in argv if not a.startswith("-")]
    path = Path(args[0]) if args else ROOT.parent / "shared" / "groundtruth" / "dev.csv"
    if not path.is_file():
        print(f"error: no such file {path}", file=sys.stderr)
        return 1
    problems = check_file(path)
    if problems:
        print("error: malformed ground-truth table:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    profiles = load_profiles()
    every = parse(path, profiles)
    # a setup the profiles cannot run (weights do not fit, unknown dtype) is a skip, not a crash
    for r in every:
        if not r.skip:
            try:
                r.predicted = predict_row(r, profiles)
            except (ValueError, KeyError, ZeroDivisionError) as e:
                r.skip = f"prediction failed: {type(e).__name__}: {e}"
    rows = [r for r in every if not r.skip]
    skipped = [r for r in every if r.skip]
    if not rows:
        print(f"0 rows of {len(every)} from {path} can be predicted by this checkout")
        report_skipped(skipped)
        return 0
    base = profiles
    if "--fit" in argv or "--cv" in argv:
        print("fitting engine and fp8 parameters (values to copy into profiles/ with this "
              "script as their source):")
        profiles = fit(rows, profiles)
        for r in rows:
            r.predicted = predict_row(r, profiles)
    print(f"{len(rows)} rows from {path}"
          + (f" ({len(skipped)} more skipped, listed below)" if skipped else ""))
    report(rows, verbose="-v" in argv, markdown="--markdown" in argv)
    if len({r.raw["model"] for r in rows}) > 1 or "--by-model" in argv:
        by_model(rows, markdown="--markdown" in argv)
    report_skipped(skipped)
    if "--cv" in argv:
        cv_report(rows, *cross_validate(rows, base))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
