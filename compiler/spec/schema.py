"""The spec: the user's input contract (pydantic v2, strict, unknown keys rejected).

``Spec`` is what ``trimtab schema spec`` prints as JSON Schema and what docs/spec-reference.md documents.
Cross-field checks that need profiles (unknown GPU or model names, context windows) happen in
``trimtab.ir.lower``; the checks here need only the file itself.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

SPEC_VERSION = 1
# The JSON Schema's identifier (``trimtab schema spec``): a URN, since the project publishes no schema URL;
# editors bind the schema to files by path (docs/spec-reference.md), the $id names it and its version.
SPEC_SCHEMA_ID = f"urn:trimtab:schema:spec:v{SPEC_VERSION}"
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class UniformDist(_Strict):
    min: int = Field(ge=1, le=10_000_000, description="shortest length, tokens (inclusive)")
    max: int = Field(ge=1, le=10_000_000, description="longest length, tokens (inclusive; at least min)")

    @model_validator(mode="after")
    def _order(self):
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        return self


class LognormalDist(_Strict):
    """Either ``median`` + ``p99`` (tokens) or ``mu`` + ``sigma`` of ln(tokens)."""

    median: float | None = Field(default=None, gt=0, le=10_000_000,
                                 description="median length, tokens (with p99; not with mu and sigma)")
    p99: float | None = Field(default=None, gt=0, le=10_000_000,
                              description="99th-percentile length, tokens; must exceed median")
    mu: float | None = Field(default=None, ge=-50, le=50,
                             description="mean of ln(tokens) (with sigma; not with median and p99)")
    sigma: float | None = Field(default=None, gt=0, le=10, description="standard deviation of ln(tokens)")

    @model_validator(mode="after")
    def _one_form(self):
        a = self.median is not None or self.p99 is not None
        b = self.mu is not None or self.sigma is not None
        if a == b:
            raise ValueError("give either median and p99, or mu and sigma")
        if a and (self.median is None or self.p99 is None):
            raise ValueError("median and p99 go together")
        if b and (self.mu is None or self.sigma is None):
            raise ValueError("mu and sigma go together")
        if a and self.p99 <= self.median:
            raise ValueError(f"p99 ({self.p99}) must exceed median ({self.median})")
        return self


class HistogramDist(_Strict):
    """Piecewise uniform: ``weights[i]`` of the requests fall in ``[edges[i], edges[i+1])``."""

    edges: list[int] = Field(min_length=2, max_length=1000,
                             description="bin edges, tokens, strictly increasing and >= "
                                         "0; one more than weights")
    weights: list[float] = Field(min_length=1, max_length=999,
                                 description="relative share of requests per bin (>= 0, "
                                             "not all 0; normalised)")

    @model_validator(mode="after")
    def _shape(self):
        if len(self.edges) != len(self.weights) + 1:
            raise ValueError(f"{len(self.edges)} edges need {len(self.edges) - 1} "
                             f"weights, got {len(self.weights)}")
        if any(b <= a for a, b in zip(self.edges, self.edges[1:])):
            raise ValueError("edges must be strictly increasing")
        if self.edges[0] < 0:
            raise ValueError("edges must be non-negative")
        if any(w < 0 for w in self.weights) or sum(self.weights) <= 0:
            raise ValueError("weights must be non-negative and not all zero")
        return self


class SamplesDist(_Strict):
    """Token counts read from one column of a CSV file (path relative to the spec file)."""

    path: str = Field(description="CSV file with a header row, relative to the spec file")
    column: str = Field(description="header of the column holding token counts (positive integers)")


class TokenDist(_Strict):
    """Exactly one of the forms below."""

    fixed: int | None = Field(default=None, ge=1, le=10_000_000,
                              description="every request has this many tokens")
    uniform: UniformDist | None = Field(default=None, description="uniform between min and max tokens")
    lognormal: LognormalDist | None = Field(default=None,
                                            description="lognormal: median and p99, or mu and "
                                                        "sigma of ln(tokens)")
    histogram: HistogramDist | None = Field(default=None, description="piecewise uniform over bins (edges, "
                                                                      "weights)")
    samples: SamplesDist | None = Field(default=None, description="empirical: token counts from a CSV column")

    @model_validator(mode="after")
    def _exactly_one(self):
        given = [k for k in ("fixed", "uniform", "lognormal", "histogram", "samples")
                 if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of fixed, uniform, lognormal, histogram, samples"
                             + (f" (got {', '.join(given)})" if given else ""))
        return self

    @property
    def kind(self) -> str:
        return next(k for k in ("fixed", "uniform", "lognormal", "histogram", "samples")
                    if getattr(self, k) is not None)


Dtype = Literal["bf16", "fp8", "fp4", "fp32"]
KvDtype = Literal["bf16", "fp8", "fp4"]  # fp32 weights keep an fp32 KV cache (dtype's)


class Slo(_Strict):
    ttft_ms: float = Field(gt=0, le=3_600_000, description="time to first token, ms, at `percentile`")
    tpot_ms: float = Field(gt=0, le=60_000, description="time per output token after the first, ms")
    percentile: float = Field(default=99, gt=0, lt=100,
                              description="share of requests (%) that must meet both")


class GpuPool(_Strict):
    type: str = Field(description="GPU profile name (trimtab profiles list)")
    count: int = Field(ge=0, le=1_000_000, description="GPUs of this type available to the plan (an upper "
                                                       "bound; the plan may use fewer)")
    usd_per_hour: float | None = Field(default=None, ge=0, le=10_000,
                                       description="price per GPU-hour, USD; default: the profile's price")


LoraModule = Literal["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class Adapter(_Strict):
    """A LoRA adapter of the model (docs/multi-lora.md)."""

    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
                      description="adapter name, unique per model; requests select it by this name (vLLM "
                                  "--lora-modules); the engine loads it from <adapter dir>/<name>")
    rank: int = Field(ge=1, le=1024, description="LoRA rank r: sets the adapter's memory and "
                                                 "its compute per token")
    target_modules: list[LoraModule] | None = Field(default=None, min_length=1,
                                                    description="projections the adapter modifies; default: "
                                                                "q_proj, k_proj, v_proj, o_proj")
    weight: float = Field(default=1.0, gt=0, le=1e9,
                          description="relative share of a workload with adapter '*'")


class ZipfTraffic(_Strict):
    s: float = Field(ge=0, le=10, description="adapter i (from 1) gets a share proportional to 1 / i^s")


class AdapterTraffic(_Strict):
    zipf: ZipfTraffic = Field(description="Zipf popularity over the adapters in name "
                                          "order (the first is hottest)")


class AdapterPopulation(_Strict):
    """``count`` adapters named ``{prefix}{i}`` (i from 1, zero-padded), all of one rank."""

    count: int = Field(ge=1, le=100_000, description="number of adapters generated")
    rank: int = Field(ge=1, le=1024, description="LoRA rank of every generated adapter")
    target_modules: list[LoraModule] | None = Field(default=None, min_length=1,
                                                    description="projections every adapter modifies; "
                                                                "default: q_proj, k_proj, v_proj, o_proj")
    traffic: AdapterTraffic | None = Field(default=None, description="split of a workload with adapter '*'; "
                                                                     "default: uniform")
    prefix: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
                               description="default: '<model>-lora-'")


class ModelRef(_Strict):
    name: str = Field(description="model profile name (trimtab profiles list), or any name with config")
    config: str | None = Field(default=None, description="path to a local Hugging Face config.json "
                                                         "(relative to the spec)")
    adapters: list[Adapter] | None = Field(default=None,
                                           description="LoRA adapters served on this base model")
    adapters_from: AdapterPopulation | None = Field(default=None,
                                                    description="a generated adapter population")
    hf_id: str | None = Field(default=None, max_length=200,
                              pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$",
                              description="Hugging Face repo id the engines load (e.g. a fine-tune or a "
                                          "quantised copy); default: the profile's hf.repo")
    hf_revision: str | None = Field(default=None, min_length=1, max_length=200,
                                    description="branch, tag or commit of hf_id; default: "
                                                "the profile's, else main")
    served_name: str | None = Field(default=None, min_length=1, max_length=200,
                                    pattern=r"^[A-Za-z0-9][A-Za-z0-9_./:-]*$",
                                    description="the model name clients send in OpenAI requests; default: "
                                                "the model's name in this spec")


class Tenant(_Strict):
    """Isolation rules for the workloads carrying ``tenant: <name>``."""

    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
                      description="the tenant, as workloads[].tenant names it")
    dedicated: bool = Field(default=False, description="its replicas serve no other tenant")
    not_shared_with: list[str] = Field(default=[], description="tenants it must never share GPUs with")


class TraceRef(_Strict):
    """A request trace (arrival times and token lengths); path relative to the spec file."""

    path: str = Field(description="trace file, relative to the spec file")
    format: Literal["azure", "mooncake", "csv"] = Field(
        description="azure: TIMESTAMP, ContextTokens, GeneratedTokens CSV; mooncake: JSONL with timestamp "
                    "(ms), input_length, output_length; csv: columns timestamp (s), input_tokens, "
                    "output_tokens")
    rate_scale: float | None = Field(default=None, gt=0, le=1_000_000,
                                     description="multiply the trace's own arrival rate (time runs this much "
                                                 "faster); default 1; not together with rate_rps")


class Prefix(_Strict):
    """Prefix reuse (prefix caching, docs/prefix-caching.md): declared, or measured from the workload's
    trace."""

    hit_rate: float | None = Field(default=None, ge=0, lt=1,
                                   description="share of input tokens served from the prefix cache when it "
                                               "holds the whole working set (0 <= x < 1)")
    cached_tokens: int | None = Field(default=None, ge=1, le=1_000_000_000,
                                      description="the working set: distinct prefix tokens (shared system "
                                                  "prompts, documents) the cache must hold for hit_rate")
    from_trace: bool | None = Field(default=None,
                                    description="true: measure hit rate, working set and the LRU curve from "
                                                "the trace's hash_ids (Mooncake format)")

    @model_validator(mode="after")
    def _one_form(self):
        declared = self.hit_rate is not None or self.cached_tokens is not None
        if self.from_trace is False:
            raise ValueError("from_trace: false means nothing; give hit_rate and "
                             "cached_tokens, or from_trace: true")
        if declared and self.from_trace:
            raise ValueError("give either hit_rate and cached_tokens, or from_trace: true, not both")
        if not declared and not self.from_trace:
            raise ValueError("give hit_rate and cached_tokens, or from_trace: true")
        if declared and (self.hit_rate is None or self.cached_tokens is None):
            raise ValueError("hit_rate and cached_tokens go together (cached_tokens: the prefix tokens the "
                             "cache must hold for that hit rate)")
        return self


class RateProfile(_Strict):
    """A workload's arrival rate over the schedule's period, one value per window (docs/online.md): declared
    (``rps``), or the shape of a ServeGen per-10-minute rate file scaled so its busiest window is
    ``peak_rps``."""

    rps: list[float] | None = Field(default=None, min_length=1, max_length=10_000,
                                    description="requests per second in each window, in order")
    servegen: str | None = Field(default=None, description="ServeGen rate CSV (window_start_s, rate, ...; "
                                                           "path relative to the spec): its 10-minute rates "
                                                           "averaged into the schedule's windows")
    peak_rps: float | None = Field(default=None, gt=0, le=1_000_000,
                                   description="servegen: scale the shape so its busiest "
                                               "window has this rate")
    fold: Literal["day", "none"] = Field(default="day",
                                         description="servegen: day = one day of windows, each the busiest "
                                                     "of that time of day over all days; none = the whole "
                                                     "file")
    cv: list[float] | None = Field(default=None, min_length=1, max_length=10_000,
                                   description="burstiness per window: coefficient of variation of "
                                               "inter-arrival gaps in simulation (default: the workload's "
                                               "arrival_cv)")

    @model_validator(mode="after")
    def _one_form(self):
        if (self.rps is None) == (self.servegen is None):
            raise ValueError("give either rps (one rate per window) or servegen (a ServeGen rate file)")
        if self.servegen is not None and self.peak_rps is None:
            raise ValueError("servegen needs peak_rps (ServeGen rates are a shape, not volumes)")
        if self.rps is not None and self.peak_rps is not None:
            raise ValueError("peak_rps scales a servegen shape; with rps give the rates themselves")
        if self.rps is not None and any(not 0 < r <= 1_000_000 for r in self.rps):
            raise ValueError("every rate in rps must be in (0, 1000000]")
        if self.cv is not None and any(not 0 < c <= 20 for c in self.cv):
            raise ValueError("every cv must be in (0, 20]")
        if self.cv is not None and self.rps is not None and len(self.cv) != len(self.rps):
            raise ValueError(f"cv has {len(self.cv)} values for {len(self.rps)} windows of rps")
        return self


class Stage(_Strict):
    """One load stage: arrivals at ``rate_rps`` for ``duration_s`` seconds (a load generator's stage)."""

    rate_rps: float = Field(gt=0, le=1_000_000, description="arrival rate in this stage, requests per second")
    duration_s: float = Field(gt=0, le=1e7, description="length of the stage, seconds")


class SharedPrefix(_Strict):
    """Shared system prompts: ``groups`` distinct prefixes of ``prefix_tokens`` tokens, each the start of the
    prompts of ``users_per_group`` users (a chat service's system prompts, a load generator's shared_prefix
    data). With prefix caching, every request but a group's first finds its group's prefix cached while the
    cache holds the groups' prefixes; with ``prompts_repeat`` it finds its whole prompt
    (docs/prefix-caching.md)."""

    prefix_tokens: int = Field(ge=1, le=10_000_000, description="tokens of each shared prefix")
    groups: int = Field(ge=1, le=10_000_000, description="distinct shared prefixes")
    users_per_group: int = Field(default=1, ge=1, le=10_000_000,
                                 description="users (conversations) sharing one")
    prompts_repeat: bool = Field(default=False,
                                 description="each user sends the same whole prompt again (a load "
                                             "generator's fixed prompt set, e.g. inference-perf's "
                                             "shared_prefix data): once warm the cache holds every prompt, "
                                             "not only the shared prefixes")


class Workload(_Strict):
    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
                      description="unique workload name (plan routes, predictions and check name it)")
    model: str = Field(description="name of a models[] entry that serves it")
    rate_rps: float | None = Field(default=None, gt=0, le=1_000_000,
                                   description="mean arrival rate, requests per second (with trace: "
                                               "optional; the trace's arrivals are rescaled to it)")
    input_tokens: TokenDist | None = Field(default=None, description="required unless trace is given")
    output_tokens: TokenDist | None = Field(default=None, description="required unless trace is given")
    slo: Slo = Field(description="latency objectives every plan must meet at the percentile")
    dtype: Dtype | None = Field(default=None, description="weights and KV cache precision; "
                                                          "default: defaults.dtype")
    kv_dtype: KvDtype | None = Field(default=None,
                                   description="KV cache precision when it differs from dtype's (fp8 for fp4 "
                                               "weights, else dtype): fp4 is an NVFP4 KV cache, on GPUs with "
                                               "FP4 tensor cores (B200) and grouped-query attention only "
                                               "(docs/moe.md, FP4)")
    trace: TraceRef | None = Field(default=None,
                                   description="replay this trace: its arrivals for simulation, and its "
                                               "lengths (where input/output_tokens are not given) and mean "
                                               "rate (where rate_rps is not) for planning")
    arrival_cv: float | None = Field(default=None, gt=0, le=20,
                                     description="coefficient of variation of inter-arrival gaps in "
                                                 "simulation (1 = Poisson, the default; > 1 bursty, Gamma "
                                                 "gaps); ignored with a trace")
    adapter: str | None = Field(default=None, description="LoRA adapter of the model the requests use; '*': "
                                                          "spread over the model's adapters by their traffic")
    tenant: str | None = Field(default=None, min_length=1, max_length=100, description="owner, for isolation")
    prefix: Prefix | None = Field(default=None, description="prefix reuse: hits cut prefill work and need "
                                                            "cache capacity (docs/prefix-caching.md)")
    rate_profile: RateProfile | None = Field(default=None,
                                             description="arrival rate per window of the schedule "
                                                         "(docs/online.md); needs schedule")
    arrivals: Literal["poisson", "constant"] | None = Field(
        default=None, description="arrival process in simulation: poisson (the default; arrival_cv shapes "
                                  "its gaps) or constant (fixed intervals of 1 / rate, a load generator's "
                                  "constant rate)")
    stages: list[Stage] | None = Field(default=None, min_length=1, max_length=10_000,
                                       description="load in stages, in order (rate x duration); the planner "
                                                   "sizes for the busiest stage, the simulator runs them in "
                                                   "turn (and again from the first past their end)")
    shared_prefix: SharedPrefix | None = Field(default=None,
                                               description="shared system prompts: prefix reuse derived from "
                                                           "N prefixes x M users")

    @model_validator(mode="after")
    def _traffic(self):
        if self.stages is not None and (self.rate_rps is not None or self.trace is not None
                                        or self.rate_profile is not None):
            raise ValueError("give stages or rate_rps / trace / rate_profile, not both (the busiest stage is "
                             "the rate)")
        if self.arrivals == "constant" and (self.arrival_cv is not None or self.trace is not None):
            raise ValueError("arrivals: constant has fixed gaps: no arrival_cv or trace with it")
        if self.shared_prefix is not None and self.prefix is not None:
            raise ValueError("give shared_prefix or prefix, not both (shared_prefix implies the prefix "
                             "reuse)")
        if self.rate_profile is not None and (self.rate_rps is not None or self.trace is not None):
            raise ValueError("give rate_profile or rate_rps / trace, not both "
                             "(rate_profile's peak is the rate)")
        if self.trace is None:
            need = ("input_tokens", "output_tokens") + (("rate_rps",) if self.rate_profile is None
                                                         and self.stages is None else ())
            missing = [k for k in need if getattr(self, k) is None]
            if missing:
                raise ValueError(f"give {', '.join(missing)} (or a trace to take them from)")
        elif self.rate_rps is not None and self.trace.rate_scale is not None:
            raise ValueError("give rate_rps or trace.rate_scale, not both")
        if self.prefix is not None and self.prefix.from_trace:
            if self.trace is None:
                raise ValueError("prefix.from_trace needs a trace (format: mooncake, with hash_ids)")
            if self.trace.format != "mooncake":
                raise ValueError(f"prefix.from_trace needs a mooncake trace (its hash_ids); trace.format is "
                                 f"{self.trace.format!r}")
        return self


