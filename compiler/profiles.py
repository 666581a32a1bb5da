"""Profiles: GPU, model and engine facts the cost model uses, each number with its source.

Entry points: ``load_profiles(extra_dirs=())`` returns a ``ProfileSet``; ``model_from_hf_config(path)``
builds a model profile from a local Hugging Face ``config.json`` (nothing is downloaded).
Profile files are strict: unknown keys are errors, every quantity names a declared source.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

import profiles as _bundled
from compiler.errors import InputError, Problem
from compiler.validation import validate
from compiler.yamlio import read_yaml_file

SourceKind = Literal["spec_sheet", "measurement", "fit", "assumption"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Source(_Strict):
    kind: SourceKind
    ref: str


class Q(_Strict):
    """A number with the key of its source."""

    value: float
    source: str


class _Profile(_Strict):
    name: str
    sources: dict[str, Source]

    @model_validator(mode="after")
    def _sources_declared(self):
        hf = getattr(self, "hf", None)
        if hf is not None and hf.source not in self.sources:
            raise ValueError(f"hf: source {hf.source!r} is not declared under sources")
        for field, val in self:
            if isinstance(val, Q) and val.source not in self.sources:
                raise ValueError(f"{field}: source {val.source!r} is not declared under sources")
        return self

    def provenance(self) -> dict[str, str]:
        """field -> "kind: ref" for every quantity."""
        out = {}
        for field, val in self:
            if isinstance(val, Q):
                s = self.sources[val.source]
                out[field] = f"{s.kind}: {s.ref}"
        return out

    def kinds(self) -> dict[str, str]:
        return {f: self.sources[v.source].kind for f, v in self if isinstance(v, Q)}


class GpuProfile(_Profile):
    description: str
    memory_gib: Q
    hbm_bandwidth_gbps: Q
    bf16_tflops: Q
    fp8_tflops: Q
    interconnect: Literal["nvlink", "xgmi", "pcie"]
    link_bandwidth_gbps: Q
    gpus_per_node: Q
    usd_per_hour: Q
    compute_efficiency: Q
    bandwidth_efficiency: Q
    allreduce_latency_us: Q
    allreduce_bus_gbps: Q
    node_network_gbps: Q
    # Optional refinements (docs/cost-model.md); absent means "use compute/bandwidth efficiency" (assumption).
    fp8_compute_efficiency: Q | None = None  # achieved / peak fp8 FLOP/s of fp8 GEMMs
    attention_efficiency: Q | None = None  # achieved / peak bf16 FLOP/s of prefill attention (flash kernels)
    kernel_latency_us: Q | None = None  # fixed time per GEMM kernel (launch, tail) on top of its roofline
    elementwise_passes: Q | None = None  # norm/rope/activation/residual traffic per layer, in token x hidden x 2 B
    # Ranges the fitted numbers were measured over, e.g. {gemm_tokens: [1, 4096], allreduce_gpus: [2, 8]}.
    measured_ranges: dict[str, list[float]] | None = None
    # Host side (KV offload tier, docs/kv-tiers.md); spec nodes[].cpu_memory_gib / pcie_gbps override them.
    host_memory_gib_per_node: Q | None = None  # CPU memory of one node
    pcie_gbps: Q | None = None  # GPU <-> host bandwidth per GPU, one direction, GB/s

    @model_validator(mode="after")
    def _physical(self):
        for f in ("compute_efficiency", "bandwidth_efficiency", "fp8_compute_efficiency", "attention_efficiency"):
            q = getattr(self, f)
            if q is None:
                continue
            v = q.value
            if not 0 < v <= 1:
                raise ValueError(f"{f} must be in (0, 1], got {v}")
        for f in ("memory_gib", "hbm_bandwidth_gbps", "bf16_tflops", "fp8_tflops", "gpus_per_node"):
            if getattr(self, f).value <= 0:
                raise ValueError(f"{f} must be positive")
        return self


HF_REPO_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$"


class HfRepo(_Strict):
    """Which weights an engine loads: a Hugging Face repo id at a revision (branch, tag or commit), with the key
    of the source that names it (the config.json the architecture numbers were read from)."""

    repo: str = Field(pattern=HF_REPO_PATTERN)
    revision: str = Field(default="main", min_length=1)
    source: str


class ModelProfile(_Profile):
    hf: HfRepo | None = None  # None: a model built from a local config.json; the spec names its weights
    num_layers: Q
    hidden_size: Q
    num_attention_heads: Q
    num_kv_heads: Q
    head_dim: Q
    intermediate_size: Q
    vocab_size: Q
    params_billion: Q
    active_params_billion: Q
    max_context_tokens: Q
    num_experts: Q
    experts_per_token: Q


class EngineProfile(_Profile):
    description: str
    gpu_memory_utilization: Q
    max_num_seqs: Q
    step_overhead_ms: Q
    runtime_reserve_gib: Q
    # Optional (docs/cost-model.md): per-request front-end time added to TTFT in serving (HTTP, tokenisation,
    # scheduling, detokenisation), and the share of the GPU's GEMM efficiency the engine's kernels reach.
    request_overhead_ms: Q | None = None
    kernel_efficiency: Q | None = None
    max_num_batched_tokens: Q | None = None
    # reserve: admit a request only with KV room for prompt and output (never evicts); on_demand: room for the
    # prompt, preempt and recompute the newest requests when decoding overflows the cache.
    kv_admission: Literal["reserve", "on_demand"] | None = None

    @model_validator(mode="after")
    def _engine_physical(self):
        if self.kernel_efficiency is not None and not 0 < self.kernel_efficiency.value <= 1:
            raise ValueError(f"kernel_efficiency must be in (0, 1], got {self.kernel_efficiency.value}")
        return self


@dataclass(frozen=True)
class ProfileSet:
    gpus: dict[str, GpuProfile]
    models: dict[str, ModelProfile]
    engines: dict[str, EngineProfile]

    def digest(self) -> str:
        """Content hash of every profile, part of a plan's input hash."""
        h = hashlib.sha256()
        for kind in ("gpus", "models", "engines"):
            for name in sorted(getattr(self, kind)):
                h.update(f"{kind}/{name}".encode())
                h.update(getattr(self, kind)[name].model_dump_json().encode())
        return h.hexdigest()

    def with_model(self, profile: ModelProfile) -> "ProfileSet":
        return ProfileSet(self.gpus, {**self.models, profile.name: profile}, self.engines)


