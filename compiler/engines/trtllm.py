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
    fl, val, ex, s = t["flags"], t["values"], t["extra_options"], f.shape
    extra: dict = {ex["chunked_prefill"]: True}
    cache: dict = {}
    if f.prefix_caching:
        cache[ex["block_reuse"]] = True
    if s.kv_dtype:  # a KV precision set apart from dtype's (an NVFP4 KV cache)
        cache[ex["kv_dtype"]] = val["kv_cache"][s.kv_dtype]
    elif s.dtype in ("fp8", "fp4"):  # fp4 weights serve an fp8 KV cache
        cache[ex["kv_dtype"]] = "fp8"
    if f.offload_gib > 0:  # host tier of the block-reuse (prefix) cache, bytes per rank
        cache[ex["host_cache_bytes"]] = int(f.offload_gib * GIB / (s.tp * s.pp))
    if cache:
        extra[ex["kv_cache_config"]] = cache
    if s.lora:
        extra[ex["lora_config"]] = {"lora_dir": [f"{ADAPTER_DIR}/{n}" for n in f.adapters],
                                    "max_lora_rank": s.lora.max_lora_rank, "max_loras": s.lora.max_loras,
                                    "max_cpu_loras": f.max_cpu_loras}
    if s.dp > 1:
        extra[ex["attention_dp"]] = True
    if s.ep > 1:
        extra[ex["moe_ep"]] = s.ep
    if s.role in ("prefill", "decode"):
        extra[ex["cache_transceiver"]] = {"backend": "NIXL"}
    fname = options_file(s.name)
    a = [kv(fl["host"], "0.0.0.0"), kv(fl["port"], t["port"]), kv(fl["backend"], val["backend"]),
         kv(fl["tensor_parallel"], s.tp * s.dp), kv(fl["pipeline_parallel"], s.pp),
         kv(fl["context"], f.context_tokens), kv(fl["max_batch"], s.max_num_seqs),
         kv(fl["max_step_tokens"], s.max_batched_tokens),
         kv(fl["memory_fraction"], num(f.kv_free_fraction)), kv(fl["extra_options"], fname)]
    warnings = []
    if s.dtype in ("fp8", "fp4"):
        warnings.append(f"{s.name}: TensorRT-LLM reads {s.dtype} weights from an {s.dtype} checkpoint "
                        f"(ModelOpt); set models[].hf_id to one, {f.model.model_id} is served as published")
    # trtllm-serve takes the model positionally and has no revision or served-name flag (docs/deploy.md):
    # say so where the spec asked for either, not deploy another revision, or another name, without a word
    if f.model.revision != "main":
        warnings.append(f"{s.name}: trtllm-serve has no revision flag: {f.model.model_id} is served at its "
                        f"default branch, not models[].hf_revision {f.model.revision}; point "
                        "models[].hf_id at a copy (a repo or a local folder) holding that revision")
    if f.model.served_name != f.model.name:
        warnings.append(f"{s.name}: trtllm-serve has no served-name flag: clients send the model id "
                        f"{f.model.model_id}, not models[].served_name {f.model.served_name}")
    if s.dp > 1 and s.tp > 1:
        warnings.append(f"{s.name}: TensorRT-LLM's attention data parallelism runs attention on one GPU per "
                        f"rank; this plan's tp {s.tp} x dp {s.dp} layout is served as tp 1 x dp "
                        f"{s.tp * s.dp}")
    head = [*t["program"], f.model.model_id]
    # A replica spanning nodes runs under an MPI launcher (mpirun/srun) that starts this same command on every
    # node; trtllm-llmapi-launch joins the ranks. The command is identical on all nodes.
    if f.nodes_per_replica > 1:
        head = [*val["multi_node_launcher"], *head]
    cmd = (*head, *a)
    return Launch(engine_args=tuple(a), command=cmd, worker_command=cmd if f.nodes_per_replica > 1 else (),
                  files={fname: dump_canonical(extra)}, warnings=tuple(warnings))