class Defaults(_Strict):
    dtype: Dtype = Field(default="bf16", description="weights and KV cache precision of workloads that do "
                                                     "not set dtype: bf16, fp8 (fp8 weights and KV), "
                                                     "fp4, or fp32 (a CPU device without native bf16: "
                                                     "its profile's fp32_tflops)")
    engine: Literal["vllm", "vllm-cpu", "sglang", "trt-llm"] = Field(
        default="vllm", description="serving engine family whose profile "
                                    "(profiles/engines) the cost model uses")
    kv_tiers: Literal["off", "auto", "offload", "experimental-live"] = Field(
        default="off", description="KV cache beyond HBM (docs/kv-tiers.md). off (default); auto or offload: "
                                   "a host-memory tier of the prefix cache (evicted prefix blocks kept in "
                                   "CPU memory and reloaded over PCIe on a hit: vLLM --kv-offloading-size, "
                                   "SGLang HiCache, TensorRT-LLM host_cache_size) where its hits pay, for "
                                   "workloads with prefix reuse; experimental-live: running requests' KV may "
                                   "spill to host memory or borrow other instances' HBM, which no engine "
                                   "flag realises (trimtab emit refuses such plans without "
                                   "--allow-experimental)")


class SolverOptions(_Strict):
    backend: Literal["highs", "cbc", "cpsat"] = Field(default="highs",
                                                      description="MILP solver (docs/solvers.md): highs "
                                                                  "(default), cbc or cpsat")
    # A safety net well above the solver time of any plan measured (the largest generated specs, priced out
    # over several rounds on a loaded 2-core machine, come near 60 s): the machine's load must never decide
    # whether a plan is found; the deterministic node limit stops a search that does not converge
    time_limit_s: float = Field(default=300, gt=0, le=86_400, description="wall-clock safety net for one "
                                "planning run, solves and validating simulations, seconds (default 300): a "
                                "run it stops gives no plan (exit 4), so the plan never depends on the "
                                "machine's load")
    node_limit: int | None = Field(default=None, ge=0, le=10**9, description="deterministic work limit per "
                                   "solve: branch-and-bound nodes for highs and cbc (default 50000); a solve "
                                   "it stops keeps its best plan with the gap, or stops without one (exit 4)")


