"""``trimtab replan`` (docs/online.md, "Re-planning"): moves from a running plan, failures, --max-moves.

Small spec: one 8B workload on two GPU types; plans are analytic (cost model only) so each test is a few
solves. The oracles: no drift needs no move; the re-plan never moves more replicas than a from-scratch plan
of the same spec and costs no more per hour beyond what its saved start-ups pay for; a failed node's replicas
are gone and the repair fits the GPUs left.
"""
from __future__ import annotations

import pytest

from trimtab.api import check, plan
from trimtab.errors import InfeasibleError, InputError
from trimtab.online.replan import count_moves, diff_moves, parse_failures, replan
from trimtab.spec.load import load_spec
from trimtab.spec.overrides import apply_overrides

SPEC = """version: 1
name: small
gpus:
  - {type: h100-sxm, count: 16, usd_per_hour: 3.90}
  - {type: l40s, count: 16, usd_per_hour: 1.80}
models:
  - name: llama-3.1-8b
workloads:
  - name: a
    model: llama-3.1-8b
    rate_rps: 20
    input_tokens: {uniform: {min: 500, max: 3000}}
    output_tokens: {fixed: 150}
    slo: {ttft_ms: 2000, tpot_ms: 80, percentile: 90}
  - name: b
    model: llama-3.1-8b
    rate_rps: 8
    input_tokens: {fixed: 1000}
    output_tokens: {fixed: 300}
    slo: {ttft_ms: 3000, tpot_ms: 100, percentile: 90}
"""


@pytest.fixture(scope="module")
def setup():
    spec = load_spec("small.yaml", text=SPEC)
    return spec, plan(spec, validate=False).plan


def test_no_drift_no_moves(setup):
    spec, cur = setup
    r = replan(cur, spec, validate=False)
    assert r.moves == {} and r.transition_usd == 0
    assert r.plan.cost_usd_per_hour == pytest.approx(cur.cost_usd_per_hour)


def test_plus_30_percent_moves_no_more_than_from_scratch(setup):
    spec, cur = setup
    up = apply_overrides(spec, {"workloads.a.rate_rps": 26})
    r = replan(cur, up, validate=False)
    assert count_moves(r.moves) >= 1  # more traffic needs more capacity
    assert count_moves(r.moves) <= count_moves(r.fresh_moves)
    # it may cost more per hour only by what its fewer start-ups save over the 24 h horizon
    assert (r.plan.cost_usd_per_hour * 24 + r.transition_usd
            <= r.fresh.cost_usd_per_hour * 24 + r.fresh_transition_usd + 1e-6)


def test_node_failure_loses_its_replicas_and_the_repair_fits(setup):
    spec, cur = setup
    node = cur.deployments[0].placement[0].node
    f = parse_failures(cur, spec, [f"node={node}"])
    on_node = {d.name: len({p.replica for p in d.placement if p.node == node}) for d in cur.deployments}
    assert f.lost_replicas == {k: v for k, v in on_node.items() if v}
    assert f.nodes == (node,)
    r = replan(cur, spec, fail=[f"node={node}"], validate=False)
    gpu = next(n for n in cur.deployments if n.name == cur.deployments[0].name).gpu
    assert r.plan.gpus.get(gpu, 0) <= 16 - 8  # one 8-GPU node fewer
    assert all(p.node != node for d in r.plan.deployments
               for p in d.placement) or r.plan.gpus.get(gpu, 0) <= 8
    running = {d.name: d.replicas - f.lost_replicas.get(d.name, 0) for d in cur.deployments}
    assert r.moves == diff_moves({k: v for k, v in running.items() if v > 0}, r.plan)
    assert count_moves(r.moves) <= count_moves(r.fresh_moves)


def test_gpu_loss_and_max_moves(setup):
    spec, cur = setup
    gpu = cur.deployments[0].gpu
    lost = sum(d.tensor_parallel for d in cur.deployments if d.gpu == gpu and d.replicas)
    have = {g.type: g.count for g in spec.gpus}[gpu]
    # every GPU of that type gone: whatever ran there must be started elsewhere, so --max-moves 0 is
    # infeasible
    with pytest.raises(InfeasibleError, match="max-moves"):
        replan(cur, spec, fail=[f"gpus.{gpu}=-{have}"], max_moves=0, validate=False)
    r = replan(cur, spec, fail=[f"gpus.{gpu}=-{have}"], validate=False)
    assert r.plan.gpus.get(gpu, 0) == 0 and lost > 0


