"""``redundancy: n+1`` with adapters and tenants (docs/online.md, "Redundancy"): the adapter planner with the
n+1 rows (``trimtab.planning.redundancy.RedundantLoraPlanner``).

Oracle: the plan read by hand. For every node, the replicas of each deployment placed on it are removed; the
traffic the plan routes to the deployment (spec rate x route shares, every workload, adapter and tenant it
serves) must fit in the survivors: sum_w load[w] / cap[w] <= replicas left, and every adapter route must
still reach a replica holding the adapter. cap[w] (one replica's rate of workload w's whole length mix at
w's SLO) is the cost model's (``trimtab.planning.lora_candidates.mix_capacity``, read off the candidate the
deployment was bought as): a queueing capacity has no practical hand computation, so it is the one number
taken from the project. The same spec planned without n+1 fails that check (the oracle can tell), and the
node-loss check of ``trimtab.gate.nodeloss`` agrees both ways. Plans are analytic (cost model only) except
one validated by simulation.
"""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from trimtab.api import explain, plan
from trimtab.cli.main import app
from trimtab.contract.write import emit
from trimtab.errors import InfeasibleError
from trimtab.gate.nodeloss import check_each_node, losses_by_node
from trimtab.ir.lower import lower
from trimtab.planning.lora import build
from trimtab.spec.load import load_spec

# 3 l40s nodes and 2 h100 nodes of 8 GPUs; 60 adapters under Zipf (hot adapters and cold classes), a dedicated
# tenant's adapter, tenant-less base traffic on the same base model.
SPEC = """version: 1
name: lora-n1
{extra}gpus:
  - {{type: l40s, count: {l40s}, usd_per_hour: 1.80}}
  - {{type: h100-sxm, count: 16, usd_per_hour: 3.90}}
models:
  - name: llama-3.1-8b
    adapters_from:
      count: 60
      rank: 16
      traffic: {{zipf: {{s: 1.1}}}}
  - name: qwen2.5-7b
    adapters:
      - {{name: acme-legal, rank: 32}}
workloads:
  - name: assistants
    model: llama-3.1-8b
    adapter: "*"
    rate_rps: 40
    input_tokens: {{lognormal: {{median: 700, p99: 4000}}}}
    output_tokens: {{lognormal: {{median: 180, p99: 900}}}}
    slo: {{ttft_ms: 1500, tpot_ms: 60, percentile: 99}}
  - name: acme-legal
    model: qwen2.5-7b
    adapter: acme-legal
    tenant: acme
    rate_rps: 6
    input_tokens: {{fixed: 2000}}
    output_tokens: {{fixed: 300}}
    slo: {{ttft_ms: 3000, tpot_ms: 80, percentile: 90}}
  - name: qwen-base
    model: qwen2.5-7b
    rate_rps: 8
    input_tokens: {{fixed: 1000}}
    output_tokens: {{fixed: 200}}
    slo: {{ttft_ms: 2000, tpot_ms: 60, percentile: 90}}
tenants:
  - {{name: acme, dedicated: true}}
"""


def spec_of(n1: bool = True, l40s: int = 24, extra: str = ""):
    return load_spec("lora-n1.yaml", text=SPEC.format(
        extra=("redundancy: n+1\n" if n1 else "") + extra, l40s=l40s))


@pytest.fixture(scope="module")
def plans():
    none, n1 = spec_of(False), spec_of()
    return none, plan(none, validate=False).plan, n1, plan(n1, validate=False).plan


def short_of(p, spec) -> list[str]:
    """Each (node or single replica lost, deployment) whose survivors cannot carry the deployment's traffic
    (module docstring); [] when every loss is survived."""
    rate = {w.name: w.rate_rps for w in spec.workloads}
    cap = {c.id: dict(c.lora_group.capacity_rps) for c in build(lower(spec)).cands}
    load: dict[str, dict[str, float]] = {}
    for r in p.routes:
        per = load.setdefault(r.deployment, {})
        per[r.workload] = per.get(r.workload, 0.0) + rate[r.workload] * r.share
    reps = {d.name: d.replicas for d in p.deployments}
    losses = [(f"node {n}", lost) for n, lost in losses_by_node(p).items()]
    losses += [(f"one replica of {d}", {d: 1}) for d in reps]
    held = {d.name: set(d.adapters) for d in p.deployments}
    out = []
    for what, lost in losses:
        for d, per in load.items():
            need = sum(r / cap[d][w] for w, r in per.items())
            left = reps[d] - lost.get(d, 0)
            if need > left + 1e-6:
                out.append(f"{what}: {d} needs {need:.3f} replicas, {left} left")
        for r in p.adapter_routes:  # every adapter's routes still reach a replica that holds it
            if r.share > 0 and (reps[r.deployment] - lost.get(r.deployment, 0) < 1
                                or r.adapter not in held[r.deployment]):
                out.append(f"{what}: adapter {r.adapter} of {r.workload} loses {r.deployment}")
    return out


