"""``workloads[].kv_dtype`` with LoRA adapters (docs/multi-lora.md; refused before: "kv_dtype is not supported
with LoRA adapters yet"). The adapter planner prices each replica's KV cache at the workload's precision
(``trimtab.planning.lora_candidates``: a group per base model, dtype and KV precision), so workloads of one
base model at different KV precisions never share a replica (one ``--kv-cache-dtype`` per engine).

Oracle, by hand: a LoRA replica's KV memory is its HBM left after weights, activations and its adapter slots,
whatever the KV precision, so an NVFP4 cache holds 163,840 / 92,160 = 16/9 the tokens of an fp8 one on
Llama 3.1 70B (2 x 80 layers x 8 KV heads x (64 + 8) bytes against x 128; tests/unit/test_fp4_kv.py).
"""
from __future__ import annotations

import dataclasses

import pytest

from trimtab.api import plan
from trimtab.deployment.shape import DeploymentSpecView, replica_model_of
from trimtab.ir.lower import lower
from trimtab.spec.load import load_spec

FP4 = """\
version: 1
name: kv4-lora
gpus:
  - {type: b200, count: 32}
models:
  - name: llama-3.1-70b
    adapters:
      - {name: law, rank: 16}
workloads:
  - name: agent
    model: llama-3.1-70b
    adapter: law
    rate_rps: 1
    dtype: fp8
    kv_dtype: fp4
    input_tokens: {lognormal: {median: 12000, p99: 40000}}
    output_tokens: {lognormal: {median: 1500, p99: 4000}}
    slo: {ttft_ms: 20000, tpot_ms: 120, percentile: 90}
"""

MIXED = """\
version: 1
name: kv-mixed
gpus:
  - {type: h100-sxm, count: 16, usd_per_hour: 3.9}
models:
  - name: llama-3.1-8b
    adapters:
      - {name: ada, rank: 16}
      - {name: bob, rank: 8}
workloads:
  - name: long
    model: llama-3.1-8b
    adapter: ada
    kv_dtype: fp8
    rate_rps: 4
    input_tokens: {lognormal: {median: 12000, p99: 30000}}
    output_tokens: {lognormal: {median: 800, p99: 2000}}
    slo: {ttft_ms: 10000, tpot_ms: 60, percentile: 90}
  - name: chat
    model: llama-3.1-8b
    adapter: bob
    rate_rps: 10
    input_tokens: {fixed: 800}
    output_tokens: {fixed: 150}
    slo: {ttft_ms: 2000, tpot_ms: 60, percentile: 90}
"""


def test_fp4_kv_cache_with_an_adapter_is_priced_at_fp4():
    spec = load_spec("kv4-lora.yaml", text=FP4)
    ir = lower(spec)
    p = plan(spec, validate=False).plan
    assert p.deployments and p.adapter_routes
    for d in p.deployments:
        assert d.kv_dtype == "fp4" and d.adapters == ["law"]
        assert "--kv-cache-dtype=nvfp4" in d.engine_args and "--enable-lora" in d.engine_args
        view = DeploymentSpecView.of_plan(d)
        assert view.lora is not None  # the LoRA replica model, adapter slots taken from its HBM
        fp8 = replica_model_of(ir, dataclasses.replace(view, kv_dtype=None)).memory
        assert replica_model_of(ir, view).memory.kv_cache_tokens == d.kv_cache_tokens
        assert d.kv_cache_tokens == pytest.approx(fp8.kv_cache_tokens * 16 / 9, abs=2)


def test_workloads_at_different_kv_precisions_never_share_a_replica():
    spec = load_spec("kv-mixed.yaml", text=MIXED)
    p = plan(spec, validate=False).plan
    served: dict[str, set[str]] = {}
    for r in p.routes:
        served.setdefault(r.deployment, set()).add(r.workload)
    kv = {d.name: d.kv_dtype for d in p.deployments}
    assert all(len(ws) == 1 for ws in served.values()), served
    assert {kv[d] for d, ws in served.items() if ws == {"long"}} == {"fp8"}
    assert {kv[d] for d, ws in served.items() if ws == {"chat"}} == {None}
    by = {d.name: d for d in p.deployments}
    assert all("--kv-cache-dtype=fp8" in by[d].engine_args for d, ws in served.items() if ws == {"long"})
