"""One engine step's time: ``ReplicaStep.iteration_s``, the equations every step time of the project comes
from, mixed into ``ReplicaModel``.

The terms that do not depend on the step's batch are folded once per replica (``_fold``); ``_step_py`` is the
reference arithmetic over them, and ``compiler/cost/_step.c`` (``trimtab.cost._step``) its transcription to C,
which gives the same float to the last bit about fifteen times faster (tests/cost/test_step_kernel.py). The
planner calls a step time about three million times on a 100-workload spec (issue 35); hot loops take
``step_s``, the fastest callable that is this replica's ``iteration_s``. The kernel's queueing side
(compiler/cost/_queue.c) transcribes the TPOT tail (``tpot_tail`` here) and the capacity search's decision
(``Step.decide``, through ``ReplicaModel.meets_at``) the same way. ``TRIMTAB_COST_KERNEL=python`` (or an
install without a C compiler) keeps the reference alone.
"""
from __future__ import annotations

import os
from functools import cache, cached_property

from trimtab.cost import queueing
from trimtab.cost.moe import attention_flops_per_ctx, attention_kernels, kv_elements

try:
    from trimtab.cost import _step
except ImportError:  # an install without a C compiler: the reference alone
    _step = None

KERNEL = _step is not None and os.environ.get("TRIMTAB_COST_KERNEL", "") != "python"


@cache
def queueing_compiled() -> bool:
    """Whether the kernel's queueing side runs (``Step.decide``, ``tpot_tail``): it takes scipy's gammaincc
    (the function ``trimtab.cost.queueing.gamma_q`` calls) through scipy's C API, given once, on first use
    (scipy is imported then). A scipy without that entry: the interpreted queueing, the same floats."""
    if not KERNEL:
        return False
    try:
        from scipy.special.cython_special import __pyx_capi__

        _step.use_gammaincc(__pyx_capi__["gammaincc"])
    except (ImportError, KeyError, TypeError, ValueError):
        return False
    return True


def tpot_tail(classes, s, nsteps, t_d: float, tpot: float, percentile: float,
              bound_s: float | None = None) -> float:
    """``trimtab.cost.queueing.tpot_tail`` (the reference), compiled where the kernel is (``_step.tpot_tail``,
    the same float: tests/cost/test_step_kernel.py). Why: a plan's assessment and check take the full TPOT
    percentile of every replica's state, a bisection over every class's output lengths, about half a
    millisecond each interpreted."""
    if not queueing_compiled():
        return queueing.tpot_tail(classes, s, nsteps, t_d, tpot, percentile, bound_s)
    return _step.tpot_tail(tuple((c.rate_rps, c.isl_cv2, si, k, tuple(c.osl_points) or ((c.osl_mean, 1.0),))
                                 for c, si, k in zip(classes, s, nsteps)), t_d, tpot, percentile, bound_s)


