"""The analytic rounds' derate (compiler.rounds.derate_analytic) and the load factor it takes from the cost model
(compiler.assess.load_factor_to_meet)."""
from __future__ import annotations

from dataclasses import dataclass

from compiler.assess import assess, load_factor_to_meet
from compiler.deployment import DeploymentSpecView, RouteView, budget_family, candidate_id
from compiler.lower import lower
from compiler.rounds import ANALYTIC_FLOOR, DERATE, derate_analytic
from compiler.spec.load import load_spec
from tests.sim.helpers import one_deployment_plan, write_spec


def _meets(ir, plan, f):
    d = plan.deployments[0]
    routes = [RouteView(r.workload, r.bucket, d.name, r.share * f) for r in plan.routes]
    return assess(ir, [DeploymentSpecView.of_plan(d)], routes).workloads["w"].slo_met


def test_the_load_factor_is_the_edge_of_meeting_the_slo(tmp_path):
    # 40 rps of 2k-token prompts on one H100 replica: far over what it can serve within a 500 ms p90 TTFT.
    p = write_spec(tmp_path, rate=40, isl="{fixed: 2048}", osl="{fixed: 64}", ttft=500, tpot=200, pct=90)
    ir = lower(load_spec(p))
    plan = one_deployment_plan(p)
    assert not _meets(ir, plan, 1.0)
    f = load_factor_to_meet(ir, plan, "d", "w")
    assert 0 < f < 1
    assert _meets(ir, plan, f) and not _meets(ir, plan, f + 2 ** -8)  # the bisection's edge, at its resolution
    assert load_factor_to_meet(ir, plan, "nope", "w") is None


def test_a_tail_no_load_can_fix_gives_zero_and_a_met_slo_gives_one(tmp_path):
    p = write_spec(tmp_path, rate=1, isl="{fixed: 8192}", osl="{fixed: 16}", ttft=20, tpot=200, pct=90)
    ir = lower(load_spec(p))
    assert load_factor_to_meet(ir, one_deployment_plan(p), "d", "w") == 0.0  # 8k-token prefill > 20 ms alone
    p = write_spec(tmp_path, rate=1, isl="{fixed: 256}", osl="{fixed: 16}", ttft=5000, tpot=500, pct=90, name="ok.yaml")
    ir = lower(load_spec(p))
    assert load_factor_to_meet(ir, one_deployment_plan(p), "d", "w") == 1.0


@dataclass
class Miss:
    workload: str
    worst_deployment: str


def test_derate_steps_and_token_budget_siblings():
    a2, a8 = candidate_id("w", "h100-sxm", 1, 1, 2048), candidate_id("w", "h100-sxm", 1, 1, 8192)
    other = candidate_id("w", "h100-sxm", 2, 1, 2048)
    assert budget_family(a2) == budget_family(a8) != budget_family(other)
    peers = {"w": (a2, a8, other)}
    m = [Miss("w", a2)]
    assert derate_analytic(m, {}) == {a2: DERATE}  # no cost-model factor: the fixed step, as before
    assert derate_analytic(m, {a2: 0.8}, {a2: 0.7}) == {a2: 0.8 * 0.7}  # a bigger step where the model asks for it
    assert derate_analytic(m, {}, {a2: 0.95}) == {a2: DERATE}  # never less than the fixed step
    assert derate_analytic(m, {}, {a2: 0.0}) == {a2: ANALYTIC_FLOOR}  # at most the floor per round
    # the sibling that differs only in its token budget gets the same factor; another shape does not
    assert derate_analytic(m, {a8: 0.9}, {a2: 0.6}, peers) == {a2: 0.6, a8: 0.9 * 0.6}
