"""What a deployment is, for every stage: the shapes a model may take on a GPU pool, the candidate records the
planners build and solve over, and the views assessment takes of a deployment and a route (from a candidate or
from a plan file). Below candidates, disaggregation, formulation and assessment, so each imports it and none
of them imports another to get a record.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Literal

from trimtab.cost.factory import lend, replica_model
from trimtab.cost.model import ReplicaModel
from trimtab.cost.records import BYTES
from trimtab.ir.model import GpuPoolIR, ProblemIR, WorkloadIR
from trimtab.cost.adapters import lora_kwargs

TP_OPTIONS = (1, 2, 4, 8)


PP_OPTIONS = (1, 2, 4)


TOKEN_BUDGETS = (2048, 8192)  # max_num_batched_tokens: smaller keeps TPOT flat, larger shortens long prefills


# unified serves both phases; the others one side of a P/D pair
Role = Literal["unified", "prefill", "decode"]


@dataclass(frozen=True, slots=True)
class LoraSlots:
    """A LoRA deployment's adapter slots (vLLM --max-loras, --max-lora-rank) and how many adapters it
    holds."""

    max_loras: int
    max_lora_rank: int
    adapters: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DeploymentShape:
    """How one replica runs, the one record every stage shares: what the engine command and the cost model
    need, nothing about load. A candidate is a shape with a price and capacities; a deployment view a shape
    with a name and replicas; a plan deployment converts to a view with ``DeploymentSpecView.of_plan`` and a
    view to a plan deployment with ``trimtab.contract.schema.Deployment.of_view``; the simulator and placement
    take views. Field names are the cost model's (``tp``, ``max_num_seqs``); the plan file spells them as the
    engines do (``tensor_parallel``, ``max_batch_size``)."""

    model: str
    gpu: str
    tp: int
    pp: int
    dtype: str
    max_num_seqs: int
    max_batched_tokens: int
    role: Role = "unified"
    # KV tiers (docs/kv-tiers.md), GiB per replica: host memory it offloads KV to, spare HBM KV it borrows
    # from other instances on its node, HBM KV it lends to them
    kv_offload_gib: float = 0.0
    kv_borrow_gib: float = 0.0
    kv_lent_gib: float = 0.0
    lora: LoraSlots | None = None
    # co-located P/D pair: the other side (hand-off over NVLink, trimtab.milp.disagg)
    colocated_with: str = ""
    # Mixture-of-experts layouts (compiler/deployment/layouts.py): attention data-parallel ranks,
    # expert-parallel degree
    dp: int = 1
    ep: int = 1
    kv_dtype: str | None = None  # KV cache precision set apart from dtype's (an fp4 KV cache); None: dtype's

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp


@dataclass(frozen=True, slots=True)
class PdGroup:
    """A co-located P/D side's group (``trimtab.milp.disagg.local_group_name``): the group's name, the partner
    side's candidate id, and how many replicas of this side and of the partner one NVLink domain holds.
    Carried as data so that formulation, extraction and pairing never read it back out of an id."""

    name: str
    partner: str
    per_group: int
    partner_per_group: int


@dataclass(frozen=True, slots=True)
class LoraGroup:
    """A shared candidate of the adapter planner (``trimtab.planning.lora``): the group of workloads it may
    serve (one base model, dtype and KV cache precision) and tenant colour, the tenants of that colour, the
    adapters it may keep in CPU memory, and per workload the per-replica rate of that workload's whole length
    mix at its SLO. One candidate serves several workloads, so its capacity is per workload, not per bucket
    (``Candidate.capacity_rps`` stays empty); carried as data so that formulation, extraction and n+1 never
    read the group or colour out of an id."""

    name: str
    color: int
    tenants: tuple[str, ...]
    # adapters it may hold (--max-cpu-loras as the MILP counts it): 1 with one slot, else up to MAX_CPU_LORAS
    cpu_slots: int
    capacity_rps: tuple[tuple[str, float], ...]  # (workload name, per-replica rate at its SLO), only > 0

    def capacity(self, workload: str) -> float:
        for w, v in self.capacity_rps:
            if w == workload:
                return v
        return 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate(DeploymentShape):
    """A shape the solver may buy for one workload: its price and per-replica capacity per length range."""

    id: str  # also the deployment name if chosen
    workload: str
    kv_cache_tokens: int
    usd_per_hour: float  # per replica
    capacity_rps: tuple[tuple[str, float], ...]  # (bucket name, per-replica rate at SLO), only > 0
    kv_spare_gib: float = 0.0  # spare HBM KV it can lend at its planned operating point (HBM-only shapes)
    pd_group: PdGroup | None = None  # a co-located P/D side only
    lora_group: LoraGroup | None = None  # a shared candidate of the adapter planner only

    def capacity(self, bucket: str) -> float:
        # dict(self.capacity_rps).get(bucket, 0.0) without building the dict (a bucket appears once; the last
        # pair wins as in the dict, hence reversed)
        for b, v in reversed(self.capacity_rps):
            if b == bucket:
                return v
        return 0.0


@dataclass(frozen=True, slots=True)
class Pruned:
    """A shape not offered to the solver: ``reason`` says why in full; ``cause`` is the short kind that
    messages group by (``memory``, ``dominated``, ``redundancy n+1``, a layout's own phrase such as
    ``needs 16 GPUs, ...``), set where the shape is pruned: nothing parses ``reason`` back."""

    id: str
    reason: str
    workload: str  # the workload the candidate was made for (ids are for display only)
    cause: str


@dataclass(frozen=True, slots=True)
class BucketBest:
    """Best zero-load latency any candidate reaches for a bucket (for infeasibility messages)."""

    workload: str
    bucket: str
    ttft_ms: float
    ttft_by: str
    tpot_ms: float
    tpot_by: str


@dataclass(frozen=True)
class CandidateSet:
    """Every shape the solver may buy, one tuple of ``Candidate`` records: a P/D side is a candidate whose
    ``role`` is prefill or decode (and ``pd_group`` where it is co-located), not a record of another kind
    kept beside the others. The unified candidates come first, then the P/D sides, each in the order they
    were given (``__post_init__``), so that every stage that walks ``candidates`` walks them in one order;
    ``unified`` and ``disagg`` are the two views for the stages that treat a side differently (the pair
    rows, the unified capacity and KV-tier rows, the precheck, n+1's refusal of pairs)."""

    candidates: tuple[Candidate, ...]
    pruned: tuple[Pruned, ...]
    best: tuple[BucketBest, ...] = field(default=())
    # P/D sides and cost floors made while building the set, by workload, GPU type and layout
    # (trimtab.milp.disagg.side): a GPU type offered alone rebuilds its pairs from them (for_one_type). Not
    # part of the set's value: left out of its comparisons and repr.
    pd_memo: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        cs = tuple(self.candidates)
        unified = tuple(c for c in cs if c.role == "unified")
        object.__setattr__(self, "candidates", unified + tuple(c for c in cs if c.role != "unified"))
        object.__setattr__(self, "_unified", len(unified))

    @property
    def unified(self) -> tuple[Candidate, ...]:
        """The candidates that serve both phases."""
        return self.candidates[:self._unified]

    @property
    def disagg(self) -> tuple[Candidate, ...]:
        """The prefill and decode sides of P/D pairs (``trimtab.milp.disagg``)."""
        return self.candidates[self._unified:]

    def by_id(self) -> dict[str, Candidate]:
        return {c.id: c for c in self.candidates}


def stage_parts(tp: int, dp: int, domain: int) -> tuple[int, int]:
    """(parts, GPUs per part) of one pipeline stage's tp x dp GPUs as placement packs and check verifies them:
    one part inside an NVLink domain of ``domain`` GPUs, or, for an expert group wider than a domain
    (attention data parallelism across nodes, ``trimtab.deployment.layouts``), k = tp x dp / domain parts of
    ``domain`` GPUs each, every part holding dp / k whole data-parallel ranks (the engines' ranks per node:
    vLLM infers --data-parallel-size-local from --nnodes, SGLang from --nnodes)."""
    g = tp * dp
    if domain <= 0 or g <= domain or g % domain or domain % tp:
        return 1, g
    return g // domain, domain


def candidate_id(workload: str, gpu: str, tp: int, pp: int, mbt: int, dp: int = 1, ep: int = 1) -> str:
    return (f"{workload}-{gpu}-tp{tp}" + (f"-pp{pp}" if pp > 1 else "") + (f"-dp{dp}" if dp > 1 else "")
            + (f"-ep{ep}" if ep > 1 else "") + f"-t{mbt // 1024}k")


def fits_one_node(ir: ProblemIR, w: WorkloadIR, pool: GpuPoolIR) -> bool:
    """Whether one node of ``pool`` holds the workload's model weights within the engine's memory share: when
    it does not, replicas span nodes (pipeline stages, ``shapes``; expert groups,
    ``trimtab.deployment.layouts``)."""
    arch = ir.models[w.model]
    weights_gib = arch.params_billion.value * 1e9 * BYTES[w.dtype] / 1024**3
    per_node = int(pool.profile.gpus_per_node.value)
    return weights_gib < ir.engine.gpu_memory_utilization.value * pool.profile.memory_gib.value * per_node


def shapes(ir: ProblemIR, w: WorkloadIR, pool: GpuPoolIR):
    arch = ir.models[w.model]
    heads, kv = int(arch.num_attention_heads.value), int(arch.num_kv_heads.value)
    per_node = int(pool.profile.gpus_per_node.value)
    layers = int(arch.num_layers.value)
    fits_in_node = fits_one_node(ir, w, pool)
    # docs/moe.md: FP4 weights and an NVFP4 KV cache need FP4 tensor cores
    fp4 = "dtype" if w.dtype == "fp4" else "kv_dtype" if w.kv_dtype == "fp4" else ""
    if fp4 and pool.profile.fp4_tflops is None:
        yield (candidate_id(w.name, pool.type, 1, 1, TOKEN_BUDGETS[0]), 1, 1,
               f"{pool.type} has no FP4 tensor cores (no fp4_tflops in its profile): {fp4} fp4 needs a GPU "
               "with them")
        return
    if w.dtype == "fp32" and pool.profile.fp32_tflops is None:
        yield (candidate_id(w.name, pool.type, 1, 1, TOKEN_BUDGETS[0]), 1, 1,
               f"{pool.type} has no measured fp32 rate (no fp32_tflops in its profile): dtype fp32 is for a "
               "CPU device without native bf16, its profile written by trimtab bench and calibrate")
        return
    for tp in TP_OPTIONS:
        for pp in PP_OPTIONS:
            cid = candidate_id(w.name, pool.type, tp, pp, TOKEN_BUDGETS[0])
            if tp > pool.tp_limit:
                continue  # TP groups stay inside one NVLink domain (one node unless the spec says)
            if heads % tp or (kv % tp and tp % kv):
                yield cid, tp, pp, f"tp{tp} does not divide {heads} attention heads / {kv} KV heads"
                continue
            if pp > 1 and (tp < per_node or fits_in_node):
                continue  # pipeline across nodes only when one node's memory cannot hold the model
            if layers % pp:
                yield cid, tp, pp, f"pp{pp} does not divide {layers} layers"
                continue
            if tp * pp > pool.count:
                yield cid, tp, pp, f"needs {tp * pp} GPUs, the spec has {pool.count} {pool.type}"
                continue
            yield cid, tp, pp, ""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeploymentSpecView(DeploymentShape):
    """A named deployment of ``replicas`` replicas of a shape: what assessment, placement and the simulator
    take (from a chosen candidate, ``of_candidate``, or from a plan file, ``of_plan``)."""

    name: str
    replicas: int

    @classmethod
    def of_candidate(cls, c: Candidate, replicas: int, **changes) -> DeploymentSpecView:
        return cls(**{"name": c.id, "replicas": replicas, **shape_fields(c), **changes})

    @classmethod
    def of_plan(cls, d) -> DeploymentSpecView:
        """The view of a plan file's deployment (``trimtab.contract.schema.Deployment``). Its inverse,
        ``Deployment.of_view``, lives in the contract: this stage is below it and may not import it."""
        kv = d.kv
        return cls(name=d.name, replicas=d.replicas, model=d.model, gpu=d.gpu, tp=d.tensor_parallel,
                   pp=d.pipeline_parallel, dtype=d.dtype, max_num_seqs=d.max_batch_size,
                   max_batched_tokens=d.max_num_batched_tokens, role=d.role,
                   kv_offload_gib=kv.offload_gib if kv else 0.0, kv_borrow_gib=kv.borrowed_gib if kv else 0.0,
                   kv_lent_gib=kv.lent_gib if kv else 0.0,
                   lora=LoraSlots(d.max_loras, d.max_lora_rank, len(d.adapters)) if d.max_loras else None,
                   colocated_with=d.colocated_with or "", dp=d.data_parallel, ep=d.expert_parallel,
                   kv_dtype=d.kv_dtype)


def shape_fields(s: DeploymentShape) -> dict:
    """The ``DeploymentShape`` fields of ``s`` (a candidate, a view) as keyword arguments."""
    return {f.name: getattr(s, f.name) for f in fields(DeploymentShape)}


def replica_model_of(ir: ProblemIR, s: DeploymentShape) -> ReplicaModel:
    """The cost model of one replica of shape ``s``: LoRA slots, KV tier, MoE layout and lent KV applied
    (``trimtab.cost.factory.replica_model`` makes it)."""
    lora = (lora_kwargs(ir, s.model, s.lora.max_loras, s.lora.max_lora_rank, s.lora.adapters)
            if s.lora else None)
    rm = replica_model(ir, s.model, s.gpu, s.tp, s.pp, s.dtype, s.max_num_seqs, s.max_batched_tokens,
                       lora=lora, kv_offload_gib=s.kv_offload_gib, kv_borrow_gib=s.kv_borrow_gib, dp=s.dp,
                       ep=s.ep, kv_dtype=s.kv_dtype)
    return lend(rm, s.kv_lent_gib)


@dataclass(frozen=True, slots=True)
class RouteView:
    workload: str
    bucket: str
    deployment: str  # "" for a prefill/decode pair
    share: float  # of the workload's requests
    prefill: str = ""
    decode: str = ""


@dataclass(frozen=True, slots=True)
class DeploymentLoad:
    name: str
    rate_rps_per_replica: float
    utilization: float
    decode_batch: float
    kv_tokens_used: float
    kv_cache_tokens: int
    tpot_ms: float
    stable: bool
    reason: str
    prefix_cache_tokens: int = 0  # KV tokens each replica keeps for prefix reuse (docs/prefix-caching.md)
