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
    seconds: float = Field(description="solver wall time rounded up to whole seconds (keeps plans byte-stable)")
    rounds: int = Field(description="solve rounds: 1, plus one per re-solve after the assessment found a miss")


class Deployment(_Strict):
    name: str
    model: str
    gpu: str
    tensor_parallel: int = Field(ge=1)
    pipeline_parallel: int = Field(ge=1)
    replicas: int = Field(ge=0)
    role: Literal["unified"]
    dtype: Literal["bf16", "fp8"]
    max_batch_size: int = Field(ge=1, description="vLLM --max-num-seqs")
    max_num_batched_tokens: int = Field(ge=1, description="token budget per engine step (chunked prefill)")
    kv_cache_tokens: int = Field(ge=0, description="KV cache capacity per replica, tokens")
    load_rps_per_replica: float
    utilization: float = Field(description="share of engine steps carrying prefill work, at the planned load")
    engine_args: list[str]


class Route(_Strict):
    workload: str
    bucket: str
    deployment: str
    share: float = Field(gt=0, le=1, description="share of the workload's requests")


class Prediction(_Strict):
    ttft_ms: float | None = Field(description="at the SLO percentile; null when the load is beyond capacity")
    tpot_ms: float | None
    percentile: float
    slo_met: bool
    utilization: float


class Bucket(_Strict):
    name: str
    share: float
    input_tokens_mean: float
    output_tokens_mean: float


class Plan(_Strict):
    plan_version: Literal[1] = PLAN_VERSION
    spec: str
    input_hash: str
    cost_usd_per_hour: float
    gpus: dict[str, int]
    solver: SolverInfo
    deployments: list[Deployment]
    routes: list[Route]
    predictions: dict[str, Prediction]
    buckets: dict[str, list[Bucket]]
    warnings: list[str] = []
