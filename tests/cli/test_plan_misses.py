"""No silent misses (issue 35): a plan whose own validating simulation still shows a workload below its target
exits 7 and is not written; ``plan --allow-misses`` writes it marked with ``misses``, and ``check`` and
``emit`` refuse it unless given ``--allow-misses`` too (docs/errors.md, docs/plan-reference.md)."""
from __future__ import annotations

import yaml
from typer.testing import CliRunner

from trimtab.cli.main import app
from trimtab.errors import ExitCode

# Llama-3.1-70B chat on at most six H100: the cost model's plan (six GPUs) misses TTFT p99 in simulation, and
# the capacity the simulation asks for needs more GPUs than the spec offers, so the rounds end with the miss
# (with the measured H100 of issue 34: 4.5 rps plans and holds on six GPUs, 5.5 misses; 6 is infeasible).
FORCED_MISS = {
    "version": 1, "name": "forced-miss", "objective": "min_cost",
    "gpus": [{"type": "h100-sxm", "count": 6, "usd_per_hour": 3.90}],
    "models": [{"name": "llama-3.1-70b"}],
    "workloads": [{"name": "chat", "model": "llama-3.1-70b", "rate_rps": 5.5,
                   "input_tokens": {"lognormal": {"median": 1000, "p99": 8000}},
                   "output_tokens": {"lognormal": {"median": 250, "p99": 1500}},
                   "slo": {"ttft_ms": 2000, "tpot_ms": 60, "percentile": 99}}],
}


def run(*args):
    res = CliRunner().invoke(app, [str(a) for a in args])
    assert "Traceback" not in res.output, res.output
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res


def test_a_plan_that_misses_is_not_a_success(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(FORCED_MISS))
    plan = tmp_path / "plan.yaml"
    res = run("plan", spec, "-o", plan)
    assert res.exit_code == ExitCode.PLAN_MISSES == 7, res.output
    assert "below their SLO: chat" in res.output and "no plan written" in res.output
    assert not plan.exists()

    res = run("plan", spec, "-o", plan, "--allow-misses")
    assert res.exit_code == ExitCode.PLAN_MISSES, res.output
    data = yaml.safe_load(plan.read_text())
    assert data["misses"] == ["chat"]
    assert data["simulation"]["passed"] is False
    assert any("not brought within its SLO" in w for w in data["warnings"])

    for cmd in (["check", plan, "--spec", spec, "--analytic"],
                ["emit", plan, "--spec", spec, "--to", "k8s", "-o", tmp_path / "k8s"]):
        res = run(*cmd)
        assert res.exit_code == ExitCode.PLAN_MISSES and "--allow-misses" in res.output, res.output
        assert run(*cmd, "--allow-misses").exit_code != ExitCode.PLAN_MISSES
    assert (tmp_path / "k8s").exists()


def test_every_command_that_writes_plans_refuses_misses(tmp_path):
    """``what-if``, ``replan``, ``pareto`` and ``sweep`` refuse a plan with misses as ``plan`` does: exit 7
    and nothing written unless --allow-misses (then written, marked, exit 7 all the same); a sweep point with
    misses has status misses and the sweep exits 7."""
    import json

    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(FORCED_MISS))
    out = tmp_path / "changed.yaml"
    res = run("what-if", spec, "--set", "workloads.chat.rate_rps=5.5", "-o", out)
    assert res.exit_code == ExitCode.PLAN_MISSES and "no changed plan written" in res.output, res.output
    assert not out.exists()
    res = run("what-if", spec, "--set", "workloads.chat.rate_rps=5.5", "-o", out, "--allow-misses")
    assert res.exit_code == ExitCode.PLAN_MISSES, res.output
    running = yaml.safe_load(out.read_text())
    assert running["misses"] == ["chat"]

    res = run("replan", "--plan", out, "--spec", spec, "-o", tmp_path / "re.yaml")
    assert res.exit_code == ExitCode.PLAN_MISSES and "--allow-misses" in res.output, res.output
    assert not (tmp_path / "re.yaml").exists()

    res = run("pareto", spec, "--points", "1", "--serial", "-o", tmp_path / "front")
    assert res.exit_code == ExitCode.PLAN_MISSES and "no point written" in res.output, res.output
    assert not (tmp_path / "front").exists()

    res = run("sweep", spec, "--set", "workloads.chat.rate_rps=5.5", "--serial", "--format", "json")
    assert res.exit_code == ExitCode.PLAN_MISSES, res.output
    doc = json.loads(res.stdout[res.stdout.index("{"):])
    assert [p["status"] for p in doc["points"]] == ["misses"]
