"""The IR: an immutable, resolved view of a spec (names resolved to profiles, lengths to buckets).

Built by ``trimtab.ir.lower.lower(spec, profiles)``; read by candidate generation, the MILP, plan extraction
and ``check``. Frozen dataclasses with tuples, sorted by name, so every later stage iterates
deterministically.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from trimtab.spec.lengths import LengthBucket
from trimtab.profiles.loader import EngineProfile, GpuProfile, ModelProfile


@dataclass(frozen=True, slots=True)
class SloIR:
    ttft_ms: float
    tpot_ms: float
    percentile: float


@dataclass(frozen=True, slots=True)
class WorkloadIR:
    name: str
    model: str
    rate_rps: float
    slo: SloIR
    dtype: str
    buckets: tuple[LengthBucket, ...]
    truncated_share: float  # share of sampled requests cut to the model's context window
    index: int  # position in the spec, for error paths
    # Prefix reuse (docs/prefix-caching.md): share of input tokens served from the prefix cache when it holds
    # the whole working set (tokens); from a trace also the LRU curve ((cache tokens, hit rate), ascending),
    # which scales the hit rate to the cache a replica has (without one: uniform popularity, hit x cache /
    # working set).
    prefix_hit_rate: float = 0.0
    prefix_working_set: int = 0
    prefix_curve: tuple[tuple[int, float], ...] = ()
    prefix_source: str = ""  # "declared", "trace" or "" (no prefix reuse)
    kv_dtype: str | None = None  # KV cache precision; None: the one dtype implies (trimtab.cost.model)

    def bucket(self, name: str) -> LengthBucket | None:
        return next((b for b in self.buckets if b.name == name), None)


@dataclass(frozen=True, slots=True)
class GpuPoolIR:
    type: str
    count: int
    usd_per_hour: float
    profile: GpuProfile
    index: int
    max_tp: int = 0  # largest tensor-parallel group in one NVLink domain (spec nodes); 0: the profile's node
    nic_gbps: float = 0.0  # narrowest node NIC of this type in the spec's nodes, GB/s; 0: the profile's
    # KV tiers (docs/kv-tiers.md): CPU memory of this type's nodes and the smallest per-node share (GiB), the
    # narrowest GPU <-> host PCIe bandwidth (GB/s); from spec nodes, else the GPU profile; 0: unknown
    cpu_memory_gib: float = 0.0
    cpu_memory_gib_per_node: float = 0.0
    pcie_gbps: float = 0.0

    @property
    def tp_limit(self) -> int:
        return self.max_tp or int(self.profile.gpus_per_node.value)


@dataclass(frozen=True, slots=True)
class ProblemIR:
    name: str
    objective: str
    budget_usd_per_hour: float | None
    gpus: tuple[GpuPoolIR, ...]
    models: dict[str, ModelProfile]
    workloads: tuple[WorkloadIR, ...]
    engine: EngineProfile
    input_hash: str
    warnings: tuple[str, ...] = ()
    # spec network.inter_rack_gbps (KV transfer between disaggregated sides)
    inter_rack_gbps: float | None = None
    lora: object | None = None  # trimtab.spec.lora.LoraIR: adapters and tenants; None when the spec has none
    # spec defaults.kv_tiers: off | auto | offload | experimental-live (docs/kv-tiers.md)
    kv_tiers: str = "off"
    redundancy: str = "none"  # spec redundancy: none | n+1 (compiler/planning/redundancy.py)
    # Per model: the weights engines load and the served name (trimtab.engines.base.ModelIdentity)
    identities: dict = field(default_factory=dict)

    def gpu(self, name: str) -> GpuPoolIR | None:
        return next((g for g in self.gpus if g.type == name), None)

    def workload(self, name: str) -> WorkloadIR | None:
        return next((w for w in self.workloads if w.name == name), None)
