"""Simulated vs measured latency of real vLLM runs on H100 (the BLIS team's ``blis-dev`` split).

usage: python benchmarks/accuracy_gpu.py [FOLDER] [-v] [--markdown] [--runs=ID,ID] [--no-cv] [--seed=N]
                                        [--tp-sync-from=N] [--ttft]
       python benchmarks/accuracy_gpu.py --coverage
       (default FOLDER: ../shared/groundtruth/blis-dev, relative to the repository root)
       python benchmarks/accuracy_gpu.py --write-error-bars profiles/error_bars.yaml
       (the error bars per class of deployment over this table, dev.csv and the CPU load tests:
       benchmarks/error_bars.py)

``--coverage`` needs no measurements: every model x GPU x TP of the held-out evaluation split (``COVERAGE``)
is described the same way (the ``general`` family's lengths and shared prefixes, two constant-rate stages at a
modest load) and simulated; it prints what each predicts and exits 1 if any crashes or is predicted
overloaded. A deployment whose weights leave no room for a request's KV is listed as not fitting.

Every usable run of ``experiments.csv`` is described to trimtab as a user would describe it, from the run's
published setup only, and simulated with trimtab's discrete-event simulator (``trimtab.sim.simulate``):

  * the model: a bundled profile (``MODELS``), or the Hugging Face ``config.json`` of its repository
    (``benchmarks/data/hf_configs/<repo>/config.json``: architecture facts copied from the model's public
    config); FP8 checkpoints run fp8 weights with a bf16 KV cache (vLLM's default for FP8-dynamic);
  * the GPU (the ``gpu`` column read as ``benchmarks/groundtruth.gpu_profile`` reads it: H100 -> ``h100-sxm``,
    A100 -> ``a100-80gb``, L40S -> ``l40s``), TP, and the engine limits the run states (``max_num_seqs``,
    ``max_num_batched_tokens``); where it does not state them, vLLM's defaults for its version (the same rule
    as ``benchmarks/accuracy.py``: 1024 sequences and 8,192 tokens on an H100, H200 or B200, else 256 and
    2,048);
  * the traffic: fixed-interval arrivals in load stages (rate x seconds: ``stage_rates_rps`` and
    ``stage_durations_s`` where the run's profile is published, else the family's usual stages from the
    split's README, marked ``nominal``), written as the spec's own ``arrivals: constant`` and ``stages``;
    prompt = system prompt + question (the run's published mean prompt length where there is one); output =
    the tokens the engine generates: the generator's target, which every run sets as ``max_tokens`` with
    ``ignore_eos`` (``engine_output_len``; the load generator's own count, which re-tokenises the streamed
    text, is only the ITL metric's denominator, as in the measurement); the shared system prompts as a
    ``shared_prefix`` group (N system prompts each shared by M users) with ``prompts_repeat``:
    inference-perf's shared_prefix generator draws every request from a fixed set of N x M prompts (system
    prompt + one question per user), so with vLLM's prefix caching (on in every run) a warm server finds the
    whole prompt cached but its last token. N and M are the ones the load generator ran where the run's
    folder has the configuration it wrote (``ran_prompts``: 10 x 10 on every phase-0 run, whatever its
    profile asked for), else the columns'.

The table gives, per run, predicted and measured TTFT mean/p90/p99, ITL mean ((E2E - TTFT) / (output - 1), the
metric every simulator is scored on) and E2E mean/p90/p99, and the median absolute % errors, with the peers'
published errors (``peer_predictions_trainval.csv``, summary stage) on the same runs beside trimtab's.
``--ttft`` adds, per served run, what its TTFT error is made of (``ttft_breakdown``: the front end against the
run's own, the decode steps against the measured ones, and the spread from mean to p90).

Fitted parameters: the engine's front-end overhead (``request_overhead_ms``: API server, tokenisation, first
token's detokenisation and streaming) is the one number fitted on these runs. It adds to every request's TTFT
and E2E, so its fit is exact and cheap: the median of (measured - simulated) TTFT mean over the training runs,
with the simulation run without it. It is reported **leave one model out**: each model's runs are predicted
with the overhead fitted on the other models' runs (``--no-cv``: the bundled profile's value for every run).
Where the vLLM profile charges a per-step TP sync (``tp_sync_ms`` from ``tp_sync_min_tp`` GPUs up; or with
``--tp-sync-from=N``, which sets that degree for this run), it is fitted the same way, first: each training
run at that TP is simulated with and without ``SYNC_PROBE_MS`` a step, its own value read off the line through
the two ITLs (a per-step constant moves ITL linearly), and the median of those is used (none: the profile's).
Everything else comes from the profiles (spec sheets, kernel measurements, fits on other data)."""
from __future__ import annotations

