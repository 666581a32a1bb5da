"""Mixture-of-experts and MLA arithmetic of the cost model (docs/cost-model.md, "Mixture of experts").

``ReplicaModel`` (compiler/cost/model.py) calls these; nothing else computes an expert's bytes or a dispatch.

Entry points:
  * ``attention_params(model)`` (from trimtab.profiles.loader, shared with the config import): attention
    weights of one layer (GQA/MHA projections, or MLA's low-rank ones)
  * ``kv_elements(model)`` -> (elements per token per layer, split across TP?): GQA 2 x kv_heads x
    head_dim, split over TP ranks; MLA kv_lora_rank + qk_rope_head_dim, one latent per token, replicated on
    every TP rank
  * ``expert_params(model)``: routed experts' parameters (all MoE layers), 0 for a dense model
  * ``experts_touched(tokens, experts, topk)``: expected share of a layer's experts some token is routed to
  * ``busiest_rank_factor(tokens, experts, topk, ep)``: the busiest EP rank's expert assignments over the mean
  * ``MoeLayer``: the routed-expert block of one layer at a layout (tp, dp, ep, pp) as seconds of a step
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache

from trimtab.profiles.loader import (GpuProfile, ModelProfile, attention_params, expert_size, fp4_kv_problem,
                                     moe_layers, value_or)
from trimtab.cost.records import KV_DTYPES

__all__ = ["ACT_BYTES", "MoeLayer", "attention_flops_per_ctx", "attention_kernels", "attention_params",
           "busiest_rank_factor", "check_kv_dtype", "check_layout", "expected_max_normal", "expert_params",
           "expert_size", "experts_touched", "is_mla", "kv_elements", "moe_layers"]

ACT_BYTES = 2.0  # activations, router logits and the tokens dispatched to experts travel in bf16


def check_layout(model: ModelProfile, gpu: GpuProfile, tp: int, dp: int, ep: int, dtype: str) -> None:
    """ValueError unless the layout and precision are servable: attention data parallelism and expert
    parallelism need a mixture-of-experts model, ep divides the tp x dp expert group and is at most the number
    of experts. fp4 weights on a GPU without FP4 tensor cores (no fp4_tflops: Hopper, Ampere) run weight-only:
    4-bit weights dequantised in the GEMM at the bf16 rate (``ReplicaModel``), as the engines' MXFP4 / NVFP4
    weight-only kernels do on Hopper (gpt-oss-120b on H100)."""
    if (dp > 1 or ep > 1) and model.num_experts.value <= 1:
        raise ValueError(f"{model.name} is dense: attention data parallelism (dp) and expert "
                         f"parallelism (ep) apply to mixture-of-experts models")
    if (tp * dp) % ep:
        raise ValueError(f"ep {ep} must divide tp x dp = {tp * dp} (the GPUs of a stage's expert group)")
    if ep > model.num_experts.value:
        raise ValueError(f"ep {ep} exceeds {model.name}'s {model.num_experts.value:g} experts")


def check_kv_dtype(model: ModelProfile, gpu: GpuProfile, kv_dtype: str) -> None:
    """ValueError unless the KV cache precision is one the engines serve (``records.KV_DTYPES``) and, for fp4
    (NVFP4), this GPU and model can hold it (``trimtab.profiles.loader.fp4_kv_problem``)."""
    if kv_dtype not in KV_DTYPES:
        raise ValueError(f"kv_dtype must be one of {list(KV_DTYPES)}")
    why = fp4_kv_problem(model, gpu) if kv_dtype == "fp4" else None
    if why:
        raise ValueError(why)


def is_mla(model: ModelProfile) -> bool:
    return model.kv_lora_rank is not None


def kv_elements(model: ModelProfile) -> tuple[float, bool]:
    """(KV elements per token per layer, whether TP ranks split them). MLA caches one compressed latent of
    kv_lora_rank + qk_rope_head_dim per token and layer, which every TP rank holds whole (vLLM and SGLang
    replicate it; attention data parallelism is what divides it)."""
    if is_mla(model):
        return model.kv_lora_rank.value + value_or(model.qk_rope_head_dim), False
    return 2 * model.num_kv_heads.value * model.head_dim.value, True


def attention_flops_per_ctx(model: ModelProfile) -> tuple[float, float]:
    """FLOPs per (query token x context token) of attention, (decode, prefill), whole model width.
    GQA/MHA: 4 heads head_dim both (QK^T and PV). MLA decode runs the absorbed form over the latent:
    2 heads (kv_lora_rank + rope) + 2 heads kv_lora_rank; MLA prefill the expanded one: 2 heads (nope + rope)
    + 2 heads v."""
    heads = model.num_attention_heads.value
    if not is_mla(model):
        f = 4 * heads * model.head_dim.value
        return f, f
    r_kv, rope = model.kv_lora_rank.value, value_or(model.qk_rope_head_dim)
    nope, v = (value_or(model.qk_nope_head_dim, model.head_dim.value),
               value_or(model.v_head_dim, model.head_dim.value))
    return 2 * heads * (2 * r_kv + rope), 2 * heads * (nope + rope + v)


def attention_kernels(model: ModelProfile) -> int:
    """GEMM kernels of one layer's attention projections: fused QKV and O (GQA/MHA); MLA decode runs q down
    (with a Q rank) and up, KV down, the two absorbed per-head products (W_UK, W_UV) and O."""
    if not is_mla(model):
        return 2
    return 6 if model.q_lora_rank is not None else 5


def expert_params(model: ModelProfile) -> float:
    """Routed experts' parameters over all MoE layers (shared experts are not routed: they count as dense)."""
    return moe_layers(model) * model.num_experts.value * expert_size(model)