class ReplicaStep:
    """The step time of a ``ReplicaModel`` (its profile numbers are the model's attributes)."""

    @cached_property
    def _step(self) -> tuple[float, ...]:
        """``iteration_s``'s equations with everything that does not depend on the step's batch folded into
        per-token and fixed seconds, once per replica (the planner calls ``iteration_s`` millions of times).
        Same terms as the docstring there; each ``x / bandwidth`` or ``flops / rate`` becomes
        ``x * (1 / rate)``. The layout (pp, dp), the attention kernels' time and the MoE block's methods are
        read from here too. Eager kernels: the GPU's kernel latency and all-reduce fit."""
        return self._fold(self.kernel_s, self.ar_lat, self.ar_bw, self.bw)

    @cached_property
    def _step_graph(self) -> tuple[float, ...]:
        """``_step`` for steps replayed from a CUDA graph (``graph_tokens``): the kernels' fixed time inside a
        graph, the custom all-reduce's latency and bus bandwidth, the GEMMs' bandwidth (GPU ``graph_*``)."""
        g = self.gpu
        if not self.graph_tokens:
            return self._step
        gw = g.hbm_bandwidth_gbps.value * 1e9 * g.graph_bandwidth_efficiency.value \
            if g.graph_bandwidth_efficiency is not None else self.bw
        return self._fold(g.graph_kernel_latency_us.value * 1e-6, *g.allreduce_at(self.tp, graph=True), gw)

    @cached_property
    def _ar_eager(self) -> tuple[float, float] | None:
        """(fixed, per token) seconds of a layer's two eager (NCCL) all-reduces; None without TP."""
        return (self._step[9], self._step[10]) if self.tp > 1 else None

    def _fold(self, ks: float, ar_lat: float, ar_bw: float, gw: float) -> tuple[float, ...]:
        """Kernel time ``ks``, all-reduce latency and bus bandwidth, and ``gw``: the GEMMs' (projections, MLP,
        LM head) bandwidth; the KV, elementwise passes and hand-offs take ``self.bw``."""
        tp, pp = self.tp, self.pp
        bw, fl, fa = self.bw, self.flops_linear, self.flops_attn
        wb, H = self.wbytes, self.H
        q_dim = self.heads * self.head_dim
        qkv_n = (q_dim + 2 * self.kv_heads * self.head_dim) / tp
        # attention projections (QKV and O): weight seconds, activation seconds per token,
        # FLOP seconds per token
        a_w = self.attn_params * wb / tp / gw
        a_act = (qkv_n + H + H + q_dim / tp) * 2 / gw
        a_fl = 2 * self.attn_params / tp / fl
        # dense MLP (MoE adds the touched experts per step, in iteration_s)
        inter_tp = self.mlp_params / (3 * H) / tp if self.mlp_params else 0.0
        m_w = self.mlp_params * wb / tp / gw
        m_act = (2 * inter_tp + H + H + inter_tp) * 2 / gw
        m_fl = 2 * self.mlp_params / tp / fl
        # attention kernels: KV bytes per token of context, FLOPs per (token x context)
        if self.mla:  # the compressed latent per token, whole on each rank; absorbed decode, expanded prefill
            kv_s = kv_elements(self.model)[0] * self.kvbytes / bw
            f_dec, f_pre = attention_flops_per_ctx(self.model)
            att_fl, att_fl_p = f_dec / tp / fa, f_pre / tp / fa
        else:
            kv_s = 2 * max(self.kv_heads / tp, 1.0) * self.head_dim * self.kvbytes / bw
            att_fl = att_fl_p = 4 * q_dim / tp / fa
        elem = self.elem_passes * H * 2 / bw
        ar0 = 2 * ar_lat if tp > 1 else 0.0
        ar1 = 2 * H * 2 * 2 * (tp - 1) / tp / ar_bw if tp > 1 else 0.0
        # LM head (last stage only)
        h_w = self.head_params * wb / tp / gw
        h_act = (self.vocab / tp + H) * 2 / gw
        h_fl = 2 * self.head_params / tp / fl
        hop0 = (pp - 1) * self.ar_lat if pp > 1 else 0.0
        hop1 = (pp - 1) * H * 2 / (self.nic_bw_per_gpu * tp) if pp > 1 else 0.0
        # KV tier: the same KV bytes per token of context over the tier link (per GPU: each moves its
        # own shard)
        kv_r = kv_s * bw / (self.kv_tier.gbps_per_gpu * 1e9) if self.kv_tier is not None else 0.0
        Ls = self.L / pp  # layers per stage
        a_k = 2 * ks if not self.mla else attention_kernels(self.model) * ks  # attention projections' kernels
        # and the attention kernel's own fixed time, once a layer
        if self.gpu.attention_kernel_us is not None:
            a_k += self.gpu.attention_kernel_us.value * 1e-6
        moe = self.moe
        # MoE: the block's three terms as bound methods; comm_s is 0.0 with ep = dp = 1 (left out:
        # changes nothing)
        moe_terms = (None, None, None) if moe is None else \
            (moe.compute_s, moe.router_s, moe.comm_s if moe.ep > 1 or moe.dp > 1 else None)
        return (a_w, a_act, a_fl, m_w, m_act, m_fl, kv_s, att_fl, elem, ar0, ar1, h_w, h_act, h_fl,
                hop1, 2 * ks, ks, a_k, pp * Ls, self.overhead + hop0, kv_r, att_fl_p, pp, self.dp) + moe_terms

    def iteration_s(self, decode_batch: float, decode_ctx: float, prefill_tokens: float = 0.0,
                    prefill_ctx: float = 0.0, prefill_seqs: float = 1.0, remote_share: float = 0.0) -> float:
        """Seconds of one engine step that decodes ``decode_batch`` requests (mean context ``decode_ctx``)
        and prefills ``prefill_tokens`` tokens (mean prior context ``prefill_ctx``) split evenly over
        ``prefill_seqs`` prompts.

        Per pipeline stage (1/pp of the layers, 1/pp of the batch as one micro-batch), per layer and GPU:
          GEMMs     = for attention projections and MLP each:
                      max(bytes / BW_eff, FLOPs / F_eff) + kernels x t_k
          attention = decode: max(KV bytes / BW_eff, FLOPs / F_attn); prefill: FLOPs / F_attn
          other     = elementwise passes x tokens x hidden x 2 B / BW_eff (norms, rope, activation, residual)
          comms     = 2 all-reduces (latency + bytes x 2(tp-1)/tp / bus bandwidth) when tp > 1
        plus the LM head once per step; step = pp x stage + (pp - 1) x hand-off + engine overhead.
        The per-replica factors of these terms are folded once in ``_step``.

        Mixture of experts (``compiler/cost/moe.py``, docs/cost-model.md): the routed experts the step's T
        tokens touch, the router and the expert dispatch are added to the MLP term. With ``dp`` attention
        ranks the attention-side terms take the busiest rank's tokens (b / dp decoding, a prompt's chunk on
        one rank), the experts all ranks' tokens.

        KV tier (``kv_tier``; docs/kv-tiers.md): ``remote_share`` r of the context KV lives in the tier.
        Decode attention reads (1 - r) of its KV bytes from HBM (inside the roofline max) and r over the tier
        link at ``kv_tier.gbps_per_gpu``, added, not overlapped (conservative); so does the prior-context KV a
        prefill chunk reads. A share r of the KV a prefill chunk writes goes to the tier too (swap-out), which
        lengthens prefill steps and so TTFT. With r = 0 every term is the HBM-only one.
        """
        return self._step_fn(decode_batch, decode_ctx, prefill_tokens, prefill_ctx, prefill_seqs,
                             remote_share)

    def _step_py(self, decode_batch: float, decode_ctx: float, prefill_tokens: float = 0.0,
                    prefill_ctx: float = 0.0, prefill_seqs: float = 1.0, remote_share: float = 0.0) -> float:
        """``iteration_s``'s equations over the folded terms: the reference (compiler/cost/_step.c
        transcribes it; keep the two in step, operation for operation)."""
        (a_w, a_act, a_fl, m_w, m_act, m_fl, kv_s, att_fl, elem, ar0, ar1, h_w, h_act, h_fl, hop1, k2, ks,
         a_k, pLs, fixed, kv_r, att_fl_p, pp, dp, moe_compute, moe_router, moe_comm) = \
            self._step_graph if (graph := decode_batch + prefill_tokens <= self.graph_tokens * self.pp) \
            else self._step
        tp_ar = self._ar_eager if graph else None
        b = decode_batch / pp
        p = prefill_tokens / pp
        seqs = (prefill_seqs if prefill_seqs > 1.0 else 1.0) / pp if p > 0 else 0.0
        T = b + p  # tokens through the experts (all dp ranks')
        if dp > 1:
            # attention DP: the decode batch splits over the ranks, a prompt's chunk stays on one rank;
            spread = (1.0 if 1.0 > seqs else seqs) if p > 0 else 1.0  # ranks step in lockstep: the busiest;
            spread = spread if spread < dp else float(dp)  # min(float(dp), max(seqs, 1.0)) without builtins
            b, p, seqs = b / dp, p / spread, seqs / spread
        Ta = b + p  # tokens through attention on one rank
        # (rooflines as conditional expressions, not max(): the same values, a third faster in the hot path)
        x, y = a_w + Ta * a_act, Ta * a_fl
        t_attn_proj = (x if x >= y else y) + a_k
        x, y = m_w + Ta * m_act, Ta * m_fl  # the dense MLP (and shared experts), on the attention rank
        t_mlp = (x if x >= y else y) + k2
        if moe_compute is not None:  # the routed experts some token goes to, the gate, the dispatch (moe.py)
            if moe_comm is None:  # ep = dp = 1: no dispatch (comm_s is 0.0)
                t_mlp += moe_compute(T) + moe_router(Ta)
            else:
                t_mlp += moe_compute(T) + moe_router(Ta) + moe_comm(T)
        ar = ar0 + Ta * ar1
        # the engine sends a large message to NCCL when that is faster than its custom kernel
        if graph and tp_ar:
            x = tp_ar[0] + Ta * tp_ar[1]
            ar = x if x < ar else ar
        layer = t_attn_proj + t_mlp + Ta * elem + ar
        if remote_share and kv_r:  # a KV tier in use (r > 0 only comes with one)
            r = remote_share
            if b > 0:
                bc = b * decode_ctx
                layer += max((1 - r) * bc * kv_s, bc * att_fl) + r * bc * kv_r
            if p > 0:
                layer += (p * (prefill_ctx + p / seqs / 2) * att_fl_p
                          + seqs * prefill_ctx * ((1 - r) * kv_s + r * kv_r) + r * p * kv_r)
        else:
            if b > 0:
                bc = b * decode_ctx
                x, y = bc * kv_s, bc * att_fl
                layer += x if x >= y else y
            if p > 0:
                layer += p * (prefill_ctx + p / seqs / 2) * att_fl_p + seqs * prefill_ctx * kv_s
        head_tokens = b + seqs
        x, y = h_w + head_tokens * h_act, head_tokens * h_fl
        stage_head = (x if x >= y else y) + ks
        return pLs * layer + stage_head + Ta * hop1 + fixed  # pLs: pp x layers per stage

    @cached_property
    def _step_fn(self):
        """This replica's base step time as a callable: the compiled ``Step`` over its folded terms, or the
        reference ``_step_py`` where the kernel is not built or switched off."""
        if not KERNEL:
            return self._step_py
        # the MoE block's methods as presence marks: the kernel computes them from ``kernel_terms`` (and
        # numbers alone pickle)
        eager, graph = ((*f[:-3], *(None if m is None else True for m in f[-3:])) for f in
                        (self._step, self._step_graph))
        return _step.Step(eager, graph, self._ar_eager, self.graph_tokens * self.pp,
                          None if self.moe is None else self.moe.kernel_terms)

    @cached_property
    def step_s(self):
        """``iteration_s`` as the fastest callable, for hot loops: the base step time where the class keeps
        ``ReplicaStep.iteration_s`` (no Python frame in between), else its own ``iteration_s`` (a subclass
        that adds terms, such as the adapters' ``LoraReplicaModel``)."""
        if type(self).iteration_s is ReplicaStep.iteration_s:
            return self._step_fn
        return self.iteration_s