import csv
import math
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.accuracy import _with  # noqa: E402  (one way to override a profile field)
from benchmarks.groundtruth import gpu_profile  # noqa: E402  (one reading of a GPU's name)

# Hugging Face ids of the runs -> bundled profiles; the others are read from their config.json. Base and
# instruction-tuned checkpoints share an architecture, so either id names the profile.
MODELS = {"meta-llama/llama-2-7b-hf": "llama-2-7b", "meta-llama/llama-2-70b-hf": "llama-2-70b",
          "meta-llama/llama-2-7b-chat-hf": "llama-2-7b", "meta-llama/llama-2-70b-chat-hf": "llama-2-70b",
          "meta-llama/llama-3.1-70b-instruct": "llama-3.1-70b", "meta-llama/llama-3.1-70b": "llama-3.1-70b",
          "meta-llama/llama-3.1-8b-instruct": "llama-3.1-8b", "meta-llama/llama-3.1-8b": "llama-3.1-8b",
          "meta-llama/meta-llama-3.1-8b-instruct": "llama-3.1-8b",
          "meta-llama/meta-llama-3.1-8b": "llama-3.1-8b",
          "meta-llama/meta-llama-3.1-70b-instruct": "llama-3.1-70b", "qwen/qwen2.5-7b-instruct": "qwen2.5-7b",
          "qwen/qwen3-14b": "qwen3-14b", "qwen/qwen3-14b-base": "qwen3-14b",
          "mistralai/mixtral-8x7b-v0.1": "mixtral-8x7b",
          "mistralai/mixtral-8x7b-instruct-v0.1": "mixtral-8x7b",
          "redhatai/llama-4-scout-17b-16e-instruct-fp8-dynamic": "llama-4-scout"}
HF_CONFIGS = ROOT / "benchmarks" / "data" / "hf_configs"
# The families' usual stages (the split's README, "Workload families"), for runs whose profile is unpublished.
FAMILY_STAGES = {"general": ((8, 600), (20, 600)), "codegen": ((5, 600), (10, 600)), "roleplay": ((6, 1200),),
                 "reasoning": ((4, 1200),), "general-lite": ((2.5, 600), (6, 600)),
                 "reasoning-lite": ((1, 1200),)}
METRICS = ("ttft_mean", "ttft_p90", "ttft_p99", "itl_mean", "e2e_mean", "e2e_p90", "e2e_p99")
HEADLINE = ("e2e_mean", "ttft_mean", "itl_mean", "ttft_p90", "e2e_p90")
PEERS = ("blis-evolved", "blis-roofline", "vidur", "llm-optimizer-estimate", "aiconfigurator-estimate")
# vLLM >= 0.10 ``vllm serve`` defaults (benchmarks/accuracy.py, _engine_limits): GPUs of 70 GiB or more other
# than the A100 get (max_num_seqs, max_num_batched_tokens) = (1024, 8192), the others (256, 2048).
VLLM_BIG_GPUS = ("h100-sxm", "h200", "b200")
OVERLOADED_S = 10.0  # a mean TTFT beyond this (served runs measured 21-140 ms) is a queue that never drains


@dataclass
class Run:
    exp_id: str
    model: str  # Hugging Face id
    gpu: str  # GPU profile
    usable: bool
    tp: int
    dtype: str
    max_num_seqs: int
    max_batched_tokens: int
    max_model_len: int | None
    isl: int
    osl: int  # tokens the engine generates per request
    osl_client: float  # the load generator's mean count of them (the ITL metric's denominator)
    system_len: int
    groups: int
    users: int
    stages: tuple[tuple[float, float], ...]
    stages_nominal: bool
    measured: dict[str, float]
    predicted: dict[str, float] = field(default_factory=dict)
    overloaded: bool = False

    @property
    def name(self) -> str:
        return self.model.split("/")[-1]


def _num(x: str) -> float | None:
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def _stages(r: dict) -> tuple[tuple[tuple[float, float], ...], bool]:
    if r["stage_rates_rps"]:
        rates = [float(x) for x in r["stage_rates_rps"].split(";")]
        durs = [float(x) for x in r["stage_durations_s"].split(";")]
        return tuple(zip(rates, durs)), False
    return tuple((float(a), float(b)) for a, b in FAMILY_STAGES[r["workload"]]), True