def experts_touched(tokens: float, experts: float, topk: float) -> float:
    """Expected share of a layer's experts that at least one of ``tokens`` tokens is routed to, each token
    choosing ``topk`` of ``experts`` uniformly: 1 - (1 - k/E)^T (uniform routing; a balanced router's
    load-balancing loss aims at it; real routing is skewed, which touches fewer experts: an upper bound on the
    bytes read)."""
    return _touched_share(experts, topk)(tokens)


def _touched_miss(experts: float, topk: float) -> float | None:
    """The chance that a token does not choose a given expert (None: one expert, always touched)."""
    return None if experts <= 1 else 1.0 - topk / experts


def _touched_share(experts: float, topk: float):
    """``experts_touched`` as a function of the tokens alone, ``experts`` and ``topk`` folded in once
    (``MoeLayer`` keeps one per layer: the planner evaluates it ~10^6 times)."""
    miss = _touched_miss(experts, topk)
    if miss is None:
        return lambda tokens: 1.0

    def share(tokens: float) -> float:
        return 1.0 - miss ** (0.0 if 0.0 > tokens else tokens)  # max(tokens, 0.0), without the builtin's call

    return share


@lru_cache(maxsize=None)
def expected_max_normal(n: int) -> float:
    """E[max of n independent standard normals] = integral of x n phi(x) Phi(x)^(n-1) dx (the expected largest
    order statistic; David and Nagaraja, Order Statistics, 3rd ed., sec. 3.1), by the trapezoid rule on
    [-10, 10] in steps of 1e-3 (exact to ~1e-6). 0 for n = 1; 1/sqrt(pi) = 0.5642 for n = 2."""
    if n <= 1:
        return 0.0
    h, total = 1e-3, 0.0
    for i in range(-10000, 10001):
        x = i * h
        phi = math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
        cdf = 0.5 * math.erfc(-x / math.sqrt(2))
        total += x * n * phi * cdf ** (n - 1)
    return total * h


def busiest_rank_factor(tokens: float, experts: float, topk: float, ep: int) -> float:
    """E[assignments on the busiest of ``ep`` expert-parallel ranks] / mean, for ``tokens`` tokens each routed
    to ``topk`` distinct experts of ``experts`` uniformly, the experts split evenly over the ranks. A token's
    assignments to one rank are hypergeometric (k draws from E, E/ep of them on the rank): mean k/ep, variance
    k (1/ep)(1 - 1/ep)(E - k)/(E - 1); over T independent tokens the rank's load is close to normal, so the
    busiest rank carries mean + sd x E[max of ep standard normals] (``expected_max_normal``). The grouped
    GEMMs of a step end when the busiest rank's do: its FLOPs and activations set the time. 1 for ep = 1;
    uniform routing is the balanced router's aim, so real (skewed) routing is at least this imbalanced."""
    return _busiest_rank(experts, topk, ep)(tokens)


