"""SGLang emitter: ``python3 -m sglang.launch_server --model-path MODEL`` with the flags of
``profiles/engine_flags.yaml`` (``sglang``).

Entry point: ``launch(facts) -> Launch``. tests/engines/test_sglang_parser.py parses the emitted commands with
SGLang's ``ServerArgs.add_cli_args`` parser when the ``sglang`` package imports (it does on CPU with
``pip install --no-deps sglang orjson ipython traitlets``).
"""
from __future__ import annotations

from trimtab.engines.base import (ADAPTER_DIR, LEADER_ENV, RANK_ENV, DeploymentFacts, Launch,
                                   address_and_shape, dtype_args, flag_table, kv, num)

ENGINE = "sglang"
GIB = 1024 ** 3
# --dist-init-addr port of a multi-node replica's leader (any free port; fixed for stable bytes)
DIST_PORT = 20000


def launch(f: DeploymentFacts) -> Launch:
    t = flag_table()[ENGINE]
    fl, val, s = t["flags"], t["values"], f.shape
    a = address_and_shape(f, t) + [
         # SGLang sizes its KV pool from --mem-fraction-static; capping it at the planned tokens keeps the
         # admission the cost model assumed.
         # With DP attention each rank has its own pool (the plan's KV is the replica's: dp x a rank's), and
         # SGLang divides --max-running-requests and --chunked-prefill-size among the dp ranks (the plan's are
         # per rank).
         kv(fl["kv_pool_tokens"], f.kv_cache_tokens // s.dp),
         kv(fl["max_batch"], s.max_num_seqs * s.dp), kv(fl["max_step_tokens"], s.max_batched_tokens * s.dp),
         kv(fl["memory_fraction"], num(f.memory_fraction)), fl["metrics"]]
    a += dtype_args(f, t)
    if s.dp > 1:  # attention data parallelism: --tp-size counts all tp x dp GPUs (address_and_shape)
        a += [kv(fl["data_parallel"], s.dp), fl["dp_attention"]]
    if s.ep > 1:
        a.append(kv(fl["expert_parallel_size"], s.ep))
    # Prefix caching: SGLang's radix cache is on unless --disable-radix-cache; nothing to add.
    # HiCache: host-memory tier of the radix (prefix) cache. --hicache-size is an integer of GB (1e9 bytes)
    # per rank (sglang/srt/server_args.py: type=int; mem_cache/pool_host: host_size * 1e9 bytes): rounded
    # down, so the node's host memory holds what the plan counted; under 1 GB per rank there is no tier to
    # enable.
    host_gb = int(f.offload_gib * GIB / 1e9 / (s.tp * s.pp)) if f.offload_gib > 0 else 0
    if host_gb >= 1:
        a += [fl["hierarchical_cache"], kv(fl["hicache_size"], host_gb)]
    if s.lora:
        a += [fl["enable_lora"], kv(fl["max_loras"], s.lora.max_loras),
              kv(fl["max_lora_rank"], s.lora.max_lora_rank), kv(fl["max_cpu_loras"], f.max_cpu_loras)]
        if f.adapters:
            a += [fl["lora_modules"], *(f"{n}={ADAPTER_DIR}/{n}" for n in f.adapters)]
    if s.role in ("prefill", "decode"):
        a += [kv(fl["disaggregation_mode"], s.role), kv(fl["transfer_backend"], val["transfer_backend"])]
    head = [*t["program"], kv(t["model"], f.model.model_id)]
    worker: tuple[str, ...] = ()
    if f.nodes_per_replica > 1:
        multi = [kv(fl["nnodes"], f.nodes_per_replica),
                 kv(fl["master_addr"], f"${{{LEADER_ENV}}}:{DIST_PORT}")]
        worker = (*head, *a, *multi, kv(fl["node_rank"], f"${{{RANK_ENV}}}"))
        a += [*multi, kv(fl["node_rank"], 0)]
    return Launch(engine_args=tuple(a), command=(*head, *a), worker_command=worker)