def gpu_of(name: str) -> str | None:
    """The GPU profile of a run's ``gpu`` column, read as ``benchmarks/groundtruth.gpu_profile`` reads it,
    with a vendor prefix ("NVIDIA A100-SXM4-80GB", as nvidia-smi names it) dropped."""
    n = name.strip()
    return gpu_profile(n[len("nvidia"):].strip() if n.lower().startswith("nvidia") else n)


def engine_output_len(r: dict, counted: float | None) -> float:
    """Tokens the engine generates per request. With ``ignore_eos`` (every run's generator states it) vLLM
    stops at ``max_tokens``, the generator's ``output_len_target``, whatever the text; the load generator's
    own count (``output_len_mean``) re-tokenises the streamed text and can fall short of it: on the Llama-2-7b
    runs it averages 77-83 % of the target with p1 at 4-7 tokens, yet no request finished in under 1.5 s,
    the time of the full target (raw/*/results/summary_lifecycle_metrics.json). Without ``ignore_eos`` the
    count is the best estimate there is."""
    target = _num(r.get("output_len_target", ""))
    if target and "ignore_eos=true" in r.get("data_generator", "").replace(" ", "").lower():
        return target
    return counted or target


def ran_prompts(folder: Path, exp_folder: str) -> tuple[int, int] | None:
    """(system prompts, questions per system prompt) that the load generator ran, from the configuration it
    wrote beside its results (``raw/<run>/results/config.yaml``), None where the run has none. The run's
    ``profile.yaml`` asks for ``num_unique_system_prompts`` and ``num_users_per_system_prompt`` (the
    ``experiments.csv`` columns), but the inference-perf these runs used reads ``num_groups`` and
    ``num_prompts_per_group`` (the aliases came in kubernetes-sigs/inference-perf#311, 2026-02-05) and ignores
    keys it does not know: its written configuration shows its defaults, 10 x 10, and no
    ``enable_multi_turn_chat`` (the prompts do not grow: measured prompt lengths stay at system + question).
    Its ``SharedPrefixDataGenerator`` then cycles through those 100 prompts, each system prompt + " " + one
    question."""
    cfg = folder / "raw" / exp_folder / "results" / "config.yaml"
    if not exp_folder or not cfg.is_file():
        return None
    import yaml

    sp = ((yaml.safe_load(cfg.read_text()) or {}).get("data") or {}).get("shared_prefix") or {}
    groups = sp.get("num_groups", sp.get("num_unique_system_prompts"))
    per = sp.get("num_prompts_per_group", sp.get("num_users_per_system_prompt"))
    return (int(groups), int(per)) if groups and per else None


def read_runs(folder: Path) -> list[Run]:
    """Every run of ``experiments.csv`` (usable or not), measured summary statistics from ``stages.csv``; the
    number of distinct prompts from the load generator's own configuration where the run's folder has it
    (``ran_prompts``)."""
    summary = {}
    with open(folder / "stages.csv", newline="") as f:
        for s in csv.DictReader(f):
            if s["stage_index"] == "-1":
                summary[s["exp_id"]] = s
    runs = []
    with open(folder / "experiments.csv", newline="") as f:
        for r in csv.DictReader(f):
            s = summary.get(r["exp_id"], r)
            meas = {m: _num(s.get(f"{m}_ms", "")) for m in METRICS}
            meas = {k: v for k, v in meas.items() if v is not None}
            counted = _num(r["output_len_mean"]) or _num(r["output_len_mean_derived"])
            osl = engine_output_len(r, counted)
            isl = _num(r["prompt_len_mean"]) or float(r["system_prompt_len"]) + float(r["question_len"])
            stages, nominal = _stages(r)
            gpu = gpu_of(r["gpu"])
            if gpu is None:
                raise ValueError(f"{folder / 'experiments.csv'}: run {r['exp_id']}: "
                                 f"gpu {r['gpu']!r} has no profile")
            big = gpu in VLLM_BIG_GPUS
            groups, users = (ran_prompts(folder, r.get("exp_folder", ""))
                             or (int(r["num_unique_system_prompts"]), int(r["users_per_system_prompt"])))
            runs.append(Run(
                exp_id=r["exp_id"], model=r["model"], gpu=gpu, usable=r["usable"] == "yes", tp=int(r["tp"]),
                dtype="fp8" if r["precision_label"].upper().startswith("FP8") else "bf16",
                max_num_seqs=int(r["max_num_seqs"] or (1024 if big else 256)),
                max_batched_tokens=int(r["max_num_batched_tokens"] or (8192 if big else 2048)),
                max_model_len=int(r["max_model_len"]) if r["max_model_len"] else None,
                isl=int(round(isl)), osl=int(round(osl)), osl_client=counted or osl,
                system_len=int(r["system_prompt_len"]),
                groups=groups, users=users,
                stages=stages, stages_nominal=nominal, measured=meas))
    return runs


