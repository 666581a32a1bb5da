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

import trimtab.profiles as _bundled
from trimtab.errors import InputError, Problem
from trimtab.util.validation import validate
from trimtab.util.yamlio import read_yaml_file

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


class AllReduceFit(_Strict):
    """latency + bytes x 2(n-1)/n / bus bandwidth at one GPU count."""

    latency_us: Q
    bus_gbps: Q


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
    # FP4 tensor cores (Blackwell NVFP4/MXFP4), dense peak; absent: the GPU cannot serve dtype fp4. fp4 GEMMs
    # run at fp8_compute_efficiency (or compute_efficiency) of this peak.
    fp4_tflops: Q | None = None
    # fp32 GEMM peak, for a device served in fp32 (a CPU without native bf16, where vLLM's CPU kernels run
    # bf16 several times slower than fp32); absent: the device cannot serve dtype fp32 (a GPU's fp32 units
    # are not what its engines serve on). fp32 GEMMs run at compute_efficiency of this peak.
    fp32_tflops: Q | None = None
    attention_efficiency: Q | None = None  # achieved / peak bf16 FLOP/s of prefill attention (flash kernels)
    kernel_latency_us: Q | None = None  # fixed time per GEMM kernel (launch, tail) on top of its roofline
    # Inside a captured CUDA graph (docs/cost-model.md, "CUDA graphs"): the fixed time per GEMM kernel
    # without the host's launch, and the engine's one-shot custom all-reduce (latency, bus bandwidth).
    graph_kernel_latency_us: Q | None = None
    # The GEMMs' achieved share of HBM bandwidth inside a captured graph (weights streamed once a step, as
    # vLLM replays them); absent = bandwidth_efficiency. Attention's KV reads keep bandwidth_efficiency.
    graph_bandwidth_efficiency: Q | None = None
    # Fixed time of a layer's attention kernel call on top of its KV-bandwidth roofline (split-KV launch,
    # combine); absent = 0.
    attention_kernel_us: Q | None = None
    graph_allreduce_latency_us: Q | None = None
    graph_allreduce_bus_gbps: Q | None = None
    # The same per GPU count where one latency and bus bandwidth do not fit every count: on PCIe GPUs the
    # all-reduce crosses the host's root complexes, so its bandwidth per GPU falls with the count (measured:
    # L40S 2 -> 8 GPUs); a tensor-parallel size not listed takes the fields above.
    graph_allreduce_by_gpus: dict[int, AllReduceFit] | None = None
    # the eager (NCCL) all-reduce per GPU count, alike
    allreduce_by_gpus: dict[int, AllReduceFit] | None = None
    # vLLM's fused-MoE kernel shape fitted on this GPU (compiler/field/calibrate_aic.py); they replace the
    # engine's moe_rows_half / moe_cols_half (an H100 fit) for engines that have a shape fit.
    moe_rows_half: Q | None = None
    moe_cols_half: Q | None = None
    # norm/rope/activation/residual traffic per layer, in token x hidden x 2 B
    elementwise_passes: Q | None = None
    # Ranges the fitted numbers were measured over, e.g. {gemm_tokens: [1, 4096], allreduce_gpus: [2, 8]}.
    measured_ranges: dict[str, list[float]] | None = None
    # Host side (KV offload tier, docs/kv-tiers.md); spec nodes[].cpu_memory_gib / pcie_gbps override them.
    host_memory_gib_per_node: Q | None = None  # CPU memory of one node
    pcie_gbps: Q | None = None  # GPU <-> host bandwidth per GPU, one direction, GB/s

    def allreduce_at(self, gpus: int, graph: bool = False) -> tuple[float, float]:
        """(latency s, bus bandwidth bytes/s) of an all-reduce over ``gpus`` GPUs, eager (NCCL) or inside a
        CUDA graph: the count's own fit where the profile has one (PCIe GPUs), else the joint fit."""
        lat, bus = ((self.graph_allreduce_latency_us, self.graph_allreduce_bus_gbps) if graph
                    else (self.allreduce_latency_us, self.allreduce_bus_gbps))
        at = ((self.graph_allreduce_by_gpus if graph else self.allreduce_by_gpus) or {}).get(gpus)
        if at is not None:
            lat, bus = at.latency_us, at.bus_gbps
        return lat.value * 1e-6, bus.value * 1e9

    @model_validator(mode="after")
    def _physical(self):
        for name in ("graph_allreduce_by_gpus", "allreduce_by_gpus"):
            for n, fit in (getattr(self, name) or {}).items():
                for f, q in fit:
                    if q.source not in self.sources:
                        raise ValueError(f"{name}.{n}.{f}: source {q.source!r} is not declared under sources")
        for f in ("compute_efficiency", "bandwidth_efficiency", "fp8_compute_efficiency",
                  "attention_efficiency", "graph_bandwidth_efficiency"):
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
    """Which weights an engine loads: a Hugging Face repo id at a revision (branch, tag or commit), with the
    key of the source that names it (the config.json the architecture numbers were read from)."""

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
    # Mixture of experts (docs/cost-model.md): absent means every layer is MoE (num_experts > 1), each routed
    # expert of intermediate_size, no shared experts.
    moe_intermediate_size: Q | None = None  # one routed expert's intermediate size
    # layers whose MLP is routed (DeepSeek's first_k_dense_replace, Llama 4's interleave)
    moe_layers: Q | None = None
    shared_experts: Q | None = None  # always-active experts per MoE layer (counted in the dense parameters)
    # Multi-head latent attention (DeepSeek-V2/V3): the KV cache holds kv_lora_rank + qk_rope_head_dim per
    # token and layer. Absent: grouped-query attention with num_kv_heads x head_dim.
    kv_lora_rank: Q | None = None
    q_lora_rank: Q | None = None
    qk_rope_head_dim: Q | None = None
    qk_nope_head_dim: Q | None = None
    v_head_dim: Q | None = None


