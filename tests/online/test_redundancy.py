"""``redundancy: n+1`` (docs/online.md, "Redundancy"): the MILP rows of ``trimtab.planning.redundancy``, the
spread
placement of ``trimtab.milp.spread`` and the node-loss check of ``trimtab.gate.nodeloss``.

Oracles: a hand-computed case (a workload needing 3 replicas of 8 GPUs on 8-GPU nodes needs 4 with n+1, +33
%), the same optimum on every solver backend, a pool of one node that can carry nothing, and the node-loss
check both ways: a plan made without n+1 on a spec where one node holds every replica a workload has fails it,
the n+1 plan of the same spec passes it. Plans are analytic (cost model only), so each test is a few solves.
"""
from __future__ import annotations

import dataclasses

import pytest
from typer.testing import CliRunner

from trimtab.cli.main import app
from trimtab.api import plan
from trimtab.deployment.shape import CandidateSet
from trimtab.errors import InputError
from trimtab.milp.formulate import formulate, n_var
from trimtab.ir.lower import lower
from trimtab.gate.nodeloss import check_each_node, losses_by_node, without_node, worst_loss
from trimtab.contract.write import emit
from trimtab.planning.redundancy import add_redundancy_rows, pools_of, redundant_model, spread_var
from trimtab.spec.load import load_spec
from trimtab.ir.topology import build_topology
from trimtab.solvers import SolveOptions, available_backends, get_backend

OPTS = SolveOptions(time_limit_s=30)

BIG = """version: 1
name: big
gpus:
  - {type: h100-sxm, count: 40, usd_per_hour: 4.0}
models:
  - name: llama-3.1-70b
workloads:
  - name: chat
    model: llama-3.1-70b
    rate_rps: 5
    input_tokens: {fixed: 1000}
    output_tokens: {fixed: 200}
    slo: {ttft_ms: 3000, tpot_ms: 100, percentile: 90}
"""

SMALL = """version: 1
name: small
{extra}gpus:
  - {{type: h100-sxm, count: 16, usd_per_hour: 3.90}}
  - {{type: l40s, count: 16, usd_per_hour: 1.80}}
models:
  - name: llama-3.1-8b
workloads:
  - name: a
    model: llama-3.1-8b
    rate_rps: 20
    input_tokens: {{uniform: {{min: 500, max: 3000}}}}
    output_tokens: {{fixed: 150}}
    slo: {{ttft_ms: 2000, tpot_ms: 80, percentile: 90}}
  - name: b
    model: llama-3.1-8b
    rate_rps: 8
    input_tokens: {{fixed: 1000}}
    output_tokens: {{fixed: 300}}
    slo: {{ttft_ms: 3000, tpot_ms: 100, percentile: 90}}
"""


def hand_case(count: int = 40):
    """One workload and one candidate of 8 H100 whose replica carries 1/2.5 of the traffic: 3 replicas without
    n+1 (2.5 rounded up); with n+1 on 8-GPU nodes a node holds 1 replica (node_room), so 3 must survive: 4."""
    spec = load_spec("big.yaml", text=BIG.replace("count: 40", f"count: {count}"))
    ir = lower(spec)
    w = ir.workloads[0]
    from trimtab.milp.candidates import build_candidates

    c8 = next(c for c in build_candidates(ir).candidates if c.tp == 8 and c.pp == 1)
    c8 = dataclasses.replace(c8, capacity_rps=tuple((b.name, w.rate_rps / 2.5) for b in w.buckets))
    return ir, CandidateSet((c8,), ()), pools_of(build_topology(spec, ir)), c8


def test_hand_case_three_replicas_become_four():
    ir, cands, pools, c = hand_case()
    assert pools == {"h100-sxm": (5, 8)}
    be = get_backend("highs")
    none = be.solve(formulate(ir, cands), OPTS)
    n1 = be.solve(redundant_model(ir, cands, pools), OPTS)
    assert round(none.values[n_var(c.id)]) == 3 and round(n1.values[n_var(c.id)]) == 4
    assert round(n1.values[spread_var(c.id)]) == 1  # one replica per node: a node loss takes one
    assert n1.objective / none.objective == pytest.approx(4 / 3, rel=1e-4)  # +33 %


@pytest.mark.parametrize("backend", available_backends())
def test_rows_on_every_backend(backend):
    ir, cands, pools, c = hand_case()
    m = redundant_model(ir, cands, pools)
    assert {"spread", "survive", "node_room"} <= {k.family for k in m.constraints}
    assert all(str(k.origin) == "redundancy" for k in m.constraints if k.family in ("spread", "survive",
                                                                                    "node_room"))
    res = get_backend(backend).solve(m, OPTS)
    assert res.has_solution and round(res.values[n_var(c.id)]) == 4
    assert res.objective == pytest.approx(4 * c.usd_per_hour, rel=1e-3)
    assert m.violations(res.values, tol=1e-3) == []