def model_entry(run: Run) -> str:
    """The spec's ``models`` entry for the run's model: a bundled profile or its config.json."""
    prof = MODELS.get(run.model.lower())
    if prof:
        return f"  - name: {prof}\n"
    return f"  - name: {run.name.lower()}\n    config: {hf_config(run.model)}\n"


def hf_config(repo: str) -> Path:
    """``benchmarks/data/hf_configs/<repo>/config.json``, the repository's name matched regardless of case."""
    want = repo.lower()
    for cfg in sorted(HF_CONFIGS.glob("*/*/config.json")):
        if f"{cfg.parent.parent.name}/{cfg.parent.name}".lower() == want:
            return cfg
    raise FileNotFoundError(f"{repo}: no bundled profile (MODELS) and no "
                            f"{(HF_CONFIGS / repo / 'config.json').relative_to(ROOT)}")


def spec_text(run: Run) -> str:
    """The run as a trimtab spec: what a user knows about it, nothing measured but the lengths."""
    model = MODELS.get(run.model.lower()) or run.name.lower()
    stages = ", ".join(f"{{rate_rps: {r:g}, duration_s: {d:g}}}" for r, d in run.stages)
    kv = "\n    kv_dtype: bf16" if run.dtype == "fp8" else ""
    return f"""version: 1
name: blis-{run.exp_id}
gpus:
  - {{type: {run.gpu}, count: {run.tp}}}
models:
{model_entry(run)}workloads:
  - name: w
    model: {model}
    dtype: {run.dtype}{kv}
    arrivals: constant
    stages: [{stages}]
    input_tokens: {{fixed: {run.isl}}}
    output_tokens: {{fixed: {run.osl}}}
    shared_prefix: {{prefix_tokens: {run.system_len}, groups: {run.groups}, users_per_group: {run.users},
                    prompts_repeat: true}}
    slo: {{ttft_ms: 100000, tpot_ms: 10000, percentile: 50}}
"""


def one_deployment(ir, run: Run, model: str):
    """A plan serving the workload on one replica with the run's TP and engine limits."""
    from trimtab.cost.factory import replica_model
    from trimtab.contract.schema import Deployment, Plan, Route, SolverInfo

    w = ir.workloads[0]
    rm = replica_model(ir, model, run.gpu, run.tp, 1, w.dtype, run.max_num_seqs, run.max_batched_tokens,
                       kv_dtype=getattr(w, "kv_dtype", None))
    dep = Deployment(name="d", model=model, gpu=run.gpu, tensor_parallel=run.tp, pipeline_parallel=1,
                     replicas=1, role="unified", dtype=w.dtype, max_batch_size=run.max_num_seqs,
                     max_num_batched_tokens=run.max_batched_tokens, kv_cache_tokens=rm.memory.kv_cache_tokens,
                     load_rps_per_replica=0.0, utilization=0.0, engine_args=[])
    routes = [Route(workload=w.name, bucket=b.name, deployment="d", share=b.prob) for b in w.buckets]
    return Plan(spec=ir.name, input_hash=ir.input_hash, cost_usd_per_hour=0.0, gpus={run.gpu: run.tp},
                solver=SolverInfo(backend="highs", status="optimal", gap=0.0, seconds=0.0, rounds=1),
                deployments=[dep], routes=routes, predictions={}, buckets={})


