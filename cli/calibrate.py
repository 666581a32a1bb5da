"""``trimtab bench`` and ``trimtab calibrate``: measure a device and fit its profile, from this machine's
microbenchmarks, Vidur CSVs or aiconfigurator-core's kernel tables (logic in ``trimtab.field``)."""
from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from trimtab.cli.common import ProfilesOpt, TableOrJson, err, out
from trimtab.errors import InputError, Problem
from trimtab.sim.metrics import clean


class BenchDevice(str, Enum):
    cpu = "cpu"
    cuda = "cuda"


def bench_cmd(
    output: Annotated[Path, typer.Option("-o", "--output",
                                         help="Folder for bench.csv and metadata.json.")] = Path("bench-out"),
    device: Annotated[BenchDevice, typer.Option(help="Where to run the microbenchmarks.")] = BenchDevice.cuda,
    quick: Annotated[bool, typer.Option("--quick",
                                        help="Tiny sizes and few repeats (seconds; for CI).")] = False,
    dtype: Annotated[str, typer.Option(help="GEMM/attention precision: auto (bf16 on a GPU and on a "
                                            "CPU with native bf16, AVX512-BF16 or AMX; fp32 on other "
                                            "CPUs, as vLLM's CPU kernels compute there), bf16 or fp32.")
                 ] = "auto",
    eager: Annotated[bool, typer.Option("--eager", help="On a GPU, time every call eagerly (host "
                                                         "launch overhead included) instead of short calls "
                                                         "inside a CUDA graph.")]
    = False,
    fmt: Annotated[TableOrJson, typer.Option("--format", help="table, or json (the files written, alone on "
                                                              "stdout).")] = TableOrJson.table,
) -> None:
    """Microbenchmark GEMMs, attention, copies and all-reduce on this machine (needs trimtab[bench]).

    Example: trimtab bench --device cuda -o bench-out/
    """
    from trimtab.field.bench import run_bench

    path = run_bench(output, device.value, quick, log=lambda m: err.print(m, markup=False), dtype=dtype,
                     graph=not eager)
    if fmt == TableOrJson.json:
        written = [str(path), str(path.parent / "metadata.json")]
        sys.stdout.write(json.dumps({"written": written}, indent=2) + "\n")
        return
    out.print(f"wrote {path} and {path.parent / 'metadata.json'}", markup=False)


