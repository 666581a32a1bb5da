"""LoRA serving arithmetic: adapter memory, the batched multi-adapter compute overhead, swap-in latency.

``LoraReplicaModel`` is a ``ReplicaModel`` with ``max_loras`` GPU adapter slots of rank ``max_lora_rank``
(vLLM ``--enable-lora --max-loras --max-lora-rank``); every planner, ``check`` and simulator path builds it
through ``trimtab.milp.candidates.replica_model(..., lora=...)``, so it stays the one implementation.

Memory: vLLM preallocates ``max_loras`` slots of ``max_lora_rank`` for every LoRA-capable projection; one
adapter of rank r over modules M takes  r x sum_{m in M} (in_m + out_m) x layers x 2 bytes  (bf16 adapters),
sharded over the TP x PP GPUs like the layers it adapts. The slots come out of the KV cache budget.

Compute (per engine step): the gather-matmul kernels of Punica (SGMV, Chen et al., "Punica: Multi-Tenant LoRA
Serving", MLSys 2024, arXiv:2310.18547, section 4) and S-LoRA (MBGMM, Sheng et al., arXiv:2311.03285,
section 5): per layer and target module a shrink (x A) and an expand (x B) kernel. Each distinct adapter in
the batch has its A and B read once from HBM, so at the small ranks of LoRA the kernels are memory-bound and
their time grows linearly with the distinct adapters in the batch D:
    t_lora = layers x ( sum_m max((D x r x (in_m + out_m) x 2 B + T x (in_m + out_m + 2r) x 2 B)
                                  / (tp BW_eff),
                                  2 T r (in_m + out_m) / (tp F_eff))  +  2 x packed groups x t_kernel )
with D = min(max_loras, requests in the step) (planning assumes every request of a full step uses a different
adapter: the worst case). Punica reports its kernels add about 2 ms per token over a single-model baseline at
batch 32 of distinct rank-16 adapters on an A100 (abstract and section 7); this roofline gives 1.0 to 2.3 ms
per step for 7-8B models (rank 16, attention modules) on L40S/A100/H100 at D = 1 to 32, about 1.7 ms on the
A100 at D = 32 (tests/test_lora.py keeps it within that figure's range).

Swap-in: when more adapters are assigned to a replica than it has GPU slots, a request whose adapter is not
resident waits for it to be copied from CPU memory: adapter bytes / host-to-device bandwidth (the spec node's
``pcie_gbps``, default PCIE_GBPS). Planning charges that wait to every request's TTFT (conservative); the
simulator charges it only on misses of its per-replica LRU of slots.
"""
from __future__ import annotations

from dataclasses import replace
from functools import cached_property

from trimtab.cost.model import GIB, MemoryFit, ReplicaModel, ReplicaState

ADAPTER_BYTES = 2.0  # bf16 adapter weights
PCIE_GBPS = 25.0  # GB/s host to device: PCIe 4.0 x16 (31.5 GB/s theoretical) at ~80 % achieved
PACKED = {"q_proj": "qkv", "k_proj": "qkv", "v_proj": "qkv", "gate_proj": "gate_up", "up_proj": "gate_up"}
VLLM_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)  # values vLLM accepts for --max-lora-rank


def module_dims(model, module: str) -> tuple[float, float]:
    """(in, out) features of one target module of ``model`` (a ModelProfile)."""
    H = model.hidden_size.value
    q = model.num_attention_heads.value * model.head_dim.value
    kv = model.num_kv_heads.value * model.head_dim.value
    inter = model.intermediate_size.value
    return {"q_proj": (H, q), "k_proj": (H, kv), "v_proj": (H, kv), "o_proj": (q, H),
            "gate_proj": (H, inter), "up_proj": (H, inter), "down_proj": (inter, H)}[module]


def adapter_bytes(model, rank: int, modules: tuple[str, ...]) -> float:
    """Bytes of one adapter (all layers): rank x (in + out) x layers x modules x 2 bytes."""
    return rank * sum(sum(module_dims(model, m)) for m in modules) * model.num_layers.value * ADAPTER_BYTES


def vllm_rank(rank: int) -> int:
    """Smallest --max-lora-rank vLLM accepts that holds ``rank``."""
    return next((r for r in VLLM_RANKS if r >= rank), rank)


def swap_s(model, rank: int, modules: tuple[str, ...], pcie_gbps: float | None = None) -> float:
    """Seconds to copy one adapter from CPU memory into a GPU slot."""
    return adapter_bytes(model, rank, modules) / ((pcie_gbps or PCIE_GBPS) * 1e9)


class LoraReplicaModel(ReplicaModel):
    """A replica serving adapters: ``slots`` = max_loras, ``rank`` = max_lora_rank, ``modules`` the target
    modules preallocated, ``swap_wait_s`` added to every TTFT (0 when all assigned adapters stay resident)."""

    def __init__(self, *args, slots: int, rank: int, modules: tuple[str, ...], swap_wait_s: float = 0.0,
                 **kw):
        super().__init__(*args, **kw)
        self.lora_slots, self.lora_rank, self.lora_modules = int(slots), int(rank), tuple(modules)
        self.swap_wait_s = float(swap_wait_s)
        self._dims = [module_dims(self.model, m) for m in self.lora_modules]
        # vLLM packs q/k/v and gate/up into one LoRA layer each: one shrink + one expand launch per
        # packed group
        self._groups = len({PACKED.get(m, m) for m in self.lora_modules})

    @cached_property
    def memory(self) -> MemoryFit:
        base = ReplicaModel.memory.func(self)
        lora = (self.lora_slots * adapter_bytes(self.model, self.lora_rank, self.lora_modules)
                / (self.tp * self.pp))
        kv = base.kv_gib_per_gpu * GIB - lora
        tokens = int(kv // base.kv_bytes_per_token_per_gpu) if kv > 0 else 0
        return replace(base, kv_gib_per_gpu=max(kv, 0.0) / GIB, kv_cache_tokens=tokens)

    def lora_step_s(self, tokens: float, seqs: float) -> float:
        """Extra seconds of one engine step of ``tokens`` tokens from ``seqs`` requests (see module doc)."""
        if self.lora_slots <= 0 or tokens <= 0:
            return 0.0
        D = min(self.lora_slots, max(seqs, 1.0))
        r = self.lora_rank
        t = 0.0
        for i, o in self._dims:
            byt = (D * r * (i + o) + tokens * (i + o + 2 * r)) * ADAPTER_BYTES / self.tp
            t += max(byt / self.bw, 2 * tokens * r * (i + o) / self.tp / self.flops_linear)
        t += 2 * self._groups * self.kernel_s
        return self.L / self.pp * t * self.pp  # every stage runs its layers' kernels in turn

    def iteration_s(self, decode_batch: float, decode_ctx: float, prefill_tokens: float = 0.0,
                    prefill_ctx: float = 0.0, prefill_seqs: float = 1.0) -> float:
        base = super().iteration_s(decode_batch, decode_ctx, prefill_tokens, prefill_ctx, prefill_seqs)
        seqs = decode_batch + (max(prefill_seqs, 1.0) if prefill_tokens > 0 else 0.0)
        return base + self.lora_step_s(decode_batch + prefill_tokens, seqs)

    def evaluate(self, classes, percentile: float = 99.0, *args, **kw) -> ReplicaState:
        st = super().evaluate(classes, percentile, *args, **kw)
        if not self.swap_wait_s or not st.stable:
            return st
        w = self.swap_wait_s
        return replace(st, ttft_s=tuple(t + w for t in st.ttft_s),
                       ttft_mean_s=tuple(t + w for t in st.ttft_mean_s))
