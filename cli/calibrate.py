"""``trimtab bench`` and ``trimtab calibrate``: measure a device and fit its profile, from this machine's
microbenchmarks, Vidur CSVs or aiconfigurator-core's kernel tables (logic in ``trimtab.field``)."""
from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from trimtab.cli.common import TableOrJson, err, out
from trimtab.errors import InputError, Problem


class BenchDevice(str, Enum):
    cpu = "cpu"
    cuda = "cuda"


def bench_cmd(
    output: Annotated[Path, typer.Option("-o", "--output", help="Folder for bench.csv and metadata.json.")] = Path("bench-out"),
    device: Annotated[BenchDevice, typer.Option(help="Where to run the microbenchmarks.")] = BenchDevice.cuda,
    quick: Annotated[bool, typer.Option("--quick", help="Tiny sizes and few repeats (seconds; for CI).")] = False,
    dtype: Annotated[str, typer.Option(help="GEMM/attention precision: auto (bf16 on a GPU, fp32 on a CPU), bf16 "
                                            "(what vLLM's CPU engine runs on AVX512-BF16 CPUs) or fp32.")] = "auto",
    eager: Annotated[bool, typer.Option("--eager", help="On a GPU, time every call eagerly (host launch overhead "
                                                         "included) instead of short calls inside a CUDA graph.")]
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
    base: Annotated[Optional[str], typer.Option(help="GPU profile (name or YAML path) whose spec-sheet peaks and other "
                                                     "fields the fit starts from.")] = None,
    source: Annotated[Optional[str], typer.Option(
        "--from", help="'aiconfigurator': fit every GPU profile its vLLM kernel tables cover.")] = None,
    data: Annotated[Optional[Path], typer.Option(
        help="aiconfigurator's systems/data folder (default: the installed aiconfigurator_core's).")] = None,
    out_dir: Annotated[Path, typer.Option(
        "--out", help="Profile folder to write gpus/NAME.yaml into (--from aiconfigurator).")
    ] = Path("profiles-aiconfigurator"),
    fmt: Annotated[TableOrJson, typer.Option(
        "--format", help="table, or json (the fit errors per operation and the parameters, alone on "
                         "stdout).")] = TableOrJson.table,
) -> None:
    """Fit a GPU profile's efficiency parameters to measurements by least squares; print the fit error per op.

    Example: trimtab calibrate bench-out/ --base h100-sxm -o profiles/gpus/my-h100.yaml
    Example: trimtab calibrate --from aiconfigurator --out my-profiles/
    """
    if source is not None:
        if source != "aiconfigurator":
            raise InputError([Problem("--from", f"unknown source {source!r}; known: aiconfigurator")])
        from trimtab.field.calibrate_aic import calibrate_from_aiconfigurator, report_lines

        cals = calibrate_from_aiconfigurator(data, out_dir)
        if fmt == TableOrJson.json:
            from trimtab.sim.metrics import clean

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
        from trimtab.sim.metrics import clean

        sys.stdout.write(json.dumps(clean({
            "profile": str(r.output), "params": dict(r.fit.params),
            "errors": {op: {"rows": e.rows, "median_pct": e.median_pct, "p90_pct": e.p90_pct}
                       for op, e in r.fit.errors.items()}}), indent=2) + "\n")
        return
    for line in format_errors(r.fit):
        out.print(line, markup=False)
    out.print(f"profile written to {r.output}", markup=False)
