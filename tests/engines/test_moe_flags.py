"""MoE layouts through the emitters (docs/moe.md): attention data parallelism and expert parallelism in each
engine's names, parsed by vLLM's and SGLang's own parsers where they import."""
from __future__ import annotations

import pytest

from trimtab.engines import sglang as sglang_emitter
from trimtab.engines import trtllm as trtllm_emitter
from trimtab.engines import vllm as vllm_emitter
import yaml
from tests.engines.conftest import _facts


def moe_facts(**kw):
    from trimtab.engines.base import ModelIdentity

    base = dict(name="chat-h200-tp2-dp4-ep8-t2k",
                model=ModelIdentity("deepseek-v3", "deepseek-ai/DeepSeek-V3",
                "main", "deepseek-v3"), tp=2, pp=1, dp=4, ep=8, nodes_per_replica=1, gpus_per_node=8)
    base.update(kw)
    return _facts(**base)


def test_vllm_flags_name_dp_and_ep():
    a = vllm_emitter.launch(moe_facts()).engine_args
    assert ("--tensor-parallel-size=2" in a and "--data-parallel-size=4" in a
            and "--enable-expert-parallel" in a)
    plain = vllm_emitter.launch(moe_facts(dp=1, ep=1)).engine_args
    assert not any(x.startswith("--data-parallel") or x == "--enable-expert-parallel" for x in plain)


def test_vllm_parser_reads_the_layout():
    cli_args = pytest.importorskip("vllm.entrypoints.launchers.cli_args")
    argparse_utils = pytest.importorskip("vllm.utils.argparse_utils")
    cmd = vllm_emitter.launch(moe_facts()).command
    ns = cli_args.make_arg_parser(argparse_utils.FlexibleArgumentParser()).parse_args(list(cmd[2:]))
    assert (ns.tensor_parallel_size, ns.data_parallel_size, ns.enable_expert_parallel) == (2, 4, True)


def test_sglang_tp_size_counts_every_gpu_with_dp_attention():
    a = sglang_emitter.launch(moe_facts()).engine_args
    assert "--tp-size=8" in a and "--dp-size=4" in a and "--enable-dp-attention" in a and "--ep-size=8" in a
    f = moe_facts()  # SGLang divides the running requests among the ranks; each rank has its own KV pool
    assert f"--max-running-requests={f.shape.max_num_seqs * 4}" in a
    assert f"--max-total-tokens={f.kv_cache_tokens // 4}" in a
    assert f"--chunked-prefill-size={f.shape.max_batched_tokens * 4}" in a
    sa = pytest.importorskip("sglang.srt.server_args")
    import argparse

    p = argparse.ArgumentParser()
    sa.ServerArgs.add_cli_args(p)
    ns = p.parse_args(list(sglang_emitter.launch(moe_facts()).command[3:]))
    assert (ns.tp_size, ns.dp_size, ns.enable_dp_attention, ns.ep_size) == (8, 4, True, 8)


def test_trtllm_extra_options_carry_attention_dp_and_moe_ep():
    la = trtllm_emitter.launch(moe_facts(tp=1, dp=8))
    assert "--tp_size=8" in la.engine_args
    opts = yaml.safe_load(next(iter(la.files.values())))
    assert opts["enable_attention_dp"] is True and opts["moe_expert_parallel_size"] == 8
    assert not la.warnings or all("fp8" in w for w in la.warnings)
    assert any("tp 2 x dp 4" in w for w in trtllm_emitter.launch(moe_facts()).warnings)


def test_fp4_weights_serve_an_fp8_kv_cache():
    a = vllm_emitter.launch(moe_facts(dtype="fp4")).engine_args
    assert "--kv-cache-dtype=fp8" in a and not any(x.startswith("--quantization") for x in a)