def simulate_run(run: Run, profiles, seed: int = 0) -> dict[str, float]:
    """Simulated statistics (ms) of ``run`` under ``profiles`` (the engine's front-end overhead included)."""
    from trimtab.ir.lower import lower
    from trimtab.sim import simulate
    from trimtab.spec.load import load_spec

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "spec.yaml"
        p.write_text(spec_text(run))
        spec = load_spec(p)
        ir = lower(spec, profiles)
        plan = one_deployment(ir, run, ir.workloads[0].model)
        res = simulate(plan, spec, ir=ir, duration_s=sum(dur for _, dur in run.stages), seed=seed,
                       timeline=False, warmup=False)
    ws = res.workloads["w"] if isinstance(res.workloads, dict) else res.workloads[0]
    out = {f"ttft_{k}": ws.ttft_ms[k] for k in ("mean", "p90", "p99")}
    out.update({f"e2e_{k}": ws.e2e_ms[k] for k in ("mean", "p90", "p99")})
    # the measured metric's own definition: the load generator's token count as the denominator
    out["itl_mean"] = (out["e2e_mean"] - out["ttft_mean"]) / max(run.osl_client - 1, 1)
    out["_unfinished"] = (ws.requests - ws.completed) / max(ws.requests, 1)
    return out


def with_front_end(profiles, ms: float):
    return _with(profiles, "engines", "vllm", "request_overhead_ms", ms)


def with_tp_sync(profiles, ms: float):
    return _with(profiles, "engines", "vllm", "tp_sync_ms", ms)


def with_tp_sync_from(profiles, tp: int):
    """``profiles`` with vLLM's TP sync from ``tp`` GPUs up (its value the profile's, or 0 until fitted)."""
    eng = profiles.engines["vllm"]
    prof = with_tp_sync(profiles, eng.tp_sync_ms.value if eng.tp_sync_ms is not None else 0.0)
    engines = dict(prof.engines, vllm=prof.engines["vllm"].model_copy(update={"tp_sync_min_tp": tp}))
    return type(profiles)(prof.gpus, prof.models, engines)


def fit_front_end(runs: list[Run], raw: dict[str, dict[str, float]]) -> float:
    """The vLLM front-end overhead (ms) that makes the median TTFT-mean residual of ``runs`` zero: it adds to
    every TTFT, so this is its least-absolute-error fit. Non-negative (time cannot be given back)."""
    res = [r.measured["ttft_mean"] - raw[r.exp_id]["ttft_mean"] for r in runs if "ttft_mean" in r.measured]
    return max(statistics.median(res), 0.0) if res else 0.0


SYNC_PROBE_MS = 1.0  # second per-step time simulated to fit tp_sync_ms (ITL is linear in a per-step constant)


def fit_tp_sync(runs: list[Run], at0: dict, at1: dict) -> float | None:
    """The per-step time at tensor parallelism >= the profile's ``tp_sync_min_tp`` (ms) that makes the median
    ITL-mean residual of ``runs`` (those at that TP) zero: each run's ITL simulated without it (``at0``) and
    with ``SYNC_PROBE_MS`` (``at1``), the run's own value read off the line through them. None: no runs."""
    own = []
    for r in runs:
        if r.exp_id in at1 and "itl_mean" in r.measured:
            slope = (at1[r.exp_id]["itl_mean"] - at0[r.exp_id]["itl_mean"]) / SYNC_PROBE_MS
            own.append((r.measured["itl_mean"] - at0[r.exp_id]["itl_mean"]) / slope)
    return max(statistics.median(own), 0.0) if own else None


