"""SGLang commands parsed by SGLang's own parser (``ServerArgs.add_cli_args``), for every example's
deployments realised for SGLang. The package imports on CPU with `pip install --no-deps sglang orjson ipython
traitlets`; the test skips without it."""
from __future__ import annotations

import argparse

import pytest

from trimtab.engines.base import ADAPTER_DIR, flag_table
from tests.engines.conftest import for_engine

server_args = pytest.importorskip("sglang.srt.server_args")

PROGRAM = ["python3", "-m", "sglang.launch_server"]


def parse(command: list[str], env: dict[str, str] | None = None) -> argparse.Namespace:
    assert command[:3] == PROGRAM
    argv = list(command[3:])
    for k, v in (env or {}).items():
        argv = [a.replace("${" + k + "}", v) for a in argv]
    p = argparse.ArgumentParser(exit_on_error=False)
    server_args.ServerArgs.add_cli_args(p)
    return p.parse_args(argv)


def test_parser_rejects_an_unknown_flag():
    with pytest.raises(SystemExit):
        parse(PROGRAM + ["--model-path=m", "--max-num-seqs=4"])  # a vLLM flag: SGLang has no such option


def test_every_example_command_parses_with_the_plan_values(example_plans):
    seen = offloading = 0
    for name, (plan0, ir0) in example_plans.items():
        plan, ir = for_engine(plan0, ir0, "sglang")
        assert plan.engine.name == "sglang" and plan.engine.version == flag_table()["sglang"]["version"]
        for d in plan.deployments:
            ns = parse(d.command)
            where = f"{name}/{d.name}"
            assert ns.model_path == ir.identities[d.model].model_id, where
            # MoE layouts (docs/moe.md): with DP attention --tp-size counts every GPU of a stage, SGLang
            # divides running requests and the chunk among the dp ranks, and each rank has its own KV pool
            dp = d.data_parallel
            assert (ns.tp_size, ns.pp_size) == (d.tensor_parallel * dp, d.pipeline_parallel), where
            assert (ns.dp_size, bool(ns.enable_dp_attention)) == (dp, dp > 1), where
            assert ns.context_length == d.context_tokens <= d.kv_cache_tokens // dp, where
            assert ns.max_total_tokens == d.kv_cache_tokens // dp, where
            assert (ns.max_running_requests, ns.chunked_prefill_size) == (
                d.max_batch_size * dp, d.max_num_batched_tokens * dp), where
            assert ns.mem_fraction_static == ir.engine.gpu_memory_utilization.value, where
            assert ns.enable_metrics is True
            assert (ns.quantization == "fp8") == (d.dtype == "fp8"), where
            assert ns.disaggregation_mode == (d.role if d.role != "unified" else "null"), where
            if d.max_loras:
                assert ns.enable_lora and ns.max_loras_per_batch == d.max_loras, where
                paths = [p if isinstance(p, str) else f"{p['lora_name']}={p['lora_path']}"
                         for p in ns.lora_paths]
                assert sorted(paths) == sorted(f"{a}={ADAPTER_DIR}/{a}" for a in d.adapters), where
            if d.kv is not None and d.kv.offload_gib > 0 and not d.kv.live:  # the prefix cache's host tier
                assert ns.enable_hierarchical_cache, where
                per_rank_bytes = ns.hicache_size * 1e9  # SGLang: integer GB per rank
                gpus = d.tensor_parallel * d.pipeline_parallel
                # rounded down
                assert 0 < d.kv.offload_gib * 1024**3 - per_rank_bytes * gpus < 1e9 * gpus, where
                offloading += 1
            seen += 1
    assert seen == sum(len(p.deployments) for p, _ in example_plans.values())
    assert offloading >= 1  # long-context's RAG deployment


def test_multi_node_leader_and_worker_parse():
    from trimtab.engines import sglang
    from tests.engines.conftest import _facts

    ln = sglang.launch(_facts())
    lead = parse(list(ln.command), {"LEADER_ADDRESS": "10.0.0.1"})
    work = parse(list(ln.worker_command), {"LEADER_ADDRESS": "10.0.0.1", "NODE_RANK": "1"})
    assert (lead.nnodes, lead.node_rank, lead.dist_init_addr) == (2, 0, "10.0.0.1:20000")
    assert (work.nnodes, work.node_rank) == (2, 1)
