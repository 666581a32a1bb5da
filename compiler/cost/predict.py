"""Building a ``ReplicaModel`` from profile names, and the fidelity of its numbers.

Entry points:
  * ``replica(profiles, model, gpu, engine, tp, pp, dtype, kv_dtype, max_num_seqs, max_batched_tokens,
    dp, ep)``
  * ``fidelity(rm, isl, osl, batch)`` -> ``Fidelity``: which profile numbers the prediction rests on and what
    kind each is (measured, fitted, spec sheet, assumption), and whether the operating point lies outside the
    ranges the fitted numbers were measured over.

``trimtab predict`` and ``benchmarks/accuracy.py`` both go through ``replica``; plans use ``fidelity`` to warn
when a chosen deployment rests on spec-sheet or assumed efficiency numbers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from trimtab.cost.model import ReplicaModel
from trimtab.profiles.loader import GpuProfile, ProfileSet
from trimtab.cost.factory import replica_model

# GPU numbers that carry the step-time arithmetic (peaks alone are spec sheets by nature).
EFFICIENCY_FIELDS = ("compute_efficiency", "bandwidth_efficiency", "allreduce_latency_us",
                     "allreduce_bus_gbps")
OPTIONAL_GPU_FIELDS = ("fp8_compute_efficiency", "attention_efficiency", "kernel_latency_us",
                       "elementwise_passes")
ENGINE_FIELDS = ("step_overhead_ms", "request_overhead_ms", "kernel_efficiency")
RANK = {"measurement": 0, "fit": 1, "spec_sheet": 2, "assumption": 3}
LEVEL = {0: "measured", 1: "fitted", 2: "spec-sheet", 3: "assumption"}


@dataclass(frozen=True)
class Fidelity:
    level: str  # worst kind among the efficiency numbers used: measured | fitted | spec-sheet | assumption
    sources: dict[str, str]  # "gpu.field" / "engine.field" -> kind
    extrapolation: list[str] = field(default_factory=list)  # why the point lies outside measured ranges
    unfitted: list[str] = field(default_factory=list)  # efficiency numbers that are spec-sheet or assumed

    @property
    def spec_sheet_only(self) -> bool:
        return self.level in ("spec-sheet", "assumption")

    def as_dict(self) -> dict:
        return {"level": self.level, "sources": self.sources, "extrapolation": self.extrapolation,
                "unfitted": self.unfitted}


def replica(profiles: ProfileSet, model: str, gpu: str, engine: str = "vllm", tp: int = 1, pp: int = 1,
            dtype: str = "bf16", kv_dtype: str | None = None, max_num_seqs: int | None = None,
            max_batched_tokens: int | None = None, dp: int = 1, ep: int = 1) -> ReplicaModel:
    """``dp``: attention data-parallel ranks (the replica spans tp x pp x dp GPUs; ``max_num_seqs`` and
    ``max_batched_tokens`` are per rank, as the engines' flags are); ``ep``: expert-parallel degree (1:
    experts split by tensor parallelism over the tp x dp GPUs of a stage; tp x dp: vLLM's
    --enable-expert-parallel). ValueError for a layout or precision the model or GPU cannot take
    (trimtab.cost.moe.check_layout)."""
    eng = profiles.engines[engine]
    if max_batched_tokens is None:
        max_batched_tokens = (int(eng.max_num_batched_tokens.value) if eng.max_num_batched_tokens is not None
                              else 8192)
    return ReplicaModel(profiles.models[model], profiles.gpus[gpu], eng, tp, pp, dtype, max_num_seqs,
                        max_batched_tokens, kv_dtype, dp=dp, ep=ep)


def _kind(prof, name: str) -> str | None:
    q = getattr(prof, name, None)
    if q is None or not hasattr(q, "source"):
        return None
    return prof.sources[q.source].kind


def fidelity(rm: ReplicaModel, isl: float = 0.0, osl: float = 0.0, batch: float = 1.0) -> Fidelity:
    """Provenance of the numbers behind ``rm``'s predictions at (isl, osl, batch)."""
    g: GpuProfile = rm.gpu
    used = list(EFFICIENCY_FIELDS if rm.tp * rm.dp > 1 else EFFICIENCY_FIELDS[:2])
    if ((rm.dtype == "fp4" and g.fp4_tflops is not None)
            or (rm.dtype == "fp8" and g.fp8_tflops.value > g.bf16_tflops.value)):
        used.append("fp8_compute_efficiency")
    used += [f for f in OPTIONAL_GPU_FIELDS if f != "fp8_compute_efficiency" and getattr(g, f) is not None]
    sources: dict[str, str] = {}
    unfitted: list[str] = []
    worst = 0
    for f in used:
        k = _kind(g, f)
        if k is None:  # optional refinement absent: falls back to compute_efficiency, an assumption
            k = "assumption"
        sources[f"gpu.{f}"] = k
        worst = max(worst, RANK[k])
        if RANK[k] >= 2:
            unfitted.append(f"{g.name}.{f} ({k})")
    for f in ENGINE_FIELDS:
        k = _kind(rm.engine, f)
        if k is not None:
            sources[f"engine.{f}"] = k
    extra: list[str] = []
    rng = g.measured_ranges or {}
    tokens = max(batch, min(isl * max(batch, 1), rm.max_batched_tokens))
    if "gemm_tokens" in rng and not rng["gemm_tokens"][0] <= tokens <= rng["gemm_tokens"][1]:
        extra.append(f"step of {tokens:.0f} tokens outside the measured GEMM range "
                     f"{rng['gemm_tokens'][0]:g}-{rng['gemm_tokens'][1]:g}")
    if (rm.tp > 1 and "allreduce_gpus" in rng
            and not rng["allreduce_gpus"][0] <= rm.tp <= rng["allreduce_gpus"][1]):
        extra.append(f"tp {rm.tp} outside the measured all-reduce group sizes "
                     f"{rng['allreduce_gpus'][0]:g}-{rng['allreduce_gpus'][1]:g}")
    if "attention_context" in rng and isl + osl > rng["attention_context"][1]:
        extra.append(f"context {isl + osl:.0f} beyond the measured attention range (<= "
                     f"{rng['attention_context'][1]:g})")
    if (rm.dtype in ("fp8", "fp4")
            and sources.get("gpu.fp8_compute_efficiency") in ("assumption", "spec_sheet")):
        extra.append(f"{rm.dtype} GEMM efficiency not measured on this GPU")
    return Fidelity(LEVEL[worst], sources, extra, unfitted)


def fidelity_warnings(ir, deps) -> list[str]:
    """One warning per chosen GPU type whose deployments rest on spec-sheet or assumed efficiency numbers, and
    per deployment whose operating point extrapolates beyond the measured ranges 
    (``deps``: (candidate, n))."""
    out: list[str] = []
    seen: set[str] = set()
    for c, _n in sorted(deps, key=lambda d: d[0].id):
        rm = replica_model(ir, c.model, c.gpu, c.tp, c.pp, c.dtype, c.max_num_seqs, c.max_batched_tokens,
                           dp=c.dp, ep=c.ep, kv_dtype=c.kv_dtype)
        w = ir.workload(c.workload)
        isl = max((b.isl_mean for b in w.buckets), default=0.0) if w else 0.0
        osl = max((b.osl_mean for b in w.buckets), default=0.0) if w else 0.0
        fid = fidelity(rm, isl, osl, 1)
        if fid.unfitted and c.gpu not in seen:
            seen.add(c.gpu)
            out.append(f"{c.gpu}: predictions rest on {fid.level} efficiency numbers "
                       f"({', '.join(fid.unfitted)}); measure them with trimtab bench and trimtab calibrate")
        out += [f"{c.id}: {e}" for e in fid.extrapolation]
    return out
