"""Issue 34: a load generator's traffic written natively in a spec (arrivals: constant, stages,
shared_prefix)."""
from __future__ import annotations

import pytest

from trimtab.errors import InputError
from trimtab.ir.lower import lower
from trimtab.spec.load import load_spec

SPEC = """\
version: 1
name: gen
gpus:
  - {{type: h100-sxm, count: 2}}
models:
  - name: llama-3.1-8b
workloads:
  - name: chat
    model: llama-3.1-8b
{traffic}
    input_tokens: {{fixed: 547}}
    output_tokens: {{fixed: 248}}
    slo: {{ttft_ms: 500, tpot_ms: 50, percentile: 90}}
"""
GOOD = """    arrivals: constant
    stages: [{rate_rps: 8, duration_s: 600}, {rate_rps: 20, duration_s: 600}]
    shared_prefix: {prefix_tokens: 100, groups: 9, users_per_group: 5}"""


def _write(tmp_path, traffic):
    p = tmp_path / "s.yaml"
    p.write_text(SPEC.format(traffic=traffic))
    return p


def test_repeated_prompts_are_cached_whole(tmp_path):
    ir = lower(load_spec(_write(tmp_path, GOOD.replace("users_per_group: 5}", "users_per_group: 5, "
                                                                           "prompts_repeat: true}"))))
    w = ir.workloads[0]
    assert w.prefix_hit_rate == pytest.approx(546 / 547) and w.prefix_working_set == 45 * 547


def test_stages_size_for_the_busiest_and_shared_prefix_becomes_its_reuse(tmp_path):
    ir = lower(load_spec(_write(tmp_path, GOOD)))
    w = ir.workloads[0]
    assert w.rate_rps == 20
    assert w.prefix_hit_rate == pytest.approx(100 / 547)
    assert w.prefix_working_set == 900 and w.prefix_source == "shared_prefix"


def test_shared_prefix_longer_than_the_prompt_is_said(tmp_path):
    """specgen_mix probe (issue 35): a shared prefix of 5,000 tokens on 547-token prompts was capped at the
    prompt without a word; the plan now warns (and a prefix shorter than the prompt does not)."""
    ir = lower(load_spec(_write(tmp_path, GOOD.replace("prefix_tokens: 100", "prefix_tokens: 5000"))))
    assert ir.workloads[0].prefix_hit_rate == pytest.approx(546 / 547)
    assert [x for x in ir.warnings if "shared_prefix.prefix_tokens 5000 is not shorter than the mean prompt "
            "(547 tokens)" in x]
    assert not [x for x in lower(load_spec(_write(tmp_path, GOOD))).warnings if "shared_prefix" in x]


@pytest.mark.parametrize("traffic, field", [
    ("    rate_rps: 3\n    stages: [{rate_rps: 8, duration_s: 600}]", "stages"),
    ("    rate_rps: 3\n    arrivals: constant\n    arrival_cv: 2", "constant"),
    ("    rate_rps: 3\n    arrivals: uniform", "arrivals"),
    ("    stages: [{rate_rps: 0, duration_s: 600}]", "rate_rps"),
    ("    rate_rps: 3\n    shared_prefix: {prefix_tokens: 100, groups: 9, user_per_group: 5}",
     "user_per_group"),
])
def test_malformed_traffic_names_file_line_and_field(tmp_path, traffic, field):
    with pytest.raises(InputError) as exc:
        load_spec(_write(tmp_path, traffic))
    text = str(exc.value)
    assert "s.yaml" in text and field in text


def test_simulated_constant_stages_keep_their_rates(tmp_path):
    from tests.sim.helpers import one_deployment_plan
    from trimtab.sim import simulate

    spec_path = _write(tmp_path, GOOD)
    spec = load_spec(spec_path)
    plan = one_deployment_plan(spec_path)
    res = simulate(plan, spec, duration_s=60.0, seed=0, timeline=False)
    ws = res.workloads["chat"] if isinstance(res.workloads, dict) else res.workloads[0]
    assert ws.throughput_rps == pytest.approx(8.0, rel=0.1)  # the first stage: 8 rps for 60 s
    assert any("found" in n and "cached" in n for n in res.notes)  # the shared prefixes hit the cache