class NodeGroup(_Strict):
    """Identical servers: ``count`` nodes with ``gpus_per_node`` GPUs of type ``gpu`` each."""

    name: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
                      description="group name; nodes are named <name>-0, <name>-1, ... in placements")
    gpu: str = Field(description="GPU profile name; must also be listed under gpus")
    count: int = Field(default=1, ge=1, le=100_000, description="number of such nodes")
    gpus_per_node: int | None = Field(default=None, ge=1, le=1024, description="default: the GPU profile's")
    nvlink_domain: int | None = Field(default=None, ge=1, le=1024,
                                      description="GPUs per NVLink/xGMI domain inside the node (TP groups "
                                                  "stay in one); default: the whole node")
    nic_gbps: float | None = Field(default=None, gt=0, le=100_000, description="node network bandwidth, GB/s")
    cpu_memory_gib: float | None = Field(default=None, gt=0, le=1_000_000,
                                         description="host memory per node, GiB (the KV offload tier may use "
                                                     "half); default: the GPU profile's "
                                                     "host_memory_gib_per_node")
    pcie_gbps: float | None = Field(default=None, gt=0, le=10_000,
                                    description="host-to-GPU bandwidth per GPU, GB/s per direction (KV "
                                                "offload reloads); default: the GPU profile's pcie_gbps")
    rack: str | None = Field(default=None, description="nodes in the same rack share a switch")


