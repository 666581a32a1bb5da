"""The ``trimtab`` command line: thin typer commands over ``trimtab.api``.

Exit codes (docs/errors.md): 0 ok, 1 invalid input, 2 usage, 3 infeasible, 4 no solution within limits,
5 check failed, 6 internal, 7 plan misses. Expected errors print one line per problem and no traceback.

The command modules import at their top only what ``import trimtab`` loads anyway; a command whose stage is
heavier (the planners' extras, deploy, field, study, online, the reports) imports it in its body, so
``trimtab --help`` and the small commands start fast.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from enum import Enum
from importlib.metadata import version
from pathlib import Path
from typing import Annotated, Optional

import typer
import yaml

from trimtab.cli.common import (Fmt, MarginStat, ProfilesOpt, Solver, TableOrJson, TraceFormat,
                                _expected_errors, err, exit_misses, misses_lines, out,
                                plan_path as plan_path_of, process_seconds, refuse_misses, refuse_to_write,
                                steps)
from trimtab.cli.calibrate import bench_cmd, calibrate_cmd
from trimtab.cli.emit import emit_cmd
from trimtab.cli.replan import replan_cmd
from trimtab.cli.watch import watch_cmd
from trimtab.cli.pareto import pareto_cmd
from trimtab.cli.profiles import profiles_app
from trimtab.cli.sweep import sweep_cmd
from trimtab.errors import ExitCode, InputError, PlanMissesError, Problem
from trimtab.api import (diff_plans, explain as do_explain, load_spec, plan as do_plan, what_if as do_what_if,
                         with_margin)
from trimtab.contract.schema import Plan
from trimtab.contract.write import emit, plan_to_data
from trimtab.cost.model import ReplicaModel
from trimtab.cost.moe import check_kv_dtype, check_layout
from trimtab.gate.analytic import check as do_check, load_plan, plan_references
from trimtab.ir.lower import lower
from trimtab.profiles.loader import load_profiles, model_from_hf_config
from trimtab.spec.load import load_profile_folder
from trimtab.spec.schema import Spec

app = typer.Typer(add_completion=True, no_args_is_help=True, rich_markup_mode="rich",
                  context_settings={"help_option_names": ["-h", "--help"]},
                  help="trimtab: plan the cheapest LLM inference deployment that meets every SLO.")
app.add_typer(profiles_app, name="profiles")



def _version(value: bool) -> None:
    if value:
        out.print(f"trimtab {version('trimtab')}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the version and exit.")] = False) -> None:
    """trimtab: a constraint compiler for LLM inference deployments."""


@app.command()
@_expected_errors
def plan(
    spec: Annotated[Path, typer.Argument(help="Spec YAML (see docs/spec-reference.md).")],
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Write the plan here; '-' "
                                                   "(or none): the plan alone on stdout, the "
                                                   "summary on stderr.")] = None,
    solver: Annotated[Optional[Solver],
                      typer.Option(help="MILP backend; overrides the spec's solver.backend.")] = None,
    time_limit: Annotated[Optional[float],
                          typer.Option(min=0.01, help="Wall-clock safety net for the whole run (solves "
                                                      "and validating simulations), seconds; its expiry is "
                                                      "exit 4, no plan; overrides "
                                                      "solver.time_limit_s.")] = None,
    fmt: Annotated[Fmt, typer.Option("--format", help="Plan file format.")] = Fmt.yaml,
    verbose: Annotated[bool, typer.Option("-v", "--verbose", help="Also print the rounds and seconds per "
                                                                  "stage, and list pruned "
                                                                  "candidates and why.")] = False,
    allow_misses: Annotated[bool, typer.Option("--allow-misses", help="Write the plan even when its own "
                                               "validation still shows a workload below its SLO (marked with "
                                               "misses; exit 7 all the same).")] = False,
    profiles: ProfilesOpt = None,
) -> None:
    """Plan the cheapest deployment that meets every SLO, and write it as YAML (or JSON). A plan whose own
    validation still shows a miss is not written (exit 7) unless --allow-misses.

    Example: trimtab plan examples/quickstart.yaml -o plan.yaml
    """
    from trimtab.cli.render import plan_summary

    t0 = time.perf_counter()
    up = process_seconds()  # interpreter start-up and imports, before this line
    s = load_spec(spec, profile_dir=profiles)
    t1 = time.perf_counter()
    with steps(err, f"planning {s.name}") as say:
        r = do_plan(s, backend=solver.value if solver else None, time_limit_s=time_limit, progress=say)
    t2 = time.perf_counter()
    text = emit(r.plan, fmt.value)
    # Every stage of the process, so that plan -v accounts for its wall time (the writing itself left out)
    r.seconds.update({"start-up": up, "read spec": t1 - t0, "emit": time.perf_counter() - t2})
    r.seconds["total"] = up + (time.perf_counter() - t0)
    if r.plan.misses and not allow_misses:
        plan_summary(err, r, verbose)
        raise PlanMissesError(misses_lines(r.plan) + ["no plan written; --allow-misses writes it, marked"])
    if output is None or str(output) == "-":
        plan_summary(err, r, verbose)
        sys.stdout.write(text)
    else:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
        plan_summary(out, r, verbose)
        out.print(f"plan written to {output}")
    if r.plan.misses:
        raise PlanMissesError(misses_lines(r.plan) + ["written with --allow-misses, marked with its misses"])



@app.command()
@_expected_errors
def check(
    spec: Annotated[Path, typer.Option("--spec", help="Spec the plan must satisfy.")],
    plan_opt: Annotated[Optional[Path], typer.Option("--plan", help="Plan file written by trimtab "
                                                                    "plan.")] = None,
    plan_pos: Annotated[Optional[Path], typer.Argument(metavar="PLAN", help="Deprecated spelling of --plan.",
                                                       show_default=False)] = None,
    fmt: Annotated[TableOrJson, typer.Option("--format", help="Report format.")] = TableOrJson.table,
    analytic: Annotated[bool, typer.Option("--analytic", help="Judge SLOs by the cost model only (fast), "
                                                              "not by simulation.")] = False,
    seed: Annotated[Optional[int], typer.Option(help="First simulation seed (default: 1000, past "
                                                     "the seeds the plan was validated on).")] = None,
    seeds: Annotated[int, typer.Option(min=1, help="Simulation runs, one per seed from --seed; attainment is "
                                                   "pooled with 95% bounds.")] = 3,
    strict: Annotated[bool, typer.Option(help="Fail a workload unless its lower 95% bound reaches the target "
                                              "(default: fail only a miss the runs show).")] = False,
    requests: Annotated[Optional[int], typer.Option(min=1,
                                                    help="Requests per run (default: the plan's).")] = None,
    duration: Annotated[Optional[float], typer.Option(min=0.001, help="Seconds of arrivals to "
                                                                      "simulate instead.")] = None,
    trace: Annotated[Optional[Path], typer.Option(help="Replay this trace's arrivals and lengths, "
                                                       "rescaled to each workload's rate.")] = None,
    trace_format: Annotated[TraceFormat, typer.Option(help="Trace file format.")] = TraceFormat.azure,
    fail_each_node: Annotated[bool, typer.Option("--fail-each-node", help="Also check the plan "
                                                 "with each node removed (automatic when the spec says "
                                                 "redundancy: n+1).")] = False,
    transitions: Annotated[bool, typer.Option(help="Schedules: also simulate each boundary where "
                                                   "replicas are added over time (start-up, drain, "
                                                   "rate change).")] = True,
    start_lead: Annotated[Optional[float], typer.Option(min=0, help="Schedules: seconds before a boundary a "
                                                                    "replica's start is issued (default: its "
                                                                    "start-up time, as planned; 0: at the "
                                                                    "boundary).")] = None,
    allow_misses: Annotated[bool, typer.Option("--allow-misses", help="Check a plan written by plan "
                                               "--allow-misses (marked with misses).")] = False,
    margin: Annotated[bool, typer.Option(
        "--margin", help="Also fail a workload whose SLO headroom is smaller than the cost model's measured "
                         "error for its deployments' class (the plan's error_bar; docs/fidelity.md).")
    ] = False,
    margin_stat: Annotated[MarginStat, typer.Option(help="--margin: the class's median or p90 absolute "
                                                         "error.")] = MarginStat.median,
    profiles: ProfilesOpt = None,
) -> None:
    """Verify a plan against a spec: structure, and SLOs by simulation (or by the cost model with --analytic);
    exit 5 on any violation (CI gate). With redundancy n+1 (or --fail-each-node) also with each node removed.

    Example: trimtab check --plan plan.yaml --spec examples/quickstart.yaml
    """
    plan_path = plan_path_of(plan_opt, plan_pos, "a positional PLAN")
    p = load_plan(plan_path)
    refuse_misses(p, plan_path, allow_misses)
    s = load_spec(spec, profile_dir=profiles)

    foreign = plan_references(p, lower(s))
    if foreign:  # a plan from another spec: invalid input (exit 1), not a failed check
        raise InputError([Problem(f.where, f.message, str(plan_path)) for f in foreign], "plan")
    mstat = margin_stat.value if margin else None
    if not analytic and p.schedule is not None and s.schedule is not None and trace is None \
            and duration is None:
        if margin:
            raise InputError([Problem("--margin", "checks a static plan: not with a schedule")])
        from trimtab.cli.simulate import schedule_check  # every window of the schedule (docs/online.md)

        with steps(err, "check") as say:
            say(f"simulating each of {len(p.schedule.windows)} windows"
                + (" and its boundaries" if transitions else ""))
            ok = schedule_check(p, s, out, fmt.value, seed, seeds, requests, strict, transitions, start_lead)
        if not ok:
            raise typer.Exit(int(ExitCode.CHECK_FAILED))
        return
    replay = trace is not None or duration is not None
    if fail_each_node or (s.redundancy == "n+1" and not replay):  # docs/online.md, "Redundancy"
        from trimtab.cli.simulate import node_loss_check

        if p.schedule is not None or replay or margin:
            raise InputError([Problem("--fail-each-node" if not margin else "--margin",
                                      "checks a static plan at the spec's rates: not with a "
                                      "schedule, --trace or --duration")])
        with steps(err, "check") as say:
            say("the plan, then the plan without each node"
                + (" (cost model)" if analytic else " (simulated)"))
            ok = node_loss_check(p, s, out, err, fmt.value, analytic, seed, seeds, requests, strict)
        if not ok:
            raise typer.Exit(int(ExitCode.CHECK_FAILED))
        return
    if not analytic:
        from trimtab.cli.simulate import sim_check

        if not sim_check(p, s, out, err, fmt.value, seed, seeds, requests, duration, trace,
                         trace_format.value, strict, mstat):
            raise typer.Exit(int(ExitCode.CHECK_FAILED))
        return

    rep = with_margin(do_check(p, s), p, s, None, mstat)
    if fmt is TableOrJson.json:
        data = {"ok": rep.ok, "violations": rep.violations, "notes": rep.notes,
                "workloads": {k: {"ttft_ms": v.ttft_ms if v.ttft_ms != float("inf") else None,
                                  "tpot_ms": v.tpot_ms if v.tpot_ms != float("inf") else None,
                                  "slo_met": v.slo_met} for k, v in rep.assessment.workloads.items()}}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        for n in rep.notes:
            out.print(f"note: {n}", markup=False)
        for w in rep.assessment.workloads.values():
            mark = "ok  " if w.slo_met else "FAIL"
            out.print(f"{mark} {w.workload}: TTFT p{w.percentile:g} {w.ttft_ms:.0f} ms, TPOT "
                      f"{w.tpot_ms:.1f} ms",
                      markup=False)
        for v in rep.violations:
            out.print(f"FAIL {v}", markup=False)
        out.print("check passed" if rep.ok else f"check failed: {len(rep.violations)} violation(s)",
                  markup=False)
    if not rep.ok:
        raise typer.Exit(int(ExitCode.CHECK_FAILED))


@app.command()
@_expected_errors
def simulate(
    spec: Annotated[Path, typer.Option("--spec", help="Spec whose traffic to simulate.")],
    plan_opt: Annotated[Optional[Path], typer.Option("--plan", help="Plan file written by trimtab "
                                                                    "plan.")] = None,
    plan_pos: Annotated[Optional[Path], typer.Argument(metavar="PLAN", help="Deprecated spelling of --plan.",
                                                       show_default=False)] = None,
    requests: Annotated[Optional[int], typer.Option(min=1, help="Requests to simulate, all "
                                                                "workloads together.")] = None,
    duration: Annotated[Optional[float], typer.Option(min=0.001, help="Seconds of arrivals to "
                                                                      "simulate instead.")] = None,
    seed: Annotated[int, typer.Option(help="Random seed (arrivals, lengths, routing).")] = 0,
    trace: Annotated[Optional[Path], typer.Option(help="Replay this trace's arrivals and lengths, "
                                                       "rescaled to each workload's rate.")] = None,
    trace_format: Annotated[TraceFormat, typer.Option(help="Trace file format.")] = TraceFormat.azure,
    arrival_cv: Annotated[Optional[float], typer.Option(min=0.01, help="Burstiness: coefficient of "
                                                                       "variation of inter-arrival gaps "
                                                                       "(1 = Poisson).")] = None,
    fmt: Annotated[TableOrJson, typer.Option("--format", help="Report format.")] = TableOrJson.table,
    plot: Annotated[Optional[Path],
                    typer.Option(help="Write latency CDFs and a timeline as PNGs here.")] = None,
    profiles: ProfilesOpt = None,
) -> None:
    """Simulate a plan request by request (continuous batching, chunked prefill, queues, KV cache, routing).

    Example: trimtab simulate --plan plan.yaml --spec examples/quickstart.yaml --plot plots/
    """
    from trimtab.cli.simulate import sim_report

    p = load_plan(plan_path_of(plan_opt, plan_pos, "a positional PLAN"))
    sim_report(p, load_spec(spec, profile_dir=profiles), out, err, fmt.value, seed, requests, duration, trace,
               trace_format.value, arrival_cv, plot)


@app.command()
@_expected_errors
def predict(
    model: Annotated[str, typer.Option(help="Model profile name, or a path to a Hugging Face config.json.")],
    gpu: Annotated[str, typer.Option(help="GPU profile name.")],
    isl: Annotated[int, typer.Option(min=1, help="Input tokens per request.")],
    osl: Annotated[int, typer.Option(min=1, help="Output tokens per request.")],
    concurrency: Annotated[str, typer.Option(help="Requests in flight, or 'max' for the most that fit in "
                                                  "the KV cache.")],
    tp: Annotated[int, typer.Option(min=1, help="Tensor parallel size.")] = 1,
    pp: Annotated[int, typer.Option(min=1, help="Pipeline parallel size.")] = 1,
    dtype: Annotated[str,
                     typer.Option(help="bf16, fp8 or fp4 (weights; fp4 needs FP4 tensor "
                                       "cores: b200).")] = "bf16",
    max_num_batched_tokens: Annotated[int, typer.Option(min=1, help="Token budget per engine step.")] = 8192,
    fmt: Annotated[TableOrJson, typer.Option("--format", help="Output format.")] = TableOrJson.table,
    engine: Annotated[str, typer.Option(help="Engine profile: vllm, sglang or trt-llm (trimtab "
                                             "profiles list).")] = "vllm",
    kv_dtype: Annotated[Optional[str], typer.Option(help="KV cache precision, bf16, fp8 or fp4 "
                                                        "(NVFP4: FP4 tensor cores, b200; default: --dtype; "
                                                        "fp8 with fp4 weights).")] = None,
    dp: Annotated[int, typer.Option(min=1, help="Attention data-parallel ranks (MoE models; the "
                                                "replica spans tp x pp x dp GPUs).")] = 1,
    ep: Annotated[int, typer.Option(min=1, help="Expert-parallel degree (MoE; 1: experts split by "
                                                "TP; tp x dp: vLLM --enable-expert-parallel).")] = 1,
    profiles: ProfilesOpt = None,
) -> None:
    """Predict TTFT, TPOT and throughput of one replica at a fixed concurrency.

    Example: trimtab predict --model llama-3.1-8b --gpu h100-sxm --isl 1000 --osl 200 --concurrency 16
    """
    from trimtab.cli.render import prediction_table

    profs = load_profiles() if profiles is None else load_profile_folder(profiles)
    problems = []
    if model.endswith(".json") or Path(model).is_file():
        mprof = model_from_hf_config(model, Path(model).parent.name or "model")
    elif model in profs.models:
        mprof = profs.models[model]
    else:
        mprof = None
        problems.append(Problem("--model", f"unknown model {model!r}; known: "
                                           f"{', '.join(sorted(profs.models))}"))
    if gpu not in profs.gpus:
        problems.append(Problem("--gpu", f"unknown GPU {gpu!r}; known: {', '.join(sorted(profs.gpus))}"))
    if dtype not in ("bf16", "fp8", "fp4"):
        problems.append(Problem("--dtype", f"must be bf16, fp8 or fp4, got {dtype!r}"))
    if kv_dtype is not None and kv_dtype not in ("bf16", "fp8", "fp4"):
        problems.append(Problem("--kv-dtype", f"must be bf16, fp8 or fp4, got {kv_dtype!r}"))
    if engine not in profs.engines:
        problems.append(Problem("--engine", f"unknown engine {engine!r}; known: "
                                            f"{', '.join(sorted(profs.engines))}"))
    if concurrency != "max" and not (concurrency.isdigit() and int(concurrency) >= 1):
        problems.append(Problem("--concurrency", f"must be a positive integer or 'max', got {concurrency!r}"))
    if mprof is not None and (mprof.num_attention_heads.value % tp or mprof.num_layers.value % pp):
        problems.append(Problem("--tp/--pp", f"tp {tp} must divide {mprof.num_attention_heads.value:g} heads "
                                             f"and pp {pp} must divide {mprof.num_layers.value:g} layers"))
    if not problems:
        try:
            check_layout(mprof, profs.gpus[gpu], tp, dp, ep, dtype)
        except ValueError as exc:
            problems.append(Problem("--dtype" if "fp4" in str(exc) else "--dp/--ep", str(exc)))
        if kv_dtype is not None:
            try:
                check_kv_dtype(mprof, profs.gpus[gpu], kv_dtype)
            except ValueError as exc:
                problems.append(Problem("--kv-dtype", str(exc)))
    if problems:
        raise InputError(problems)
    rm = ReplicaModel(mprof, profs.gpus[gpu], profs.engines[engine], tp, pp, dtype,
                      max_batched_tokens=max_num_batched_tokens, kv_dtype=kv_dtype, dp=dp, ep=ep)
    conc = rm.max_concurrency(isl, osl) if concurrency == "max" else int(concurrency)
    if conc < 1:
        raise InputError([Problem("--concurrency", f"{mprof.name} on {tp * pp * dp} x {gpu} has KV room for "
                                                   f"{rm.memory.kv_cache_tokens} tokens: not one request of "
                                                   f"{isl + osl} tokens fits")])
    pr = rm.predict_closed_loop(isl, osl, conc)
    from trimtab.cost.predict import fidelity

    fid = fidelity(rm, isl, osl, conc)
    if fmt is TableOrJson.json:
        d = {k: getattr(pr, k) for k in ("ttft_ms", "tpot_ms", "output_tokens_per_s",
                                         "output_tokens_per_s_per_gpu",
                                         "requests_per_s", "fits", "max_concurrency", "concurrency",
                                         "kv_cache_tokens")}
        d["engine"] = engine
        d["fidelity"] = fid.as_dict()
        sys.stdout.write(json.dumps(d, indent=2) + "\n")
    else:
        shape = f"tp{tp} pp{pp}" + (f" dp{dp}" if dp > 1 else "") + (f" ep{ep}" if ep > 1 else "")
        prediction_table(out, f"{mprof.name} on {gpu} {shape} {dtype}, {engine}, isl {isl}, osl {osl}", pr)
        out.print(f"fidelity: {fid.level}" + ("; spec-sheet/assumed: "
                                              f"{', '.join(fid.unfitted)}" if fid.unfitted else "")
                  + (f"; extrapolates: {'; '.join(fid.extrapolation)}" if fid.extrapolation else ""),
                  markup=False)


@app.command()
@_expected_errors
def loadtest(
    plan_path: Annotated[Path, typer.Option("--plan", help="Plan file written by trimtab plan.")],
    spec: Annotated[Path, typer.Option("--spec", help="Spec whose traffic to replay.")],
    endpoint: Annotated[list[str], typer.Option(help="OpenAI-compatible server, http://HOST:PORT (every "
                                                     "deployment), or DEPLOYMENT=http://HOST:PORT "
                                                     "(repeatable). Only these addresses are contacted.")],
    requests: Annotated[Optional[int], typer.Option(min=1, help="Requests to send, all workloads together "
                                                                "(default 200).")] = None,
    duration: Annotated[Optional[float], typer.Option(min=0.001,
                                                      help="Seconds of arrivals to send instead.")] = None,
    rate_scale: Annotated[float, typer.Option(min=1e-6,
                                              help="Multiply every workload's arrival rate.")] = 1.0,
    seed: Annotated[int, typer.Option(help="Random seed (arrivals, lengths, routing, prompts).")] = 0,
    timeout: Annotated[float, typer.Option(min=1.0, help="Wall-clock limit of the whole run in seconds; "
                                                         "requests still running then "
                                                         "count as failed.")] = 900.0,
    fmt: Annotated[TableOrJson, typer.Option("--format", help="Report format.")] = TableOrJson.table,
    profiles: ProfilesOpt = None,
) -> None:
    """Replay the spec's traffic against a running server; measured vs predicted vs simulated per workload;
    exit 5 when a workload misses its SLO (docs/loadtest.md).

    Example: trimtab loadtest --plan plan.yaml --spec spec.yaml --endpoint http://127.0.0.1:8000 \