class EngineRelease(BaseModel):
    """How releases up to ``until`` (inclusive, "major.minor") differ from the engine profile's current one:
    the fields given replace the profile's (``EngineProfile.at``)."""

    model_config = ConfigDict(extra="forbid")
    until: str = Field(pattern=r"^\d+\.\d+$")
    request_overhead_ms: Q | None = None
    async_scheduling: bool | None = None


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
    # Share of the linear-layer FLOP rate the engine's fused-MoE grouped GEMMs reach (compiler/cost/moe.py;
    # fitted by benchmarks/moe_fit.py); absent = 1, the dense GEMMs' rate.
    moe_gemm_efficiency: Q | None = None
    # Fused-MoE grouped GEMMs by kernel shape (compiler/cost/moe.py): FLOPs of T k + moe_rows_half x experts
    # touched rows, at moe_gemm_efficiency x the linear rate / (1 + moe_cols_half / expert columns per GPU).
    moe_rows_half: Q | None = None
    moe_cols_half: Q | None = None
    # The scheduler forms the next step's batch while a step runs (vLLM's async scheduling): a request
    # arriving during step n is first scheduled into step n + 2 (compiler/sim/replica.py; docs/simulator.md).
    async_scheduling: bool | None = None
    # Older releases that behave differently (front end, scheduling), oldest first: ``at(version)``.
    releases: list[EngineRelease] | None = None
    # Steps of at most this many tokens replay captured CUDA graphs (vLLM's largest capture size): GEMMs and
    # all-reduces take the GPU's graph_* numbers. Absent = eager steps.
    cuda_graph_max_tokens: Q | None = None
    # Output tokens per second the serving front end streams (API server detokenising and sending one event
    # per token per request; docs/cost-model.md): a burst of streamed requests delivers no faster. Absent = no
    # limit.
    stream_tokens_per_s: Q | None = None
    max_num_batched_tokens: Q | None = None
    # reserve: admit a request only with KV room for prompt and output (never evicts); on_demand: room for the
    # prompt, preempt and recompute the newest requests when decoding overflows the cache.
    kv_admission: Literal["reserve", "on_demand"] | None = None
    # How a step's batch is formed while prompts are being prefilled (docs/cost-model.md, "Burst"): mixed =
    # each step decodes every running request and fills the rest of the token budget with prompt chunks
    # (vLLM's and TensorRT-LLM's chunked prefill); prefill_first = a step that has prompt tokens to prefill
    # runs them alone and the running requests decode only in steps with no prefill (SGLang's default
    # scheduler). Absent = mixed.
    prefill_schedule: Literal["mixed", "prefill_first"] | None = None
    # Per-step time added from tensor parallelism tp_sync_min_tp up (docs/cost-model.md, "Step overhead"): the
    # engine runs one worker process per GPU, each prepares and launches every step on its own, and every
    # all-reduce holds all GPUs until the slowest (late launch or slower share of the layer). Absent = none.
    tp_sync_ms: Q | None = None
    tp_sync_min_tp: int | None = Field(default=None, ge=2)

    def step_overhead_s(self, tp: int) -> float:
        """Seconds of engine time per step outside the GPU's kernels at tensor parallelism ``tp``:
        ``step_overhead_ms``, plus ``tp_sync_ms`` once ``tp`` reaches ``tp_sync_min_tp``."""
        ms = self.step_overhead_ms.value
        if self.tp_sync_ms is not None and tp >= (self.tp_sync_min_tp or 2):
            ms += self.tp_sync_ms.value
        return ms * 1e-3

    def at(self, version: str | None) -> "EngineProfile":
        """This engine as release ``version`` ("major.minor[.patch]") behaves: the first of ``releases`` whose
        ``until`` it does not pass replaces the fields it gives; None, or a release past them all: as is."""
        if not version or not self.releases:
            return self
        key = tuple(int(x) for x in version.split(".")[:2])
        for rel in self.releases:
            if key <= tuple(int(x) for x in rel.until.split(".")):
                upd = {f: getattr(rel, f) for f in ("request_overhead_ms", "async_scheduling")
                       if getattr(rel, f) is not None}
                return self.model_copy(update=upd)
        return self

    @model_validator(mode="after")
    def _engine_physical(self):
        for rel in self.releases or ():
            if rel.request_overhead_ms is not None and rel.request_overhead_ms.source not in self.sources:
                raise ValueError(f"releases (until {rel.until}): request_overhead_ms: source "
                                 f"{rel.request_overhead_ms.source!r} is not declared under sources")
        if self.kernel_efficiency is not None and not 0 < self.kernel_efficiency.value <= 1:
            raise ValueError(f"kernel_efficiency must be in (0, 1], got {self.kernel_efficiency.value}")
        if self.moe_gemm_efficiency is not None and not 0 < self.moe_gemm_efficiency.value <= 1:
            raise ValueError(f"moe_gemm_efficiency must be in (0, 1], got {self.moe_gemm_efficiency.value}")
        if self.tp_sync_ms is not None and self.tp_sync_ms.value < 0:
            raise ValueError(f"tp_sync_ms must be >= 0, got {self.tp_sync_ms.value}")
        if self.stream_tokens_per_s is not None and not self.stream_tokens_per_s.value > 0:
            raise ValueError(f"stream_tokens_per_s must be > 0, got {self.stream_tokens_per_s.value}")
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
                raise InputError([Problem("name", f"profile name {prof.name!r} differs "
                                                  "from its file name", str(path), 1)])
            out[kind][prof.name] = prof
    return out