class Network(_Strict):
    inter_rack_gbps: float | None = Field(default=None, gt=0, le=1_000_000,
                                          description="bandwidth between racks, GB/s; default: unlimited "
                                                      "(only the nodes' NICs)")


class Startup(_Strict):
    """What starting a replica takes (defaults: profiles/online.yaml, with sources)."""

    load_gbps: float | None = Field(default=None, gt=0, le=10_000, description="weights read per node, GB/s")
    warmup_s: float | None = Field(default=None, ge=0, le=86_400,
                                   description="engine warm-up after loading, s")


class Schedule(_Strict):
    """Plan per window of a period (docs/online.md): replicas per deployment per window, cheapest over the
    period including the cost of starting replicas."""

    window_s: int = Field(default=3600, ge=60, le=86_400 * 7, description="length of a window, seconds")
    min_lifetime_windows: int = Field(default=1, ge=1, le=1000,
                                      description="a started replica runs at least this "
                                                                            "many windows")
    max_changes_per_window: int | None = Field(default=None, ge=0, le=100_000,
                                               description="replicas started plus stopped at "
                                                           "one window boundary")
    cyclic: bool = Field(default=True, description="the period repeats: window 0 follows the last")
    startup: Startup = Field(default=Startup(), description="what starting a replica takes: weight loading "
                                                            "bandwidth and engine warm-up (defaults: "
                                                            "profiles/online.yaml); a started replica serves "
                                                            "nothing until then")
    validate_windows: int = Field(default=3, ge=1, le=10_000,
                                  description="plan validates this many of the fullest windows on all its "
                                              "seeds from the start, besides each workload's peak window and "
                                              "the fullest bursty one; every other window is screened on one "
                                              "seed first (docs/online.md)")


