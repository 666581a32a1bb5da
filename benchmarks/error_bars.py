"""Write the cost model's error bars per class of deployment (``profiles/error_bars.yaml``) from the accuracy
benchmarks: what each plan states beside its predictions and what ``trimtab check --margin`` holds SLO
headroom against (``trimtab.profiles.error_bars``).

usage: python benchmarks/accuracy_gpu.py --write-error-bars PATH
       (or python benchmarks/accuracy.py --write-error-bars PATH: the same file)

Samples, one per run (or table row) and metric, as each benchmark scores them:
  * ``benchmarks/accuracy_gpu.py`` over ``../shared/groundtruth/blis-dev`` (real vLLM runs on H100, the front
    end fitted leave one model out): TTFT = the run's TTFT p90 (the percentile an SLO is written on; its p99
    rests on a few dozen requests per run), TPOT = its mean ITL; served runs only;
  * ``benchmarks/accuracy.py`` over ``../shared/groundtruth/dev.csv`` (published measurements of vLLM, SGLang
    and TensorRT-LLM on several GPUs): its TTFT rows and its TPOT/ITL rows;
  * the recorded load tests of vLLM's CPU engine (``benchmarks/data/engine_fidelity_cpu*.json``, 30-80 % of
    the planned capacity): TTFT p90 and TPOT p90, the prediction made again by this checkout.
The class of a sample: the GPU profile's family, tensor parallel 1 or more, dense or mixture-of-experts (the
model profile's experts), the engine. Per class and metric the median and p90 absolute % error and the count;
a class with fewer than ``MIN_RUNS`` samples of a metric is written with its count and takes the pooled figure
(all samples of the metric) when a plan asks for it.
"""
from __future__ import annotations

import datetime as _dt
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from benchmarks.accuracy import GROUPS, _pct  # noqa: E402  (one percentile for every benchmark table)
from trimtab.profiles.error_bars import ErrorBars, METRICS, class_name, gpu_family  # noqa: E402

MIN_RUNS = 3
GROUNDTRUTH = ROOT.parent / "shared" / "groundtruth"


def _stat(errs: list[float]) -> dict:
    return {"median_pct": round(statistics.median(errs), 1), "p90_pct": round(_pct(errs, 0.9), 1),
            "runs": len(errs)}


def gpu_samples(folder: Path, profiles) -> list[tuple[tuple, str, float]]:
    """((gpu, tp, moe, engine), metric, abs % error) of every served run of ``accuracy_gpu``'s table."""
    from benchmarks import accuracy_gpu as g

    runs = g.read_runs(folder)
    g.predict(runs, profiles, cv=True, seed=0, log=lambda m: None)
    out = []
    for r in runs:
        if not r.usable:
            continue
        key = ("h100-sxm", r.tp, _moe_of_run(r, profiles), "vllm")
        for metric, col in (("ttft", "ttft_p90"), ("tpot", "itl_mean")):
            if col in r.measured and col in r.predicted:
                out.append((key, metric, g.ape(r.predicted[col], r.measured[col])))
    return out


