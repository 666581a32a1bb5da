"""Fit the engines' fused-MoE GEMM efficiency and streaming rate to the MoE ground truth,
leave-one-source-out.

usage: python benchmarks/moe_fit.py [CSV] [-v] [--engines=vllm,sglang] [--grid=1,0.6,...] [--dtype=fp8]
       (default CSV: benchmarks/data/moe_groundtruth.csv)

The cost model (compiler/cost/moe.py) runs the routed experts' FLOPs at ``moe_gemm_efficiency`` x the dense
linear-layer rate of the GPU profile, and a streamed burst (``predict_burst(streaming=True)``) delivers at
most ``stream_tokens_per_s`` output tokens per second (engine profile fields; absent = 1 and no limit). This
script

  1. predicts every row of the table the engine serves (``benchmarks/accuracy.py``'s ``predict_row``, the same
     prediction ``trimtab predict`` makes) at each point of a grid of (efficiency, stream rate), one engine at
     a time (the parameters of one engine change only that engine's rows);
  2. in-sample: picks per engine the grid point with the least summed |log(predicted / measured)| over all its
     rows (throughput, TPOT and TTFT alike, as ``accuracy.py --fit``);
  3. leave one source out: for every source (document), picks the value on the other sources' rows only and
     predicts this source's rows with it (with no rows of the engine left to fit on, the unfitted profile);
  4. prints median |% error| per metric group, per model and per source, in-sample and held out, and the
     residuals (signed median) grouped by model, engine, source, layout (TP vs EP), precision and batch
     regime.

A grid, not a continuous optimiser: every (row, value) prediction simulates bursts of up to 1,000 requests
step by step (1-6 s each on a shared core), so the predictions are made once and every fit reuses them.
"""
from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.accuracy import GROUPS, _with, parse, predict_row, source_of  # noqa: E402
from trimtab.profiles.loader import ProfileSet, load_profiles  # noqa: E402

GRID = (1.0, 0.6, 0.4, 0.3, 0.22, 0.16, 0.12)  # moe_gemm_efficiency
# stream_tokens_per_s (0 = no limit); no lower value: the GPUStack front ends did stream 9,788 tokens/s at
# their peak (Qwen3-235B FP8 TP8+EP, vLLM) and 9,699 (DeepSeek-R1, SGLang), so a limit below that contradicts
# a measurement
STREAM = (0.0, 16000.0, 12000.0, 10000.0)
FIELD = "moe_gemm_efficiency"


def group_of(metric: str) -> str:
    return next(g for g, ms in GROUPS.items() if metric in ms)


def regime(row) -> str:
    """Batch regime of a row: small (concurrency/batch <= 16), burst/offline of short (<= 256-token) prompts,
    or of long prompts (prefill-heavy)."""
    if row.mode in ("closed", "static") and row.amount <= 16:
        return "small batch"
    return "large batch, short prompts" if row.isl <= 256 else "large batch, long prompts"


def log_loss(rows, pred) -> float:
    return sum(abs(math.log(max(pred[r.n], 1e-12) / r.value)) for r in rows)


def pick(rows, table) -> tuple[float, float]:
    """The (efficiency, stream rate) grid point with the least summed |log error| over ``rows``; (1, 0), the
    unfitted profile, when there are none. Ties go to the higher efficiency and the absent stream limit."""
    if not rows:
        return (1.0, 0.0)
    return min(table, key=lambda v: (log_loss(rows, table[v]), -v[0], v[1]))


def with_point(profiles, eng: str, point: tuple[float, float]):
    """``profiles`` with the engine's efficiency and stream rate at ``point`` (rate 0: no limit, whatever the
    profile says)."""
    ps = _with(profiles, "engines", eng, FIELD, point[0])
    if point[1]:
        return _with(ps, "engines", eng, "stream_tokens_per_s", point[1])
    d = dict(ps.engines)
    d[eng] = d[eng].model_copy(update={"stream_tokens_per_s": None})
    return ProfileSet(ps.gpus, ps.models, d)


def show(point: tuple[float, float]) -> str:
    return f"{FIELD} {point[0]:g}, stream_tokens_per_s " + (f"{point[1]:g}" if point[1] else "none")


def err(r, p) -> float:
    return 100.0 * (p - r.value) / r.value


def summary(title: str, rows, pred, key) -> None:
    groups: dict[str, list] = {}
    for r in rows:
        groups.setdefault(key(r), []).append(r)
    print(f"\n{title}")
    print(f"  {'group':58s} {'rows':>4s} " + " ".join(f"{g:>17s}" for g in ("throughput", "tpot", "ttft")))
    for k in sorted(groups):
        cells = []
        for g in ("throughput", "tpot", "ttft"):
            e = [err(r, pred[r.n]) for r in groups[k] if group_of(r.metric) == g]
            cells.append(f"{statistics.median(abs(x) for x in e):6.1f} ({statistics.median(e):+6.1f})"
                         if e else "-")
        print(f"  {k[:58]:58s} {len(groups[k]):4d} " + " ".join(f"{c:>17s}" for c in cells))