--requests 100"""
    from trimtab.field.loadtest import run_loadtest
    from trimtab.cli.render import loadtest_table

    if requests is not None and duration is not None:
        raise InputError([Problem("--requests/--duration", "give one of them, not both")])
    with steps(err, "loadtest") as say:
        res = run_loadtest(load_plan(plan_path), load_spec(spec, profile_dir=profiles), endpoint,
                           requests=requests,
                           duration_s=duration, rate_scale=rate_scale, seed=seed, timeout_s=timeout,
                           progress=say)
    if fmt is TableOrJson.json:
        sys.stdout.write(json.dumps(res.to_dict(), indent=2) + "\n")
    else:
        out.print(loadtest_table(res))
        for n in res.notes:
            out.print(f"note: {n}", markup=False)
        for f in res.failures():
            out.print(f"FAIL {f}", markup=False)
        verdicts = {w.verdict for w in res.workloads.values()}
        out.print(f"sent {res.sent} requests in {res.wall_s:.1f} s; "
                  + ("every workload met its SLO" if res.ok else "SLO missed" if "missed" in verdicts
                     else "insufficient requests to call every SLO met"), markup=False)
    if not res.ok:
        raise typer.Exit(int(ExitCode.CHECK_FAILED))


class SchemaName(str, Enum):
    spec = "spec"
    plan = "plan"


@app.command()
@_expected_errors
def explain(
    spec: Annotated[Path, typer.Argument(help="Spec YAML.")],
    solver: Annotated[Optional[Solver],
                      typer.Option(help="MILP backend; overrides the spec's solver.backend.")] = None,
    time_limit: Annotated[Optional[float], typer.Option(min=0.01,
                                                        help="Wall-clock safety net for the explanation's "
                                                             "solves together (and, apart, for the plan "
                                                             "without --analytic), seconds; its expiry is "
                                                             "exit 4.")] = None,
    analytic: Annotated[bool, typer.Option("--analytic", help="Skip planning with validation: only the cost "
                                                              "model's price (labelled analytic).")] = False,
    fmt: Annotated[TableOrJson, typer.Option("--format",
                                             help="table, or json (the document "
                                                  "alone on stdout).")] = TableOrJson.table,
    profiles: ProfilesOpt = None,
) -> None:
    """Why a spec is infeasible and what to relax (verified), or what limits a feasible plan's cost.

    Example: trimtab explain examples/quickstart.yaml
    """
    s = load_spec(spec, profile_dir=profiles)
    with steps(err, f"explaining {s.name}") as say:
        say("solving the cost model's problem and its relaxations")
        e = do_explain(s, backend=solver.value if solver else None, time_limit_s=time_limit)
        if e.feasible and not analytic:  # the cost a user will get: trimtab plan's, validated by simulation
            r = do_plan(s, backend=solver.value if solver else None, time_limit_s=time_limit,
                        progress=lambda step: say(f"planning: {step}"))
            e = replace(e, validated_cost_usd_per_hour=r.plan.cost_usd_per_hour)
    if fmt == TableOrJson.json:
        sys.stdout.write(json.dumps(e.as_dict(), indent=2) + "\n")
        return
    for line in e.lines():
        out.print(line, markup=False)


@app.command()
def schema(which: Annotated[SchemaName, typer.Argument(help="spec or plan")]) -> None:
    """Print the JSON Schema of the spec or the plan.

    Example: trimtab schema spec > spec.schema.json
    """
    model = Spec if which is SchemaName.spec else Plan
    sys.stdout.write(json.dumps(model.model_json_schema(), indent=2) + "\n")


app.command("bench")(_expected_errors(bench_cmd))
app.command("calibrate")(_expected_errors(calibrate_cmd))
app.command("emit")(_expected_errors(emit_cmd))
app.command("sweep")(_expected_errors(sweep_cmd))
app.command("pareto")(_expected_errors(pareto_cmd))
app.command("replan")(_expected_errors(replan_cmd))
app.command("watch")(_expected_errors(watch_cmd))


@app.command("what-if")
@_expected_errors
def what_if(
    spec: Annotated[Path, typer.Argument(help="Spec YAML.")],
    overrides: Annotated[list[str], typer.Option("--set", help="PATH=VALUE, e.g. workloads.chat.rate_rps=8 "
                                                               "(repeatable).")],
    output: Annotated[Optional[Path], typer.Option("-o", "--output",
                                                   help="Write the changed plan here.")] = None,
    fmt: Annotated[TableOrJson, typer.Option("--format",
                                             help="table, or json (the document "
                                                  "alone on stdout).")] = TableOrJson.table,
    profiles: ProfilesOpt = None,
    allow_misses: Annotated[bool, typer.Option("--allow-misses", help="Write the changed plan even when its "
                                               "own validation still shows a workload below its SLO (marked "
                                               "with misses; exit 7 all the same).")] = False,
) -> None:
    """Re-plan with changed inputs and show what changes against the base plan. A changed plan whose own
    validation still shows a miss is refused (exit 7) unless --allow-misses.

    Example: trimtab what-if examples/quickstart.yaml --set workloads.chat.rate_rps=8
    """
    parsed = {}
    for o in overrides:
        if "=" not in o:
            raise InputError([Problem("--set", f"{o!r} is not PATH=VALUE")])
        k, v = o.split("=", 1)
        parsed[k.strip()] = yaml.safe_load(v)
    s = load_spec(spec, profile_dir=profiles)
    with steps(err, f"what-if {s.name}") as say:
        base = do_plan(s, progress=lambda step: say(f"base plan: {step}"))
        alt = do_what_if(s, parsed, progress=lambda step: say(f"changed plan: {step}"))
    refuse_to_write([("changed plan", alt.plan)], allow_misses, "changed plan")
    lines = diff_plans(base.plan, alt.plan)
    if fmt == TableOrJson.json:
        sys.stdout.write(json.dumps({"changes": lines, "base_cost_usd_per_hour": base.plan.cost_usd_per_hour,
                                     "plan": plan_to_data(alt.plan)}, indent=2) + "\n")
    else:
        for line in lines or ["no change"]:
            out.print(line, markup=False)
    if output:
        output.write_text(emit(alt.plan), encoding="utf-8")
    exit_misses([("changed plan", alt.plan)], "changed plan")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