def test_adapter_plan_with_n_plus_1_survives_every_node_and_replica_loss(plans):
    none, p0, spec, p = plans
    assert p.redundancy == "n+1" and p0.redundancy is None
    assert p.adapter_routes and {t for d in p.deployments for t in d.tenants} == {"acme"}
    assert short_of(p, spec) == []
    # every node that holds a replica was checked, and there are several of them per GPU type
    assert len(losses_by_node(p)) >= 3
    # the cheapest plan without n+1 does not survive (the oracle tells the two apart); n+1 costs more
    assert short_of(p0, none)
    assert p.cost_usd_per_hour > p0.cost_usd_per_hour
    # each deployment spread: at most ceil(replicas / nodes of its type) of it on one node, each replica whole
    nodes = {"l40s": 3, "h100-sxm": 2}
    for d in p.deployments:
        per: dict[str, set] = {}
        for s in d.placement:
            per.setdefault(s.node, set()).add(s.replica)
        assert max(len(v) for v in per.values()) <= -(-d.replicas // nodes[d.gpu])
        assert sum(len(v) for v in per.values()) == d.replicas


def test_node_loss_check_agrees(plans):
    """``trimtab.gate.nodeloss`` (the cost model over the survivors, adapter and tenant checks included)
    passes every node loss of the n+1 plan and fails one of the plan without it."""
    none, p0, spec, p = plans
    losses = check_each_node(p, spec, analytic=True)
    assert losses and all(x.report.ok for x in losses), [x.report.violations for x in losses]
    assert not all(x.report.ok for x in check_each_node(p0, none, analytic=True))


TENANTS = """version: 1
name: tenants
redundancy: n+1
gpus:
  - {type: l40s, count: 16, usd_per_hour: 1.80}
models:
  - name: llama-3.1-8b
workloads:
  - name: a
    model: llama-3.1-8b
    tenant: acme
    rate_rps: 12
    input_tokens: {fixed: 1000}
    output_tokens: {fixed: 200}
    slo: {ttft_ms: 2000, tpot_ms: 80, percentile: 90}
  - name: b
    model: llama-3.1-8b
    rate_rps: 6
    input_tokens: {fixed: 500}
    output_tokens: {fixed: 100}
    slo: {ttft_ms: 2000, tpot_ms: 80, percentile: 90}
tenants:
  - {name: acme, dedicated: true}
"""


def test_tenants_without_adapters_plan_with_n_plus_1():
    """Refused before (exit 1, "n+1 is not supported with adapters or tenants yet"); a schedule still is
    (tests/online/test_redundancy.py). Tenants alone go to the adapter planner too: two nodes, each
    deployment keeps a replica on either."""
    spec = load_spec("tenants.yaml", text=TENANTS)
    assert lower(spec).lora is not None
    p = plan(spec, validate=False).plan
    assert p.redundancy == "n+1" and short_of(p, spec) == []
    assert {t for d in p.deployments for t in d.tenants} == {"acme"}
    assert all(len({s.node for s in d.placement}) == 2 for d in p.deployments)


def test_cli_plan_and_check_of_an_adapter_n_plus_1_spec(plans, tmp_path):
    _, _, _, p = plans
    s, f = tmp_path / "s.yaml", tmp_path / "s.plan.yaml"
    s.write_text(SPEC.format(extra="redundancy: n+1\n", l40s=24))
    f.write_text(emit(p))
    r = CliRunner().invoke(app, ["check", str(f), "--spec", str(s), "--analytic"])  # node losses: automatic
    assert r.exit_code == 0, r.output
    assert "check passed (every node loss)" in r.output


def test_one_node_pool_is_infeasible_with_the_reason():
    """Only the l40s carry qwen here (h100 count 0) and they are one node: its loss takes every replica."""
    text = SPEC.format(extra="redundancy: n+1\n", l40s=8).replace("count: 16", "count: 0")
    with pytest.raises(InfeasibleError) as e:
        plan(load_spec("one.yaml", text=text), validate=False)
    msg = str(e.value)
    assert "loss of any one node" in msg and "l40s 1 node of 8 GPUs" in msg, msg


def test_replicas_that_span_nodes_are_named():
    """70B with an adapter needs 2+ H100 per replica; 17 H100 make nodes of 8, 8 and 1, so n+1 leaves no
    candidate: the precheck says why, not that no candidate meets the SLO."""
    text = """version: 1
name: big
redundancy: n+1
gpus:
  - {type: h100-sxm, count: 17, usd_per_hour: 4.0}
models:
  - name: llama-3.1-70b
    adapters:
      - {name: law, rank: 16}
workloads:
  - name: chat
    model: llama-3.1-70b
    adapter: law
    rate_rps: 2
    input_tokens: {fixed: 1000}
    output_tokens: {fixed: 200}
    slo: {ttft_ms: 3000, tpot_ms: 100, percentile: 90}
"""
    with pytest.raises(InfeasibleError) as e:
        plan(load_spec("odd.yaml", text=text), validate=False)
    msg = str(e.value)
    head = "chat: with redundancy n+1 no candidate that meets its SLO is left (a replica of 2 GPUs spans"
    assert head + " nodes of 1" in msg and "(h100-sxm 1 GPU)" in msg, msg


def test_precheck_names_each_workload_by_its_own_cause():
    """One workload no deployment serves even without n+1 (a TPOT of 1 ms), one that only n+1's pruning
    strands (70B replicas of 2+ GPUs, a node of 1): the first said as the adapter planner says it, the
    second as n+1's."""
    text = """version: 1
name: two
redundancy: n+1
gpus:
  - {type: h100-sxm, count: 17, usd_per_hour: 4.0}
models:
  - name: llama-3.1-70b
    adapters:
      - {name: law, rank: 16}
  - name: llama-3.1-8b
    adapters:
      - {name: tiny, rank: 8}
workloads:
  - name: big
    model: llama-3.1-70b
    adapter: law
    rate_rps: 2
    input_tokens: {fixed: 1000}
    output_tokens: {fixed: 200}
    slo: {ttft_ms: 3000, tpot_ms: 100, percentile: 90}
  - name: fast
    model: llama-3.1-8b
    adapter: tiny
    rate_rps: 2
    input_tokens: {fixed: 500}
    output_tokens: {fixed: 100}
    slo: {ttft_ms: 3000, tpot_ms: 1, percentile: 90}
"""
    with pytest.raises(InfeasibleError) as e:
        plan(load_spec("two.yaml", text=text), validate=False)
    lines = e.value.lines
    assert any(x.startswith("big: with redundancy n+1 no candidate") for x in lines), lines
    assert any(x.startswith("fast: ") and "TPOT" in x and "n+1" not in x for x in lines), lines
    assert not any(x.startswith("big: ") and "n+1" not in x for x in lines), lines


def test_explain_solves_the_n_plus_1_adapter_problem(plans):
    _, p0, spec, p = plans
    e = explain(spec)
    assert e.feasible and abs(e.cost_usd_per_hour - p.cost_usd_per_hour) < 0.01
    assert any("n+1" in n and f"{p0.cost_usd_per_hour:.2f}" in n for n in e.notes)


@pytest.mark.slow  # quick suite within 3 minutes; .ci/run runs the slow suite
def test_validated_plan_simulates_each_node_loss():
    """The rounds simulate the plan and each kind of node loss (``SurvivesNodeLoss.simulate``); the plan
    records a passed simulation and still survives every loss by hand."""
    spec = spec_of()
    r = plan(spec)
    assert r.plan.simulation is not None and r.plan.simulation.passed and not r.plan.misses
    assert short_of(r.plan, spec) == []
