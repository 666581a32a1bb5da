"""``Deployment.of_view`` (view -> plan record) and ``DeploymentSpecView.of_plan`` (plan record -> view) are
inverses on what a plan's deployment holds before realisation: both planners build their plan records with the
first, and every later stage reads them back with the second, so a field one drops or misspells would change
what is checked, simulated and launched."""
from __future__ import annotations

from pathlib import Path

import pytest

from trimtab.contract.schema import Deployment
from trimtab.deployment.shape import DeploymentSpecView
from trimtab.gate.analytic import load_plan

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
# each has a feature sub-record: P/D roles, MoE layout, KV tiers, LoRA slots and tenants, prefix cache
EXAMPLES = ("disaggregated", "moe", "long-context", "multi-lora", "shared-prefix")
# filled after the planner builds the record (trimtab.contract.realise, placement)
REALISED = ("engine_args", "command", "worker_command", "engine_files", "placement", "context_tokens",
            "capacity_rps_per_replica")


@pytest.mark.parametrize("example", EXAMPLES)
def test_of_view_inverts_of_plan(example):
    for d in load_plan(GOLDEN / f"{example}.plan.yaml").deployments:
        v = DeploymentSpecView.of_plan(d)
        back = Deployment.of_view(v, kv_cache_tokens=d.kv_cache_tokens,
                                  load_rps_per_replica=d.load_rps_per_replica, utilization=d.utilization,
                                  prefix_cache_tokens=d.prefix_cache_tokens, kv=d.kv, adapters=d.adapters,
                                  tenants=d.tenants, group_replicas=d.group_replicas)
        assert back == d.model_copy(update={k: getattr(back, k) for k in REALISED})
        assert DeploymentSpecView.of_plan(back) == v


def test_the_examples_cover_every_sub_record():
    deps = [d for e in EXAMPLES for d in load_plan(GOLDEN / f"{e}.plan.yaml").deployments]
    assert any(d.role == "prefill" for d in deps) and any(d.data_parallel > 1 for d in deps)
    assert any(d.kv for d in deps) and any(d.max_loras for d in deps) and any(d.tenants for d in deps)
    assert any(d.prefix_cache_tokens for d in deps)
