"""TensorRT-LLM commands against the documented flag list (the package needs CUDA, so its click parser cannot
run here: docs/deploy.md states the limit), and contracts every emitter keeps."""
from __future__ import annotations

from pathlib import Path

import yaml

from trimtab.engines.base import flag_table
from trimtab.contract.realise import EMITTERS, deployment_facts
from tests.engines.conftest import _facts, for_engine

ROOT = Path(__file__).resolve().parents[2]
# LlmArgs fields the extra options YAML may carry (tensorrt_llm/llmapi/llm_args.py), with their own keys.
LLM_ARGS = {"enable_chunked_prefill": None,
            "kv_cache_config": {"enable_block_reuse", "dtype", "host_cache_size"},
            "lora_config": {"lora_dir", "max_lora_rank", "max_loras", "max_cpu_loras"},
            "cache_transceiver_config": {"backend"}, "enable_attention_dp": None,
            "moe_expert_parallel_size": None}


def _flag_names(args: list[str]) -> list[str]:
    return [a.split("=", 1)[0] for a in args if a.startswith("--")]


def test_every_engine_profile_has_an_emitter_and_a_flag_table():
    engines = sorted(p.stem for p in (ROOT / "profiles" / "engines").glob("*.yaml"))
    assert sorted(EMITTERS) == engines == sorted(flag_table())
    for name, t in flag_table().items():
        t = flag_table()[t["same_as"]] if "same_as" in t else t
        assert t["version"] and t["source"], name


def test_trtllm_commands_use_only_documented_flags(example_plans):
    documented = set(flag_table()["trt-llm"]["flags"].values())
    for name, (plan0, ir0) in example_plans.items():
        plan, _ = for_engine(plan0, ir0, "trt-llm")
        for d in plan.deployments:
            # multi-node: MPI ranks
            cmd = d.command[1:] if d.command[0] == "trtllm-llmapi-launch" else d.command
            assert (d.command[0] == "trtllm-llmapi-launch") == (name == "big405b"), f"{name}/{d.name}"
            assert cmd[:2] == ["trtllm-serve", "serve"] and cmd[3:] == d.engine_args
            assert set(_flag_names(d.engine_args)) <= documented, f"{name}/{d.name}"
            args = dict(a.split("=", 1) for a in d.engine_args)
            assert int(args["--max_seq_len"]) == d.context_tokens <= d.kv_cache_tokens
            # attention DP (MoE layouts): --tp_size counts every GPU of a stage
            assert int(args["--tp_size"]) == d.tensor_parallel * d.data_parallel
            assert int(args["--max_batch_size"]) == d.max_batch_size
            assert 0 < float(args["--kv_cache_free_gpu_memory_fraction"]) <= 1
            (fname, text), = d.engine_files.items()
            assert args["--extra_llm_api_options"] == fname
            extra = yaml.safe_load(text)
            assert set(extra) <= set(LLM_ARGS) and extra["enable_chunked_prefill"] is True
            for k, v in extra.items():
                if LLM_ARGS[k] is not None:
                    assert set(v) <= LLM_ARGS[k], (k, v)
            assert ("lora_config" in extra) == bool(d.max_loras)
            assert ("cache_transceiver_config" in extra) == (d.role != "unified")
            assert extra.get("enable_attention_dp", False) == (d.data_parallel > 1), f"{name}/{d.name}"
            assert extra.get("moe_expert_parallel_size", 1) == d.expert_parallel, f"{name}/{d.name}"


def test_trtllm_memory_fraction_is_a_share_of_memory_free_after_weights(example_plans):
    """TensorRT-LLM's fraction applies to HBM left after weights and workspace, not to all of it: the fraction
    times that free memory is the planned KV (rounded down to 0.001), from the cost model's memory fit."""
    from trimtab.cost.factory import replica_model

    plan, ir = example_plans["quickstart"]
    plan, ir = for_engine(plan, ir, "trt-llm")
    for f, _ in deployment_facts(plan, ir):
        d = next(x for x in plan.deployments if x.name == f.shape.name)
        mem = replica_model(ir, d.model, d.gpu, d.tensor_parallel, d.pipeline_parallel, d.dtype,
                            d.max_batch_size, d.max_num_batched_tokens).memory
        free = ir.gpu(d.gpu).profile.memory_gib.value - mem.weights_gib_per_gpu - mem.activation_gib_per_gpu \
            - mem.reserve_gib_per_gpu
        kv_gib = d.kv_cache_tokens * mem.kv_bytes_per_token_per_gpu / 1024 ** 3
        assert f.kv_free_fraction * free <= kv_gib < (f.kv_free_fraction + 0.001) * free + 1e-9


def test_trtllm_multi_node_runs_under_the_llmapi_launcher():
    from trimtab.engines import trtllm

    ln = trtllm.launch(_facts())
    assert ln.command[0] == "trtllm-llmapi-launch" and ln.worker_command == ln.command


def test_emitted_flags_all_come_from_the_flag_table(example_plans):
    """No flag name is spelled in Python: each is a value of profiles/engine_flags.yaml (aiconfigurator's
    backend-contract golden, per engine version)."""
    from trimtab.engines.base import engine_table

    for engine in EMITTERS:
        names = set(engine_table(engine)["flags"].values())
        for plan0, ir0 in example_plans.values():
            plan, _ = for_engine(plan0, ir0, engine)
            for d in plan.deployments:
                assert set(_flag_names(d.engine_args)) <= names, (engine, d.name)


def test_realise_is_deterministic(example_plans):
    from trimtab.contract.write import emit

    for plan0, ir0 in example_plans.values():
        for engine in EMITTERS:
            a, _ = for_engine(plan0, ir0, engine)
            b, _ = for_engine(plan0, ir0, engine)
            assert emit(a) == emit(b)


def test_facts_carry_the_plans_shape_and_repeat_none_of_it(example_plans):
    """An emitter reads tp, batch sizes, role, LoRA slots, the MoE layout and the KV tier from the
    deployment's shape, the view every stage takes of a plan deployment; the facts add only what a shape does
    not say."""
    from dataclasses import fields

    from trimtab.deployment.shape import DeploymentSpecView
    from trimtab.engines.base import DeploymentFacts

    shared = {f.name for f in fields(DeploymentFacts)} & {f.name for f in fields(DeploymentSpecView)}
    assert shared == {"model"}  # the facts' is the weights' identity, the shape's the profile name
    for stem in ("multi-lora", "moe", "disaggregated", "long-context"):
        plan, ir = example_plans[stem]
        for d, (f, _) in zip(plan.deployments, deployment_facts(plan, ir)):
            assert f.shape == DeploymentSpecView.of_plan(d) and f.model.name == d.model