def _busiest_fold(experts: float, topk: float, ep: int) -> tuple | None:
    """``busiest_rank_factor``'s constants (topk, q, 1 - q, E - k, E - 1, E[max of ep normals], ep); None
    where the factor is 1 (one rank, or every expert touched by each token)."""
    if ep <= 1 or experts <= topk:
        return None
    q = 1.0 / ep
    # var = tokens k q (1 - q) (E - k) / (E - 1): left to right, mean x (1 - q) x (E - k) / (E - 1)
    return topk, q, 1 - q, experts - topk, experts - 1, expected_max_normal(ep), float(ep)


def _busiest_rank(experts: float, topk: float, ep: int):
    """``busiest_rank_factor`` as a function of the tokens alone, everything else folded in once
    (``MoeLayer``)."""
    fold = _busiest_fold(experts, topk, ep)
    if fold is None:
        return lambda tokens: 1.0
    topk, q, one_q, spare, e1, emax, cap = fold
    sqrt = math.sqrt

    def factor(tokens: float) -> float:
        if tokens <= 0:
            return 1.0
        mean = tokens * topk * q
        f = 1.0 + sqrt(mean * one_q * spare / e1) * emax / mean
        return cap if cap < f else f  # min(f, cap), without the builtin's call

    return factor


def kernel_shape(gpu: GpuProfile, engine) -> tuple[float, float]:
    """Fused-MoE kernel shape (rows_half, cols_half) of ``MoeLayer``: the GPU's own fit of the engine's
    kernels where the engine has a shape fit and the GPU profile one (compiler/field/calibrate_aic.py), else
    the engine's."""
    if engine.moe_rows_half is None or gpu.moe_rows_half is None or gpu.moe_cols_half is None:
        return value_or(engine.moe_rows_half), value_or(engine.moe_cols_half)
    return gpu.moe_rows_half.value, gpu.moe_cols_half.value