def calibrate_cmd(
    folders: Annotated[Optional[list[Path]], typer.Argument(
        metavar="DIR...", help="Folders of trimtab bench or Vidur CSVs.")] = None,
    output: Annotated[Optional[Path], typer.Option(
        "-o", "--output", help="GPU profile to write, e.g. profiles/gpus/NAME.yaml.")] = None,
    base: Annotated[Optional[str], typer.Option(help="GPU profile (name or YAML path) whose spec-sheet "
                                                     "peaks and other fields the fit starts from.")] = None,
    source: Annotated[Optional[str], typer.Option(
        "--from", help="'aiconfigurator': fit every GPU profile its vLLM kernel tables cover.")] = None,
    data: Annotated[Optional[Path], typer.Option(
        help="aiconfigurator's systems/data folder (default: the installed aiconfigurator_core's).")] = None,
    out_dir: Annotated[Optional[Path], typer.Option(
        "--out", help="Profile folder to write into: gpus/NAME.yaml (--from aiconfigurator; default "
                      "profiles-aiconfigurator), engines/NAME.yaml (--engine; default my-profiles).")] = None,
    engine_url: Annotated[Optional[str], typer.Option(
        "--engine", metavar="URL", help="A running OpenAI-compatible server (http://HOST:PORT): fit the "
                                        "engine's front-end and per-step overheads from timed requests at "
                                        "known lengths.")]
    = None,
    model: Annotated[Optional[str], typer.Option(help="--engine: the model it serves (profile name or "
                                                      "config.json).")] = None,
    gpu: Annotated[Optional[str], typer.Option(help="--engine: the GPU profile it runs on.")] = None,
    engine_profile: Annotated[str, typer.Option(
        help="--engine: the engine profile to refit (its other numbers are kept).")] = "vllm",
    max_num_batched_tokens: Annotated[int, typer.Option(min=1, help="--engine: the server's token budget per "
                                                                    "step.")] = 8192,
    kernel_share: Annotated[bool, typer.Option(
        "--kernel-share", help="--engine: also fit the engine's kernel share of the device profile.")
    ] = False,
    scale: Annotated[int, typer.Option(min=1, help="--engine: multiply the timed prompt and output lengths "
                                                   "(64-512 prompt tokens at 1).")] = 1,
    engine_dtype: Annotated[str, typer.Option(
        "--dtype", help="--engine: the precision the server runs the model in (its --dtype): bf16, or fp32 "
                        "(a CPU without native bf16).")] = "bf16",
    profiles: ProfilesOpt = None,
    fmt: Annotated[TableOrJson, typer.Option(
        "--format", help="table, or json (the fit errors per operation and the parameters, alone on "
                         "stdout).")] = TableOrJson.table,
) -> None:
    """Fit a GPU profile's efficiency parameters to measurements by least squares; print the fit error per op.

    Example: trimtab calibrate bench-out/ --base h100-sxm -o profiles/gpus/my-h100.yaml Example: trimtab
    calibrate --from aiconfigurator --out my-profiles/ Example: trimtab calibrate --engine
    http://127.0.0.1:8000 --model llama-3.1-8b --gpu h100-sxm --out my-profiles/ (then: trimtab plan spec.yaml
    --profiles my-profiles/)
"""
    if engine_url is not None:
        return _engine(engine_url, model, gpu, engine_profile, out_dir or Path("my-profiles"), profiles,
                       max_num_batched_tokens, kernel_share, scale, fmt, engine_dtype)
    if source is not None:
        if source != "aiconfigurator":
            raise InputError([Problem("--from", f"unknown source {source!r}; known: aiconfigurator")])
        from trimtab.field.calibrate_aic import calibrate_from_aiconfigurator, report_lines

        cals = calibrate_from_aiconfigurator(data, out_dir or Path("profiles-aiconfigurator"))
        if fmt == TableOrJson.json:
            sys.stdout.write(json.dumps(clean({"profiles": [
                {"gpu": c.gpu, "profile": c.profile, "written": str(c.output), "notes": c.notes,
                 "fields": {f: {"before": c.before.get(f), "after": v} for f, v in c.values.items()},
                 "no_table": list(c.missing)} for c in cals]}), indent=2) + "\n")
            return
        for line in report_lines(cals):
            out.print(line, markup=False)
        return
    if not folders or output is None:
        raise InputError([Problem("DIR... / --output", "give measurement folders and -o, or --from "
                                                       "aiconfigurator")])
    from trimtab.field.calibrate import calibrate as do_calibrate, format_errors

    r = do_calibrate([str(f) for f in folders], output, base)
    if fmt == TableOrJson.json:
        sys.stdout.write(json.dumps(clean({
            "profile": str(r.output), "params": dict(r.fit.params),
            "errors": {op: {"rows": e.rows, "median_pct": e.median_pct, "p90_pct": e.p90_pct}
                       for op, e in r.fit.errors.items()}}), indent=2) + "\n")
        return
    for line in format_errors(r.fit):
        out.print(line, markup=False)
    out.print(f"profile written to {r.output}", markup=False)


def _engine(url, model, gpu, engine, out_dir, profiles, max_tokens, kernel_share, scale, fmt, dtype) -> None:
    """``calibrate --engine``: time requests against the server, fit, write the engine profile, print the fit.
    """
    if model is None or gpu is None:
        raise InputError([Problem("--model/--gpu",
                                  "--engine needs the model the server runs and its GPU profile")])
    if dtype not in ("bf16", "fp32"):
        raise InputError([Problem("--dtype", f"must be bf16 or fp32, got {dtype!r}")])
    from trimtab.field.enginefit import calibrate_server

    err.print(f"timing requests against {url} ...", markup=False)
    cal, path = calibrate_server(url, model, gpu, engine, out_dir, profile_dir=profiles,
                                 max_batched_tokens=max_tokens, kernel_share=kernel_share, scale=scale,
                                 dtype=dtype)
    if fmt == TableOrJson.json:
        held = {k: cal.held[k] for k in ("ttft_median", "tpot_median")}
        doc = {"profile": str(path), "params": cal.fit.params, "rows": cal.table(), "held_out": held}
        sys.stdout.write(json.dumps(clean(doc), indent=2) + "\n")
        return
    for k, v in cal.fit.params.items():
        out.print(f"{k}: {v:.3f}", markup=False)
    for r in cal.table():
        out.print(f"{r['set']:8} isl {r['isl']:5} osl {r['osl']:4} c {r['concurrency']:2}: "
                  f"TTFT {r['ttft_ms']:.1f} ms (predicted {r['ttft_pred_ms']:.1f}), "
                  f"TPOT {r['tpot_ms']:.2f} ms (predicted {r['tpot_pred_ms']:.2f})", markup=False)
    out.print(f"held-out median error: TTFT {cal.held['ttft_median']:.1f} %, "
              f"TPOT {cal.held['tpot_median']:.1f} %", markup=False)
    out.print(f"engine profile written to {path}; plan with it: --profiles {path.parent.parent}",
              markup=False)
