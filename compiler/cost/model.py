"""The cost model: one implementation of every piece of serving arithmetic.

The planner (capacities), ``predict``, ``check`` and (later) the simulator all call ``ReplicaModel``;
nothing else in the code base computes a step time, a memory fit or a latency.

Entry points:
  * ``ReplicaModel(model, gpu, engine, tp, pp, dtype, max_num_seqs, max_batched_tokens)``
  * ``.memory`` -> ``MemoryFit`` (weights, activations, reserve, KV capacity in tokens)
  * ``.iteration_s(decode_batch, decode_ctx, prefill_tokens, prefill_ctx)`` -> seconds of one engine step
  * ``.evaluate(classes, percentile)`` -> ``ReplicaState`` at a steady offered load (TTFT at a percentile
    including queueing, mean TPOT, utilisation, KV use)
  * ``.capacity_rps(cls, slo)`` -> the highest per-replica rate at which ``cls`` meets the SLO
  * ``.predict_closed_loop(isl, osl, concurrency)`` -> ``ClosedLoopPrediction``

The equations, with their sources, are in docs/cost-model.md. Every number comes from a profile
(GPU, model, engine); there are no hidden constants apart from byte widths of the data types.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cache, cached_property

from compiler.profiles import EngineProfile, GpuProfile, ModelProfile

BYTES = {"bf16": 2.0, "fp8": 1.0}
GIB = 1024**3


@dataclass(frozen=True, slots=True)
class TrafficClass:
    """Requests of similar length offered to one replica (per-replica rate)."""

    rate_rps: float
    isl_mean: float
    osl_mean: float
    isl_tail: float | None = None  # input length whose TTFT is reported at the percentile
    isl_cv2: float = 0.0  # squared coefficient of variation of input length
    # Prefix reuse (docs/prefix-caching.md): mean input tokens per request served from the prefix cache (prefill
    # computes only isl - cached, attending to the cached tokens as prior context; the decode context is the full
    # isl), and the KV tokens the replica keeps for this workload's prefix cache (not available to requests).
    cached_tokens: float = 0.0
    prefix_reserved: float = 0.0
    # Output lengths in the class as ((length, probability), ...): a router cannot split requests by output
    # length, so one class mixes short and long outputs, and a short one's TPOT is the noisier (its mean over
    # fewer steps). Empty: every request has osl_mean.
    osl_points: tuple[tuple[float, float], ...] = ()

    @property
    def tail(self) -> float:
        return self.isl_mean if self.isl_tail is None else self.isl_tail

    @property
    def tail_cached(self) -> float:
        """Cached tokens of the tail-length request (the same share of its input as on average)."""
        return self.tail * self.cached_tokens / self.isl_mean if self.cached_tokens else 0.0


@dataclass(frozen=True, slots=True)
class KvTier:
    """KV capacity beyond HBM for one replica (docs/kv-tiers.md).

    ``kind``: ``offload`` (host CPU memory over PCIe) or ``borrow`` (spare HBM of other instances on the same
    node, over NVLink, or PCIe where the GPU has none). ``tokens``: KV tokens the tier holds for this replica.
    ``gbps_per_gpu``: bandwidth from each GPU of the replica to the tier, GB/s (each GPU moves its own shard)."""

    kind: str
    tokens: int
    gbps_per_gpu: float

    def __post_init__(self):
        if self.kind not in ("offload", "borrow"):
            raise ValueError(f"KvTier.kind must be offload or borrow, got {self.kind!r}")
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
    tpot_s: float  # per-request TPOT at the percentile (over all classes' requests); the mean at percentile 50
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


_UNSTABLE = float("inf")


class ReplicaModel:
    """Analytic model of one serving replica: ``tp`` x ``pp`` GPUs running one copy of the model."""

    def __init__(self, model: ModelProfile, gpu: GpuProfile, engine: EngineProfile, tp: int = 1, pp: int = 1,
                 dtype: str = "bf16", max_num_seqs: int | None = None, max_batched_tokens: int = 8192,
                 kv_dtype: str | None = None, kv_tier: KvTier | None = None):
        if tp < 1 or pp < 1:
            raise ValueError("tp and pp must be >= 1")
        if dtype not in BYTES:
            raise ValueError(f"dtype must be one of {sorted(BYTES)}")
        kv_dtype = kv_dtype or dtype
        if kv_dtype not in BYTES:
            raise ValueError(f"kv_dtype must be one of {sorted(BYTES)}")
        self.model, self.gpu, self.engine = model, gpu, engine
        self.kv_tier = kv_tier
        self.tp, self.pp, self.dtype, self.kv_dtype = tp, pp, dtype, kv_dtype
        self.max_num_seqs = int(max_num_seqs or engine.max_num_seqs.value)
        self.max_batched_tokens = int(max_batched_tokens)
        m = model
        self.L = m.num_layers.value
        self.H = m.hidden_size.value
        self.heads = m.num_attention_heads.value
        self.kv_heads = m.num_kv_heads.value
        self.head_dim = m.head_dim.value
        self.vocab = m.vocab_size.value
        self.params = m.params_billion.value * 1e9
        self.active = m.active_params_billion.value * 1e9
        self.experts = m.num_experts.value
        self.topk = m.experts_per_token.value
        self.wbytes = BYTES[dtype]
        self.kvbytes = BYTES[kv_dtype]
        g = gpu
        keff = engine.kernel_efficiency.value if engine.kernel_efficiency is not None else 1.0
        eta_c = g.compute_efficiency.value * keff
        if dtype == "fp8" and g.fp8_tflops.value > g.bf16_tflops.value:
            # fp8 tensor cores: their own (usually lower) efficiency; without fp8 units the weights are
            # dequantised and the GEMM runs at the bf16 rate.
            eta8 = g.fp8_compute_efficiency.value if g.fp8_compute_efficiency is not None else g.compute_efficiency.value
            self.flops_linear = g.fp8_tflops.value * 1e12 * eta8 * keff
        else:
            self.flops_linear = g.bf16_tflops.value * 1e12 * eta_c
        eta_a = g.attention_efficiency.value if g.attention_efficiency is not None else g.compute_efficiency.value
        self.flops_attn = g.bf16_tflops.value * 1e12 * eta_a * keff
        self.bw = g.hbm_bandwidth_gbps.value * 1e9 * g.bandwidth_efficiency.value
        self.kernel_s = (g.kernel_latency_us.value if g.kernel_latency_us is not None else 0.0) * 1e-6
        self.elem_passes = g.elementwise_passes.value if g.elementwise_passes is not None else 0.0
        self.ar_lat = g.allreduce_latency_us.value * 1e-6
        self.ar_bw = g.allreduce_bus_gbps.value * 1e9
        self.link_bw = g.link_bandwidth_gbps.value * 1e9
        # Pipeline stages sit on different nodes (PP is used once TP fills a node): hand-offs cross the NICs.
        self.nic_bw_per_gpu = g.node_network_gbps.value * 1e9 / g.gpus_per_node.value
        self.overhead = engine.step_overhead_ms.value * 1e-3
        self.request_overhead = (engine.request_overhead_ms.value * 1e-3
                                 if engine.request_overhead_ms is not None else 0.0)
        # Expert weights: the share of parameters in MoE experts, read only for experts the batch touches.
        inter = m.intermediate_size.value
        self.expert_params = 3 * self.H * inter * self.L * self.experts if self.experts > 1 else 0.0
        self.dense_params = self.params - self.expert_params
        # Per-layer weights (whole model, before sharding): attention projections from the architecture;
        # the LM head is vocab x hidden; the MLP is the rest of the parameter count (gated or not, dense or MoE).
        q_dim = self.heads * self.head_dim
        self.attn_params = self.H * (q_dim + 2 * self.kv_heads * self.head_dim) + q_dim * self.H
        self.head_params = self.vocab * self.H
        embed = 2 * self.head_params if self.params > 2 * self.head_params + self.L * self.attn_params else self.head_params
        self.mlp_params = max((self.dense_params - embed) / self.L - self.attn_params, 0.0)  # dense MLP per layer
        self.mlp_active_expert = 3 * self.H * inter * self.topk if self.experts > 1 else 0.0

    # ------------------------------------------------------------------ memory
    @cached_property
    def memory(self) -> MemoryFit:
        """Per-GPU memory budget (vLLM's profile run: utilisation x HBM, minus weights, activations, reserve)."""
        gpus = self.tp * self.pp
        weights = self.params * self.wbytes / gpus
        inter = self.model.intermediate_size.value
        # Peak activations of a full token budget: hidden states, QKV, MLP intermediate (per TP shard), 2 bytes each.
        act = self.max_batched_tokens * (4 * self.H + (self.heads + 2 * self.kv_heads) * self.head_dim / self.tp
                                         + 2 * inter / self.tp) * 2
        reserve = self.engine.runtime_reserve_gib.value * GIB
        usable = self.gpu.memory_gib.value * GIB * self.engine.gpu_memory_utilization.value
        kv = usable - weights - act - reserve
        # KV heads are split across TP ranks, or replicated when TP exceeds the number of KV heads.
        kv_per_tok = 2 * (self.L / self.pp) * max(self.kv_heads / self.tp, 1.0) * self.head_dim * self.kvbytes
        tokens = int(kv // kv_per_tok) if kv > 0 else 0
        return MemoryFit(weights / GIB, act / GIB, reserve / GIB, usable / GIB, max(kv, 0.0) / GIB, kv_per_tok, tokens)

    @cached_property
    def kv_capacity_tokens(self) -> int:
        """KV tokens the replica may hold: HBM (``memory.kv_cache_tokens``) plus its tier's, if any."""
        hbm = self.memory.kv_cache_tokens
        return hbm + self.kv_tier.tokens if self.kv_tier is not None and hbm > 0 else hbm

    def remote_share(self, kv_tokens_used: float) -> float:
        """Share of the KV in use that lives in the tier: max(0, used - HBM) / used (0 without a tier)."""
        if self.kv_tier is None or kv_tokens_used <= 0:
            return 0.0
        return max(0.0, kv_tokens_used - self.memory.kv_cache_tokens) / kv_tokens_used

    # ------------------------------------------------------------------ one engine step
    def _gemm_s(self, tokens: float, weight_bytes: float, flops: float, n_out: float, k_in: float,
                kernels: float) -> float:
        """One group of GEMMs: roofline of (weights + activations) bytes vs FLOPs, plus fixed kernel time."""
        act = tokens * (n_out + k_in) * 2
        return max((weight_bytes + act) / self.bw, flops / self.flops_linear) + kernels * self.kernel_s

    @cached_property
    def _step(self) -> tuple[float, ...]:
        """``iteration_s``'s equations with everything that does not depend on the step's batch folded into
        per-token and fixed seconds, once per replica (the planner calls ``iteration_s`` millions of times).
        Same terms as the docstring there; each ``x / bandwidth`` or ``flops / rate`` becomes ``x * (1 / rate)``."""
        tp, pp = self.tp, self.pp
        bw, fl, fa = self.bw, self.flops_linear, self.flops_attn
        wb, H = self.wbytes, self.H
        q_dim = self.heads * self.head_dim
        qkv_n = (q_dim + 2 * self.kv_heads * self.head_dim) / tp
        ks = self.kernel_s
        # attention projections (QKV and O): weight seconds, activation seconds per token, FLOP seconds per token
        a_w = self.attn_params * wb / tp / bw
        a_act = (qkv_n + H + H + q_dim / tp) * 2 / bw
        a_fl = 2 * self.attn_params / tp / fl
        # dense MLP (MoE adds the touched experts per step, in iteration_s)
        inter_tp = self.mlp_params / (3 * H) / tp if self.mlp_params else 0.0
        m_w = self.mlp_params * wb / tp / bw
        m_act = (2 * inter_tp + H + H + inter_tp) * 2 / bw
        m_fl = 2 * self.mlp_params / tp / fl
        # attention kernels: KV bytes per token of context, FLOPs per (token x context)
        kv_s = 2 * max(self.kv_heads / tp, 1.0) * self.head_dim * self.kvbytes / bw
        att_fl = 4 * q_dim / tp / fa
        elem = self.elem_passes * H * 2 / bw
        ar0 = 2 * self.ar_lat if tp > 1 else 0.0
        ar1 = 2 * H * 2 * 2 * (tp - 1) / tp / self.ar_bw if tp > 1 else 0.0
        # LM head (last stage only)
        h_w = self.head_params * wb / tp / bw
        h_act = (self.vocab / tp + H) * 2 / bw
        h_fl = 2 * self.head_params / tp / fl
        hop0 = (pp - 1) * self.ar_lat if pp > 1 else 0.0
        hop1 = (pp - 1) * H * 2 / (self.nic_bw_per_gpu * tp) if pp > 1 else 0.0
        # KV tier: the same KV bytes per token of context over the tier link (per GPU: each moves its own shard)
        kv_r = kv_s * bw / (self.kv_tier.gbps_per_gpu * 1e9) if self.kv_tier is not None else 0.0
        return (a_w, a_act, a_fl, m_w, m_act, m_fl, kv_s, att_fl, elem, ar0, ar1, h_w, h_act, h_fl,
                hop0, hop1, 2 * ks, ks, self.L / pp, self.overhead + hop0, kv_r)

    def iteration_s(self, decode_batch: float, decode_ctx: float, prefill_tokens: float = 0.0,
                    prefill_ctx: float = 0.0, prefill_seqs: float = 1.0, remote_share: float = 0.0) -> float:
        """Seconds of one engine step that decodes ``decode_batch`` requests (mean context ``decode_ctx``)
        and prefills ``prefill_tokens`` tokens (mean prior context ``prefill_ctx``) split evenly over
        ``prefill_seqs`` prompts.

        Per pipeline stage (1/pp of the layers, 1/pp of the batch as one micro-batch), per layer and GPU:
          GEMMs     = for attention projections and MLP each: max(bytes / BW_eff, FLOPs / F_eff) + kernels x t_k
          attention = decode: max(KV bytes / BW_eff, FLOPs / F_attn); prefill: FLOPs / F_attn
          other     = elementwise passes x tokens x hidden x 2 B / BW_eff (norms, rope, activation, residual)
          comms     = 2 all-reduces (latency + bytes x 2(tp-1)/tp / bus bandwidth) when tp > 1
        plus the LM head once per step; step = pp x stage + (pp - 1) x hand-off + engine overhead.
        The per-replica factors of these terms are folded once in ``_step``.

        KV tier (``kv_tier``; docs/kv-tiers.md): ``remote_share`` r of the context KV lives in the tier. Decode
        attention reads (1 - r) of its KV bytes from HBM (inside the roofline max) and r over the tier link at
        ``kv_tier.gbps_per_gpu``, added, not overlapped (conservative); so does the prior-context KV a prefill
        chunk reads. A share r of the KV a prefill chunk writes goes to the tier too (swap-out), which lengthens
        prefill steps and so TTFT. With r = 0 every term is the HBM-only one.
        """
        (a_w, a_act, a_fl, m_w, m_act, m_fl, kv_s, att_fl, elem, ar0, ar1, h_w, h_act, h_fl,
         _hop0, hop1, k2, ks, Ls, fixed, kv_r) = self._step
        pp = self.pp
        b = decode_batch / pp
        p = prefill_tokens / pp
        seqs = (prefill_seqs if prefill_seqs > 1.0 else 1.0) / pp if p > 0 else 0.0
        T = b + p
        # (rooflines as conditional expressions, not max(): the same values, a third faster in the hot path)
        x, y = a_w + T * a_act, T * a_fl
        t_attn_proj = (x if x >= y else y) + k2
        if self.expert_params:  # MLP: the experts some token is routed to
            tp, wb = self.tp, self.wbytes
            touched = 1.0 - (1.0 - self.topk / self.experts) ** max(T, 0.0)
            w = (self.mlp_params + self.expert_params / self.L * touched) * wb / tp
            fl = 2 * T * (self.mlp_params + self.mlp_active_expert) / tp
            t_mlp = max(w / self.bw + T * m_act, fl / self.flops_linear) + 2 * max(1.0, self.experts * touched) * ks
        else:
            x, y = m_w + T * m_act, T * m_fl
            t_mlp = (x if x >= y else y) + k2
        layer = t_attn_proj + t_mlp + T * elem + (ar0 + T * ar1)
        if remote_share and kv_r:  # a KV tier in use (r > 0 only comes with one)
            r = remote_share
            if b > 0:
                bc = b * decode_ctx
                layer += max((1 - r) * bc * kv_s, bc * att_fl) + r * bc * kv_r
            if p > 0:
                layer += (p * (prefill_ctx + p / seqs / 2) * att_fl + seqs * prefill_ctx * ((1 - r) * kv_s + r * kv_r)
                          + r * p * kv_r)
        else:
            if b > 0:
                bc = b * decode_ctx
                x, y = bc * kv_s, bc * att_fl
                layer += x if x >= y else y
            if p > 0:
                layer += p * (prefill_ctx + p / seqs / 2) * att_fl + seqs * prefill_ctx * kv_s
        head_tokens = b + seqs
        x, y = h_w + head_tokens * h_act, head_tokens * h_fl
        stage_head = (x if x >= y else y) + ks
        return pp * Ls * layer + stage_head + T * hop1 + fixed

    def prefill_s(self, isl: float, decode_batch: float, decode_ctx: float, remote_share: float = 0.0,
                  cached: float = 0.0) -> float:
        """Prefill of one prompt in chunks of the token budget left after the decode batch (``remote_share``:
        see ``iteration_s``). ``cached``: leading tokens found in the prefix cache (docs/prefix-caching.md); only
        the other ``isl - cached`` are computed, with the cached ones as prior context."""
        chunk = self.max_batched_tokens - decode_batch
        if chunk <= 0:
            return _UNSTABLE
        new = isl - cached
        n = max(1, math.ceil(new / chunk))
        last = new - (n - 1) * chunk
        t = 0.0
        if remote_share:
            for i in range(n - 1):
                t += self.iteration_s(decode_batch, decode_ctx, chunk, cached + i * chunk, 1.0, remote_share)
            return t + self.iteration_s(decode_batch, decode_ctx, last, cached + (n - 1) * chunk, 1.0, remote_share)
        for i in range(n - 1):
            t += self.iteration_s(decode_batch, decode_ctx, chunk, cached + i * chunk)
        return t + self.iteration_s(decode_batch, decode_ctx, last, cached + (n - 1) * chunk)

    # ------------------------------------------------------------------ steady state under load
    def evaluate(self, classes: list[TrafficClass] | tuple[TrafficClass, ...], percentile: float = 99.0,
                 max_iter: int = 200, slo_ms: tuple[float, float] | None = None, b0: float = 0.0) -> ReplicaState:
        """Steady state of continuous batching with chunked prefill at the offered per-replica load.

        ``slo_ms`` = (TTFT, TPOT) switches to decision mode (capacity bisection): ``meets(state, *slo_ms)``
        is what it is without it, but ``ttft_mean_s`` is ``ttft_s``, and ``tpot_s`` only compares right with
        the TPOT SLO (the mean TPOT when within it, infinity when not; the percentile search is skipped, and so
        is the TPOT tail when TTFT already misses). The fixed point is accelerated (``_Aitken``): it lands
        within the same tolerance, closer to the exact fixed point than plain iteration, which approaches it
        from below, so a rate that meets the SLO in decision mode meets it in a plain evaluation too (up to
        the tolerance; capacities move by less than the bisection's ``rel_tol``). ``b0`` starts the iteration
        from a decode batch known to lie at or below the fixed point (the batch of the same classes at a lower
        rate: the fixed point grows with the rate) instead of 0; it saves iterations, not accuracy.

        Prefill is served first-come first-served in chunks of the token budget left after the decode batch;
        a prompt of ``isl`` tokens takes n = isl / chunk steps of T(b, min(isl, chunk)) each, so the prefill
        "server" is busy rho = sum(rate x n x T) of the time (an M/G/1 queue). Its waiting time at
        percentile p follows the exponential tail P(W > t) = rho x exp(-t / theta) with
        theta = E[S^2] / (2 E[S] (1 - rho)), whose mean is the Pollaczek-Khinchine value.
        Every step emits one token per decoding request, so mean TPOT = 1 / (steps per second), counting
        the prefill-carrying steps and the decode-only ones (T_d) that fill the remaining 1 - rho of time.
        The decode batch follows by Little's law, b = (sum rate x osl) x TPOT; iterate b to its fixed point.
        """
        lam = sum(c.rate_rps for c in classes)
        n = len(classes)
        if lam <= 0:
            ttft = tuple(self.request_overhead + self.prefill_s(c.tail, 0, 0, 0.0, c.tail_cached) for c in classes)
            mean = tuple(self.request_overhead + self.prefill_s(c.isl_mean, 0, 0, 0.0, c.cached_tokens)
                         for c in classes)
            t1 = self.iteration_s(1, 0)
            return ReplicaState(True, "", t1, ttft, mean, 0.0, 0.0, 0.0, 0.0, 0.0, t1)
        D = sum(c.rate_rps * c.osl_mean for c in classes)
        ctx_dec = sum(c.rate_rps * c.osl_mean * (c.isl_mean + c.osl_mean / 2) for c in classes) / max(D, 1e-12)
        K = self.max_batched_tokens
        b = max(b0, 0.0) if b0 < min(self.max_num_seqs, K - 1) else 0.0
        kv_cap = self.kv_capacity_tokens  # HBM, plus the KV tier's when the replica has one
        prefix = False
        for c in classes:
            if c.cached_tokens or c.prefix_reserved:
                prefix = True
                break
        if prefix:  # the prefix cache's reserve is not available to requests (docs/prefix-caching.md)
            kv_cap -= max(c.prefix_reserved for c in classes)
        tier = self.kv_tier is not None
        r, kv_pre = 0.0, 0.0  # remote share of the KV in use (tier), KV of the prompts being prefilled
        # The share is at least that of the longest (tail) request decoding alone: at low load the mean KV in use
        # may fit HBM while a long request, on its own, does not (its TPOT is what the percentile sees).
        kv_floor = max(c.tail + c.osl_mean / 2 for c in classes) if tier else 0.0
        # ... and the KV in use is taken at the percentile of the number of requests holding it (Poisson around
        # the mean, normal approximation, as in ``evaluate_decode``): a tier slows every step more the more KV is
        # out of HBM, so a burst feeds on itself; the mean alone would miss that (docs/kv-tiers.md).
        z = 0.0
        if tier and percentile > 50:
            from statistics import NormalDist
            z = NormalDist().inv_cdf(percentile / 100.0)

        def kv_at_p(kv_mean: float) -> float:
            n_mean = kv_mean / max(ctx_dec, 1.0)
            return max((n_mean + z * math.sqrt(n_mean)) * ctx_dec, kv_floor)

        def unstable(reason: str) -> ReplicaState:
            inf = (_UNSTABLE,) * n
            return ReplicaState(False, reason, _UNSTABLE, inf, inf, 1.0, b, _UNSTABLE, _UNSTABLE, _UNSTABLE, _UNSTABLE)

        # Decision mode (capacity bisection) accelerates the fixed point; plain iteration climbs to it from below,
        # so the stated predictions (assess, check) are not more pessimistic than the capacities assumed.
        accel = _Aitken(min(self.max_num_seqs, K - 1), on=slo_ms is not None, start=b)
        for _ in range(max_iter):
            chunk = K - b
            if chunk < 1:
                if accel.retreat():  # an extrapolated batch overshot: back to the last plain iterate
                    b = accel.safe
                    continue
                return unstable(f"decode batch {b:.0f} leaves no room in max_num_batched_tokens {K}")
            if tier:  # the share of the KV in use beyond HBM, at the current batch (previous prefill load)
                r = self.remote_share(kv_at_p(b * ctx_dec + kv_pre))
            t_d = self.iteration_s(b, ctx_dec) if not tier else self._tier_decode_s(b, ctx_dec, kv_pre, kv_floor)
            rho, prefill_steps, s, nsteps = 0.0, 0.0, [], []
            for c in classes:
                new = c.isl_mean - c.cached_tokens  # prefix hits: only the uncached tokens are computed
                per_step = min(new, chunk)
                steps = new / per_step
                t = self.iteration_s(b, ctx_dec, per_step, c.cached_tokens + (new - per_step) / 2, 1.0, r) if tier \
                    else self.iteration_s(b, ctx_dec, per_step, c.cached_tokens + (new - per_step) / 2)
                s.append(steps * t)
                nsteps.append(steps)
                rho += c.rate_rps * steps * t
                prefill_steps += c.rate_rps * steps
            if tier and rho < 1:
                kv_pre = rho * sum(c.rate_rps * c.isl_mean for c in classes) / max(prefill_steps, 1e-12)
            if rho >= 1 and accel.retreat():
                b = accel.safe
                continue
            if rho >= 1:
                return unstable(f"prefill saturated (utilisation {rho:.2f})")
            tpot = 1.0 / (prefill_steps + (1 - rho) / t_d)
            b_new = D * tpot
            if b_new > self.max_num_seqs and accel.retreat():
                b = accel.safe
                continue
            if b_new > self.max_num_seqs:
                return unstable(f"needs a decode batch of {b_new:.0f} > max_num_seqs {self.max_num_seqs}")
            if abs(b_new - b) <= 1e-4 * max(b_new, 1.0):
                b = b_new
                break
            b_acc = accel.step(b, b_new)
            b = b_new if b_acc is None else b_acc
        else:
            return unstable("no steady state (load too close to saturation)")
        wait_p, wait_mean, pre_tokens = _prefill_queue(classes, s, lam, rho, percentile)
        # KV in use: decoding requests' contexts plus the prompts being prefilled.
        kv_used = b * ctx_dec + rho * pre_tokens / max(prefill_steps, 1e-12)
        if prefix:  # a request's cached tokens are blocks of the prefix cache, shared, not its own KV
            kv_used -= (b * sum(c.rate_rps * c.osl_mean * c.cached_tokens for c in classes) / max(D, 1e-12)
                        + rho * sum(c.rate_rps * c.cached_tokens for c in classes) / max(prefill_steps, 1e-12))
        if kv_used > kv_cap:
            return unstable(f"KV cache needs {kv_used:.0f} tokens > capacity {kv_cap}")
        if tier:
            r = self.remote_share(kv_at_p(kv_used))
        fe = self.request_overhead
        ttft = tuple(fe + wait_p + self.prefill_s(c.tail, b, ctx_dec, r, c.tail_cached) for c in classes)
        if slo_ms is not None:  # decision mode (see the docstring)
            tpot_p = tpot if max(ttft) * 1e3 > slo_ms[0] else \
                self._tpot_tail(classes, s, nsteps, t_d, tpot, percentile, slo_ms[1] * 1e-3)
            if tier and math.isfinite(tpot_p) and max(ttft) * 1e3 <= slo_ms[0]:
                tpot_p = max(tpot_p, self._tier_decode_s(b, ctx_dec, kv_pre, kv_floor, z))
                tpot_p = tpot_p if tpot_p <= slo_ms[1] * 1e-3 else _UNSTABLE
            return ReplicaState(True, "", tpot_p, ttft, ttft, rho, b, kv_used, wait_p, wait_mean, tpot)
        ttft_mean = tuple(fe + wait_mean + self.prefill_s(c.isl_mean, b, ctx_dec, r, c.cached_tokens) for c in classes)
        tpot_p = self._tpot_tail(classes, s, nsteps, t_d, tpot, percentile)
        if tier:
            tpot_p = max(tpot_p, self._tier_decode_s(b, ctx_dec, kv_pre, kv_floor, z))
        return ReplicaState(True, "", tpot_p, ttft, ttft_mean, rho, b, kv_used, wait_p, wait_mean, tpot)

    def _tier_decode_s(self, b: float, ctx: float, kv_pre: float, kv_floor: float, z: float | None = None) -> float:
        """Decode step time a request sees on a replica with a KV tier, over the number of requests decoding with
        it: itself plus N ~ Poisson(b) others (M/G/inf), each step with N' = 1 + N requests of context ``ctx``
        whose KV beyond HBM (at least ``kv_floor``, plus ``kv_pre`` of prompts being prefilled) is read over the
        tier link. The mean E[T(N')] (``z`` None), or T at N' = 1 + b + z sqrt(b) (a percentile; normal
        approximation). The step time grows faster than linearly in N' once KV spills to the tier, so the mean
        over N' is longer than the step at the mean: bursts of long requests slow each other down."""
        def step(n: float, own: float = ctx) -> float:
            held = own + (n - 1.0) * ctx  # the request's own context plus n - 1 others of the mean context
            kv = max(held + kv_pre, kv_floor)
            return self.iteration_s(n, held / n, 0.0, 0.0, 1.0, self.remote_share(kv))

        b = max(b, 0.0)
        if z is not None:  # the request at the percentile: a tail-length one (its own KV spills most), in a burst
            return step(min(1.0 + b + z * math.sqrt(b), float(self.max_num_seqs)), max(kv_floor, ctx))
        if b > 40:  # normal approximation at 16 equally likely points
            from statistics import NormalDist
            nd = NormalDist(b, math.sqrt(b))
            pts = [min(max(1.0 + nd.inv_cdf((i + 0.5) / 16), 1.0), float(self.max_num_seqs)) for i in range(16)]
            return sum(step(n) for n in pts) / 16
        total, pmf, cum, n = 0.0, math.exp(-b), 0.0, 0
        while cum < 1 - 1e-6 and n <= self.max_num_seqs:
            total += pmf * step(1.0 + n)
            cum += pmf
            n += 1
            pmf *= b / n
        return total / max(cum, 1e-12)

    def _tpot_tail(self, classes, s: list[float], nsteps: list[float], t_d: float, tpot: float,
                   percentile: float, bound_s: float | None = None) -> float:
        """Per-request TPOT at ``percentile``. A request decoding k = osl - 1 tokens is slowed by the prompts
        that arrive while it decodes: each adds D = (its prefill time) - (its chunk steps x t_d), the excess of its
        prefill-carrying steps over decode-only steps. Over the request's window (k x mean TPOT) the prompts
        form a compound Poisson process, so its TPOT is t_d + Y / k with E[Y] = lambda k TPOT E[D] and
        Var[Y] = lambda k TPOT E[D^2] (length variation within a class included), skewness from E[D^3]. The
        rate-weighted mixture over classes, each a shifted gamma with those three moments, is solved for the
        percentile (long prompts are rare and large: the tail is skewed); the mean is the mean TPOT."""
        lam = sum(c.rate_rps for c in classes)
        if lam <= 0 or percentile <= 50:
            return tpot
        d = [max(si - k * t_d, 0.0) for si, k in zip(s, nsteps)]
        ed2 = sum(c.rate_rps * di ** 2 * (1 + c.isl_cv2) for c, di in zip(classes, d)) / lam
        ed3 = sum(c.rate_rps * di ** 3 * (1 + c.isl_cv2) ** 3 for c, di in zip(classes, d)) / lam
        parts = []  # (weight, sd of TPOT, skewness) per class and output length with more than one output token
        for c in classes:
            for o, share in c.osl_points or ((c.osl_mean, 1.0),):
                k = o - 1
                if k >= 1 and ed2 > 0:
                    m = lam * k * tpot  # prompts arriving during the request's decode
                    parts.append((c.rate_rps * share, math.sqrt(m * ed2) / k, ed3 / (math.sqrt(m) * ed2 ** 1.5)))
        if not parts:
            return tpot
        wsum = lam  # requests with a single output token have no TPOT to miss
        q = 1 - percentile / 100.0
        nd = _normal()

        def tail(x: float, g: float) -> float:
            # P(Z > x) for a standardised variable with skewness g: a shifted gamma with the same three moments
            if g <= 1e-6:
                return 1 - nd.cdf(x)
            a = 4.0 / (g * g)
            return gamma_q(a, max(a + x * math.sqrt(a), 0.0))

        def miss(t: float) -> float:
            return sum(w * tail((t - tpot) / sd, g) for w, sd, g in parts) / wsum

        lo, hi = tpot, tpot + 20 * max(p[1] for p in parts)
        if bound_s is not None:
            decided = _tail_decision(miss, q, lo, hi, 1e-4 * tpot, bound_s)
            if decided is not None:
                return tpot if decided else _UNSTABLE
        while hi - lo > 1e-4 * tpot:  # 0.01 % of the mean TPOT: far below any SLO's resolution
            mid = (lo + hi) / 2
            if miss(mid) > q:
                lo = mid
            else:
                hi = mid
        return hi

    def meets(self, state: ReplicaState, ttft_ms: float, tpot_ms: float) -> bool:
        return state.stable and max(state.ttft_s) * 1e3 <= ttft_ms and state.tpot_s * 1e3 <= tpot_ms

    def capacity_rps(self, cls: TrafficClass, ttft_ms: float, tpot_ms: float, percentile: float,
                     rel_tol: float = 0.005, guess: float | None = None) -> float:
        """Highest per-replica rate of ``cls`` (its rate field is ignored) that meets both SLOs; 0 if none.

        ``evaluate`` gets monotonically worse with the rate, so bisection applies. ``guess`` (e.g. a sibling
        shape's capacity) only saves evaluations: a bracket is searched outward from it first (two evaluations
        when it is right to the tolerance), and the bisection then takes every outcome that monotonicity
        implies from what is known (a rate at or below one that met the SLOs meets them; at or above one that
        missed, misses), so it returns the same rate as without the guess.
        """
        if self.kv_capacity_tokens - cls.prefix_reserved < cls.tail - cls.tail_cached + cls.osl_mean:
            return 0.0

        # Decision mode skips the TPOT percentile search; only where ``evaluate`` is not overridden (a subclass
        # may adjust the state after the base evaluation).
        slo = (ttft_ms, tpot_ms) if type(self).evaluate is ReplicaModel.evaluate else None

        known = [0.0, math.inf]  # highest rate known to meet the SLOs, lowest known to miss
        below = [0.0]  # decode batch at known[0]: a start below the fixed point of any higher rate

        def ok(rate: float) -> bool:
            if rate <= known[0] or rate >= known[1]:
                return rate <= known[0]  # implied by monotonicity
            c = replace(cls, rate_rps=rate)
            if slo is None:
                st = self.evaluate([c], percentile)
            else:
                st = self.evaluate([c], percentile, slo_ms=slo, b0=below[0])
            met = self.meets(st, ttft_ms, tpot_ms)
            if met:
                if rate > known[0]:
                    below[0] = st.decode_batch
                known[0] = max(known[0], rate)
            else:
                known[1] = min(known[1], rate)
            return met

        # Upper bound: prefill alone saturates at chunk / (isl x T_m(0)); decode alone at max_num_seqs / (osl x T_d).
        new = cls.isl_mean - cls.cached_tokens
        per_step = min(new, self.max_batched_tokens)
        prefill_t = new / per_step * self.iteration_s(0, 0, per_step, cls.cached_tokens)
        hi = min(1.0 / prefill_t, self.max_num_seqs / (cls.osl_mean * self.iteration_s(1, cls.isl_mean))) * 1.01
        if guess is not None and 0.0 < guess < hi:
            _bracket(ok, guess, hi, rel_tol)  # fills ``known``
        if not ok(1e-9):
            return 0.0
        return bisect_max(ok, 0.0, hi, rel_tol)

    # ------------------------------------------------------------------ disaggregated roles (prefill / decode)
    @property
    def kv_bytes_per_token(self) -> float:
        """KV bytes of one token of context for the whole model (all layers and KV heads): what a prefill
        instance hands to a decode instance per input token."""
        return 2 * self.L * self.kv_heads * self.head_dim * self.kvbytes

    def evaluate_prefill(self, classes: list[TrafficClass] | tuple[TrafficClass, ...],
                         percentile: float = 99.0) -> ReplicaState:
        """Steady state of a prefill-only replica: every step carries prompt chunks and nothing decodes (the first
        token comes out of the prefill, the rest on a decode replica). The same M/G/1 prefill server as
        ``evaluate`` with a decode batch of 0: service of a prompt = isl / chunk steps of T(0, chunk), waiting time
        at the percentile from the exponential tail. KV: only the prompts being prefilled (handed off after)."""
        lam = sum(c.rate_rps for c in classes)
        n = len(classes)
        fe = self.request_overhead
        if lam <= 0:
            ttft = tuple(fe + self.prefill_s(c.tail, 0, 0) for c in classes)
            mean = tuple(fe + self.prefill_s(c.isl_mean, 0, 0) for c in classes)
            return ReplicaState(True, "", 0.0, ttft, mean, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        K = self.max_batched_tokens
        rho, steps_total, s = 0.0, 0.0, []
        for c in classes:
            per_step = min(c.isl_mean, K)
            steps = c.isl_mean / per_step
            t = self.iteration_s(0, 0, per_step, (c.isl_mean - per_step) / 2)
            s.append(steps * t)
            rho += c.rate_rps * steps * t
            steps_total += c.rate_rps * steps
        if rho >= 1:
            inf = (_UNSTABLE,) * n
            return ReplicaState(False, f"prefill saturated (utilisation {rho:.2f})", 0.0, inf, inf, 1.0, 0.0,
                                _UNSTABLE, _UNSTABLE, _UNSTABLE, 0.0)
        wait_p, wait_mean, pre_tokens = _prefill_queue(classes, s, lam, rho, percentile)
        kv_used = rho * pre_tokens / max(steps_total, 1e-12)
        ttft = tuple(fe + wait_p + self.prefill_s(c.tail, 0, 0) for c in classes)
        mean = tuple(fe + wait_mean + self.prefill_s(c.isl_mean, 0, 0) for c in classes)
        return ReplicaState(True, "", 0.0, ttft, mean, rho, 0.0, kv_used, wait_p, wait_mean, 0.0)

    def evaluate_decode(self, classes: list[TrafficClass] | tuple[TrafficClass, ...],
                        percentile: float = 99.0, max_iter: int = 200) -> ReplicaState:
        """Steady state of a decode-only replica: requests arrive with their prompt's KV (transferred) and
        decode osl - 1 tokens; every step is decode-only, T_d = T(b, mean context). Little's law gives
        b = (sum rate x (osl - 1)) x T_d; iterate to the fixed point. Without prompts interleaved the step time
        does not jump, so TPOT at the percentile is the step time at the batch size the Poisson number of
        requests in the system (M/G/inf) reaches at that percentile, b_p = b + z sqrt(b) (normal approximation;
        the batch changes on the time scale of a request's own decode, so its steps do not average it out)."""
        from statistics import NormalDist

        n = len(classes)
        D = sum(c.rate_rps * max(c.osl_mean - 1, 0.0) for c in classes)
        if D <= 0:
            t1 = self.iteration_s(1, max((c.tail for c in classes), default=0.0))
            return ReplicaState(True, "", t1, (0.0,) * n, (0.0,) * n, 0.0, 0.0, 0.0, 0.0, 0.0, t1)
        ctx = sum(c.rate_rps * max(c.osl_mean - 1, 0.0) * (c.isl_mean + c.osl_mean / 2) for c in classes) / D
        b = 1.0
        for _ in range(max_iter):
            t_d = self.iteration_s(b, ctx)
            b_new = D * t_d
            if b_new > self.max_num_seqs:
                inf = (_UNSTABLE,) * n
                return ReplicaState(False, f"needs a decode batch of {b_new:.0f} > max_num_seqs {self.max_num_seqs}",
                                    _UNSTABLE, inf, inf, 1.0, b_new, _UNSTABLE, 0.0, 0.0, _UNSTABLE)
            if abs(b_new - b) <= 1e-4 * max(b_new, 1.0):
                b = b_new
                break
            b = b_new
        kv_used = b * ctx
        if kv_used > self.memory.kv_cache_tokens:
            inf = (_UNSTABLE,) * n
            return ReplicaState(False, f"KV cache needs {kv_used:.0f} tokens > capacity {self.memory.kv_cache_tokens}",
                                _UNSTABLE, inf, inf, 1.0, b, kv_used, 0.0, 0.0, _UNSTABLE)
        tpot = self.iteration_s(max(b, 1.0), ctx)
        tpot_p = tpot
        if percentile > 50:
            z = NormalDist().inv_cdf(percentile / 100.0)
            tpot_p = self.iteration_s(max(b + z * math.sqrt(max(b, 1.0)), 1.0), ctx)
        return ReplicaState(True, "", tpot_p, (0.0,) * n, (0.0,) * n, 0.0, b, kv_used, 0.0, 0.0, tpot)

    def capacity_rps_role(self, role: str, cls: TrafficClass, ttft_ms: float, tpot_ms: float, percentile: float,
                          transfer_s: float = 0.0, rel_tol: float = 0.005) -> float:
        """``capacity_rps`` for a ``prefill`` replica (TTFT, the KV hand-off ``transfer_s`` included, within
        ``ttft_ms``) or a ``decode`` replica (TPOT within ``tpot_ms``, prompt plus output in its KV cache)."""
        if role == "prefill":
            if self.memory.kv_cache_tokens < cls.tail:
                return 0.0

            def ok(rate: float) -> bool:
                st = self.evaluate_prefill([TrafficClass(rate, cls.isl_mean, 1.0, cls.isl_tail, cls.isl_cv2)],
                                           percentile)
                return st.stable and (st.ttft_s[0] + transfer_s) * 1e3 <= ttft_ms

            per_step = min(cls.isl_mean, self.max_batched_tokens)
            hi = 1.01 / (cls.isl_mean / per_step * self.iteration_s(0, 0, per_step, 0))
        else:
            if self.memory.kv_cache_tokens < cls.tail + cls.osl_mean or cls.osl_mean <= 1:
                return 0.0

            def ok(rate: float) -> bool:
                st = self.evaluate_decode([replace(cls, rate_rps=rate, cached_tokens=0.0, prefix_reserved=0.0)],
                                          percentile)
                return st.stable and st.tpot_s * 1e3 <= tpot_ms

            hi = 1.01 * self.max_num_seqs / ((cls.osl_mean - 1) * self.iteration_s(1, cls.isl_mean))
        if not ok(1e-9):
            return 0.0
        return bisect_max(ok, 0.0, hi, rel_tol)

    def zero_load(self, cls: TrafficClass) -> tuple[float, float]:
        """(TTFT ms, TPOT ms) of a lone request: the best this replica can ever do for ``cls``."""
        if self.kv_tier is None:
            ttft = self.request_overhead + self.prefill_s(cls.tail, 0, 0, 0.0, cls.tail_cached)
            tpot = self.iteration_s(1, cls.tail + cls.osl_mean / 2)
            return ttft * 1e3, tpot * 1e3
        ctx = cls.tail + cls.osl_mean / 2
        ttft = self.request_overhead + self.prefill_s(cls.tail, 0, 0, self.remote_share(cls.tail), cls.tail_cached)
        tpot = self.iteration_s(1, ctx, 0.0, 0.0, 1.0, self.remote_share(ctx))
        return ttft * 1e3, tpot * 1e3

    # ------------------------------------------------------------------ closed loop (predict)
    def max_concurrency(self, isl: float, osl: float) -> int:
        """Largest number of requests whose full context fits in the KV cache at once."""
        return int(self.memory.kv_cache_tokens // (isl + osl))

    def predict_closed_loop(self, isl: float, osl: float, concurrency: int,
                            frontend: bool = True) -> ClosedLoopPrediction:
        """Steady state with ``concurrency`` requests always in flight (a benchmark client's setting).

        Finds the arrival rate at which Little's law gives ``concurrency`` requests in the system,
        N = rate x (mean TTFT + (osl - 1) x TPOT), then reports mean TTFT, TPOT and throughputs.
        ``frontend=False`` leaves the engine's per-request front-end time out of the loop: for a burst of
        queued requests (offline throughput runs) it overlaps with GPU work instead of holding a slot.
        """
        mem = self.memory
        maxc = self.max_concurrency(isl, osl)
        fits = mem.kv_cache_tokens > 0 and concurrency <= maxc
        wide = ReplicaModel(self.model, self.gpu, self.engine, self.tp, self.pp, self.dtype,
                            max(self.max_num_seqs, concurrency), self.max_batched_tokens, self.kv_dtype)
        # Let the KV check pass for an over-full request (predict reports fits=False instead of failing).
        wide.__dict__["memory"] = MemoryFit(*[getattr(mem, f) for f in MemoryFit.__slots__[:-1]], 10**12)
        if not frontend:
            wide.request_overhead = 0.0

        def in_system(rate: float) -> tuple[float, ReplicaState]:
            st = wide.evaluate([TrafficClass(rate, isl, osl)], 50.0)
            if not st.stable:
                return _UNSTABLE, st
            return rate * (st.ttft_mean_s[0] + max(osl - 1, 0) * st.tpot_mean_s), st

        lo, hi = 0.0, 1.0
        while in_system(hi)[0] < concurrency and hi < 1e6:
            lo, hi = hi, hi * 2
        for _ in range(60):
            mid = (lo + hi) / 2
            if in_system(mid)[0] < concurrency:
                lo = mid
            else:
                hi = mid
        rate = lo
        st = in_system(rate)[1]
        if not st.stable:  # concurrency beyond what the engine can batch: report saturation
            rate, st = 0.0, wide.evaluate([TrafficClass(1e-9, isl, osl)], 50.0)
        gpus = self.tp * self.pp
        return ClosedLoopPrediction(
            ttft_ms=st.ttft_mean_s[0] * 1e3, tpot_ms=st.tpot_mean_s * 1e3, requests_per_s=rate,
            output_tokens_per_s=rate * osl, output_tokens_per_s_per_gpu=rate * osl / gpus,
            concurrency=concurrency, fits=fits, max_concurrency=maxc, kv_cache_tokens=mem.kv_cache_tokens,
        )

    # ------------------------------------------------------------------ static batch and open loop
    def predict_static_batch(self, isl: float, osl: float, batch: int) -> BatchPrediction:
        """``batch`` prompts of ``isl`` tokens prefilled together (in steps of at most ``max_batched_tokens``
        tokens, whole prompts per step when they fit), then ``osl - 1`` decode steps of the whole batch with
        the context growing from isl to isl + osl (mean isl + osl / 2). No front-end time: these are the
        engines' offline latency benchmarks (gptSessionBenchmark, benchmark_latency)."""
        per_step = max(1, int(self.max_batched_tokens // isl)) if isl <= self.max_batched_tokens else 0
        t_pre = 0.0
        if per_step:
            full, rest = divmod(batch, per_step)
            if full:
                t_pre += full * self.iteration_s(0, 0, per_step * isl, 0, per_step)
            if rest:
                t_pre += self.iteration_s(0, 0, rest * isl, 0, rest)
        else:
            t_pre = batch * self.prefill_s(isl, 0, 0)
        t_dec = self.iteration_s(batch, isl + osl / 2) if osl > 1 else 0.0
        e2e = t_pre + max(osl - 1, 0) * t_dec
        fits = self.memory.kv_cache_tokens >= batch * (isl + osl)
        tput = batch * osl / e2e
        return BatchPrediction(t_pre * 1e3, t_dec * 1e3, e2e * 1e3, tput, tput / (self.tp * self.pp), batch, fits)

    def predict_open_loop(self, isl: float, osl: float, rate_rps: float) -> ClosedLoopPrediction:
        """Poisson arrivals at ``rate_rps`` (a serving benchmark's request rate): mean TTFT and TPOT."""
        st = self.evaluate([TrafficClass(rate_rps, isl, osl)], 50.0)
        mem = self.memory
        maxc = self.max_concurrency(isl, osl)
        conc = rate_rps * (st.ttft_mean_s[0] + max(osl - 1, 0) * st.tpot_mean_s) if st.stable else _UNSTABLE
        return ClosedLoopPrediction(
            ttft_ms=st.ttft_mean_s[0] * 1e3, tpot_ms=st.tpot_mean_s * 1e3, requests_per_s=rate_rps if st.stable else 0.0,
            output_tokens_per_s=rate_rps * osl if st.stable else 0.0,
            output_tokens_per_s_per_gpu=rate_rps * osl / (self.tp * self.pp) if st.stable else 0.0,
            concurrency=int(math.ceil(conc)) if math.isfinite(conc) else 0, fits=st.stable, max_concurrency=maxc,
            kv_cache_tokens=mem.kv_cache_tokens)

    # ------------------------------------------------------------------ a burst of queued requests (offline runs)
    def predict_burst(self, isl: list[float] | tuple[float, ...], osl: list[float] | tuple[float, ...],
                      frontend: bool = False) -> "BurstPrediction":
        """All requests (``isl[i]``, ``osl[i]``) queued at time 0 and served to the end, step by step, the way a
        continuous-batching engine does: admit in order while a slot (max_num_seqs) and KV room are free; every
        step decodes one token for each running request and fills the rest of the token budget with prompt
        chunks, first come first served; a request leaves after its last token.
        KV admission follows the engine profile's ``kv_admission``: ``reserve`` (room for prompt and output,
        never evicts: TensorRT-LLM's guaranteed-no-evict) or ``on_demand`` (room for the prompt; when decode
        growth overflows the cache the newest requests are preempted and recomputed later: vLLM, SGLang).
        Deterministic; reports the makespan, throughputs, mean TTFT (queueing included) and mean TPOT.
        This is the drain that steady-state formulas miss: as long requests finish last, the batch thins out."""
        from collections import deque

        n = len(isl)
        if n == 0 or len(osl) != n:
            raise ValueError("isl and osl must be non-empty and of equal length")
        cap = self.memory.kv_cache_tokens
        K = self.max_batched_tokens
        reserve = (self.engine.kv_admission or "on_demand") == "reserve"
        fe = self.request_overhead if frontend else 0.0
        queue = deque((float(isl[i]), float(osl[i]), i) for i in range(n))
        first = [-1.0] * n
        tpot = [0.0] * n
        kv_used = 0.0  # reserve: reserved tokens; on_demand: tokens held now
        # running: [prompt tokens left, prompt length, tokens generated since admission, tokens still owed, index]
        running: list[list[float]] = []
        t = 0.0
        done = 0
        while done < n:
            while queue and len(running) < self.max_num_seqs:
                pi, oi, i = queue[0]
                need = pi + oi if reserve else pi
                if kv_used + need > cap and running:
                    break
                queue.popleft()
                running.append([pi, pi, 0.0, oi, float(i)])
                kv_used += need
            dec = [r for r in running if r[0] <= 0]
            b = len(dec)
            ctx = sum(r[1] + r[2] for r in dec) / b if b else 0.0
            budget = max(K - b, 0)
            p_tok, p_ctx, seqs, chunks = 0.0, 0.0, 0, []
            for r in running:
                if r[0] > 0 and budget > 0:
                    c = min(r[0], budget)
                    chunks.append((r, c))
                    p_ctx += (r[1] - r[0]) * c
                    p_tok += c
                    budget -= c
                    seqs += 1
            if b == 0 and p_tok == 0:
                raise ValueError("no progress: a request needs more KV cache than the replica has")
            t += self.iteration_s(b, ctx, p_tok, p_ctx / p_tok if p_tok else 0.0, max(seqs, 1))
            for r in dec:
                r[2] += 1
            for r, c in chunks:
                r[0] -= c
                if r[0] <= 0:  # the step that finishes a prompt emits the next token
                    r[2] += 1
                    i = int(r[4])
                    if first[i] < 0:
                        first[i] = t
            if not reserve:
                kv_used += b
            keep = []
            for r in running:
                if r[0] <= 0 and r[2] >= r[3]:
                    i = int(r[4])
                    o = float(osl[i])
                    tpot[i] = (t - first[i]) / (o - 1) if o > 1 else 0.0
                    kv_used -= (r[1] + r[3]) if reserve else (r[1] + r[2])
                    done += 1
                else:
                    keep.append(r)
            running = keep
            while not reserve and kv_used > cap and len(running) > 1:
                r = running.pop()  # preempt the newest: its KV is freed and recomputed on readmission
                kv_used -= r[1] + r[2] if r[0] <= 0 else r[1]
                queue.appendleft((r[1] + r[2], r[3] - r[2], int(r[4])))
        out_tok = float(sum(osl))
        in_tok = float(sum(isl))
        gpus = self.tp * self.pp
        multi = max(sum(1 for o in osl if o > 1), 1)
        return BurstPrediction(makespan_s=t, requests_per_s=n / t, output_tokens_per_s=out_tok / t,
                               output_tokens_per_s_per_gpu=out_tok / t / gpus, total_tokens_per_s=(in_tok + out_tok) / t,
                               ttft_ms=1e3 * (sum(first) / n + fe), tpot_ms=1e3 * sum(tpot) / multi, requests=n)


class _Aitken:
    """Aitken's delta-squared extrapolation of ``evaluate``'s decode-batch fixed point b = f(b), with a safe
    fallback. Plain iteration from 0 climbs to the fixed point from below (f grows with b), often slowly near
    saturation; every third plain iterate is replaced by the extrapolation of the last three (Steffensen's
    method), which lands on the fixed point in a few steps. Convergence is still judged on a plain step, to the
    same tolerance. An extrapolation may overshoot the fixed point: if a state looks unstable once any has been
    used, ``retreat`` goes back to the highest plain iterate known to lie below the fixed point (one with
    f(b) >= b) and plain iteration continues from there, unaccelerated, so instability is only ever concluded
    from plain iterates below the fixed point, as without acceleration."""

    __slots__ = ("hist", "safe", "on", "cap", "used")

    def __init__(self, cap: float, on: bool = True, start: float = 0.0):
        self.hist: list[float] = [start]
        self.safe = start
        self.on = on
        self.cap = cap  # extrapolations above this are not used
        self.used = False

    def step(self, b: float, b_new: float) -> float | None:
        """A plain step b -> f(b) = ``b_new``; returns the batch to continue from instead of b_new, or None."""
        if b_new >= b:
            self.safe = max(self.safe, b_new)  # f(b) >= b: b and f(b) lie below the fixed point
        if not self.on:
            return None
        h = self.hist
        h.append(b_new)
        if len(h) < 3:
            return None
        b0, b1, b2 = h
        self.hist = [b2]
        den = b2 - 2 * b1 + b0
        if den == 0 or not (b1 - b0) * (b2 - b1) > 0:  # not a monotone run: leave it to plain iteration
            return None
        acc = b0 - (b1 - b0) ** 2 / den
        if not (math.isfinite(acc) and 0.0 <= acc <= self.cap):
            return None
        self.used = True
        self.hist = [acc]
        return acc

    def retreat(self) -> bool:
        if not (self.on and self.used):
            return False
        self.on = False
        return True


def _bracket(ok, guess: float, bound: float, rel_tol: float) -> tuple[float, float]:
    """(lo, hi) around the rate where the monotone ``ok`` turns false, searched outward from ``guess``: ok(lo)
    holds (or lo is 0: not known), ok(hi) does not (or hi is ``bound``). Steps grow 4-fold from just under
    rel_tol, so a guess right to the tolerance costs two evaluations."""
    step = 0.999 * rel_tol
    if ok(guess):
        lo = guess
        while True:
            t = lo * (1 + step)
            if t >= bound:
                return lo, bound
            if not ok(t):
                return lo, t
            lo, step = t, step * 4
    hi = guess
    while True:
        t = hi / (1 + step)
        if t < 1e-6 * guess:
            return 0.0, hi
        if ok(t):
            return t, hi
        hi, step = t, step * 4


def _tail_decision(miss, q: float, lo: float, hi: float, width: float, bound: float) -> bool | None:
    """Whether the percentile search of ``_tpot_tail`` (bisection of the decreasing ``miss`` on [lo, hi] to
    ``width``) would end at or below ``bound``, from at most two evaluations of ``miss``; None when ``bound`` is
    within ``width`` of the answer and only the search itself can tell."""
    if bound < lo:
        return False  # the search never returns less than lo (the mean TPOT)
    if bound >= hi:
        return True  # ... nor more than hi
    if miss(bound) > q:
        return False  # the answer lies above bound
    if bound - width >= lo and miss(bound - width) <= q:
        return True  # the answer lies at or below bound - width, and the search ends within width of it
    return None


def _prefill_queue(classes, s: list[float], lam: float, rho: float, percentile: float) -> tuple[float, float, float]:
    """The M/G/1 prefill queue of ``evaluate`` and ``evaluate_prefill``: (waiting time at ``percentile``, mean
    waiting time, prompt tokens offered per second). Service times ``s`` per class, utilisation ``rho`` < 1;
    P(W > t) = rho exp(-t / theta), theta = E[S^2] / (2 E[S] (1 - rho)) (mean: Pollaczek-Khinchine)."""
    es = es2 = pre_tokens = 0.0
    for c, si in zip(classes, s):
        es += c.rate_rps * si
        es2 += c.rate_rps * si * si * (1 + c.isl_cv2)
        pre_tokens += c.rate_rps * c.isl_mean
    es /= lam
    es2 /= lam
    theta = es2 / (2 * es * (1 - rho))
    q = 1 - percentile / 100.0
    wait_p = theta * math.log(rho / q) if rho > q else 0.0
    return wait_p, rho * theta, pre_tokens


@cache
def _normal():
    """The standard normal distribution (made once: ``_tpot_tail`` runs hundreds of thousands of times)."""
    from statistics import NormalDist

    return NormalDist()


def bisect_max(ok, lo: float, hi: float, rel_tol: float) -> float:
    """Largest x in [lo, hi] with ok(x), to ``rel_tol``, for a predicate that holds below some point and fails
    above it (``ok(lo)`` is assumed, ``ok(hi)`` is not)."""
    while hi - lo > rel_tol * max(lo, 1e-6):
        mid = (lo + hi) / 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


def gamma_q(a: float, x: float) -> float:
    """Regularised upper incomplete gamma Q(a, x) = Gamma(a, x) / Gamma(a), for a > 0, x >= 0.

    The power series of P(a, x) for x < a + 1 and Legendre's continued fraction (evaluated with the modified
    Lentz method) otherwise, to 1e-12 relative; plain Python, because importing scipy.special would add most
    of a second to every command's start-up."""
    if x <= 0:
        return 1.0
    log_front = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1:
        term = total = 1.0 / a
        n = a
        for _ in range(10_000):
            n += 1
            term *= x / n
            total += term
            if abs(term) < abs(total) * 1e-12:
                break
        return max(0.0, 1.0 - total * math.exp(log_front))
    tiny = 1e-300
    b = x + 1 - a
    c = 1 / tiny
    d = 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-12:
            break
    return min(1.0, math.exp(log_front) * h)