class Spec(_Strict):
    """A deployment problem: traffic, models, SLOs, the GPUs one may rent, and a budget."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True,
                              json_schema_extra={"$schema": JSON_SCHEMA_DIALECT, "$id": SPEC_SCHEMA_ID})
    version: Literal[1] = Field(description="spec format version; 1")
    name: str = Field(min_length=1, max_length=100,
                      description="name of the deployment problem; plans carry it")
    objective: Literal["min_cost", "max_goodput"] = Field(
        default="min_cost", description="min_cost: cheapest plan serving all traffic; max_goodput: serve the "
                                        "most requests/s within the budget and GPU counts, then cheapest "
                                        "(docs/solvers.md)")
    budget_usd_per_hour: float | None = Field(default=None, gt=0, le=1e9,
                                              description="most the plan may cost, USD per hour; default: no "
                                                          "limit (required in effect by max_goodput)")
    defaults: Defaults = Field(default=Defaults(),
                               description="settings shared by all workloads: dtype, engine, "
                                                               "KV tiers")
    solver: SolverOptions = Field(default=SolverOptions(), description="MILP backend and time limit")
    gpus: list[GpuPool] = Field(min_length=1, description="GPU types one may rent, with counts and prices")
    models: list[ModelRef] = Field(min_length=1,
                                   description="models to serve (profiles or local "
                                               "config.json), with LoRA adapters")
    workloads: list[Workload] = Field(min_length=1,
                                      description="traffic: per workload its model, arrivals, "
                                                  "token lengths and SLO")
    nodes: list[NodeGroup] | None = Field(default=None,
                                          description="the fleet as servers; default: derived from gpus[] "
                                                      "and each profile's GPUs per node")
    network: Network = Field(default=Network(), description="links between racks (within a node and to its "
                                                            "NIC, the profiles' figures apply)")
    tenants: list[Tenant] | None = Field(default=None, description="isolation rules (docs/multi-lora.md)")
    schedule: Schedule | None = Field(default=None,
                                      description="plan per window of a period with switching costs "
                                                  "(docs/online.md); workloads give rate_profile")
    redundancy: Literal["none", "n+1"] = Field(
        default="none", description="n+1: plan so that losing any one node keeps every SLO (each deployment "
                                    "spread over its pool's nodes, the survivors carry its traffic); none: "
                                    "no spare (docs/online.md, \"Redundancy\")")
    profiles: str | None = Field(
        default=None,
        description="folder of your own profiles (gpus/, models/, engines/ inside, e.g. written by trimtab "
                    "calibrate), relative to this file: each replaces the bundled profile of the same name "
                    "(`--profiles DIR` on the command line replaces this field)")
    # Folder the spec file lives in: relative paths (samples, config.json) resolve against it.
    _base_dir: str = PrivateAttr(default=".")

    @property
    def base_dir(self) -> str:
        return self._base_dir

    # Cross-references (duplicate names, unknown models or GPUs) are checked in trimtab.spec.load,
    # which knows the YAML line of each entry.