def main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("-")]
    path = Path(args[0]) if args else ROOT / "benchmarks" / "data" / "moe_groundtruth.csv"
    opts = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
    engines = opts.get("engines", "vllm,sglang").split(",")
    global GRID
    if "grid" in opts:
        GRID = tuple(float(x) for x in opts["grid"].split(","))
    profiles = load_profiles()
    rows = []
    for r in parse(path, profiles):
        if r.skip or r.engine not in engines or r.raw["model"].lower().startswith("mixtral") or (
                "dtype" in opts and r.dtype != opts["dtype"]):
            continue
        try:
            predict_row(r, profiles)
        except (ValueError, KeyError, ZeroDivisionError):
            continue
        rows.append(r)
    print(f"{len(rows)} rows of {path} on engines {', '.join(engines)} (Mixtral and "
          "unpredictable rows left out)")
    # predictions per engine and grid point: table[engine][(efficiency, stream)][row] (only that engine's
    # rows)
    table: dict[str, dict[tuple[float, float], dict[int, float]]] = {}
    for eng in engines:
        mine = [r for r in rows if r.engine == eng]
        table[eng] = {}
        for v in GRID:
            for sr in STREAM:
                ps = with_point(profiles, eng, (v, sr))
                table[eng][(v, sr)] = {r.n: predict_row(r, ps) for r in mine}
                print(f"  {eng} {show((v, sr))}: sum |log err| "
                      f"{log_loss(mine, table[eng][(v, sr)]):.3f} over "
                      f"{len(mine)} rows", flush=True)
    base = {r.n: table[r.engine][(1.0, 0.0)][r.n] for r in rows}
    fitted = {eng: pick([r for r in rows if r.engine == eng], table[eng]) for eng in engines}
    ins = {r.n: table[r.engine][fitted[r.engine]][r.n] for r in rows}
    held: dict[int, float] = {}
    print("\nfitted (in-sample): " + "; ".join(f"{e}: {show(v)}" for e, v in fitted.items()))
    for src in sorted({source_of(r) for r in rows}):
        for eng in engines:
            train = [r for r in rows if r.engine == eng and source_of(r) != src]
            v = pick(train, table[eng])
            test = [r for r in rows if r.engine == eng and source_of(r) == src]
            for r in test:
                held[r.n] = table[eng][v][r.n]
            if test:
                print(f"  leave out {src[:70]!r}: {eng} fitted on {len(train)} other rows -> {show(v)}")
    print(f"\n{'metric group':16s} {'rows':>4s} {'unfitted':>9s} {'in-sample':>10s} {'held-out':>9s}"
          "   (median |% error|)")
    for g in list(GROUPS) + ["all"]:
        sel = [r for r in rows if g == "all" or group_of(r.metric) == g]
        if sel:
            med = [statistics.median(abs(err(r, p[r.n])) for r in sel) for p in (base, ins, held)]
            print(f"{g:16s} {len(sel):4d} {med[0]:9.1f} {med[1]:10.1f} {med[2]:9.1f}")
    if "-v" in argv:
        print(f"\n  {'row':>4s} {'metric':22s} {'measured':>9s} {'unfitted':>9s} "
              f"{'in-sample':>9s} {'held-out':>9s}"
              "  setup")
        for r in rows:
            print(f"  {r.n:4d} {r.metric:22s} {r.value:9.4g} {base[r.n]:9.4g} "
                  f"{ins[r.n]:9.4g} {held[r.n]:9.4g}  "
                  f"{r.setup()}")
    for name, pred in (("unfitted (moe_gemm_efficiency 1, no stream limit)", base), ("in-sample fit", ins),
                       ("leave-one-source-out", held)):
        summary(f"{name}: median |% error| (signed median) by model", rows, pred, lambda r: r.raw["model"])
    summary("unfitted residuals by source", rows, base, source_of)
    summary("unfitted residuals by engine and GPU", rows, base, lambda r: f"{r.engine} {r.gpu} {r.dtype}")
    summary("unfitted residuals by layout", rows, base,
            lambda r: f"tp{r.tp}" + (f" dp{r.dp}" if r.dp > 1 else "")
            + (" EP" if r.ep > 1 else " (experts by TP)"))
    summary("unfitted residuals by batch regime", rows, base, regime)
    summary("held-out residuals by source", rows, held, source_of)
    summary("held-out residuals by batch regime", rows, held, regime)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
