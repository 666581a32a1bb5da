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
from functools import cached_property

from trimtab.cost.moe import (MoeLayer, attention_kernels, attention_params, check_kv_dtype, check_layout,
                              expert_params, is_mla, kernel_shape, kv_elements, moe_layers)
from trimtab.cost.predictions import ReplicaPredictions
from trimtab.cost.queueing import _Aitken, _prefill_queue, _z, ctx_sq, gamma_q, map_slope, over_caps
from trimtab.cost.records import (BYTES, GIB, UNSTABLE, BatchPrediction, BurstPrediction,
                                   ClosedLoopPrediction, KvTier, MemoryFit, ReplicaState, TrafficClass)
from trimtab.cost.roles import ReplicaRoles
from trimtab.cost.search import bisect_max, bracket
from trimtab.cost.step import ReplicaStep, queueing_compiled, tpot_tail
from trimtab.cost.tiers import ReplicaTiers
from trimtab.profiles.loader import EngineProfile, GpuProfile, ModelProfile, value_or

# Re-exported: the records and the search are the cost model's vocabulary for its callers.
__all__ = ["BYTES", "GIB", "UNSTABLE", "BatchPrediction", "BurstPrediction", "ClosedLoopPrediction", "KvTier",
           "MemoryFit", "ReplicaModel", "ReplicaState", "TrafficClass", "bisect_max", "gamma_q"]

FIRST_HALVINGS = 2  # bisection points tried before asking whether any rate meets the SLOs (capacity_rps)
MAX_ITER = 200  # steps of ``evaluate``'s fixed point before it is called no steady state


