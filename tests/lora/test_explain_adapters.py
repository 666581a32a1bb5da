"""``explain`` explains the adapter problem of a spec with adapters (issue 12): the relaxation it offers comes
from the adapter-placement MILP's own relaxable rows (read off their ``origin``) and repairs the spec when
applied with what-if; a feasible spec's binding rows are named."""
from __future__ import annotations

from typer.testing import CliRunner

import compiler as tt
from cli.main import app
from compiler.api import explain
from compiler.errors import ExitCode, InfeasibleError
from compiler.whatif import apply_overrides

SPEC = """\
version: 1
name: lora-explain
gpus:
  - {type: l40s, count: COUNT, usd_per_hour: 1.80}
models:
  - name: llama-3.1-8b
    adapters_from: {count: 20, rank: 16, traffic: {zipf: {s: 1.1}}}
workloads:
  - name: assistants
    model: llama-3.1-8b
    adapter: "*"
    rate_rps: 30
    input_tokens: {lognormal: {median: 700, p99: 4000}}
    output_tokens: {lognormal: {median: 180, p99: 900}}
    slo: {ttft_ms: 1500, tpot_ms: 60, percentile: 99}
"""


def _spec(tmp_path, count):
    p = tmp_path / f"s{count}.yaml"
    p.write_text(SPEC.replace("COUNT", str(count)))
    return tt.load_spec(p)


def test_infeasible_adapter_spec_gets_a_repair_that_works(tmp_path):
    spec = _spec(tmp_path, 1)
    try:
        tt.plan(spec, validate=False)
        raise AssertionError("one L40S cannot carry 30 rps of adapter traffic")
    except InfeasibleError as exc:
        assert any("raise gpus[0] (l40s).count from 1 to at least" in line for line in exc.lines), exc.lines
    e = explain(spec)
    assert not e.feasible and len(e.alternatives) == 1
    (change,) = e.alternatives[0]
    assert change.path == "gpus.l40s.count" and change.old == 1 and change.new > 1
    fixed = apply_overrides(spec, {change.path: change.new})
    assert tt.plan(fixed, validate=False).plan.gpus["l40s"] <= change.new  # the repair is enough
    res = CliRunner().invoke(app, ["explain", str(tmp_path / "s1.yaml")])
    assert res.exit_code == ExitCode.OK and "with the adapters" in res.output and "l40s" in res.output


def test_feasible_adapter_spec_names_the_binding_inventory(tmp_path):
    need = tt.plan(_spec(tmp_path, 16), validate=False).plan.gpus["l40s"]
    e = explain(_spec(tmp_path, need))  # exactly enough GPUs: the inventory binds
    assert e.feasible
    assert any(b.startswith("gpus[0] (l40s).count:") and f"{need} of {need} used" in b for b in e.binding), e.binding
