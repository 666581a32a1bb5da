"""The speed-of-light guard (compiler/cost/physics.py) against hand arithmetic from spec sheets, and its
teeth:
``check`` fails a plan that promises more than physics allows, and ``plan`` refuses to emit one (exit 6)."""
from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

import trimtab as tt
from trimtab.cli.main import app
from trimtab.errors import ExitCode, InternalError
from trimtab.ir.lower import lower
from trimtab.cost.physics import breaches, decode_bound
from trimtab.contract.write import emit
from trimtab.profiles.loader import load_profiles

LLAMA2 = """\
version: 1
name: llama2-window
gpus:
  - {type: l4, count: 32}
models:
  - name: llama-2-7b
workloads:
  - name: chat
    model: llama-2-7b
    rate_rps: 8
    input_tokens: {lognormal: {median: 70, p99: 1800}}
    output_tokens: {lognormal: {median: 180, p99: 900}}
    slo: {ttft_ms: 2000, tpot_ms: 120, percentile: 99}
"""


def test_decode_bound_by_hand():
    p = load_profiles()
    m, g = p.models["llama-2-7b"], p.gpus["l4"]
    # Llama-2-7B: 6.74e9 parameters, 32 layers x 32 KV heads x 128 dims x 2 (K and V) x 2 bytes = 524,288
    # B/token. L4: 300 GB/s, 121 TFLOP/s bf16. Batch 20, prompt 300, output 200 (mean decode context 400).
    step = (6.74e9 * 2 + 20 * 400 * 524288) / 300e9
    request = 200 * step / 20 + 2 * 6.74e9 * 300 / 121e12
    assert decode_bound(m, g, 1, "bf16", 20, 300, 200, prefill=True) == pytest.approx(200 / request, rel=1e-9)
    assert decode_bound(m, g, 1, "bf16", 20, 300, 200, prefill=False) == pytest.approx(20 / step, rel=1e-9)


def test_window_reaching_spec_plans_within_physics(tmp_path):
    """The issue's case: the old lowering cut every output to 1 token and planned one L4 (0.70 $/h)."""
    (tmp_path / "s.yaml").write_text(LLAMA2)
    spec = tt.load_spec(tmp_path / "s.yaml")
    r = tt.plan(spec)
    ir = lower(spec)
    assert breaches(r.plan, ir) == []
    need = 8 * sum(b.prob * b.osl_mean for b in ir.workloads[0].buckets)  # output tokens/s
    assert need > 1500  # outputs kept: ~1,830 tokens/s, not 8
    # An independent ceiling for one L4 at its largest batch: weights read once per step at 300 GB/s.
    one_l4 = 256 / (6.74e9 * 2 / 300e9)
    assert sum(d.replicas for d in r.plan.deployments) * one_l4 >= need


def test_check_and_plan_refuse_a_plan_beyond_physics(tmp_path):
    (tmp_path / "s.yaml").write_text(LLAMA2)
    spec = tt.load_spec(tmp_path / "s.yaml")
    data = yaml.safe_load(emit(tt.plan(spec).plan))
    hot = LLAMA2.replace("rate_rps: 8", "rate_rps: 400")
    (tmp_path / "hot.yaml").write_text(hot)
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    res = CliRunner().invoke(app, ["check", str(tmp_path / "p.yaml"), "--spec", str(tmp_path / "hot.yaml"),
                                   "--analytic"])
    assert res.exit_code == ExitCode.CHECK_FAILED
    assert "physics: deployment" in res.output and "speed-of-light bound" in res.output
    # plan's last stage refuses such a plan outright (a cost-model bug would be the only way there)
    from trimtab.milp.extract import finish_plan
    from trimtab.contract.schema import Plan

    hot_spec = tt.load_spec(tmp_path / "hot.yaml")
    with pytest.raises(InternalError, match="speed-of-light"):
        finish_plan(Plan.model_validate(data), hot_spec, lower(hot_spec), None, 1000, 0)
    assert InternalError.exit_code == ExitCode.INTERNAL == 6


MISTRAL_L4 = """\
version: 1
name: mistral-l4
gpus:
  - {type: l4, count: 64, usd_per_hour: 0.80}
models:
  - name: mistral-7b
workloads:
  - name: chat
    model: mistral-7b
    rate_rps: 7.3
    input_tokens: {lognormal: {median: 600, p99: 4989}}
    output_tokens: {lognormal: {median: 400, p99: 1945}}
    slo: {ttft_ms: 4000, tpot_ms: 100, percentile: 99}
"""


def test_derate_breaches_holds_each_deployment_to_what_the_bound_allows():
    from trimtab.cost.physics import Breach
    from trimtab.planning.rounds import LIGHT_MARGIN, derate_breaches

    out = derate_breaches([Breach("a", 1000.0, 800.0, "output"), Breach("b", 500.0, 499.0, "prompt")],
                          {"a": 0.5, "c": 0.7}, {"a": 0.9})
    # a: 0.5 x fill 0.9 x 800 / 1000 x 0.99; b (no fill known: full): 1.0 x 499 / 500 x 0.99; c untouched
    assert out == pytest.approx({"a": 0.5 * 0.9 * 0.8 * (1 - LIGHT_MARGIN), "b": 0.998 * (1 - LIGHT_MARGIN),
                                 "c": 0.7})
    # never a factor above 1 - LIGHT_MARGIN, however lightly loaded the deployment was found
    assert derate_breaches([Breach("a", 1000.0, 999.0, "output")], {}, {"a": 1.2})["a"] == 1 - LIGHT_MARGIN


def test_a_plan_over_the_bound_is_re_solved_within_it(tmp_path, monkeypatch):
    """Mistral 7B on L4s, whose batch the KV cache limits: the cost model's first plan (``plan`` without
    validation) loads one L4 past the speed-of-light bound (its batch counts a request's whole context, the
    cost model a decoding request's mean context). That plan used to stop with an internal error (exit 6;
    specgen's target family: 2 of 20 specs); the driver now re-solves it within the bound, and ``check``
    passes the plan."""
    import trimtab.cost.physics as phys
    import trimtab.gate.analytic as analytic
    import trimtab.milp.extract as extract
    import trimtab.planning.driver as driver
    from trimtab.gate.analytic import check

    # at p99 the cost model's KV check at the percentile (trimtab.cost.queueing.over_caps) already keeps this
    # batch within the bound; where the margin is small enough that the mean-context count still passes it
    # depends on the cost model's figures, so the percentiles are scanned and every one over the bound is held
    # to the contract (at least one must be: the case this test is about)
    real = phys.breaches
    over = 0
    for pct in range(50, 96, 5):
        (tmp_path / "s.yaml").write_text(MISTRAL_L4.replace("percentile: 99", f"percentile: {pct}"))
        spec = tt.load_spec(tmp_path / "s.yaml")
        seen = []
        for mod in (driver, extract, analytic):  # each binds breaches at import
            monkeypatch.setattr(mod, "breaches", lambda plan_, ir: seen.append(real(plan_, ir)) or seen[-1])
        r = tt.plan(spec, validate=False)
        if not seen[0]:
            continue
        over += 1
        assert seen[0][0].unit == "output"  # the first solve was over the bound ...
        assert r.rounds == 2 and real(r.plan, lower(spec)) == []  # ... the second within it
        rep = check(r.plan, spec)
        assert rep.ok, rep.violations
    assert over, "no percentile put the cost model's first plan over the bound: the case is gone"