def _moe_of_run(run, profiles) -> bool:
    from benchmarks.accuracy_gpu import HF_CONFIGS, MODELS

    name = MODELS.get(run.model.lower())
    if name:
        return profiles.models[name].num_experts.value > 1
    cfg = json.loads((HF_CONFIGS / run.model / "config.json").read_text())
    cfg = cfg.get("text_config", cfg)
    return (cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts") or 1) > 1


def table_samples(path: Path, profiles) -> list[tuple[tuple, str, float]]:
    """The same of every predicted TTFT and TPOT row of ``accuracy``'s table."""
    from benchmarks import accuracy as a

    rows = a.parse(path, profiles)
    out = []
    for r in rows:
        metric = next((m for m in METRICS if r.metric in GROUPS[m]), None)
        if r.skip or metric is None:
            continue
        try:
            r.predicted = a.predict_row(r, profiles)
        except (ValueError, KeyError, ZeroDivisionError):
            continue  # the benchmark lists it as skipped
        moe = profiles.models[r.model].num_experts.value > 1
        out.append(((r.gpu, r.tp, moe, r.engine), metric, abs(r.error_pct)))
    return out


CPU_RUNS = (ROOT / "benchmarks" / "data" / "engine_fidelity_cpu.json",
            ROOT / "benchmarks" / "data" / "engine_fidelity_cpu_runA.json")


def cpu_samples(runs: tuple[Path, ...] = CPU_RUNS) -> list[tuple[tuple, str, float]]:
    """The same of the recorded load tests of vLLM's CPU engine (``benchmarks/engine_fidelity.py --device
    cpu``: 30-80 % of the planned capacity, measured TTFT and TPOT p90), the prediction made again by the cost
    model as it is now, at each run's rate (``trimtab.field.loadtest.predicted_at``, what ``check --analytic``
    computes)."""
    import math
    import tempfile

    from benchmarks.accuracy_gpu import ape
    from benchmarks.engine_fidelity import CPU, SPEC, fixed_lengths, plan_spec
    from trimtab.field.engine_run import SMALL_LLAMA
    from trimtab.field.loadtest import predicted_at, scaled_spec

    out = []
    with tempfile.TemporaryDirectory() as d:
        # the benchmark's case, its model as the config.json the server read (no tokenizer needed to predict)
        (Path(d) / "model").mkdir()
        (Path(d) / "model" / "config.json").write_text(json.dumps(SMALL_LLAMA), encoding="utf-8")
        spec_path = Path(d) / "spec.yaml"
        # the recorded runs' case: fixed lengths, served in bf16 (their spec named no dtype, whose default
        # that is)
        case = {**CPU, "dtype": "bf16", **fixed_lengths(CPU)}
        spec_path.write_text(SPEC.format(rate=0.5, **case), encoding="utf-8")
        spec, plan = plan_spec(spec_path)
        w = spec.workloads[0]
        key = (case["gpu"], plan.deployments[0].tensor_parallel, False, case["engine"])
        for f in runs:
            for r in json.loads(f.read_text())["rows"]:
                t, d90 = predicted_at(plan, scaled_spec(spec, r["rate_rps"] / w.rate_rps), 90.0)[w.name]
                for metric, pred, meas in (("ttft", t, r["ttft_p90"]), ("tpot", d90, r["tpot_p90"])):
                    if math.isfinite(pred):
                        out.append((key, metric, ape(pred, meas)))
    return out


def error_bars(blis: Path = GROUNDTRUTH / "blis-dev", table: Path = GROUNDTRUTH / "dev.csv") -> dict:
    """The file's content: per class and metric, and pooled, with its provenance."""
    from trimtab.profiles.loader import load_profiles

    profiles = load_profiles()
    samples = gpu_samples(blis, profiles) + table_samples(table, profiles) + cpu_samples()
    by: dict[str, dict[str, list[float]]] = {}
    keys = {}
    for key, metric, e in samples:
        name = class_name(*key)
        keys[name] = key
        by.setdefault(name, {}).setdefault(metric, []).append(e)
    classes = []
    for name in sorted(by):
        gpu, tp, moe, engine = keys[name]
        c = {"gpu": gpu_family(gpu), "tp": "1" if tp <= 1 else ">1", "moe": moe, "engine": engine}
        c.update({m: _stat(by[name][m]) for m in METRICS if m in by[name]})
        classes.append(c)
    pooled = {m: _stat([e for _, mm, e in samples if mm == m]) for m in METRICS}
    doc = {"benchmark": "python benchmarks/accuracy_gpu.py --write-error-bars (benchmarks/error_bars.py)",
           "data": [f"{_rel(blis)}: real vLLM runs on H100 (benchmarks/accuracy_gpu.py, front end fitted "
                    "leave one model out)",
                    f"{_rel(table)}: published measurements (benchmarks/accuracy.py)",
                    "benchmarks/data/engine_fidelity_cpu*.json: load tests of vLLM's CPU engine at 30-80 % "
                    "of capacity (benchmarks/engine_fidelity.py), predicted again by this checkout"],
           "date": _dt.date.today().isoformat(), "min_runs": MIN_RUNS,
           "measured": {"ttft": "blis-dev: TTFT p90 of each run; dev.csv: its TTFT rows (mean or lone "
                                "request); CPU load tests: TTFT p90",
                        "tpot": "blis-dev: mean ITL of each run; dev.csv: its mean TPOT and ITL rows; CPU "
                                "load tests: TPOT p90"},
           "pooled": pooled, "classes": classes}
    ErrorBars.model_validate(doc)  # refuse to write what the plan's reader would reject
    return doc


def _rel(p: Path) -> str:
    """A data path as the repository names it (``../shared/...``), not this machine's absolute path."""
    return str(Path("..") / p.relative_to(ROOT.parent)) if p.is_relative_to(ROOT.parent) else str(p)


def write(path: str | Path) -> dict:
    doc = error_bars()
    header = ("# The cost model's error per class of deployment, written by benchmarks/error_bars.py "
              "(docs/fidelity.md, \"Error bars\").\n# Regenerate: python benchmarks/accuracy_gpu.py "
              "--write-error-bars profiles/error_bars.yaml\n")
    Path(path).write_text(header + yaml.safe_dump(doc, sort_keys=False, width=110), encoding="utf-8")
    for c in doc["classes"]:
        figs = ", ".join(f"{m} median {c[m]['median_pct']} % p90 {c[m]['p90_pct']} % ({c[m]['runs']})"
                         for m in METRICS if m in c)
        print(f"{class_name(c['gpu'], c['tp'], c['moe'], c['engine']):28s} {figs}")
    print("pooled: " + ", ".join(f"{m} median {s['median_pct']} % p90 {s['p90_pct']} % ({s['runs']})"
                                 for m, s in doc["pooled"].items()))
    print(f"error bars written to {path}")
    return doc


def flag(argv: list[str]) -> str | None:
    """The PATH of ``--write-error-bars PATH`` (or ``=PATH``) in ``argv``, or None."""
    for i, a in enumerate(argv):
        if a.startswith("--write-error-bars="):
            return a.split("=", 1)[1]
        if a == "--write-error-bars" and i + 1 < len(argv):
            return argv[i + 1]
    return None


if __name__ == "__main__":
    write(flag(sys.argv[1:]) or ROOT / "profiles" / "error_bars.yaml")