@pytest.mark.parametrize("bad", ["node=nope", "gpus.h100-sxm=3", "rack=1"])
def test_bad_failures_are_input_errors(setup, bad):
    spec, cur = setup
    with pytest.raises(InputError, match="--fail"):
        parse_failures(cur, spec, [bad])


ADAPTER = SPEC.replace("  - name: llama-3.1-8b\n",
                      "  - name: llama-3.1-8b\n    adapters: [{name: x, rank: 8}]\n", 1)
ADAPTER = ADAPTER.replace("    rate_rps: 8\n", "    adapter: x\n    tenant: acme\n    rate_rps: 8\n")
ADAPTER += "tenants: [{name: acme, dedicated: true}]\n"


@pytest.fixture(scope="module")
def adapter_setup():
    spec = load_spec("adapters.yaml", text=ADAPTER)
    return spec, plan(spec, validate=False).plan


def held(p) -> dict[str, tuple[list[str], list[str]]]:
    return {d.name: (d.adapters, d.tenants) for d in p.deployments}


def test_adapter_spec_is_replanned_on_the_adapter_milp(adapter_setup):
    """The re-plan's move rows on the adapter-placement MILP (``LoraReplanPlanner``); on the unified MILP an
    adapter or tenant spec came back with every adapter and tenant dropped (multi-lora: no deployment holding
    any) beside a from-scratch plan that kept them. Oracles as for unified specs: no drift, no move and the
    same plan; more traffic, no more moves than from scratch; and the adapter gate passes the re-plan
    (adapters held where routed, the dedicated tenant alone)."""
    spec, cur = adapter_setup
    assert any(d.adapters for d in cur.deployments) and cur.adapter_routes
    same = replan(cur, spec, validate=False)
    assert same.moves == {} and held(same.plan) == held(cur)
    assert same.plan.cost_usd_per_hour == pytest.approx(cur.cost_usd_per_hour)
    up = apply_overrides(spec, {"workloads.b.rate_rps": 14})
    r = replan(cur, up, validate=False)
    assert count_moves(r.moves) >= 1 and count_moves(r.moves) <= count_moves(r.fresh_moves)
    assert r.plan.adapter_routes and {a.adapter for a in r.plan.adapter_routes} == {"x"}
    assert all(d.tenants in ([], ["acme"]) for d in r.plan.deployments)
    assert check(r.plan, up, analytic=True).ok


def test_adapter_spec_with_n_plus_1_is_replanned_keeping_both():
    n1 = ADAPTER.replace("name: small\n", "name: small\nredundancy: n+1\n")
    spec = load_spec("adapters-n1.yaml", text=n1)
    cur = plan(spec, validate=False).plan
    r = replan(cur, spec, validate=False)
    assert r.moves == {} and r.plan.redundancy == "n+1" and held(r.plan) == held(cur)
    assert check(r.plan, spec, analytic=True).ok


# Validated replans of the adapter spec, one per GPU type (7 s): in the slow suite; the quick suite keeps
# the adapter spec replanned on the adapter MILP (above).
@pytest.mark.slow
def test_validated_adapter_replan_searches_each_gpu_type_on_its_own_candidates(adapter_setup):
    """With validation the driver also plans each GPU type alone (``single_types``), asking the planner for
    the candidates of that type's IR: the re-plan's candidates are built once per IR (``Moves.candidates``),
    not pinned to the whole spec's, which name GPU types that IR does not have."""
    spec, cur = adapter_setup
    r = replan(cur, spec)
    assert not r.plan.misses and r.plan.adapter_routes
    assert any(d.adapters == ["x"] and d.tenants == ["acme"] for d in r.plan.deployments)


@pytest.mark.parametrize("base", ["unified", "adapters"])
def test_max_goodput_spec_replanned_serves_what_it_served(base):
    """A ``max_goodput`` re-plan in two stages as ``plan``'s: the most traffic within --max-moves, then the
    cheapest plan, moves priced, serving it. With the moves' price added to the maximised served rate, the
    re-plan bought moves and served 0 rps (the small spec under a 12 $/h budget: 11.10 $/h, 3 moves)."""
    text = (SPEC if base == "unified" else ADAPTER).replace(
        "name: small\n", "name: small\nobjective: max_goodput\nbudget_usd_per_hour: 12\n")
    spec = load_spec("goodput.yaml", text=text)
    cur = plan(spec, validate=False).plan
    r = replan(cur, spec, validate=False)
    assert r.moves == {} and r.plan.cost_usd_per_hour == pytest.approx(cur.cost_usd_per_hour)
    assert r.plan.goodput.served_rps == pytest.approx(cur.goodput.served_rps, rel=1e-5)
    assert r.plan.goodput.served_rps > 0.9 * r.plan.goodput.offered_rps