def predict(runs: list[Run], profiles, cv: bool, seed: int, log=print) -> dict[str, tuple[float, float]]:
    """Fill ``run.predicted`` for every run; returns the (front-end, TP sync) overheads used per model: fitted
    leave one model out when ``cv`` (each held-out model's runs simulated with the values the other models'
    runs give: the TP sync on their ITL first, then the front end on their TTFT), else the profile's."""
    eng = profiles.engines["vllm"]
    bundled = (eng.request_overhead_ms.value if eng.request_overhead_ms is not None else 0.0,
               eng.tp_sync_ms.value if eng.tp_sync_ms is not None else 0.0)
    synced = [r for r in runs if eng.tp_sync_min_tp and r.tp >= eng.tp_sync_min_tp]
    sync_ids = {r.exp_id for r in synced}
    sims: dict[float, dict[str, dict[str, float]]] = {}

    def at(sync: float, rs: list[Run]) -> dict[str, dict[str, float]]:
        """Simulations without the front end, TP sync ``sync`` ms (runs below its TP: the one without)."""
        got = sims.setdefault(round(sync, 3), {})
        bare = with_tp_sync(with_front_end(profiles, 0.0), sync)
        for r in rs:
            if r.exp_id not in got:
                got[r.exp_id] = (sims[0.0][r.exp_id] if sync and r.exp_id not in sync_ids
                                 else simulate_run(r, bare, seed))
                log(f"  simulated {r.exp_id} {r.name} tp{r.tp} (TP sync {sync:g} ms): TTFT "
                    f"{got[r.exp_id]['ttft_mean']:.1f} ms (no front end)")
        return got

    usable = [x for x in runs if x.usable]
    at(0.0, runs)
    if cv:
        at(SYNC_PROBE_MS, synced)

    def fitted(train: list[Run]) -> tuple[float, float]:
        sync = fit_tp_sync(train, sims[0.0], sims[round(SYNC_PROBE_MS, 3)])
        sync = bundled[1] if sync is None else sync  # no training run at that TP: the profile's value
        return fit_front_end(train, at(sync, train)), sync

    used = {"(all models)": fitted(usable)} if cv else {}
    for r in runs:
        if cv:
            fe, sync = used.setdefault(r.model, fitted([x for x in usable if x.model != r.model]))
        else:
            fe, sync = used.setdefault(r.model, bundled)
        p = dict(at(sync, [r])[r.exp_id])
        for k in ("ttft_mean", "ttft_p90", "ttft_p99", "e2e_mean", "e2e_p90", "e2e_p99"):
            p[k] += fe
        # the ITL metric: (E2E - TTFT) / tokens, unchanged by a front end that adds to both
        r.predicted = p
        r.overloaded = p["ttft_mean"] > OVERLOADED_S * 1e3 or p["_unfinished"] > 0.01
    return used


def ape(pred: float, meas: float) -> float:
    return abs(pred / meas - 1.0) * 100.0


def peer_errors(folder: Path) -> dict[tuple[str, str, str], float]:
    """(simulator, exp_id, metric) -> published absolute % error, summary stage."""
    out = {}
    with open(folder / "peer_predictions_trainval.csv", newline="") as f:
        for r in csv.DictReader(f):
            if r["stage_index"] == "-1" and r["ape_pct"]:
                out[(r["simulator"], r["exp_id"], r["metric"])] = float(r["ape_pct"])
    return out


def _fmt(x: float) -> str:
    return "-" if x is None or not math.isfinite(x) else (f"{x:,.0f}" if abs(x) >= 100 else f"{x:.1f}")


def report(runs: list[Run], peers: dict, markdown: bool) -> dict[str, float]:
    sep = " | " if markdown else "  "
    usable = [r for r in runs if r.usable]
    cols = ["run", "model", "tp", "stages"] + [f"{m} pred/meas" for m in METRICS]
    if markdown:
        print("| " + " | ".join(cols) + " |")
        print("|" + "---|" * len(cols))
    else:
        print(sep.join(cols))
    for r in runs:
        st = "+".join(f"{a:g}x{b:g}" for a, b in r.stages) + ("*" if r.stages_nominal else "")
        cells = [r.exp_id[:15] + ("" if r.usable else " (overloaded)"), r.name[:28], str(r.tp), st]
        for m in METRICS:
            meas = r.measured.get(m)
            pred = r.predicted.get(m)
            e = f" {pred / meas - 1:+.0%}" if meas and pred and math.isfinite(pred) else ""
            cells.append(f"{_fmt(pred)}/{_fmt(meas)}{e}")
        line = sep.join(cells)
        print(f"| {line} |" if markdown else line)
    print("(* stages not published for the run: the family's usual stages)")
    print()
    med = {}
    head = ["median abs % error", "runs"] + list(HEADLINE) + ["ttft_p99", "e2e_p99"]
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
    else:
        print(sep.join(head))
    for who in ("trimtab",) + PEERS:
        cells = [who]
        vals = []
        for m in head[2:]:
            if who == "trimtab":
                e = [ape(r.predicted[m], r.measured[m]) for r in usable
                     if m in r.measured and m in r.predicted]
            else:
                e = [peers[(who, r.exp_id, m)] for r in usable if (who, r.exp_id, m) in peers]
            vals.append(len(e))
            cells.append(f"{statistics.median(e):.1f}" if e else "-")
            if who == "trimtab" and e:
                med[m] = statistics.median(e)
        cells.insert(1, str(max(vals)))
        print("| " + " | ".join(cells) + " |" if markdown else sep.join(cells))
    served_over = [r.exp_id for r in usable if r.overloaded]
    print(f"\nruns vLLM served that trimtab predicts overloaded: {len(served_over)} {served_over or ''}")
    over = [r for r in runs if not r.usable]
    print(f"runs vLLM could not serve (requests failed) predicted overloaded: "
          f"{sum(r.overloaded for r in over)} of {len(over)}")
    return med