_KINDS = {"gpus": GpuProfile, "models": ModelProfile, "engines": EngineProfile}


def _load_dir(root: Path) -> dict[str, dict]:
    out: dict[str, dict] = {k: {} for k in _KINDS}
    for kind, cls in _KINDS.items():
        folder = root / kind
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.yaml")):
            data, lines = read_yaml_file(path)
            prof = validate(cls, data, lines, str(path), "profile")
            if prof.name != path.stem:
                raise InputError([Problem("name", f"profile name {prof.name!r} differs from its file name", str(path), 1)])
            out[kind][prof.name] = prof
    return out


_BUNDLED: ProfileSet | None = None


def load_profiles(extra_dirs: tuple[Path, ...] = ()) -> ProfileSet:
    """Bundled profiles, overridden by files of the same name in ``extra_dirs`` (in order)."""
    global _BUNDLED
    if _BUNDLED is None:
        b = _load_dir(_bundled.data_dir())
        _BUNDLED = ProfileSet(b["gpus"], b["models"], b["engines"])
    if not extra_dirs:
        return _BUNDLED
    merged = {k: dict(getattr(_BUNDLED, k)) for k in _KINDS}
    for d in extra_dirs:
        for k, v in _load_dir(Path(d)).items():
            merged[k].update(v)
    return ProfileSet(merged["gpus"], merged["models"], merged["engines"])


def model_from_hf_config(path: str | Path, name: str) -> ModelProfile:
    """Build a model profile from a local Hugging Face ``config.json``.

    The parameter count is computed from the architecture (embeddings, attention, MLP or experts, norms),
    since config.json does not state it; its source says so.
    """
    p = Path(path)
    try:
        cfg = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError([Problem("config", "file not found", str(p))])
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError([Problem("config", f"not valid JSON: {exc}", str(p))])
    missing = [k for k in ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")
               if not isinstance(cfg.get(k), int)]
    if missing:
        raise InputError([Problem(k, "missing or not an integer in config.json", str(p)) for k in missing])
    layers, hidden = cfg["num_hidden_layers"], cfg["hidden_size"]
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or hidden // heads
    inter, vocab = cfg["intermediate_size"], cfg["vocab_size"]
    experts = cfg.get("num_local_experts") or cfg.get("num_experts") or 1
    topk = cfg.get("num_experts_per_tok") or 1
    ctx = cfg.get("max_position_embeddings") or 4096
    attn = hidden * heads * head_dim * 2 + hidden * kv * head_dim * 2
    mlp = 3 * hidden * inter
    emb = vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
    total = layers * (attn + mlp * experts + 2 * hidden) + emb
    active = layers * (attn + mlp * min(topk, experts) + 2 * hidden) + emb
    src = {"config": Source(kind="spec_sheet", ref=f"local Hugging Face config.json: {p}"),
           "derived": Source(kind="fit", ref="parameter count computed from the config's architecture")}

    def q(v: float, s: str = "config") -> Q:
        return Q(value=float(v), source=s)

    return ModelProfile(
        name=name, sources=src, num_layers=q(layers), hidden_size=q(hidden), num_attention_heads=q(heads),
        num_kv_heads=q(kv), head_dim=q(head_dim), intermediate_size=q(inter), vocab_size=q(vocab),
        params_billion=q(total / 1e9, "derived"), active_params_billion=q(active / 1e9, "derived"),
        max_context_tokens=q(ctx), num_experts=q(experts), experts_per_token=q(min(topk, experts)),
    )
