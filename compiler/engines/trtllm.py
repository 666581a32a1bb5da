"""TensorRT-LLM emitter: ``trtllm-serve serve MODEL`` (PyTorch backend) with the flags of
``profiles/engine_flags.yaml`` (``trt-llm``); what has no flag goes into the ``--extra_llm_api_options`` YAML.

Entry point: ``launch(facts) -> Launch`` (its ``files`` holds that YAML). TensorRT-LLM needs CUDA to import,
so tests check the commands against the documented flag list instead of its parser (docs/deploy.md).
"""
from __future__ import annotations

from trimtab.engines.base import ADAPTER_DIR, DeploymentFacts, Launch, flag_table, kv, num
from trimtab.util.yamlio import dump_canonical

ENGINE = "trt-llm"
GIB = 1024 ** 3


def options_file(name: str) -> str:
    return f"{name}.extra-llm-api-options.yaml"


def launch(f: DeploymentFacts) -> Launch:
    t = flag_table()[ENGINE]
    fl, val, ex = t["flags"], t["values"], t["extra_options"]
    extra: dict = {ex["chunked_prefill"]: True}
    cache: dict = {}
    if f.prefix_caching:
        cache[ex["block_reuse"]] = True
    if f.kv_dtype:  # a KV precision set apart from dtype's (an NVFP4 KV cache)
        cache[ex["kv_dtype"]] = val["kv_cache"][f.kv_dtype]
    elif f.dtype in ("fp8", "fp4"):  # fp4 weights serve an fp8 KV cache
        cache[ex["kv_dtype"]] = "fp8"
    if f.offload_gib > 0:  # host tier of the block-reuse (prefix) cache, bytes per rank
        cache[ex["host_cache_bytes"]] = int(f.offload_gib * GIB / (f.tp * f.pp))
    if cache:
        extra[ex["kv_cache_config"]] = cache
    if f.max_loras:
        extra[ex["lora_config"]] = {"lora_dir": [f"{ADAPTER_DIR}/{n}" for n in f.adapters],
                                    "max_lora_rank": f.max_lora_rank, "max_loras": f.max_loras,
                                    "max_cpu_loras": f.max_cpu_loras}
    if f.dp > 1:
        extra[ex["attention_dp"]] = True
    if f.ep > 1:
        extra[ex["moe_ep"]] = f.ep
    if f.role in ("prefill", "decode"):
        extra[ex["cache_transceiver"]] = {"backend": "NIXL"}
    fname = options_file(f.name)
    a = [kv(fl["host"], "0.0.0.0"), kv(fl["port"], t["port"]), kv(fl["backend"], val["backend"]),
         kv(fl["tensor_parallel"], f.tp * f.dp), kv(fl["pipeline_parallel"], f.pp),
         kv(fl["context"], f.context_tokens), kv(fl["max_batch"], f.max_batch),
         kv(fl["max_step_tokens"], f.max_step_tokens),
         kv(fl["memory_fraction"], num(f.kv_free_fraction)), kv(fl["extra_options"], fname)]
    warnings = []
    if f.dtype in ("fp8", "fp4"):
        warnings.append(f"{f.name}: TensorRT-LLM reads {f.dtype} weights from an {f.dtype} checkpoint "
                        f"(ModelOpt); set models[].hf_id to one, {f.model.model_id} is served as published")
    if f.dp > 1 and f.tp > 1:
        warnings.append(f"{f.name}: TensorRT-LLM's attention data parallelism runs attention on one GPU per "
                        f"rank; this plan's tp {f.tp} x dp {f.dp} layout is served as tp 1 x dp "
                        f"{f.tp * f.dp}")
    head = [*t["program"], f.model.model_id]
    # A replica spanning nodes runs under an MPI launcher (mpirun/srun) that starts this same command on every
    # node; trtllm-llmapi-launch joins the ranks. The command is identical on all nodes.
    if f.nodes_per_replica > 1:
        head = [*val["multi_node_launcher"], *head]
    cmd = (*head, *a)
    return Launch(engine_args=tuple(a), command=cmd, worker_command=cmd if f.nodes_per_replica > 1 else (),
                  files={fname: dump_canonical(extra)}, warnings=tuple(warnings))