_BUNDLED: ProfileSet | None = None
_OVERRIDES: tuple[Path, ...] = ()  # use_profile_dirs


def use_profile_dirs(dirs: tuple[Path, ...]) -> None:
    """For the rest of this process, profiles in ``dirs`` (``gpus/``, ``models/``, ``engines/`` inside, in
    order) replace the bundled ones of the same name wherever the bundled set is read; ``()`` restores the
    bundle. For a machine's own measurements in tests and benchmarks (the end-to-end test calibrates the CPU
    it runs on), where rewriting the bundled files would change the checkout."""
    global _BUNDLED, _OVERRIDES
    _OVERRIDES = tuple(Path(d) for d in dirs)
    _BUNDLED = None


def profile_dirs() -> tuple[Path, ...]:
    """The directories ``use_profile_dirs`` set (``()``: the bundle alone), so a caller can add one to
    them."""
    return _OVERRIDES


def load_profiles(extra_dirs: tuple[Path, ...] = ()) -> ProfileSet:
    """Bundled profiles, overridden by files of the same name in ``extra_dirs`` (in order), then by
    ``use_profile_dirs``' folders."""
    global _BUNDLED
    if _BUNDLED is None:
        b = _load_dir(_bundled.data_dir())
        for d in _OVERRIDES:
            for k, v in _load_dir(d).items():
                b[k].update(v)
        _BUNDLED = ProfileSet(b["gpus"], b["models"], b["engines"])
    if not extra_dirs:
        return _BUNDLED
    # A spec's own folder is read wherever the spec is lowered (plan, check, every simulation): read once per
    # content, so a profile rewritten in the same process (calibrate, then plan) is read again. The process's
    # overrides stay on top: they are measurements made since (watch --calibrate refits the engine in use).
    dirs = (*extra_dirs, *_OVERRIDES)
    key = (id(_BUNDLED), tuple(_dir_state(Path(d)) for d in dirs))
    if key not in _EXTRA:
        merged = {k: dict(getattr(_BUNDLED, k)) for k in _KINDS}
        for d in dirs:
            for k, v in _load_dir(Path(d)).items():
                merged[k].update(v)
        _EXTRA.clear()
        _EXTRA[key] = ProfileSet(merged["gpus"], merged["models"], merged["engines"])
    return _EXTRA[key]