def test_one_node_pool_carries_nothing():
    """8 H100 are one node: its loss takes every replica, so no n+1 plan exists on it."""
    ir, cands, pools, c = hand_case(count=8)
    m = formulate(ir, cands)
    add_redundancy_rows(m, cands, pools)
    assert get_backend("highs").solve(m, OPTS).status.value == "infeasible"


def test_bad_value_is_an_input_error_naming_the_field():
    with pytest.raises(InputError) as e:
        load_spec("s.yaml", text=SMALL.format(extra="redundancy: n+2\n"))
    text = str(e.value)
    assert "redundancy" in text and "s.yaml:3" in text


def test_schedule_with_n_plus_1_is_refused():
    text = SMALL.format(extra="redundancy: n+1\nschedule: {window_s: 3600}\n").replace(
        "rate_rps: 20", "rate_profile: {rps: [10, 20]}").replace("rate_rps: 8", "rate_profile: {rps: [4, 8]}")
    with pytest.raises(InputError) as e:
        lower(load_spec("s.yaml", text=text))
    assert "redundancy" in str(e.value) and "schedule" in str(e.value)


def test_n_plus_1_refusals_name_their_line():
    """specgen_mix (issue 35): n+1 with a schedule was refused in ``lower`` without the line, unlike every
    other field's error; the loader now names it (``lower`` keeps the check for specs built in code). Adapters
    and tenants compose with n+1 (tests/lora/test_lora_redundancy.py)."""
    text = SMALL.format(extra="redundancy: n+1\nschedule: {window_s: 3600}\n").replace(
        "rate_rps: 20", "rate_profile: {rps: [10, 20]}").replace("rate_rps: 8", "rate_profile: {rps: [4, 8]}")
    with pytest.raises(InputError) as e:
        load_spec("s.yaml", text=text)
    assert e.value.lines[0].startswith("s.yaml:3: redundancy: n+1 is not supported with a schedule yet")
    text = SMALL.format(extra="redundancy: n+1\ntenants: [{name: acme}]\n")
    assert lower(load_spec("s.yaml", text=text)).lora is not None  # the adapter planner's, with n+1


@pytest.fixture(scope="module")
def plans():
    none = load_spec("small.yaml", text=SMALL.format(extra=""))
    n1 = load_spec("small.yaml", text=SMALL.format(extra="redundancy: n+1\n"))
    return none, plan(none, validate=False).plan, n1, plan(n1, validate=False).plan


def test_plan_without_n_plus_1_fails_the_node_check(plans):
    spec, p, _, _ = plans
    per = losses_by_node(p)
    # the cheapest plan packs: some node holds every replica of a deployment that serves a bucket alone
    losses = check_each_node(p, spec, analytic=True)
    assert not all(x.report.ok for x in losses)
    worst = worst_loss(losses)
    assert not worst.report.ok and worst.nodes[0] in per


