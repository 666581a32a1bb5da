"""The cost model's records: what a replica is offered (``TrafficClass``), where its KV may live beyond HBM
(``KvTier``), what fits in its memory (``MemoryFit``) and what it predicts (``ReplicaState`` and the
benchmark-style predictions). Plain frozen values, so every stage can hold them without importing the
arithmetic.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

# Bytes per weight. fp4: NVFP4, 4-bit values plus one fp8 scale per 16 (4.5 bits; NVIDIA's NVFP4 format, as
# TensorRT Model Optimizer writes it); MXFP4's one 8-bit scale per 32 (4.25 bits) is within 6 % of it.
BYTES = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5625, "fp32": 4.0}
# KV cache precisions the engines serve. fp4 is NVFP4: 4-bit values and one fp8 scale per 16, 0.5625 bytes an
# element, as vLLM lays it out (head_size / 2 + head_size / 16 bytes per head; vllm/utils/torch_utils.py,
# nvfp4_kv_cache_full_dim); on GPUs with FP4 tensor cores only (``trimtab.cost.moe.check_kv_dtype``).
KV_DTYPES = ("bf16", "fp8", "fp4", "fp32")  # fp32: fp32 weights' (a CPU device)


GIB = 1024**3
UNSTABLE = float("inf")  # latency of a replica offered more than it can serve


@dataclass(frozen=True, slots=True)
class TrafficClass:
    """Requests of similar length offered to one replica (per-replica rate)."""

    rate_rps: float
    isl_mean: float
    osl_mean: float
    isl_tail: float | None = None  # input length whose TTFT is reported at the percentile
    isl_cv2: float = 0.0  # squared coefficient of variation of input length
    # Prefix reuse (docs/prefix-caching.md): mean input tokens per request served from the prefix cache
    # (prefill computes only isl - cached, attending to the cached tokens as prior context; the decode context
    # is the full isl), and the KV tokens the replica keeps for this workload's prefix cache (not available to
    # requests).
    cached_tokens: float = 0.0
    prefix_reserved: float = 0.0
    # Output lengths in the class as ((length, probability), ...): a router cannot split requests by output
    # length, so one class mixes short and long outputs, and a short one's TPOT is the noisier (its mean over
    # fewer steps). Empty: every request has osl_mean.
    osl_points: tuple[tuple[float, float], ...] = ()
    # Of ``cached_tokens``, those found only in the replica's host-memory prefix tier (docs/kv-tiers.md):
    # reloaded over PCIe into the GPU prefix cache before the request's prefill (``ReplicaModel.reload_s``).
    host_cached_tokens: float = 0.0

    @property
    def tail(self) -> float:
        return self.isl_mean if self.isl_tail is None else self.isl_tail

    @property
    def tail_cached(self) -> float:
        """Cached tokens of the tail-length request (the same share of its input as on average)."""
        return self.tail * self.cached_tokens / self.isl_mean if self.cached_tokens else 0.0

    @property
    def tail_host_cached(self) -> float:
        """Host-tier cached tokens of the tail-length request (the same share of its input as on average)."""
        return self.tail * self.host_cached_tokens / self.isl_mean if self.host_cached_tokens else 0.0

    def at_rates(self):
        """A function rate -> ``replace(self, rate_rps=rate)``: the same value, without ``replace``'s walk
        over the fields at every call (a capacity search builds ~10^5 classes); the other fields are read
        once."""
        cls = type(self)
        rest = tuple(getattr(self, f.name) for f in fields(cls) if f.name != "rate_rps")
        assert fields(cls)[0].name == "rate_rps"  # passed positionally first
        return lambda rate: cls(rate, *rest)


@dataclass(frozen=True, slots=True)
class KvTier:
    """KV capacity beyond HBM for one replica (docs/kv-tiers.md).

    ``kind``: ``prefix`` (host CPU memory over PCIe holding evicted prefix-cache blocks, reloaded on a hit:
    what vLLM's KV offloading, LMCache and SGLang's HiCache do), or, under ``kv_tiers: experimental-live``
    only, live KV of running requests: ``offload`` (host CPU memory over PCIe) or ``borrow`` (spare HBM of
    other instances on the same node, over NVLink, or PCIe where the GPU has none). ``tokens``: KV tokens the
    tier holds for this replica. ``gbps_per_gpu``: bandwidth from each GPU of the replica to the tier, GB/s
    (each GPU moves its own shard)."""

    kind: str
    tokens: int
    gbps_per_gpu: float

    def __post_init__(self):
        if self.kind not in ("prefix", "offload", "borrow"):
            raise ValueError(f"KvTier.kind must be prefix, offload or borrow, got {self.kind!r}")
        if self.tokens < 0 or not self.gbps_per_gpu > 0:
            raise ValueError("KvTier needs tokens >= 0 and gbps_per_gpu > 0")


@dataclass(frozen=True, slots=True)
class MemoryFit:
    weights_gib_per_gpu: float
    activation_gib_per_gpu: float
    reserve_gib_per_gpu: float
    usable_gib_per_gpu: float
    kv_gib_per_gpu: float
    kv_bytes_per_token_per_gpu: float
    kv_cache_tokens: int

    @property
    def fits(self) -> bool:
        return self.kv_cache_tokens > 0


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """Steady state of one replica under an offered load (see ``ReplicaModel.evaluate``)."""

    stable: bool
    reason: str  # why not stable ("" when stable)
    # per-request TPOT at the percentile (over all classes' requests); the mean at percentile 50
    tpot_s: float
    ttft_s: tuple[float, ...]  # per class: TTFT at the percentile (queueing + prefill of isl_tail)
    ttft_mean_s: tuple[float, ...]  # per class: mean TTFT (mean wait + prefill of isl_mean)
    utilization: float  # share of engine steps that carry prefill work (prefill server utilisation)
    decode_batch: float  # mean number of requests decoding
    kv_tokens_used: float
    wait_p_s: float  # waiting time at the percentile
    wait_mean_s: float
    tpot_mean_s: float = float("nan")  # mean time between output tokens (1 / engine steps per second)


@dataclass(frozen=True, slots=True)
class ClosedLoopPrediction:
    ttft_ms: float
    tpot_ms: float
    requests_per_s: float
    output_tokens_per_s: float
    output_tokens_per_s_per_gpu: float
    concurrency: int
    fits: bool
    max_concurrency: int
    kv_cache_tokens: int


@dataclass(frozen=True, slots=True)
class BatchPrediction:
    """A static batch: ``batch`` prompts prefilled together, then decoded together (latency benchmarks)."""

    ttft_ms: float  # prefill of the whole batch
    tpot_ms: float  # mean decode step
    e2e_ms: float  # prefill + (osl - 1) decode steps
    output_tokens_per_s: float
    output_tokens_per_s_per_gpu: float
    batch: int
    fits: bool


@dataclass(frozen=True, slots=True)
class BurstPrediction:
    """A burst of queued requests served to the end (offline throughput runs, ``rate=inf`` benchmarks)."""

    makespan_s: float
    requests_per_s: float
    output_tokens_per_s: float
    output_tokens_per_s_per_gpu: float
    total_tokens_per_s: float
    ttft_ms: float  # mean, queueing included
    tpot_ms: float  # mean over requests with more than one output token
    requests: int