_EXTRA: dict[tuple, ProfileSet] = {}


def _dir_state(root: Path) -> tuple:
    """A folder's profile files with their size and modification time: what ``load_profiles`` caches on."""
    files = sorted(p for k in _KINDS for p in (root / k).glob("*.yaml")) if root.is_dir() else []
    return (str(root.resolve()),) + tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in files)


def value_or(q: Q | None, default: float = 0.0) -> float:
    """A profile quantity's value, or ``default`` when the optional field is absent."""
    return q.value if q is not None else default


def fp4_kv_problem(model: ModelProfile, gpu: GpuProfile) -> str | None:
    """Why ``model`` on ``gpu`` cannot hold an FP4 (NVFP4) KV cache, or None. It needs FP4 tensor cores
    (fp4_tflops: Blackwell; vLLM, SGLang and TensorRT-LLM all serve it there; vLLM 0.32 also has an FA2 path
    on Ampere and Hopper, not modelled: its dequantising attention is unmeasured) and grouped-query attention
    with head_dim a multiple of 16 (one fp8 scale per 16 values): MLA's latent cache has its own NVFP4 layout
    in vLLM (nvfp4_ds_mla, DeepSeek's sparse attention). The spec's cross-check and the cost model both ask
    this."""
    if gpu.fp4_tflops is None:
        return (f"an fp4 KV cache needs FP4 tensor cores; {gpu.name} has none (no fp4_tflops in its "
                "profile): use kv_dtype fp8 there")
    if model.kv_lora_rank is not None or model.head_dim.value % 16:
        return (f"an fp4 KV cache is modelled for grouped-query attention with head_dim a multiple of 16; "
                f"{model.name} has "
                + ("MLA" if model.kv_lora_rank is not None else f"head_dim {model.head_dim.value:g}"))
    return None


