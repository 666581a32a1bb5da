"""KV hand-off arithmetic of a prefill/decode pair: bytes per token, link bandwidths, seconds per transfer.

One implementation for the planner (``trimtab.milp.disagg``: capacities, link rows), ``check`` (link loads)
and the simulator (hand-off delay), so the three cannot disagree on how long a hand-off takes. Bandwidths come
from the GPU profile (``link_bandwidth_gbps``: NVLink, xGMI, or PCIe where the GPU has none;
``node_network_gbps``), the spec's ``nodes[].nic_gbps`` and ``network.inter_rack_gbps``.
"""
from __future__ import annotations

from trimtab.cost.factory import replica_model
from trimtab.ir.model import GpuPoolIR, ProblemIR


def kv_bytes_per_token(ir: ProblemIR, model: str, gpu: str, dtype: str, kv_dtype: str | None = None) -> float:
    """KV bytes one token of ``model`` takes in ``dtype`` (``kv_dtype`` when set apart) on ``gpu`` (all
    layers, all KV heads: what moves)."""
    return replica_model(ir, model, gpu, 1, 1, dtype, 1, 2048, kv_dtype=kv_dtype).kv_bytes_per_token


def local_bytes_per_s(pool: GpuPoolIR, p_gpus: int, d_gpus: int) -> float:
    """Hand-off bandwidth inside one NVLink domain (bytes/s): each GPU of the narrower side moves its KV shard
    over its own link (``link_bandwidth_gbps``: NVLink, xGMI, or PCIe where the GPU has no NVLink)."""
    return min(p_gpus, d_gpus) * pool.profile.link_bandwidth_gbps.value * 1e9


def nic_bytes_per_s(pool: GpuPoolIR, gpus: int) -> float:
    """Share of its node's NIC a replica of ``gpus`` GPUs of ``pool`` has (bytes/s)."""
    per_node = pool.nic_gbps or pool.profile.node_network_gbps.value
    return per_node * 1e9 * gpus / pool.profile.gpus_per_node.value


def transfer_s(ir: ProblemIR, model: str, dtype: str, tokens: float, p_gpu: str, p_gpus: int, d_gpu: str,
               d_gpus: int, local: bool = False, kv_dtype: str | None = None) -> float:
    """Seconds to move ``tokens`` tokens of KV from a prefill replica to a decode replica over the network
    (the narrower of the two NIC shares, and the inter-rack bandwidth when the two GPU types differ), or, for
    a co-located pair (``local``), over the GPUs' links inside the node (``local_bytes_per_s``)."""
    per_token = kv_bytes_per_token(ir, model, p_gpu, dtype, kv_dtype)
    if local:
        return tokens * per_token / local_bytes_per_s(ir.gpu(p_gpu), p_gpus, d_gpus)
    bw = min(nic_bytes_per_s(ir.gpu(p_gpu), p_gpus), nic_bytes_per_s(ir.gpu(d_gpu), d_gpus))
    if ir.inter_rack_gbps and p_gpu != d_gpu:
        bw = min(bw, ir.inter_rack_gbps * 1e9)
    return tokens * per_token / bw


def is_local_pair(p, d) -> bool:
    """A prefill and a decode deployment (plan ``Deployment`` or ``DeploymentSpecView``) that name each other
    as co-located partners, of one GPU type: their hand-off runs over the GPUs' links (``check`` verifies the
    placement keeps them in shared NVLink domains, ``verify_kv_links``)."""
    return (bool(getattr(p, "colocated_with", None)) and p.colocated_with == d.name
            and getattr(d, "colocated_with", None) == p.name and p.gpu == d.gpu)
