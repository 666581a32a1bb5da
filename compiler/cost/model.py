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
from dataclasses import dataclass
from functools import cached_property

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

    @property
    def tail(self) -> float:
        return self.isl_mean if self.isl_tail is None else self.isl_tail


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
    tpot_s: float  # mean time between output tokens
    ttft_s: tuple[float, ...]  # per class: TTFT at the percentile (queueing + prefill of isl_tail)
    ttft_mean_s: tuple[float, ...]  # per class: mean TTFT (mean wait + prefill of isl_mean)
    utilization: float  # share of engine steps that carry prefill work (prefill server utilisation)
    decode_batch: float  # mean number of requests decoding
    kv_tokens_used: float
    wait_p_s: float  # waiting time at the percentile
    wait_mean_s: float


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


_UNSTABLE = float("inf")


class ReplicaModel:
    """Analytic model of one serving replica: ``tp`` x ``pp`` GPUs running one copy of the model."""

    def __init__(self, model: ModelProfile, gpu: GpuProfile, engine: EngineProfile, tp: int = 1, pp: int = 1,
                 dtype: str = "bf16", max_num_seqs: int | None = None, max_batched_tokens: int = 8192):
        if tp < 1 or pp < 1:
            raise ValueError("tp and pp must be >= 1")
        if dtype not in BYTES:
            raise ValueError(f"dtype must be one of {sorted(BYTES)}")
        self.model, self.gpu, self.engine = model, gpu, engine
        self.tp, self.pp, self.dtype = tp, pp, dtype
        self.max_num_seqs = int(max_num_seqs or engine.max_num_seqs.value)
        self.max_batched_tokens = int(max_batched_tokens)
        m = model
        self.L = m.num_layers.value
        self.H = m.hidden_size.value
        self.heads = m.num_attention_heads.value
        self.kv_heads = m.num_kv_heads.value
        self.head_dim = m.head_dim.value
        self.params = m.params_billion.value * 1e9
        self.active = m.active_params_billion.value * 1e9
        self.experts = m.num_experts.value
        self.topk = m.experts_per_token.value
        self.wbytes = BYTES[dtype]
        self.kvbytes = BYTES[dtype]
        g = gpu
        self.flops_linear = (g.fp8_tflops.value if dtype == "fp8" else g.bf16_tflops.value) * 1e12 * g.compute_efficiency.value
        self.flops_attn = g.bf16_tflops.value * 1e12 * g.compute_efficiency.value
        self.bw = g.hbm_bandwidth_gbps.value * 1e9 * g.bandwidth_efficiency.value
        self.ar_lat = g.allreduce_latency_us.value * 1e-6
        self.ar_bw = g.allreduce_bus_gbps.value * 1e9
        self.link_bw = g.link_bandwidth_gbps.value * 1e9
        # Pipeline stages sit on different nodes (PP is used once TP fills a node): hand-offs cross the NICs.
        self.nic_bw_per_gpu = g.node_network_gbps.value * 1e9 / g.gpus_per_node.value
        self.overhead = engine.step_overhead_ms.value * 1e-3
        # Expert weights: the share of parameters in MoE experts, read only for experts the batch touches.
        inter = m.intermediate_size.value
        self.expert_params = 3 * self.H * inter * self.L * self.experts if self.experts > 1 else 0.0
        self.dense_params = self.params - self.expert_params

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

    # ------------------------------------------------------------------ one engine step
    def iteration_s(self, decode_batch: float, decode_ctx: float, prefill_tokens: float = 0.0,
                    prefill_ctx: float = 0.0) -> float:
        """Seconds of one engine step that decodes ``decode_batch`` requests (mean context ``decode_ctx``)
        and prefills ``prefill_tokens`` tokens (mean prior context ``prefill_ctx``).

        Per pipeline stage (1/pp of the layers, 1/pp of the batch as one micro-batch):
          memory  = (weights read + KV read) / (HBM bandwidth x efficiency)
          compute = (2 x active params x tokens + attention FLOPs) / (peak x efficiency)
          stage   = max(memory, compute) + 2 all-reduces per layer when tp > 1
        step = pp x stage + (pp - 1) x activation hand-off over the nodes' NICs + per-step engine overhead.
        """
        pp, tp = self.pp, self.tp
        b = decode_batch / pp
        p = prefill_tokens / pp
        tokens = b + p
        gpus = tp * pp
        # Weights read once per step; with MoE only the experts some token is routed to.
        if self.expert_params:
            touched = 1.0 - (1.0 - self.topk / self.experts) ** max(tokens, 0.0)
            wbytes = (self.dense_params + self.expert_params * touched) * self.wbytes / gpus
        else:
            wbytes = self.params * self.wbytes / gpus
        kv_read = b * decode_ctx * self.memory.kv_bytes_per_token_per_gpu
        mem_t = (wbytes + kv_read) / self.bw
        lin = 2 * self.active * tokens / gpus
        attn = 4 * (self.L / pp) * self.heads * self.head_dim * (b * decode_ctx + p * (prefill_ctx + p / 2)) / tp
        comp_t = lin / self.flops_linear + attn / self.flops_attn
        stage = max(mem_t, comp_t)
        if tp > 1:
            msg = tokens * self.H * 2  # bytes of one layer's activations (bf16)
            stage += 2 * (self.L / pp) * (self.ar_lat + msg * 2 * (tp - 1) / tp / self.ar_bw)
        hop = (pp - 1) * (tokens * self.H * 2 / (self.nic_bw_per_gpu * tp) + self.ar_lat) if pp > 1 else 0.0
        return pp * stage + hop + self.overhead

    def prefill_s(self, isl: float, decode_batch: float, decode_ctx: float) -> float:
        """Prefill of one prompt in chunks of the token budget left after the decode batch."""
        chunk = self.max_batched_tokens - decode_batch
        if chunk <= 0:
            return _UNSTABLE
        n = max(1, math.ceil(isl / chunk))
        last = isl - (n - 1) * chunk
        t = 0.0
        for i in range(n - 1):
            t += self.iteration_s(decode_batch, decode_ctx, chunk, i * chunk)
        return t + self.iteration_s(decode_batch, decode_ctx, last, (n - 1) * chunk)

    # ------------------------------------------------------------------ steady state under load
    def evaluate(self, classes: list[TrafficClass] | tuple[TrafficClass, ...], percentile: float = 99.0,
                 max_iter: int = 200) -> ReplicaState:
        """Steady state of continuous batching with chunked prefill at the offered per-replica load.

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
            ttft = tuple(self.prefill_s(c.tail, 0, 0) for c in classes)
            mean = tuple(self.prefill_s(c.isl_mean, 0, 0) for c in classes)
            return ReplicaState(True, "", self.iteration_s(1, 0), ttft, mean, 0.0, 0.0, 0.0, 0.0, 0.0)
        D = sum(c.rate_rps * c.osl_mean for c in classes)
        ctx_dec = sum(c.rate_rps * c.osl_mean * (c.isl_mean + c.osl_mean / 2) for c in classes) / max(D, 1e-12)
        K = self.max_batched_tokens
        b = 0.0
        kv_cap = self.memory.kv_cache_tokens

        def unstable(reason: str) -> ReplicaState:
            inf = (_UNSTABLE,) * n
            return ReplicaState(False, reason, _UNSTABLE, inf, inf, 1.0, b, _UNSTABLE, _UNSTABLE, _UNSTABLE)

        for _ in range(max_iter):
            chunk = K - b
            if chunk < 1:
                return unstable(f"decode batch {b:.0f} leaves no room in max_num_batched_tokens {K}")
            t_d = self.iteration_s(b, ctx_dec)
            rho, prefill_steps, s = 0.0, 0.0, []
            for c in classes:
                per_step = min(c.isl_mean, chunk)
                steps = c.isl_mean / per_step
                t = self.iteration_s(b, ctx_dec, per_step, (c.isl_mean - per_step) / 2)
                s.append(steps * t)
                rho += c.rate_rps * steps * t
                prefill_steps += c.rate_rps * steps
            if rho >= 1:
                return unstable(f"prefill saturated (utilisation {rho:.2f})")
            tpot = 1.0 / (prefill_steps + (1 - rho) / t_d)
            b_new = D * tpot
            if b_new > self.max_num_seqs:
                return unstable(f"needs a decode batch of {b_new:.0f} > max_num_seqs {self.max_num_seqs}")
            if abs(b_new - b) <= 1e-4 * max(b_new, 1.0):
                b = b_new
                break
            b = b_new
        else:
            return unstable("no steady state (load too close to saturation)")
        es = sum(c.rate_rps * si for c, si in zip(classes, s)) / lam
        es2 = sum(c.rate_rps * si * si * (1 + c.isl_cv2) for c, si in zip(classes, s)) / lam
        theta = es2 / (2 * es * (1 - rho))
        q = 1 - percentile / 100.0
        wait_p = theta * math.log(rho / q) if rho > q else 0.0
        wait_mean = rho * theta
        # KV in use: decoding requests' contexts plus the prompts being prefilled.
        kv_used = b * ctx_dec + rho * sum(c.rate_rps * c.isl_mean for c in classes) / max(prefill_steps, 1e-12)
        if kv_used > kv_cap:
            return unstable(f"KV cache needs {kv_used:.0f} tokens > capacity {kv_cap}")
        ttft = tuple(wait_p + self.prefill_s(c.tail, b, ctx_dec) for c in classes)
        ttft_mean = tuple(wait_mean + self.prefill_s(c.isl_mean, b, ctx_dec) for c in classes)
        return ReplicaState(True, "", tpot, ttft, ttft_mean, rho, b, kv_used, wait_p, wait_mean)

    def meets(self, state: ReplicaState, ttft_ms: float, tpot_ms: float) -> bool:
        return state.stable and max(state.ttft_s) * 1e3 <= ttft_ms and state.tpot_s * 1e3 <= tpot_ms

    def capacity_rps(self, cls: TrafficClass, ttft_ms: float, tpot_ms: float, percentile: float,
                     rel_tol: float = 0.005) -> float:
        """Highest per-replica rate of ``cls`` (its rate field is ignored) that meets both SLOs; 0 if none.

        ``evaluate`` gets monotonically worse with the rate, so bisection applies.
        """
        if self.memory.kv_cache_tokens < cls.tail + cls.osl_mean:
            return 0.0

        def ok(rate: float) -> bool:
            c = TrafficClass(rate, cls.isl_mean, cls.osl_mean, cls.isl_tail, cls.isl_cv2)
            return self.meets(self.evaluate([c], percentile), ttft_ms, tpot_ms)

        if not ok(1e-9):
            return 0.0
        # Upper bound: prefill alone saturates at chunk / (isl x T_m(0)); decode alone at max_num_seqs / (osl x T_d).
        per_step = min(cls.isl_mean, self.max_batched_tokens)
        prefill_t = cls.isl_mean / per_step * self.iteration_s(0, 0, per_step, 0)
        hi = min(1.0 / prefill_t, self.max_num_seqs / (cls.osl_mean * self.iteration_s(1, cls.isl_mean))) * 1.01
        lo = 0.0
        while hi - lo > rel_tol * max(lo, 1e-6):
            mid = (lo + hi) / 2
            if ok(mid):
                lo = mid
            else:
                hi = mid
        return lo

    def zero_load(self, cls: TrafficClass) -> tuple[float, float]:
        """(TTFT ms, TPOT ms) of a lone request: the best this replica can ever do for ``cls``."""
        ttft = self.prefill_s(cls.tail, 0, 0)
        tpot = self.iteration_s(1, cls.tail + cls.osl_mean / 2)
        return ttft * 1e3, tpot * 1e3

    # ------------------------------------------------------------------ closed loop (predict)
    def max_concurrency(self, isl: float, osl: float) -> int:
        """Largest number of requests whose full context fits in the KV cache at once."""
        return int(self.memory.kv_cache_tokens // (isl + osl))

    def predict_closed_loop(self, isl: float, osl: float, concurrency: int) -> ClosedLoopPrediction:
        """Steady state with ``concurrency`` requests always in flight (a benchmark client's setting).

        Finds the arrival rate at which Little's law gives ``concurrency`` requests in the system,
        N = rate x (mean TTFT + (osl - 1) x TPOT), then reports mean TTFT, TPOT and throughputs.
        """
        mem = self.memory
        maxc = self.max_concurrency(isl, osl)
        fits = mem.kv_cache_tokens > 0 and concurrency <= maxc
        wide = ReplicaModel(self.model, self.gpu, self.engine, self.tp, self.pp, self.dtype,
                            max(self.max_num_seqs, concurrency), self.max_batched_tokens)
        # Let the KV check pass for an over-full request (predict reports fits=False instead of failing).
        wide.__dict__["memory"] = MemoryFit(*[getattr(mem, f) for f in MemoryFit.__slots__[:-1]], 10**12)

        def in_system(rate: float) -> tuple[float, ReplicaState]:
            st = wide.evaluate([TrafficClass(rate, isl, osl)], 50.0)
            if not st.stable:
                return _UNSTABLE, st
            return rate * (st.ttft_mean_s[0] + max(osl - 1, 0) * st.tpot_s), st

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
            ttft_ms=st.ttft_mean_s[0] * 1e3, tpot_ms=st.tpot_s * 1e3, requests_per_s=rate,
            output_tokens_per_s=rate * osl, output_tokens_per_s_per_gpu=rate * osl / gpus,
            concurrency=concurrency, fits=fits, max_concurrency=maxc, kv_cache_tokens=mem.kv_cache_tokens,
        )