def attention_params(model: ModelProfile) -> float:
    """Weights of one layer's attention projections (the cost model's and the config import's one formula).

    GQA/MHA: Q and O are hidden x heads x head_dim, K and V hidden x kv_heads x head_dim.
    MLA (DeepSeek-V2/V3): Q = hidden x q_lora_rank + q_lora_rank x heads x (nope + rope) (hidden x heads x
    (nope + rope) without a Q rank); KV down = hidden x (kv_lora_rank + rope); KV up = kv_lora_rank x heads x
    (nope + v); O = heads x v x hidden.
    """
    H, heads = model.hidden_size.value, model.num_attention_heads.value
    if model.kv_lora_rank is None:
        q_dim = heads * model.head_dim.value
        return H * (q_dim + 2 * model.num_kv_heads.value * model.head_dim.value) + q_dim * H
    r_kv, rope = model.kv_lora_rank.value, value_or(model.qk_rope_head_dim)
    nope, v = (value_or(model.qk_nope_head_dim, model.head_dim.value),
               value_or(model.v_head_dim, model.head_dim.value))
    r_q = value_or(model.q_lora_rank)
    q = (H * r_q + r_q * heads * (nope + rope)) if r_q else H * heads * (nope + rope)
    return q + H * (r_kv + rope) + r_kv * heads * (nope + v) + heads * v * H


def moe_layers(model: ModelProfile) -> float:
    """Layers whose MLP is routed: 0 for a dense model, every layer unless the profile says."""
    if model.num_experts.value <= 1:
        return 0.0
    return value_or(model.moe_layers, model.num_layers.value)


def expert_size(model: ModelProfile) -> float:
    """Parameters of one routed expert (gated MLP: gate, up, down = 3 x hidden x its intermediate size)."""
    return 3 * model.hidden_size.value * value_or(model.moe_intermediate_size, model.intermediate_size.value)


def architecture_params(model: ModelProfile, dense_inter: float, tied: bool) -> tuple[float, float]:
    """(total, active) parameters from the architecture: embeddings (and LM head unless tied), attention and
    two norms per layer, dense MLPs (3 x hidden x ``dense_inter``) in the non-MoE layers, and in MoE layers
    the routed experts (all of them in the total, experts_per_token of them in the active count), the shared
    experts and the router (hidden x experts)."""
    L, H = model.num_layers.value, model.hidden_size.value
    E, k = model.num_experts.value, model.experts_per_token.value
    n_moe = moe_layers(model)
    emb = model.vocab_size.value * H * (1 if tied else 2)
    base = L * (attention_params(model) + 2 * H) + (L - n_moe) * 3 * H * dense_inter + emb
    per_moe = value_or(model.shared_experts) * expert_size(model) + (H * E if E > 1 else 0.0)
    total = base + n_moe * (per_moe + E * expert_size(model))
    active = base + n_moe * (per_moe + min(k, E) * expert_size(model))
    return total, active


def _moe_layer_count(cfg: dict, layers: int, experts: int) -> int:
    """MoE layers of a config: DeepSeek's first_k_dense_replace (and moe_layer_freq), Llama 4's
    interleave_moe_layer_step (or moe_layers list), Qwen's mlp_only_layers / decoder_sparse_step."""
    if experts <= 1:
        return 0
    if isinstance(cfg.get("moe_layers"), list):
        return len(cfg["moe_layers"])
    first = cfg.get("first_k_dense_replace") or 0
    step = (cfg.get("interleave_moe_layer_step") or cfg.get("moe_layer_freq")
            or cfg.get("decoder_sparse_step") or 1)
    only = set(cfg.get("mlp_only_layers") or [])
    return sum(1 for i in range(first, layers) if (i + 1) % step == 0 and i not in only)