def ttft_breakdown(run: Run, front_end: float) -> dict[str, float] | None:
    """What a served run's TTFT error is made of (ms), None without the measurements. A simulated mean TTFT
    is the front end plus ``steps`` decode steps (the step in flight, half of it on average, the one formed
    ahead and the one that computes the prompt's uncached tail: about 2.5 with async scheduling); a step is
    (E2E - TTFT) / (tokens generated - 1), measured or simulated. With the run's own front end (its measured
    mean TTFT less ``steps`` measured steps) the mean error splits exactly into a front-end term (the one
    fitted on the other runs less the run's own) and a step term (``steps`` x the step's error, the ITL error
    in milliseconds); the p90 error is the mean error plus the error in p90 - mean (the spread)."""
    m, p = run.measured, run.predicted
    if not p or any(k not in m for k in ("ttft_mean", "ttft_p90", "e2e_mean")):
        return None
    n = max(run.osl - 1, 1)
    step_m = (m["e2e_mean"] - m["ttft_mean"]) / n
    step_p = (p["e2e_mean"] - p["ttft_mean"]) / n
    steps = (p["ttft_mean"] - front_end) / step_p
    own = m["ttft_mean"] - steps * step_m
    return {"steps": steps, "step_meas": step_m, "step_pred": step_p, "fe_used": front_end, "fe_own": own,
            "fe_term": front_end - own, "step_term": steps * (step_p - step_m),
            "spread_meas": m["ttft_p90"] - m["ttft_mean"], "spread_pred": p["ttft_p90"] - p["ttft_mean"]}


def report_ttft(runs: list[Run], used: dict[str, tuple[float, float]], markdown: bool = False) -> None:
    """``ttft_breakdown`` of every served run, with its signed TTFT errors (``--ttft``)."""
    print("\nTTFT per run (ms; signed % errors): mean and p90 = pred - meas = front-end term + step term "
          "(+ spread for p90)")
    cols = ["run", "model", "tp", "mean", "p90", "p99", "steps", "step pred/meas", "front end used/own",
            "mean error = fe + step", "p90 - mean pred/meas"]
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) if markdown else "  ".join(cols))
    for r in runs:
        b = ttft_breakdown(r, used[r.model][0]) if r.usable else None
        if b is None:
            continue
        e = {k: r.predicted[k] / r.measured[k] - 1 for k in ("ttft_mean", "ttft_p90", "ttft_p99")}
        cells = [r.exp_id[:15], r.name[:20], str(r.tp), f"{e['ttft_mean']:+.0%}", f"{e['ttft_p90']:+.0%}",
                 f"{e['ttft_p99']:+.0%}", f"{b['steps']:.2f}", f"{b['step_pred']:.2f}/{b['step_meas']:.2f}",
                 f"{b['fe_used']:.1f}/{b['fe_own']:.1f}",
                 f"{b['fe_term'] + b['step_term']:+.1f} = {b['fe_term']:+.1f} {b['step_term']:+.1f}",
                 f"{b['spread_pred']:.1f}/{b['spread_meas']:.1f}"]
        print("| " + " | ".join(cells) + " |" if markdown else "  ".join(cells))


# The held-out evaluation split's models, GPUs and TP degrees (the split's README): every combination that
# fits must describe and simulate.
COVERAGE_MODELS = ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-14B",
                   "codellama/CodeLlama-34b-Instruct-hf", "meta-llama/Llama-2-70b-hf",
                   "mistralai/Mixtral-8x7B-v0.1", "mistralai/Mixtral-8x22B-v0.1")
COVERAGE_GPUS = ("H100-80GB-HBM3 SXM", "A100-80GB", "L40S")
COVERAGE_TP = (1, 2, 4, 8)


