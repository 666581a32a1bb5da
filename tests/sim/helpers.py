"""Small plans and scenarios built by hand (no solver), so simulator tests stay fast and exact."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from trimtab.cost.factory import replica_model
from trimtab.ir.lower import lower
from trimtab.contract.schema import Deployment, Plan, Route, SolverInfo
from trimtab.deployment.shape import DeploymentSpecView
from trimtab.sim.scenario import Scenario, SimDeployment, SimWorkload
from trimtab.spec.load import load_spec

ONE_WORKLOAD = """\
version: 1
name: one
gpus:
  - {{type: {gpu}, count: 8}}
models:
  - name: llama-3.1-8b
workloads:
  - name: w
    model: llama-3.1-8b
    rate_rps: {rate}
    input_tokens: {isl}
    output_tokens: {osl}
    slo: {{ttft_ms: {ttft}, tpot_ms: {tpot}, percentile: {pct}}}
"""


def write_spec(tmp_path, rate=1.0, isl="{fixed: 512}", osl="{fixed: 64}", ttft=1000, tpot=100, pct=90,
               gpu="h100-sxm", extra="", name="spec.yaml"):
    p = tmp_path / name
    p.write_text(ONE_WORKLOAD.format(rate=rate, isl=isl, osl=osl, ttft=ttft, tpot=tpot, pct=pct, gpu=gpu)
                 + extra)
    return p


def one_deployment_plan(spec_path, replicas=1, gpu="h100-sxm", tp=1, mbt=8192, max_seqs=256) -> Plan:
    """A plan sending every bucket of every workload to one deployment of ``replicas`` replicas."""
    spec = load_spec(spec_path)
    ir = lower(spec)
    w0 = ir.workloads[0]
    rm = replica_model(ir, w0.model, gpu, tp, 1, "bf16", max_seqs, mbt)
    price = ir.gpu(gpu).usd_per_hour
    dep = Deployment(name="d", model=w0.model, gpu=gpu, tensor_parallel=tp, pipeline_parallel=1,
                     replicas=replicas,
                     role="unified", dtype="bf16", max_batch_size=max_seqs, max_num_batched_tokens=mbt,
                     kv_cache_tokens=rm.memory.kv_cache_tokens, load_rps_per_replica=0.0, utilization=0.0,
                     engine_args=[])
    routes = [Route(workload=w.name, bucket=b.name, deployment="d", share=b.prob) for w in ir.workloads
              for b in w.buckets]
    return Plan(spec=ir.name, input_hash=ir.input_hash, cost_usd_per_hour=price * tp * replicas,
                gpus={gpu: tp * replicas},
                solver=SolverInfo(backend="highs", status="optimal", gap=0.0, seconds=1.0,
                                                           rounds=1),
                deployments=[dep], routes=routes, predictions={}, buckets={})


class LinearModel:
    """A stand-in for ReplicaModel whose step time is exactly ``per_token_s`` x prompt tokens (+ ``decode_s``
    when anything decodes): a single server with a service time set by the test."""

    def __init__(self, per_token_s: float, decode_s: float = 0.0, max_num_seqs: int = 1,
                 max_batched_tokens: int = 10**9, kv_tokens: int = 10**12):
        self.per_token_s, self.decode_s = per_token_s, decode_s
        self.max_num_seqs, self.max_batched_tokens = max_num_seqs, max_batched_tokens
        self.memory = SimpleNamespace(kv_cache_tokens=kv_tokens)
        self.request_overhead = 0.0

    def iteration_s(self, decode_batch, decode_ctx, prefill_tokens=0.0, prefill_ctx=0.0):
        return self.per_token_s * prefill_tokens + (self.decode_s if decode_batch > 0 else 0.0)


def single_server(model, rate: float, isl_grid: np.ndarray, osl: int = 1, ttft_s=1e9, tpot_s=1e9) -> Scenario:
    """One workload, one deployment of one replica; input lengths drawn uniformly from ``isl_grid``."""
    g = np.sort(np.asarray(isl_grid, float))
    w = SimWorkload("w", rate, ttft_s, tpot_s, 99.0, 10**9, ("all",), g, np.array([float(osl)]),
                    [(0, len(g))])
    w.routes.append((np.array([0]), np.array([1.0])))
    view = DeploymentSpecView(name="d", replicas=1, model="fake", gpu="fake", tp=1, pp=1, dtype="bf16",
                              max_num_seqs=model.max_num_seqs, max_batched_tokens=model.max_batched_tokens)
    return Scenario([SimDeployment(view, ("w",), model)], [w], [])


def pd_spec(docs: bool = True):
    """The disaggregated example (``rag`` on llama-3.1-70b, split into prefill and decode) with a unified
    ``chat`` workload on llama-3.1-8b and, with ``docs``, a long-prompt ``docs`` workload on it that is split
    too."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "examples" / "disaggregated.yaml").read_text().replace(
        "models:\n  - name: llama-3.1-70b\n", "models:\n  - name: llama-3.1-70b\n  - name: llama-3.1-8b\n")
    # (name, rate rps, prompt median / p99, output median / p99, TTFT ms, TPOT ms, percentile)
    rows = [("chat", 8, 600, 4000, 150, 800, 1500, 60, 95)]
    if docs:
        rows.append(("docs", 10, 8000, 20000, 500, 1500, 4000, 20, 99))
    for name, rate, im, ip, om, op, ttft, tpot, pct in rows:
        text += (f"  - name: {name}\n    model: llama-3.1-8b\n    rate_rps: {rate}\n"
                 f"    input_tokens: {{lognormal: {{median: {im}, p99: {ip}}}}}\n"
                 f"    output_tokens: {{lognormal: {{median: {om}, p99: {op}}}}}\n"
                 f"    slo: {{ttft_ms: {ttft}, tpot_ms: {tpot}, percentile: {pct}}}\n")
    return load_spec("pd.yaml", text=text)


def two_pair_groups():
    """(a plan, its spec) with two groups of P/D pairs that share no deployment (``rag`` and ``docs``, each
    split into prefill and decode) and a unified deployment (``chat``): ``pd_spec``, planned without
    simulation."""
    from trimtab.api import plan

    spec = pd_spec()
    return plan(spec, validate=False).plan, spec