def model_from_hf_config(path: str | Path, name: str) -> ModelProfile:
    """Build a model profile from a local Hugging Face ``config.json``.

    The parameter count is computed from the architecture (``architecture_params``: embeddings, attention or
    MLA, dense MLPs, routed and shared experts, router, norms), since config.json does not state it; its
    source says so. Mixture-of-experts keys read: num_local_experts / num_experts / n_routed_experts,
    num_experts_per_tok / experts_per_token, n_shared_experts, moe_intermediate_size, first_k_dense_replace,
    interleave_moe_layer_step, mlp_only_layers; MLA: kv_lora_rank, q_lora_rank, qk_rope_head_dim,
    qk_nope_head_dim, v_head_dim. A multimodal config's ``text_config`` is read for the language model.
    """
    p = Path(path)
    try:
        cfg = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError([Problem("config", "file not found", str(p))])
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError([Problem("config", f"not valid JSON: {exc}", str(p))])
    if not isinstance(cfg, dict):
        raise InputError([Problem("config", "config.json is not a JSON object", str(p))])
    if isinstance(cfg.get("text_config"), dict):  # Llama 4 and other multimodal configs
        cfg = {**cfg["text_config"], **{k: v for k, v in cfg.items() if k == "tie_word_embeddings"}}
    missing = [k for k in ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size",
                           "vocab_size")
               if not isinstance(cfg.get(k), int)]
    if missing:
        raise InputError([Problem(k, "missing or not an integer in config.json", str(p)) for k in missing])
    layers, hidden = cfg["num_hidden_layers"], cfg["hidden_size"]
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or hidden // heads
    inter, vocab = cfg["intermediate_size"], cfg["vocab_size"]
    experts = cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts") or 1
    topk = min(cfg.get("num_experts_per_tok") or cfg.get("experts_per_token") or 1, experts)
    ctx = cfg.get("max_position_embeddings") or 4096
    for k in ("num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok",
              "experts_per_token", "n_shared_experts", "moe_intermediate_size", "kv_lora_rank", "q_lora_rank",
              "qk_rope_head_dim"):
        if k in cfg and cfg[k] is not None and not (isinstance(cfg[k], int) and cfg[k] >= 0):
            raise InputError([Problem(k, "not a non-negative integer in config.json", str(p))])
    src = {"config": Source(kind="spec_sheet", ref=f"local Hugging Face config.json: {p}"),
           "derived": Source(kind="fit", ref="parameter count computed from the config's architecture")}

    def q(v: float, s: str = "config") -> Q:
        return Q(value=float(v), source=s)

    extra: dict[str, Q] = {}
    if experts > 1:
        extra["moe_layers"] = q(_moe_layer_count(cfg, layers, experts))
        extra["moe_intermediate_size"] = q(cfg.get("moe_intermediate_size") or inter)
        if cfg.get("n_shared_experts"):
            extra["shared_experts"] = q(cfg["n_shared_experts"])
        elif cfg.get("interleave_moe_layer_step"):  # Llama 4: one shared expert per MoE layer
            extra["shared_experts"] = q(1)
    if cfg.get("kv_lora_rank"):
        for k in ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
            if cfg.get(k):
                extra[k] = q(cfg[k])
    # Llama 4's dense layers use intermediate_size_mlp; others' dense layers use intermediate_size.
    dense_inter = cfg.get("intermediate_size_mlp") or inter
    prof = ModelProfile(
        name=name, sources=src, num_layers=q(layers), hidden_size=q(hidden), num_attention_heads=q(heads),
        num_kv_heads=q(kv), head_dim=q(head_dim), intermediate_size=q(inter), vocab_size=q(vocab),
        params_billion=q(0, "derived"), active_params_billion=q(0, "derived"),
        max_context_tokens=q(ctx), num_experts=q(experts), experts_per_token=q(topk), **extra,
    )
    total, active = architecture_params(prof, dense_inter, bool(cfg.get("tie_word_embeddings")))
    return prof.model_copy(update={"params_billion": q(total / 1e9, "derived"),
                                   "active_params_billion": q(active / 1e9, "derived")})