def coverage_run(model: str, gpu: str, tp: int, profiles) -> Run | None:
    """The ``general`` family on ``model`` x ``gpu`` x TP at a modest load: two stages of 120 s at a third and
    two thirds of the rate that keeps 32 requests decoding (32 / (output x the 32-request step)); None when
    the weights leave no KV room for one request."""
    from trimtab.cost.factory import replica_model
    from trimtab.ir.lower import lower
    from trimtab.spec.load import load_spec

    prof = gpu_of(gpu)
    big = prof in VLLM_BIG_GPUS
    run = Run(exp_id=f"{model.split('/')[-1]}/{prof}/tp{tp}", model=model, gpu=prof, usable=True, tp=tp,
              dtype="bf16", max_num_seqs=1024 if big else 256, max_batched_tokens=8192 if big else 2048,
              max_model_len=None, isl=547, osl=248, osl_client=248.0, system_len=100, groups=9, users=5,
              stages=((1.0, 120.0),), stages_nominal=False, measured={})
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "spec.yaml"
        p.write_text(spec_text(run))
        ir = lower(load_spec(p), profiles)
    w = ir.workloads[0]
    try:
        rm = replica_model(ir, w.model, prof, tp, 1, w.dtype, run.max_num_seqs, run.max_batched_tokens)
    except ValueError:  # a layout the model cannot take (heads not divisible by TP)
        return None
    if rm.memory.kv_cache_tokens < run.isl + run.osl:
        return None
    rate = 32 / (run.osl * rm.iteration_s(32, run.isl + run.osl / 2))
    run.stages = ((round(rate / 3, 2), 120.0), (round(2 * rate / 3, 2), 120.0))
    return run


def coverage(profiles, seed: int = 0) -> int:
    """Describe and simulate every held-out combination (``COVERAGE_*``); 1 if any fails or is overloaded."""
    bad = 0
    print("model  gpu  tp  stages rps  ttft_mean ms  itl_mean ms  e2e_mean ms  verdict")
    for model in COVERAGE_MODELS:
        for gpu in COVERAGE_GPUS:
            for tp in COVERAGE_TP:
                name = f"{model.split('/')[-1]}  {gpu_of(gpu)}  {tp}"
                try:
                    run = coverage_run(model, gpu, tp, profiles)
                    if run is None:
                        print(f"{name}  -  -  -  -  does not fit")
                        continue
                    out = simulate_run(run, profiles, seed)
                except Exception as e:  # noqa: BLE001  (the point is to list every failure, not stop at one)
                    bad += 1
                    print(f"{name}  -  -  -  -  FAILED: {type(e).__name__}: {e}")
                    continue
                over = out["ttft_mean"] > OVERLOADED_S * 1e3 or out["_unfinished"] > 0.01
                bad += over
                st = "+".join(f"{r:g}" for r, _ in run.stages)
                print(f"{name}  {st}  {out['ttft_mean']:.1f}  {out['itl_mean']:.2f}  {out['e2e_mean']:,.0f}  "
                      + ("OVERLOADED" if over else "ok"))
    print(f"\n{bad} combination(s) failed or predicted overloaded")
    return 1 if bad else 0


def main(argv: list[str]) -> int:
    if "-h" in argv or "--help" in argv:  # (the flags are read by hand: the usage is the module's docstring)
        print(__doc__)
        return 0
    from benchmarks.error_bars import flag, write

    if flag(argv):  # the error bars per class over both benchmarks' data (benchmarks/error_bars.py)
        write(flag(argv))
        return 0
    if "--coverage" in argv:
        from trimtab.profiles.loader import load_profiles

        return coverage(load_profiles())
    args = [a for a in argv if not a.startswith("-")]
    folder = Path(args[0]) if args else ROOT.parent / "shared" / "groundtruth" / "blis-dev"
    pick = next((a.split("=", 1)[1] for a in argv if a.startswith("--runs=")), None)
    seed = int(next((a.split("=", 1)[1] for a in argv if a.startswith("--seed=")), 0))
    from trimtab.profiles.loader import load_profiles

    runs = read_runs(folder)
    if pick:
        runs = [r for r in runs if r.exp_id in pick.split(",")]
    profiles = load_profiles()
    sync_from = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("--tp-sync-from=")), None)
    if sync_from:  # evaluate a TP sync from that degree up, fitted like the front end
        profiles = with_tp_sync_from(profiles, sync_from)
    quiet = "-v" not in argv
    used = predict(runs, profiles, cv="--no-cv" not in argv, seed=seed,
                   log=(lambda m: None) if quiet else print)
    print("front-end overhead, TP sync used (ms): "
          + ", ".join(f"{m.split('/')[-1]} {fe:.1f}, {sync:.2f}" for m, (fe, sync) in sorted(used.items()))
          + (" (bundled profile)" if "--no-cv" in argv else " (fitted leave one model out)"))
    report(runs, peer_errors(folder), "--markdown" in argv)
    if "--ttft" in argv:
        report_ttft(runs, used, "--markdown" in argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