def test_n_plus_1_plan_passes_every_node_loss(plans):
    _, p0, spec, p = plans
    assert p.redundancy == "n+1" and p0.redundancy is None
    assert p.cost_usd_per_hour > p0.cost_usd_per_hour  # a spare costs something
    topo = build_topology(spec, lower(spec))
    nodes = {g: sum(n.gpu == g for n in topo.nodes) for g in ("h100-sxm", "l40s")}
    # spread: at most ceil(n / nodes) replicas of a deployment on one node, each whole
    for d in p.deployments:
        per: dict[str, set] = {}
        for s in d.placement:
            per.setdefault(s.node, set()).add(s.replica)
        assert max(len(v) for v in per.values()) <= -(-d.replicas // nodes[d.gpu])
    losses = check_each_node(p, spec, analytic=True)
    assert losses and all(x.report.ok for x in losses), [x.report.violations for x in losses]
    assert {n for x in losses for n in x.nodes} == set(losses_by_node(p))  # every node that holds a replica


def test_without_node_respreads_a_lost_deployment(plans):
    """A deployment left with no replica gives its shares to the other deployments of the same bucket."""
    spec, p, _, _ = plans
    ir = lower(spec)
    for node, lost in losses_by_node(p).items():
        reduced, unserved = without_node(p, node, ir)
        for d in p.deployments:
            left = {x.name: x.replicas for x in reduced.deployments}
            assert left.get(d.name, 0) == d.replicas - lost.get(d.name, 0)
        for key in {(r.workload, r.bucket) for r in reduced.routes}:
            total = sum(r.share for r in reduced.routes if (r.workload, r.bucket) == key)
            assert total == pytest.approx(sum(r.share for r in p.routes if (r.workload, r.bucket) == key))


def test_cli_fail_each_node(plans, tmp_path):
    spec, p, n1spec, p1 = plans
    s0, f0 = tmp_path / "none.yaml", tmp_path / "none.plan.yaml"
    s0.write_text(SMALL.format(extra=""))
    f0.write_text(emit(p))
    r = CliRunner().invoke(app, ["check", str(f0), "--spec", str(s0), "--analytic", "--fail-each-node"])
    assert r.exit_code == 5, r.output
    assert "worst node:" in r.output and "FAIL without" in r.output
    s1, f1 = tmp_path / "n1.yaml", tmp_path / "n1.plan.yaml"
    s1.write_text(SMALL.format(extra="redundancy: n+1\n"))
    f1.write_text(emit(p1))
    r = CliRunner().invoke(app, ["check", str(f1), "--spec", str(s1), "--analytic"])  # automatic with n+1
    assert r.exit_code == 0, r.output
    assert "check passed (every node loss)" in r.output


def test_replan_keeps_n_plus_1(plans):
    """The re-plan of an n+1 spec is an n+1 plan over the nodes the failures leave (``replan`` refused it
    before: exit 1). Without drift it keeps the running plan; with a node of a two-node type lost, that
    type's one node left can carry nothing under n+1 (a node lost would take every replica), so the re-plan
    moves everything off it, and survives every node loss of the spec after the failure."""
    from trimtab.online.replan import count_moves, replan, spec_after

    _, _, spec, p = plans
    same = replan(p, spec, validate=False)
    assert same.moves == {} and same.plan.redundancy == "n+1"
    assert same.plan.cost_usd_per_hour == pytest.approx(p.cost_usd_per_hour)
    used = sorted({d.gpu for d in p.deployments})
    node = next(s.node for d in p.deployments if d.gpu == used[0] for s in d.placement)
    r = replan(p, spec, fail=[f"node={node}"], validate=False)
    assert r.plan.redundancy == "n+1" and r.fresh.redundancy == "n+1"
    assert used[0] not in r.plan.gpus  # one node of its type left: n+1 puts nothing there
    assert count_moves(r.moves) <= count_moves(r.fresh_moves)
    after = spec_after(spec, r.failure)
    assert sum(n.gpu == used[0] for n in build_topology(after, lower(after)).nodes) == 1
    losses = check_each_node(r.plan, after, analytic=True)
    assert losses and all(x.report.ok for x in losses)


def test_n_plus_1_max_goodput_plan_serves_and_survives_every_node_loss():
    """n+1 with ``max_goodput``: the two stages' routes stand (the survivors' balance LP, which minimises
    utilisation over ``<=`` demand rows, routed nothing: served 0 rps beside 4 replicas bought)."""
    spec = load_spec("g.yaml", text=SMALL.format(extra="redundancy: n+1\nobjective: max_goodput\n"
                                                        "budget_usd_per_hour: 12\n"))
    p = plan(spec, validate=False).plan
    assert p.redundancy == "n+1" and p.cost_usd_per_hour <= 12
    assert p.goodput.served_rps > 0.8 * p.goodput.offered_rps
    losses = check_each_node(p, spec, analytic=True)
    assert losses and all(x.report.ok for x in losses)


def test_one_node_spec_is_infeasible_with_the_reason():
    from trimtab.errors import InfeasibleError

    text = BIG.replace("count: 40", "count: 8").replace("name: big\n", "name: big\nredundancy: n+1\n")
    with pytest.raises(InfeasibleError) as e:
        plan(load_spec("one.yaml", text=text), validate=False)
    assert "loss of any one node" in str(e.value) and "h100-sxm 1 node of 8 GPUs" in str(e.value)


def test_replicas_larger_than_the_smallest_node_are_named():
    """specgen_mix seed 87 (issue 35): 70B needs 2+ H100 per replica; 17 H100 make nodes of 8, 8 and 1, and
    n+1 keeps each replica inside the smallest node, so no candidate was left and the precheck said "no
    candidate meets TTFT 3000 ms and TPOT 100 ms together" beside low-load values far inside them. It now says
    n+1 left none, and why."""
    from trimtab.errors import InfeasibleError

    text = BIG.replace("count: 40", "count: 17").replace("name: big\n", "name: big\nredundancy: n+1\n")
    with pytest.raises(InfeasibleError) as e:
        plan(load_spec("odd.yaml", text=text), validate=False)
    msg = str(e.value)
    head = "chat: with redundancy n+1 no candidate that meets its SLO is left (a replica of 2 GPUs spans"
    assert head + " nodes of 1" in msg and "(h100-sxm 1 GPU)" in msg and "together" not in msg, msg


def test_node_losses_simulated(plans):
    """The simulated path: one run per kind of node loss, each workload's attainment with its bounds, the
    worst kind the one with the lowest margin."""
    _, _, spec, p = plans
    losses = check_each_node(p, spec, seeds=1, requests=1500)
    assert losses and all(x.result is not None for x in losses)
    for x in losses:
        assert set(x.result.intervals) == {"a", "b"}
        assert -1.0 <= x.margin <= 1.0
    assert worst_loss(losses).margin == min(x.margin for x in losses) or not all(x.report.ok for x in losses)


def test_spread_placement_caps_and_domains():
    """Five h100 nodes of 8 GPUs in two NVLink domains of 4: 4 + 7 + 5 replicas of 4, 1 and 2 GPUs (each node
    has room for ceil(n / 5) of every deployment, node_room: 4 x 1 + 1 x 2 + 2 x 1 <= 8). At most that many
    per node, each replica whole on one node, TP groups inside one domain, no GPU twice."""
    from trimtab.milp.spread import node_cap, place_spread
    from trimtab.ir.topology import Node, Topology
    from tests.conftest import unit

    topo = Topology(tuple(Node(f"n{i}", "h100-sxm", 8, 4, 50.0, 450.0, "r") for i in range(5)))
    deps = [unit("a", "h100-sxm", 4, 1, 4), unit("b", "h100-sxm", 1, 1, 7), unit("c", "h100-sxm", 2, 1, 5)]
    out = place_spread(deps, topo)
    used = set()
    for d in deps:
        st = out[d.name]
        assert sorted(s.replica for s in st) == list(range(d.replicas))
        per: dict[str, int] = {}
        for s in st:
            per[s.node] = per.get(s.node, 0) + 1
            assert len(s.gpus) == d.tp and len({g // 4 for g in s.gpus}) == 1
            assert not ({(s.node, g) for g in s.gpus} & used)
            used |= {(s.node, g) for g in s.gpus}
        assert max(per.values()) <= node_cap(d.replicas, 5)


def test_explain_of_an_n_plus_1_spec_explains_the_n_plus_1_problem(plans):
    """``explain`` on an n+1 spec: the cost is the n+1 plan's (the analytic plan ``plan`` builds from the same
    rows), not the cheaper plan without n+1, and a note says which problem the binding analysis is of; a
    one-node spec is infeasible with n+1's own reason (before, explain ignored redundancy and called both
    feasible)."""
    from trimtab.api import explain

    none, p0, n1, p1 = plans
    e = explain(n1)
    assert e.feasible and abs(e.cost_usd_per_hour - p1.cost_usd_per_hour) < 0.01
    assert e.cost_usd_per_hour > p0.cost_usd_per_hour + 0.01  # n+1 costs more here: the spare replicas
    assert any("n+1" in n and f"{p0.cost_usd_per_hour:.2f}" in n for n in e.notes)
    assert any(line.startswith("note: redundancy: n+1") for line in e.lines())
    assert not explain(none).notes
    one = BIG.replace("count: 40", "count: 8").replace("name: big\n", "name: big\nredundancy: n+1\n")
    bad = explain(load_spec("one.yaml", text=one))
    assert not bad.feasible and any("loss of any one node" in x for x in bad.problems)
    assert explain(load_spec("one.yaml", text=BIG.replace("count: 40", "count: 8"))).feasible


def test_adapters_with_a_schedule_are_refused_on_their_line():
    """specgen_mix seed 198: a schedule with adapter workloads was planned window by window without adapter
    placement, and `check` refused every window (adapter traffic routed to deployments without LoRA). The
    loader refuses the pair, as it does n+1 and max_goodput with a schedule."""
    text = SMALL.format(extra="schedule: {window_s: 3600}\n").replace(
        "rate_rps: 20", "rate_profile: {rps: [10, 20]}").replace("rate_rps: 8", "rate_profile: {rps: [4, 8]}")
    load_spec("s.yaml", text=text)  # without adapters: a schedule plans
    with_adapter = text.replace("  - name: llama-3.1-8b\n",
                                "  - name: llama-3.1-8b\n    adapters: [{name: sql, rank: 16}]\n").replace(
        "  - name: b\n    model: llama-3.1-8b\n", "  - name: b\n    model: llama-3.1-8b\n    adapter: sql\n")
    with pytest.raises(InputError) as e:
        load_spec("s.yaml", text=with_adapter)
    assert e.value.lines[0].startswith(
        "s.yaml:3: schedule: LoRA adapters and tenants are not supported with a schedule yet")