class ReplicaModel(ReplicaStep, ReplicaRoles, ReplicaPredictions, ReplicaTiers):
    """Analytic model of one serving replica: ``tp`` x ``pp`` GPUs running one copy of the model. The step
    time, memory fit, steady state and capacity are here; the disaggregated roles
    (``compiler/cost/roles.py``), the benchmark-style predictions (``compiler/cost/predictions.py``) and the
    KV tiers' transfer times (``compiler/cost/tiers.py``) are mixed in."""

    def __init__(self, model: ModelProfile, gpu: GpuProfile, engine: EngineProfile, tp: int = 1, pp: int = 1,
                 dtype: str = "bf16", max_num_seqs: int | None = None, max_batched_tokens: int = 8192,
                 kv_dtype: str | None = None, kv_tier: KvTier | None = None,
                 prefix_tier: KvTier | None = None, dp: int = 1, ep: int = 1):
        if tp < 1 or pp < 1 or dp < 1 or ep < 1:
            raise ValueError("tp, pp, dp and ep must be >= 1")
        if dtype not in BYTES:
            raise ValueError(f"dtype must be one of {sorted(BYTES)}")
        kv_dtype = kv_dtype or ("fp8" if dtype == "fp4" else dtype)  # fp4 checkpoints serve an fp8 KV cache
        check_kv_dtype(model, gpu, kv_dtype)
        check_layout(model, gpu, tp, dp, ep, dtype)
        if kv_tier is not None and dp > 1:
            raise ValueError("a KV tier is not modelled with attention data parallelism (dp > 1)")
        self.model, self.gpu, self.engine = model, gpu, engine
        self.kv_tier = kv_tier  # live KV beyond HBM (kv_tiers: experimental-live only)
        if prefix_tier is not None and prefix_tier.kind != "prefix":
            raise ValueError("prefix_tier must be a KvTier of kind prefix")
        self.prefix_tier = prefix_tier  # host-memory tier of the prefix cache (docs/kv-tiers.md)
        self.tp, self.pp, self.dtype, self.kv_dtype = tp, pp, dtype, kv_dtype
        # Attention data parallelism: dp engine ranks, each with its own batch limit and token budget (vLLM's
        # and SGLang's flags are per rank); the replica holds dp x as many requests and tokens per step.
        self.dp, self.ep = dp, ep
        self.gpus = tp * pp * dp
        self.max_num_seqs = int(max_num_seqs or engine.max_num_seqs.value) * dp
        self.rank_batched_tokens = int(max_batched_tokens)
        self.max_batched_tokens = int(max_batched_tokens) * dp
        m = model
        self.L = m.num_layers.value
        self.H = m.hidden_size.value
        self.heads = m.num_attention_heads.value
        self.kv_heads = m.num_kv_heads.value
        self.head_dim = m.head_dim.value
        self.vocab = m.vocab_size.value
        self.params = m.params_billion.value * 1e9
        self.active = m.active_params_billion.value * 1e9
        self.mla = is_mla(m)
        self.experts = m.num_experts.value
        self.topk = m.experts_per_token.value
        self.wbytes = BYTES[dtype]
        self.kvbytes = BYTES[kv_dtype]
        g = gpu
        keff = engine.kernel_efficiency.value if engine.kernel_efficiency is not None else 1.0
        eta_c = g.compute_efficiency.value * keff
        if dtype == "fp4" and g.fp4_tflops is not None:  # FP4 tensor cores at fp8's efficiency; without them
            # (Hopper) fp4 is weight-only: 4-bit weights read, the GEMM at the bf16 rate (the else branch)
            eta8 = (g.fp8_compute_efficiency.value if g.fp8_compute_efficiency is not None
                    else g.compute_efficiency.value)
            self.flops_linear = g.fp4_tflops.value * 1e12 * eta8 * keff
        elif dtype == "fp32" and g.fp32_tflops is not None:
            self.flops_linear = g.fp32_tflops.value * 1e12 * eta_c
        elif dtype == "fp8" and g.fp8_tflops.value > g.bf16_tflops.value:
            # fp8 tensor cores: their own (usually lower) efficiency; without fp8 units the weights are
            # dequantised and the GEMM runs at the bf16 rate.
            eta8 = (g.fp8_compute_efficiency.value if g.fp8_compute_efficiency is not None
                    else g.compute_efficiency.value)
            self.flops_linear = g.fp8_tflops.value * 1e12 * eta8 * keff
        else:
            self.flops_linear = g.bf16_tflops.value * 1e12 * eta_c
        eta_a = (g.attention_efficiency.value if g.attention_efficiency is not None
                 else g.compute_efficiency.value)
        peak_attn = g.fp32_tflops if dtype == "fp32" and g.fp32_tflops is not None else g.bf16_tflops
        self.flops_attn = peak_attn.value * 1e12 * eta_a * keff
        self.bw = g.hbm_bandwidth_gbps.value * 1e9 * g.bandwidth_efficiency.value
        self.kernel_s = (g.kernel_latency_us.value if g.kernel_latency_us is not None else 0.0) * 1e-6
        self.elem_passes = g.elementwise_passes.value if g.elementwise_passes is not None else 0.0
        self.ar_lat, self.ar_bw = g.allreduce_at(tp)  # eager (NCCL); the count's own fit on PCIe GPUs
        self.link_bw = g.link_bandwidth_gbps.value * 1e9
        # Pipeline stages sit on different nodes (PP is used once TP fills a node): hand-offs cross the NICs.
        self.nic_bw_per_gpu = g.node_network_gbps.value * 1e9 / g.gpus_per_node.value
        self.overhead = engine.step_overhead_s(tp)  # scheduling, sampling; TP workers' sync (loader.py)
        self.request_overhead = (engine.request_overhead_ms.value * 1e-3
                                 if engine.request_overhead_ms is not None else 0.0)
        # Expert weights: routed experts' parameters (compiler/cost/moe.py), read only for experts the step's
        # tokens are routed to; everything else (attention, dense MLPs, shared experts, router) is dense.
        self.expert_params = expert_params(m)
        self.dense_params = self.params - self.expert_params
        moe_eff = engine.moe_gemm_efficiency.value if engine.moe_gemm_efficiency is not None else 1.0
        self.moe = MoeLayer.of(m, g, tp, dp, ep, self.wbytes, self.bw, self.flops_linear, self.kernel_s,
                               moe_eff, *kernel_shape(g, engine)) if self.expert_params else None
        # CUDA graphs (docs/cost-model.md): steps of at most graph_tokens tokens (per pipeline stage) replay a
        # captured graph, so their GEMMs pay the kernel's fixed time without the host's launch, and their
        # all-reduces are the engine's one-shot custom kernel; 0 (no engine limit or no graph numbers for this
        # GPU) keeps every step eager.
        graph = (engine.cuda_graph_max_tokens is not None and g.graph_kernel_latency_us is not None
                 and g.graph_allreduce_latency_us is not None and g.graph_allreduce_bus_gbps is not None)
        self.graph_tokens = engine.cuda_graph_max_tokens.value if graph else 0.0
        # Per-layer weights (whole model, before sharding): attention projections from the architecture (GQA
        # or MLA); the LM head is vocab x hidden; the dense MLP is the rest of the parameter count, per layer.
        self.attn_params = attention_params(m)
        self.attn_kernels_s = attention_kernels(m) * self.kernel_s  # MLA: more, smaller projections (moe.py)
        self.head_params = self.vocab * self.H
        embed = (2 * self.head_params if self.params > 2 * self.head_params + self.L * self.attn_params
                 else self.head_params)
        # dense MLP per layer
        self.mlp_params = max((self.dense_params - embed) / self.L - self.attn_params, 0.0)

    def plain(self, max_num_seqs: int) -> "ReplicaModel":
        """A plain replica of this shape (no KV tier, no adapters) with another batch limit."""
        return ReplicaModel(self.model, self.gpu, self.engine, self.tp, self.pp, self.dtype,
                            -(-max_num_seqs // self.dp), self.rank_batched_tokens, self.kv_dtype, dp=self.dp,
                            ep=self.ep)

    @cached_property
    def memory(self) -> MemoryFit:
        """Per-GPU memory budget (vLLM's profile run: utilisation x HBM, minus weights, activations,
        reserve)."""
        gpus = self.tp * self.pp
        if self.moe is None:
            weights = self.params * self.wbytes / gpus
        else:
            # dense weights split by TP (replicated over dp ranks), routed experts over the tp x dp
            # expert group
            weights = (self.dense_params * self.wbytes / self.tp
                       + moe_layers(self.model) * self.moe.weight_bytes_per_gpu()) / self.pp
        inter = self.model.intermediate_size.value
        # Peak activations of a full token budget: hidden states, QKV, MLP intermediate (per TP shard),
        # 2 bytes each.
        act = self.rank_batched_tokens * (4 * self.H
                                         + (self.heads + 2 * self.kv_heads) * self.head_dim / self.tp
                                         + 2 * inter / self.tp) * 2
        reserve = self.engine.runtime_reserve_gib.value * GIB
        usable = self.gpu.memory_gib.value * GIB * self.engine.gpu_memory_utilization.value
        kv = usable - weights - act - reserve
        # KV heads are split across TP ranks, or replicated when TP exceeds the number of KV heads; MLA's
        # latent is held whole by every TP rank. Each of the dp ranks holds its own requests' KV.
        if self.mla:
            kv_per_tok = (self.L / self.pp) * kv_elements(self.model)[0] * self.kvbytes
        else:
            kv_per_tok = (2 * (self.L / self.pp) * max(self.kv_heads / self.tp, 1.0) * self.head_dim
                          * self.kvbytes)
        tokens = int(kv // kv_per_tok) * self.dp if kv > 0 else 0
        return MemoryFit(weights / GIB, act / GIB, reserve / GIB, usable / GIB, max(kv, 0.0) / GIB,
                         kv_per_tok, tokens)

    @cached_property
    def kv_capacity_tokens(self) -> int:
        """KV tokens the replica may hold: HBM (``memory.kv_cache_tokens``) plus its tier's, if any."""
        hbm = self.memory.kv_cache_tokens
        return hbm + self.kv_tier.tokens if self.kv_tier is not None and hbm > 0 else hbm

    def prefill_s(self, isl: float, decode_batch: float, decode_ctx: float, remote_share: float = 0.0,
                  cached: float = 0.0) -> float:
        """Prefill of one prompt in chunks of the token budget left after the decode batch (``remote_share``:
        see ``iteration_s``). ``cached``: leading tokens found in the prefix cache (docs/prefix-caching.md);
        only the other ``isl - cached`` are computed, with the cached ones as prior context."""
        chunk = self.max_batched_tokens - decode_batch
        if chunk <= 0:
            return UNSTABLE
        new = isl - cached
        n = math.ceil(new / chunk)
        n = 1 if 1 > n else n  # max(1, n)
        last = new - (n - 1) * chunk
        t = 0.0
        step_s = self.step_s
        if remote_share:
            for i in range(n - 1):
                t += step_s(decode_batch, decode_ctx, chunk, cached + i * chunk, 1.0, remote_share)
            return t + step_s(decode_batch, decode_ctx, last, cached + (n - 1) * chunk, 1.0, remote_share)
        for i in range(n - 1):
            t += step_s(decode_batch, decode_ctx, chunk, cached + i * chunk)
        return t + step_s(decode_batch, decode_ctx, last, cached + (n - 1) * chunk)

    def evaluate(self, classes: list[TrafficClass] | tuple[TrafficClass, ...], percentile: float = 99.0,
                 max_iter: int = MAX_ITER, slo_ms: tuple[float, float] | None = None,
                 b0: float = 0.0) -> ReplicaState:
        """Steady state of continuous batching with chunked prefill at the offered per-replica load.

        ``slo_ms`` = (TTFT, TPOT) switches to decision mode (capacity bisection): ``meets(state, *slo_ms)``
        is what it is without it, but ``ttft_mean_s`` is ``ttft_s``, and ``tpot_s`` only compares right with
        the TPOT SLO (the mean TPOT when within it, infinity when not; the percentile search is skipped, and
        so is the TPOT tail when TTFT already misses). The fixed point is accelerated (``_Aitken``): it lands
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
        Seats and KV are checked at the percentile too (``trimtab.cost.queueing.over_caps``)."""
        lam = sum(c.rate_rps for c in classes)
        n = len(classes)
        if lam <= 0:
            ttft = tuple(self.request_overhead + self.prefill_s(c.tail, 0, 0, 0.0, c.tail_cached)
                         + self.reload_s(c.tail_host_cached) for c in classes)
            mean = tuple(self.request_overhead + self.prefill_s(c.isl_mean, 0, 0, 0.0, c.cached_tokens)
                         + self.reload_s(c.host_cached_tokens) for c in classes)
            t1 = self.iteration_s(1, 0)
            return ReplicaState(True, "", t1, ttft, mean, 0.0, 0.0, 0.0, 0.0, 0.0, t1)
        D, ctx_dec, K, b, kv_cap, prefix = self._offered(classes, b0)
        tier = self.kv_tier is not None
        r, kv_pre = 0.0, 0.0  # remote share of the KV in use (tier), KV of the prompts being prefilled
        # The share is at least that of the longest (tail) request decoding alone: at low load the mean KV in
        # use may fit HBM while a long request, on its own, does not (its TPOT is what the percentile sees).
        kv_floor = max(c.tail + c.osl_mean / 2 for c in classes) if tier else 0.0
        # ... and the KV in use is taken at the percentile of the number of requests holding it (Poisson
        # around the mean, normal approximation, as in ``evaluate_decode``): a tier slows every step more the
        # more KV is out of HBM, so a burst feeds on itself; the mean alone would miss
        # that (docs/kv-tiers.md).
        z = _z(percentile) if tier and percentile > 50 else 0.0

        def kv_at_p(kv_mean: float) -> float:
            n_mean = kv_mean / max(ctx_dec, 1.0)
            return max((n_mean + z * math.sqrt(n_mean)) * ctx_dec, kv_floor)

        def unstable(reason: str) -> ReplicaState:
            inf = (UNSTABLE,) * n
            return ReplicaState(False, reason, UNSTABLE, inf, inf, 1.0, b, UNSTABLE, UNSTABLE, UNSTABLE,
                                UNSTABLE)

        def load(b: float, chunk: float, r: float) -> tuple[float, float, list[float], list[float]]:
            # at decode batch b, ``chunk`` tokens a step left for prompts: (prefill utilisation rho,
            # prefill-carrying steps a second, per class the seconds and the steps of one prompt's prefill)
            rho, prefill_steps, s, nsteps = 0.0, 0.0, [], []
            for c in classes:
                new = c.isl_mean - c.cached_tokens  # prefix hits: only the uncached tokens are computed
                per_step = chunk if chunk < new else new  # min(new, chunk)
                steps = new / per_step
                t = step_s(b, ctx_dec, per_step, c.cached_tokens + (new - per_step) / 2, 1.0, r) if tier \
                    else step_s(b, ctx_dec, per_step, c.cached_tokens + (new - per_step) / 2)
                # host-tier hits: reload, then prefill (without any, reload_s is 0.0: the call is skipped)
                host = c.host_cached_tokens
                t_c = steps * t + self.reload_s(host) if host else steps * t + 0.0
                s.append(t_c)
                nsteps.append(steps)
                rho += c.rate_rps * t_c
                prefill_steps += c.rate_rps * steps
            return rho, prefill_steps, s, nsteps

        # Decision mode (capacity bisection) accelerates the fixed point; plain iteration climbs to it from
        # below, so the stated predictions (assess, check) are not more pessimistic than the
        # capacities assumed.
        step_s = self.step_s  # (the loop's hot path: a local, and min/max as conditional expressions)
        mns, cap = self.max_num_seqs, min(self.max_num_seqs, K - 1)
        status, b_new = 4, 0.0  # 0: converged; else why not (``_WHY``)
        compiled = None if tier else getattr(step_s, "fixed_point", None)
        if compiled is not None:  # the loop below, compiled (compiler/cost/_step.c): the same iterates
            status, b, b_in, t_d, rho, prefill_steps, tpot, b_new, s, nsteps = compiled(
                K, mns, D, ctx_dec, b, slo_ms is not None, cap, max_iter,
                tuple((c.isl_mean - c.cached_tokens, c.cached_tokens,
                       self.reload_s(c.host_cached_tokens) if c.host_cached_tokens else 0.0, c.rate_rps)
                      for c in classes))
        else:
            accel = _Aitken(cap, on=slo_ms is not None, start=b)
            for _ in range(max_iter):
                chunk = K - b
                if chunk < 1:
                    if accel.retreat():  # an extrapolated batch overshot: back to the last plain iterate
                        b = accel.safe
                        continue
                    status = 1
                    break
                if tier:  # the share of the KV in use beyond HBM at the current batch (previous prefill load)
                    r = self.remote_share(kv_at_p(b * ctx_dec + kv_pre))
                t_d = step_s(b, ctx_dec) if not tier else self._tier_decode_s(b, ctx_dec, kv_pre, kv_floor)
                rho, prefill_steps, s, nsteps = load(b, chunk, r)
                if tier and rho < 1:
                    kv_pre = rho * sum(c.rate_rps * c.isl_mean for c in classes) / max(prefill_steps, 1e-12)
                if rho >= 1 and accel.retreat():
                    b = accel.safe
                    continue
                if rho >= 1:
                    status = 2
                    break
                tpot = 1.0 / (prefill_steps + (1 - rho) / t_d)
                b_new = D * tpot
                if b_new > mns and accel.retreat():
                    b = accel.safe
                    continue
                if b_new > mns:
                    status = 3
                    break
                if abs(b_new - b) <= 1e-4 * (1.0 if 1.0 > b_new else b_new):  # max(b_new, 1.0)
                    b_in, b = b, b_new  # b = f(b_in), the batch map's last step
                    status = 0
                    break
                b_acc = accel.step(b, b_new)
                b = b_new if b_acc is None else b_acc
        if status == 1:
            return unstable(f"decode batch {b:.0f} leaves no room in max_num_batched_tokens {K}")
        if status == 2:
            return unstable(f"prefill saturated (utilisation {rho:.2f})")
        if status == 3:
            return unstable(f"needs a decode batch of {b_new:.0f} > max_num_seqs {mns}")
        if status:
            return unstable("no steady state (load too close to saturation)")
        wait_p, wait_mean, pre_tokens = _prefill_queue(classes, s, lam, rho, percentile)
        # KV in use: decoding requests' contexts plus the prompts being prefilled.
        kv_used = b * ctx_dec + rho * pre_tokens / max(prefill_steps, 1e-12)
        if prefix:  # a request's cached tokens are blocks of the prefix cache, shared, not its own KV
            kv_used -= (b * sum(c.rate_rps * c.osl_mean * c.cached_tokens for c in classes) / max(D, 1e-12)
                        + rho * sum(c.rate_rps * c.cached_tokens for c in classes)
                        / max(prefill_steps, 1e-12))
        if kv_used > kv_cap:
            return unstable(f"KV cache needs {kv_used:.0f} tokens > capacity {kv_cap}")
        if tier:  # (a tier holds the KV beyond HBM: its remote share is taken at the percentile)
            r = self.remote_share(kv_at_p(kv_used))
        # async scheduling: waits out the step in flight (half a step) and one formed ahead (sim/replica.py)
        fe = self.request_overhead + 1.5 * tpot if self.engine.async_scheduling else self.request_overhead
        ttft = tuple(fe + wait_p + self.prefill_s(c.tail, b, ctx_dec, r, c.tail_cached)
                     + self.reload_s(c.tail_host_cached) for c in classes)
        # Seats and KV at the percentile with the batch's own feedback (decision mode: not where TTFT misses)
        if not tier and percentile > 50 and b > 0 and (slo_ms is None or max(ttft) * 1e3 <= slo_ms[0]):
            def batch_map(x: float) -> float | None:  # f(x) = D x TPOT(x), as one pass of the loop above
                if K - x < 1:
                    return None
                rho2, steps2, _, _ = load(x, K - x, 0.0)
                return D / (steps2 + (1 - rho2) / step_s(x, ctx_dec)) if rho2 < 1 else None

            slope = map_slope(batch_map, b_in, b)
            if why := over_caps(b, kv_used, ctx_dec, ctx_sq(classes), percentile, self.max_num_seqs, kv_cap,
                                slope):
                return unstable(why)
        if slo_ms is not None:  # decision mode (see the docstring)
            tpot_p = tpot if max(ttft) * 1e3 > slo_ms[0] else \
                tpot_tail(classes, s, nsteps, t_d, tpot, percentile, slo_ms[1] * 1e-3)
            if tier and math.isfinite(tpot_p) and max(ttft) * 1e3 <= slo_ms[0]:
                tpot_p = max(tpot_p, self._tier_decode_s(b, ctx_dec, kv_pre, kv_floor, z))
                tpot_p = tpot_p if tpot_p <= slo_ms[1] * 1e-3 else UNSTABLE
            return ReplicaState(True, "", tpot_p, ttft, ttft, rho, b, kv_used, wait_p, wait_mean, tpot)
        ttft_mean = tuple(fe + wait_mean + self.prefill_s(c.isl_mean, b, ctx_dec, r, c.cached_tokens)
                          + self.reload_s(c.host_cached_tokens) for c in classes)
        tpot_p = tpot_tail(classes, s, nsteps, t_d, tpot, percentile)
        if tier:
            tpot_p = max(tpot_p, self._tier_decode_s(b, ctx_dec, kv_pre, kv_floor, z))
        return ReplicaState(True, "", tpot_p, ttft, ttft_mean, rho, b, kv_used, wait_p, wait_mean, tpot)

    def _offered(self, classes, b0: float) -> tuple[float, float, int, float, float, bool]:
        """``evaluate``'s load before its fixed point: (decode tokens a second D, their mean context, the
        token budget K, the first batch, the KV capacity for requests, whether a prefix cache holds some)."""
        D = sum(c.rate_rps * c.osl_mean for c in classes)
        ctx_dec = (sum(c.rate_rps * c.osl_mean * (c.isl_mean + c.osl_mean / 2) for c in classes)
                   / max(D, 1e-12))
        K = self.max_batched_tokens
        b = max(b0, 0.0) if b0 < min(self.max_num_seqs, K - 1) else 0.0
        return (D, ctx_dec, K, b) + self._kv_room(classes)

    def _kv_room(self, classes) -> tuple[float, bool]:
        """(the KV capacity requests may use, whether a prefix cache holds some of ``classes``)."""
        kv_cap = self.kv_capacity_tokens  # HBM, plus the KV tier's when the replica has one
        prefix = False
        for c in classes:
            if c.cached_tokens or c.prefix_reserved:
                prefix = True
                break
        if prefix:  # the prefix cache's reserve is not available to requests (docs/prefix-caching.md)
            kv_cap -= max(c.prefix_reserved for c in classes)
        return kv_cap, prefix

    def _offer(self, cls: TrafficClass, ttft_ms: float, tpot_ms: float, percentile: float) -> tuple | None:
        """``cls`` offered to this replica as the compiled decision takes it (``Step.decide``,
        ``Step.capacity``: compiler/cost/_queue.c): all but the rate and the first batch. None where it does
        not apply: a KV tier, a subclass's own ``evaluate``, more than 64 output lengths, no compiled
        queueing (``trimtab.cost.step.queueing_compiled``)."""
        if (type(self).evaluate is not ReplicaModel.evaluate or self.kv_tier is not None
                or len(cls.osl_points) > 64 or not hasattr(self.step_s, "decide") or not queueing_compiled()):
            return None
        K, mns = self.max_batched_tokens, self.max_num_seqs
        kv_cap, prefix = self._kv_room((cls,))
        host = self.reload_s(cls.host_cached_tokens) if cls.host_cached_tokens else 0.0
        return (K, mns, min(mns, K - 1), kv_cap, self.request_overhead, percentile,
                _z(percentile) if percentile > 50 else 0.0, ttft_ms, tpot_ms, self.engine.async_scheduling,
                cls.isl_mean - cls.cached_tokens, cls.cached_tokens, host, cls.isl_mean, cls.osl_mean,
                cls.isl_cv2, cls.tail, cls.tail_cached, self.reload_s(cls.tail_host_cached), prefix, MAX_ITER,
                tuple(cls.osl_points))

    def meets(self, state: ReplicaState, ttft_ms: float, tpot_ms: float) -> bool:
        return state.stable and max(state.ttft_s) * 1e3 <= ttft_ms and state.tpot_s * 1e3 <= tpot_ms

    def holds(self, cls: TrafficClass) -> bool:
        """Whether the KV cache holds one tail request of ``cls`` beside the prefix cache's reserve: where it
        does not, no rate of ``cls`` meets its SLOs (``capacity_rps`` is 0)."""
        return self.kv_capacity_tokens - cls.prefix_reserved >= cls.tail - cls.tail_cached + cls.osl_mean

    def meets_at(self, cls: TrafficClass, ttft_ms: float, tpot_ms: float, percentile: float,
                 b0: float = 0.0) -> tuple[bool, float]:
        """(whether ``cls`` at its rate meets both SLOs, the decode batch there): what every capacity search
        and its probes ask. Decision mode (``evaluate``'s ``slo_ms``, ``b0``) skips the TPOT percentile
        search; only where ``evaluate`` is not overridden (a subclass may adjust the state after the base
        evaluation). Without a KV tier, the compiled decision (``Step.decide``, compiler/cost/_step.c):
        ``evaluate`` in decision mode from its fixed point on, then ``meets``, the same floats
        (tests/cost/test_step_kernel.py) without building the state."""
        if type(self).evaluate is not ReplicaModel.evaluate:
            st = self.evaluate([cls], percentile)
            return self.meets(st, ttft_ms, tpot_ms), st.decode_batch
        offer = self._offer(cls, ttft_ms, tpot_ms, percentile) if cls.rate_rps > 0 else None
        if offer is not None:
            return self.step_s.decide(offer, cls.rate_rps, b0)
        st = self.evaluate([cls], percentile, slo_ms=(ttft_ms, tpot_ms), b0=b0)
        return self.meets(st, ttft_ms, tpot_ms), st.decode_batch

    def capacity_rps(self, cls: TrafficClass, ttft_ms: float, tpot_ms: float, percentile: float,
                     rel_tol: float = 0.005, guess: float | None = None) -> float:
        """Highest per-replica rate of ``cls`` (its rate field is ignored) that meets both SLOs; 0 if none.

        ``evaluate`` gets monotonically worse with the rate, so bisection applies. ``guess`` (e.g. a sibling
        shape's capacity) only saves evaluations: a bracket is searched outward from it first (two evaluations
        when it is right to the tolerance), and the bisection then takes every outcome that monotonicity
        implies from what is known (a rate at or below one that met the SLOs meets them; at or above one that
        missed, misses), so it returns the same rate as without the guess (but at an edge where a decision
        tips with the batch its fixed point starts from: tests/cost/test_step_kernel.py met one, a MoE
        shape one bisection step apart). Whether any rate meets the SLOs (a
        rate of 1e-9) is asked only after the bisection's first FIRST_HALVINGS points all missed: where one of
        them met the SLOs, monotonicity answers it (one evaluation fewer per search; FIRST_HALVINGS more where
        no rate does, which few candidates are). The points are the ones the bisection evaluates anyway; their
        fixed points now start from a batch of 0 instead of the (vanishing) batch at 1e-9, which ``evaluate``
        lands within the same tolerance: the goldens' and five specgen specs' candidates are byte-identical.
        """
        if not self.holds(cls):
            return 0.0
        offer = self._offer(cls, ttft_ms, tpot_ms, percentile)
        if offer is not None:  # the search below, compiled (``Step.capacity``: the same points and rate)
            return self.step_s.capacity(offer, rel_tol, guess, FIRST_HALVINGS)

        known = [0.0, math.inf]  # highest rate known to meet the SLOs, lowest known to miss
        below = [0.0]  # decode batch at known[0]: a start below the fixed point of any higher rate

        at_rate = cls.at_rates()  # replace(cls, rate_rps=rate)

        def ok(rate: float) -> bool:
            if rate <= known[0] or rate >= known[1]:
                return rate <= known[0]  # implied by monotonicity
            met, batch = self.meets_at(at_rate(rate), ttft_ms, tpot_ms, percentile, below[0])
            if met:
                if rate > known[0]:
                    below[0] = batch
                known[0] = max(known[0], rate)
            else:
                known[1] = min(known[1], rate)
            return met

        # Upper bound: prefill alone saturates at chunk / (isl x T_m(0)); decode alone at
        # max_num_seqs / (osl x T_d).
        new = cls.isl_mean - cls.cached_tokens
        per_step = min(new, self.max_batched_tokens)
        prefill_t = new / per_step * self.step_s(0, 0, per_step, cls.cached_tokens)
        hi = min(1.0 / prefill_t, self.max_num_seqs / (cls.osl_mean * self.step_s(1, cls.isl_mean))) * 1.01
        if guess is not None and 0.0 < guess < hi:
            bracket(ok, guess, hi, rel_tol)  # fills ``known``
        top = hi
        for _ in range(FIRST_HALVINGS):  # the bisection's first points, while they miss
            if known[0] > 0.0:
                break
            top /= 2
            ok(top)
        if known[0] == 0.0 and not ok(1e-9):
            return 0.0
        return bisect_max(ok, 0.0, hi, rel_tol)