@dataclass(frozen=True)
class MoeLayer:
    """The routed experts of one (average) layer on a layout, per GPU of the expert group.

    The expert group of a pipeline stage is its G = tp x dp GPUs. ``ep`` = 1: every expert is split G ways by
    tensor parallelism (vLLM without ``--enable-expert-parallel``); ``ep`` > 1: the experts are divided among
    ``ep`` ranks, each expert split G / ep ways (vLLM's EP has ep = G). ``share`` = MoE layers / layers, so
    the per-layer terms average over dense and MoE layers."""

    experts: float
    topk: float
    expert_params: float  # one expert
    share: float
    hidden: float
    inter: float
    group: int  # G = tp x dp
    ep: int
    wbytes: float
    bw: float  # HBM bytes/s achieved
    flops: float  # linear-layer FLOP/s achieved
    kernel_s: float
    coll_lat_s: float  # latency of one collective (all-reduce fit; all-to-all assumed alike)
    coll_bw: float  # collective bus bandwidth within a node, bytes/s
    link_bw: float  # NVLink per GPU per direction, bytes/s
    nic_bw: float  # network per GPU, bytes/s
    gpus_per_node: int
    tp: int
    dp: int
    moe_eff: float = 1.0  # share of ``flops`` the fused-MoE grouped GEMMs reach (engine moe_gemm_efficiency)
    rows_half: float = 0.0  # rows per expert at which the grouped GEMM runs at half its rate (moe_rows_half)
    cols_half: float = 0.0  # expert columns per GPU at which ... (moe_cols_half)

    @classmethod
    def of(cls, model: ModelProfile, gpu: GpuProfile, tp: int, dp: int, ep: int, wbytes: float, bw: float,
           flops: float, kernel_s: float, moe_eff: float = 1.0, rows_half: float = 0.0,
           cols_half: float = 0.0) -> "MoeLayer":
        g = gpu
        return cls(model.num_experts.value, model.experts_per_token.value, expert_size(model),
                   moe_layers(model) / model.num_layers.value, model.hidden_size.value,
                   value_or(model.moe_intermediate_size, model.intermediate_size.value), tp * dp, ep, wbytes,
                   bw, flops, kernel_s, g.allreduce_latency_us.value * 1e-6, g.allreduce_bus_gbps.value * 1e9,
                   g.link_bandwidth_gbps.value * 1e9, g.node_network_gbps.value * 1e9 / g.gpus_per_node.value,
                   int(g.gpus_per_node.value), tp, dp, moe_eff, rows_half, cols_half)

    # The per-layout factors of compute_s, router_s and comm_s, read once (each runs at every step of an MoE
    # replica, ~10^6 times in the planner). Only whole sub-expressions are folded, so every value is the same
    # to the bit as evaluating the formula in the method.
    @cached_property
    def _compute_fold(self) -> tuple:
        # Shape: each expert some token is routed to runs its grouped GEMM over at least a tile of rows, so
        # the FLOPs are those of T k + rows_half x (experts touched) rows; the expert's columns on this GPU
        # (I_e ep / G) split the tiles further: narrow columns leave tensor cores idle, x (1 + cols_half G /
        # (I_e ep)).
        cols = self.cols_half * self.group / (self.inter * self.ep)
        rows_e = 2 * self.expert_params / self.group * self.rows_half * self.experts  # x touched share
        return (self.experts, self.topk, self.expert_params, self.wbytes, self.group, self.ep, self.bw,
                self.share, 2 * self.hidden + 3 * self.inter * self.ep / self.group,
                self.flops * self.moe_eff, 4 * self.kernel_s, _touched_share(self.experts, self.topk),
                _busiest_rank(self.experts, self.topk, self.ep), 1.0 + cols, rows_e)

    @cached_property
    def kernel_terms(self) -> tuple[float, ...]:
        """Every folded constant of ``compute_s``, ``router_s`` and ``comm_s`` (with ``_spread_s``), as floats
        in the order the compiled step time reads them (compiler/cost/_step.c, ``moe_terms``): it computes
        the three terms from these as the methods do, operation for operation. A missing share or factor
        (``_touched_miss``, ``_busiest_fold``: None) is a leading 0.0 flag."""
        E, k, Pe, wb, G, ep, bw, share, act_per, rate, k4, _, _, shape, rows_e = self._compute_fold
        miss = _touched_miss(self.experts, self.topk)
        busy = _busiest_fold(self.experts, self.topk, self.ep)
        mode, G2, H, k2, ep2, share2, lat, lat2, bus, g1, ep1, link = self._comm_fold
        peers, far = self._spread_fold
        terms = ((E, k, Pe, wb, G, ep, bw, share, act_per, rate, k4, shape, rows_e)
                 + ((0.0, 0.0) if miss is None else (1.0, miss))
                 + ((0.0,) * 8 if busy is None else (1.0,) + busy)
                 + self._router_fold + (self.bw, self.flops, self.share, self.kernel_s)
                 + (mode, G2, H, k2, ep2, share2, lat, lat2, bus, g1, ep1, link)
                 + (self.group, peers, far, self.nic_bw))
        return tuple(float(x) for x in terms)

    @cached_property
    def _router_fold(self) -> tuple:
        return self.hidden * self.experts, self.hidden + self.experts

    @cached_property
    def _comm_fold(self) -> tuple:
        G = self.group
        mode = 0 if self.ep == 1 and self.dp == 1 else 1 if self.ep == 1 else 2
        bus = self.coll_bw if G <= self.gpus_per_node else min(self.coll_bw, self.nic_bw)
        return (mode, G, self.hidden, self.topk, self.ep, self.share, self.coll_lat_s, 2 * self.coll_lat_s,
                bus, G - 1, self.ep - 1, self.link_bw)

    @cached_property
    def _spread_fold(self) -> tuple:
        G = self.group
        return G - 1, G - min(self.gpus_per_node, G)  # peers, of them on other nodes

    def experts_on_rank(self) -> float:
        """Experts an EP rank holds (the busiest one when ep does not divide them)."""
        return math.ceil(self.experts / self.ep)

    def weight_bytes_per_gpu(self) -> float:
        """Routed-expert weights one GPU holds, all MoE layers of one stage not divided by pp here."""
        return self.experts_on_rank() * self.expert_params * self.wbytes / (self.group / self.ep)

    def compute_s(self, tokens: float) -> float:
        """Routed-expert GEMMs of ``tokens`` tokens (all dp ranks' tokens of the step) on one GPU:
        weights read = touched experts' bytes / G (balanced), FLOPs = 2 T k P_e / G x imbalance at the
        fused-MoE rate (``moe_eff`` x the linear-layer rate), activations of the T k / ep assignments a rank
        computes x imbalance (``busiest_rank_factor``: the busiest EP rank sets the step); four kernels per
        layer: the two grouped GEMMs (gate-up, down) and the routing (top-k selection, sorting tokens by
        expert), as fused-MoE implementations run them."""
        E, k, Pe, wb, G, ep, bw, share, act_per, rate, k4, touched, busiest, shape, rows_e = \
            self._compute_fold
        imb = busiest(tokens)  # busiest_rank_factor(tokens, E, k, ep)
        hit = touched(tokens)  # experts_touched(tokens, E, k)
        w = E * hit * Pe * wb / G
        act = imb * tokens * k / ep * act_per * ACT_BYTES  # act_per: 2 hidden + 3 inter ep / G
        fl = imb * 2 * tokens * k * Pe / G
        if rows_e or shape != 1.0:  # the kernel shape (_compute_fold); without the fit, moe_eff alone
            fl = (fl + rows_e * hit) * shape
        x, y = (w + act) / bw, fl / rate  # roofline: max(x, y) as a conditional expression (a hot path)
        return share * ((y if y > x else x) + k4)

    def router_s(self, rank_tokens: float) -> float:
        """The gate: hidden x experts logits per token on its attention rank (bf16 weights, replicated)."""
        w, h_e = self._router_fold  # hidden x experts, hidden + experts
        x, y = (w + rank_tokens * h_e) * ACT_BYTES / self.bw, 2 * rank_tokens * w / self.flops
        return self.share * ((y if y > x else x) + self.kernel_s)  # max(x, y)

    def _spread_s(self, bytes_per_gpu: float, on_node_bw: float) -> float:
        """Moving ``bytes_per_gpu`` evenly to the other members of the expert group (G GPUs): the share bound
        for GPUs on other nodes crosses the NICs, the rest NVLink, in parallel."""
        if self.group <= 1:
            return 0.0
        peers, far = self._spread_fold  # G - 1, G - min(gpus_per_node, G)
        off = bytes_per_gpu * far / peers
        x, y = (bytes_per_gpu - off) / on_node_bw, off / self.nic_bw if off else 0.0
        return y if y > x else x  # max(x, y)

    def comm_s(self, tokens: float) -> float:
        """Communication of the MoE block of one layer, ``tokens`` = all tokens of the step in the stage.

        ep = 1, dp = 1: the TP all-reduce of the block's output (as a dense MLP; in ``iteration_s``), 0 here.
        ep = 1, dp > 1: all-gather the dp ranks' tokens to the expert group, reduce-scatter the outputs:
            2 latencies + T H 2 B x 2 (G-1)/G over the collective bus (over the NICs where G spans nodes).
        ep > 1: all-to-all dispatch and combine: each GPU sends its T / G tokens' k copies, of which (ep-1)/ep
            go to other ranks: 2 x (latency + T/G k H 2 B (ep-1)/ep over NVLink / NICs)."""
        mode, G, H, k, ep, share, lat, lat2, bus, g1, ep1, link = self._comm_fold
        if mode == 0:  # ep = dp = 1
            return 0.0
        if mode == 1:  # ep = 1, dp > 1 (bus: the collective bus, or the NICs where G spans nodes; g1: G - 1)
            return share * (lat2 + tokens * H * ACT_BYTES * 2 * g1 / G / bus)
        sent = tokens / G * k * H * ACT_BYTES * ep1 / ep  # ep1: ep - 1
        return share * 2 * (lat + self._spread_s(sent, link))
