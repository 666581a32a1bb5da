"""The plan: trimtab's output contract (pydantic v2; strict on read, so ``check`` rejects a malformed plan).

docs/plan-reference.md documents every field; ``trimtab schema plan`` prints the JSON Schema.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

PLAN_VERSION = 1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SolverInfo(_Strict):
    backend: str
    status: Literal["optimal", "feasible"]
    gap: float | None = Field(description="relative MIP gap; 0 when proven optimal, null when unknown")
    bound: float | None = Field(None, description="the bound the solver proved on the objective of the MILP "
                                                  "this plan was solved from, rounded down: no plan at "
                                                  "the capacities that solve used costs less ($/h, min_cost "
                                                  "and max_goodput's cost stage; with a schedule, on its "
                                                  "cost_usd_per_hour_mean); null when the solver gives "
                                                  "none")
    seconds: float | None = Field(None, description="not written: wall time is not reproducible, so it stays "
                                                    "out of the plan (`plan -v` prints each stage's "
                                                    "seconds); read and ignored in plans written before "
                                                    "2026-12-03, which recorded a 10/60/600 s ladder that a "
                                                    "busy machine could still tip")
    rounds: int = Field(description="solve rounds: 1, plus one per re-solve after "
                                    "the assessment found a miss")


class Placement(_Strict):
    """Where one pipeline stage (a tensor-parallel group) of one replica runs."""

    replica: int = Field(ge=0)
    stage: int = Field(ge=0)
    node: str
    gpus: list[int] = Field(description="GPU indices inside the node")


class KvTiers(_Strict):
    """Where a deployment's KV cache lives (docs/kv-tiers.md); per replica. Present when the spec enables KV
    tiers."""

    hbm_tokens: int = Field(ge=0, description="KV capacity in GPU memory, tokens")
    offload_gib: float = Field(default=0.0, ge=0,
                               description="host (CPU) memory for KV over PCIe, GiB: the prefix cache's host "
                                           "tier (engine flags in engine_args), or live KV when live")
    borrowed_gib: float = Field(default=0.0, ge=0,
                                description="spare HBM of other instances on the node, GiB")
    borrowed_from: list[str] = Field(default=[], description="lender deployments (same GPU type, same node)")
    lent_gib: float = Field(default=0.0, ge=0, description="HBM KV this deployment lends to borrowers, GiB")
    live: bool = Field(default=False, description="experimental (defaults.kv_tiers: experimental-live): the "
                                                  "tier holds running requests' KV (spill to host memory, "
                                                  "borrowing, lending); no engine flag realises it, and "
                                                  "trimtab emit refuses the plan without "
                                                  "--allow-experimental (omitted when false)")


class Deployment(_Strict):
    name: str
    model: str
    gpu: str
    tensor_parallel: int = Field(ge=1)
    pipeline_parallel: int = Field(ge=1)
    data_parallel: int = Field(default=1, ge=1, description="attention data-parallel ranks of a "
                                                            "mixture-of-experts replica (it spans tensor x "
                                                            "pipeline x data parallel GPUs; omitted when 1)")
    expert_parallel: int = Field(default=1, ge=1,
                                 description="expert-parallel degree: the experts of a stage are divided "
                                             "among this many of its GPUs (1: split by tensor parallelism; "
                                             "omitted when 1)")
    replicas: int = Field(ge=0)
    role: Literal["unified", "prefill", "decode"] = Field(
        description="unified: prefill and decode; prefill / decode: one side of a disaggregated pair")
    dtype: Literal["bf16", "fp8", "fp4", "fp32"]
    kv_dtype: Literal["bf16", "fp8", "fp4"] | None = Field(
        default=None, description="KV cache precision when the spec sets it apart from dtype's (fp4: an "
                                  "NVFP4 KV cache); omitted otherwise: fp8 for fp4 weights, else dtype")
    max_batch_size: int = Field(ge=1, description="vLLM --max-num-seqs")
    max_num_batched_tokens: int = Field(ge=1, description="token budget per engine step (chunked prefill)")
    kv_cache_tokens: int = Field(ge=0, description="KV cache capacity per replica, tokens")
    load_rps_per_replica: float
    capacity_rps_per_replica: float | None = Field(
        default=None, description="requests per second one replica serves with every workload routed to it "
                                  "meeting its SLO, at its planned traffic mix (the cost model); null for a "
                                  "prefill/decode pair's deployments")
    utilization: float = Field(description="share of engine steps carrying prefill work, at the planned load")
    engine_args: list[str] = Field(description="the engine's arguments that realise the deployment (after "
                                               "program and model; names per engine in "
                                               "profiles/engine_flags.yaml)")
    context_tokens: int = Field(default=0, ge=0,
                                description="longest request (input + output) the engine admits: the largest "
                                            "routed bucket's, capped at the model's window and "
                                            "kv_cache_tokens")
    command: list[str] = Field(default=[], description="the full launch command of one "
                                                       "replica (its first node)")
    worker_command: list[str] = Field(default=[],
                                      description="a replica spanning nodes: the command of its other nodes "
                                                  "($NODE_RANK, $LEADER_ADDRESS); omitted otherwise")
    engine_files: dict[str, str] = Field(default={},
                                         description="files the command reads, name -> content (the "
                                                     "TensorRT-LLM extra options YAML); omitted when none")
    placement: list[Placement] = Field(default=[], description="one entry per replica and pipeline stage")
    adapters: list[str] = Field(default=[], description="LoRA adapters this deployment holds "
                                                        "(omitted when none)")
    max_loras: int = Field(default=0, ge=0, description="vLLM --max-loras: adapter slots on "
                                                        "the GPU (0: no LoRA)")
    max_lora_rank: int = Field(default=0, ge=0, description="vLLM --max-lora-rank")
    max_cpu_loras: int = Field(default=0, ge=0, description="vLLM --max-cpu-loras: adapters "
                                                            "kept in CPU memory")
    tenants: list[str] = Field(default=[], description="tenants whose traffic it serves (omitted when none)")
    kv: KvTiers | None = Field(default=None, description="KV tiers: HBM tokens, offload, borrowed and lent "
                                                         "GiB (omitted unless the spec enables KV tiers)")
    colocated_with: str | None = Field(default=None,
                                       description="co-located prefill/decode pair: the other side; they "
                                                   "hand KV over on NVLink inside shared NVLink domains "
                                                   "(omitted otherwise)")
    group_replicas: int = Field(default=0, ge=0,
                                description="co-located pair: replicas of this deployment in each group "
                                            "placed in one NVLink domain (omitted when 0)")
    prefix_cache_tokens: int = Field(default=0, ge=0,
                                     description="KV tokens per replica kept for prefix reuse, out of "
                                                 "kv_cache_tokens (omitted when 0)")

    @property
    def gpus_per_replica(self) -> int:
        """GPUs one replica spans: tensor x pipeline x data parallel."""
        return self.tensor_parallel * self.pipeline_parallel * self.data_parallel

    @classmethod
    def of_view(cls, v, *, kv_cache_tokens: int, load_rps_per_replica: float, utilization: float,
                **plan_only) -> Deployment:
        """The plan file's record of a deployment view (``trimtab.deployment.shape.DeploymentSpecView``: a
        shape, a name, replicas), the inverse of ``DeploymentSpecView.of_plan``, so both planners spell the
        shape one way. ``plan_only``: what the view does not carry (``prefix_cache_tokens``, the ``kv``
        record, ``adapters``, ``tenants``, ``group_replicas``); ``kv_cache_tokens`` is the caller's because
        the planners size it differently (the candidate's, or the replica model of the adapters held).
        ``engine_args`` is left empty for ``trimtab.contract.realise`` to fill. A LoRA shape's CPU slots
        hold every adapter it serves and at least its GPU slots."""
        lora = v.lora
        return cls(name=v.name, model=v.model, gpu=v.gpu, tensor_parallel=v.tp, pipeline_parallel=v.pp,
                   data_parallel=v.dp, expert_parallel=v.ep, replicas=v.replicas, role=v.role, dtype=v.dtype,
                   kv_dtype=v.kv_dtype, max_batch_size=v.max_num_seqs,
                   max_num_batched_tokens=v.max_batched_tokens, kv_cache_tokens=kv_cache_tokens,
                   load_rps_per_replica=load_rps_per_replica, utilization=utilization, engine_args=[],
                   colocated_with=v.colocated_with or None,
                   max_loras=lora.max_loras if lora else 0, max_lora_rank=lora.max_lora_rank if lora else 0,
                   max_cpu_loras=max(lora.max_loras, lora.adapters) if lora else 0, **plan_only)


class Route(_Strict):
    workload: str
    bucket: str
    deployment: str | None = Field(default=None, description="unified deployment; omitted for a P/D pair")
    prefill: str | None = Field(default=None, description="P/D pair: the prefill deployment "
                                                          "(omitted otherwise)")
    decode: str | None = Field(default=None, description="P/D pair: the decode deployment "
                                                         "(omitted otherwise)")
    share: float = Field(gt=0, le=1, description="share of the workload's requests")


class AdapterRoute(_Strict):
    """Where a workload's requests for one adapter go (multi-LoRA plans)."""

    workload: str
    adapter: str
    deployment: str
    share: float = Field(gt=0, le=1, description="share of this workload's requests for this adapter")


class PrefixReuse(_Strict):
    """A workload's prefix reuse as the plan assumed it (docs/prefix-caching.md)."""

    source: Literal["declared", "trace", "shared_prefix"] = Field(
        description="declared in the spec, measured from the trace's hash_ids, or from shared_prefix groups")
    hit_rate: float = Field(description="share of input tokens served from a cache "
                                        "holding the whole working set")
    working_set_tokens: int = Field(description="distinct prefix tokens the cache must hold for hit_rate")
    hit_rate_planned: dict[str, float] = Field(description="per deployment serving it: the hit rate its "
                                                           "replicas' prefix cache (prefix_cache_tokens) "
                                                           "gets")


class ErrorBar(_Strict):
    """The cost model's measured error for the deployments serving a workload (profiles/error_bars.yaml,
    written by the accuracy benchmarks; docs/fidelity.md, "Error bars"): per metric the figures of the least
    accurate class among them."""

    classes: list[str] = Field(description="classes of the deployments serving it: GPU family, tp1 or tp>1, "
                                           "dense or moe, engine")
    ttft_pct: float = Field(description="median absolute % error of TTFT predictions of the class, against "
                                        "real runs")
    ttft_p90_pct: float = Field(description="90th percentile of those errors")
    ttft_runs: int = Field(description="measured runs behind the TTFT figures")
    tpot_pct: float = Field(description="median absolute % error of TPOT predictions of the class")
    tpot_p90_pct: float
    tpot_runs: int
    notes: list[str] = Field(default=[], description="where the pooled figure of all classes stands in (a "
                                                     "class with too few runs), and why")
    source: str = Field(description="the file and the benchmark that measured the errors, with its date")


class Prediction(_Strict):
    ttft_ms: float | None = Field(description="TTFT at the SLO percentile over the workload's whole mix of "
                                              "length buckets and deployments; null when the load is beyond "
                                              "capacity")
    tpot_ms: float | None = Field(description="TPOT at the SLO percentile over the workload's whole mix")
    percentile: float
    slo_met: bool = Field(description="every length bucket meets the SLO at the percentile (what the planner "
                                      "holds each to; implies the whole mix does)")
    utilization: float
    ttft_ms_worst_bucket: float | None = Field(
        default=None, description="the worst length bucket's TTFT at the percentile (what slo_met judges)")
    tpot_ms_worst_deployment: float | None = Field(
        default=None, description="the worst deployment's TPOT at the percentile")
    error_bar: ErrorBar | None = Field(default=None, description="the cost model's measured error for this "
                                                                 "workload's deployments (check --margin)")


class Bucket(_Strict):
    """A range of prompt lengths of one workload: what a router sees at admission (docs/routing.md)."""

    name: str
    share: float = Field(description="share of the workload's requests whose prompt falls in this range")
    input_tokens_min: int = Field(ge=1, description="shortest prompt in the range, tokens")
    input_tokens_max: int = Field(ge=1, description="longest prompt in the range, tokens "
                                                    "(after the context cut)")
    input_tokens_mean: float
    output_tokens_mean: float = Field(description="mean output length of requests in this range")
    output_tokens_max: int = Field(ge=1, description="longest output of requests in this range; with "
                                                     "input_tokens_max the context a deployment must admit")


class Simulation(_Strict):
    """How the plan was validated by simulation (``trimtab plan``; docs/simulator.md, "Seeds and confidence"):
    ``check`` defaults to other seeds."""

    seeds: list[int] = Field(description="seeds of the validating runs (the last round's)")
    requests: int = Field(description="simulated requests per run, all workloads together")
    rounds: int = Field(description="re-solves caused by a simulated SLO miss (included in solver.rounds)")
    passed: bool = Field(description="every workload's lower 95% bound on attainment reached its percentile, "
                                     "or, for a workload listed in undersampled, its pooled attainment did")
    attainment: dict[str, float] = Field(description="per workload: share of requests meeting TTFT and TPOT, "
                                                     "pooled over the runs")
    attainment_lower: dict[str, float] = Field(description="per workload: lower one-sided 95% bound of "
                                                           "attainment (batch means over the runs)")
    undersampled: list[str] = Field(default_factory=list,
                                    description="workloads with too few simulated requests for any lower "
                                                "bound to reach their target (every request meeting the SLO "
                                                "would not): accepted on pooled attainment at or above "
                                                "target; left out when empty")


class Goodput(_Strict):
    """Served traffic of a ``max_goodput`` plan (requests per second)."""

    served_rps: float = Field(description="all workloads together")
    offered_rps: float = Field(description="the spec's total rate_rps")
    workloads: dict[str, float] = Field(description="served rps per workload")

    @staticmethod
    def unserved(plan: "Plan") -> set[str]:
        """The workloads a ``max_goodput`` plan serves not at all (none for another plan): nothing of theirs
        is offered in simulation (``trimtab.sim.engine.SHED``), so neither ``plan`` nor ``check`` judges
        them."""
        if plan.goodput is None:
            return set()
        return {n for n, rps in plan.goodput.workloads.items() if rps <= 0}


class EngineInfo(_Strict):
    """The serving engine the plan's commands are written for."""

    name: Literal["vllm", "vllm-cpu", "sglang", "trt-llm"]
    version: str = Field(description="the version whose flags were emitted (profiles/engine_flags.yaml)")


class ScheduleWindow(_Strict):
    """One window of a schedule: its traffic, replicas and routes (docs/online.md)."""

    start_s: int = Field(ge=0, description="seconds from the start of the period")
    rates: dict[str, float] = Field(description="per workload: planned arrival rate in this window, rps")
    replicas: dict[str, int] = Field(description="per deployment: replicas serving in "
                                                 "this window (0: stopped)")
    started: int = Field(ge=0, description="replicas started for this window (ahead of it "
                                           "by their start-up time)")
    stopped: int = Field(ge=0, description="replicas stopped at its start")
    cost_usd_per_hour: float = Field(description="the replicas serving in this window")
    routes: list[Route] = Field(description="shares in this window (as the plan's routes)")
    attainment_lower: dict[str, float] = Field(default={},
                                               description="per workload: lower 95% bound of simulated "
                                                           "attainment, for the windows plan simulated (else "
                                                           "omitted)")


class PlanSchedule(_Strict):
    """Replicas per deployment per window of a period (spec ``schedule``; docs/online.md). The plan's
    ``deployments[].replicas`` are the most each deployment holds at once (what is placed); each window runs
    its ``replicas``."""

    window_s: int
    cyclic: bool
    min_lifetime_windows: int
    max_changes_per_window: int | None
    startup_s: dict[str, float] = Field(description="per deployment: seconds a started replica holds its "
                                                    "GPUs before serving (weights / load bandwidth + "
                                                    "warm-up)")
    startup_source: str = Field(description="where the load bandwidth and warm-up come from")
    cost_usd_per_hour_mean: float = Field(description="serving cost averaged over the period, plus start-ups")
    startup_usd_per_period: float = Field(description="cost of replicas starting (holding GPUs, not serving)")
    windows: list[ScheduleWindow]


class Plan(_Strict):
    plan_version: Literal[1] = PLAN_VERSION
    spec: str
    input_hash: str
    cost_usd_per_hour: float
    gpus: dict[str, int]
    engine: EngineInfo | None = Field(default=None, description="engine and version of deployments[].command")
    solver: SolverInfo
    deployments: list[Deployment]
    routes: list[Route]
    predictions: dict[str, Prediction]
    buckets: dict[str, list[Bucket]]
    warnings: list[str] = []
    misses: list[str] = Field(default=[], description="workloads the planner's own validation (cost model "
                              "or simulation) still shows below their SLO, the reasons under warnings; "
                              "written only by plan --allow-misses, and check and emit refuse such a plan "
                              "unless given --allow-misses too (omitted when empty)")
    simulation: Simulation | None = Field(default=None,
                                          description="validation by simulation; null when skipped")
    adapter_routes: list[AdapterRoute] = Field(default=[], description="multi-LoRA plans: routes by adapter "
                                                                       "(omitted when empty)")
    prefix: dict[str, PrefixReuse] = Field(default={},
                                           description="per workload with prefix reuse (omitted when "
                                                                   "none)")
    goodput: Goodput | None = Field(default=None,
                                    description="objective max_goodput only: traffic served; routes then "
                                                "carry shares of at most 1 per workload")
    redundancy: Literal["n+1"] | None = Field(default=None,
                                              description="spec redundancy n+1: planned so that losing any "
                                                          "one node keeps every SLO; check then removes each "
                                                          "node (docs/online.md; omitted otherwise)")
    schedule: PlanSchedule | None = Field(default=None, description="spec schedule only: replicas per window "
                                                                    "(docs/online.md; omitted otherwise)")
