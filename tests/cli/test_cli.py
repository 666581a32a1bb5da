"""The CLI's promises: every exit code, messages that name the field, no tracebacks."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from trimtab.cli.main import app
from trimtab.errors import ExitCode
from tests.conftest import QUICKSTART, SMALL_SPEC

runner = CliRunner()


def run(*args: str):
    res = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in res.output, res.output
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res


@pytest.fixture(scope="module")
def quickstart_plan(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("plan") / "plan.yaml"
    res = run("plan", QUICKSTART, "-o", out)
    assert res.exit_code == 0, res.output
    return out


def test_plan_writes_plan_and_summary(quickstart_plan):
    data = yaml.safe_load(quickstart_plan.read_text())
    assert data["solver"]["status"] == "optimal"
    assert {w: p["slo_met"] for w, p in data["predictions"].items()} == {
        "autocomplete": True, "chat": True, "summarize": True}


def test_plan_verbose_reports_rounds_and_stage_seconds(tmp_path, small_spec_path):
    res = run("plan", small_spec_path, "-o", tmp_path / "p.yaml", "-v")
    assert res.exit_code == 0, res.output
    line = next(ln for ln in res.output.splitlines() if ln.startswith("rounds: "))
    rounds = int(line.split()[1])
    assert rounds == yaml.safe_load((tmp_path / "p.yaml").read_text())["solver"]["rounds"]
    for stage in ("lower", "candidates", "solve", "simulate", "assess", "finish", "start-up", "other"):
        assert f"{stage} " in line
    # the stages account for the process's wall time: what is left to "other" is a few hundredths of a second
    stages = dict(part.rsplit(" ", 1) for part in line.split("seconds: ")[1].split(", "))
    assert float(stages["other"]) <= 0.05 + 0.02 * sum(float(v) for v in stages.values()), line
    # a small spec simulates only plans its assessment accepts: one simulation per simulated miss, and the
    # last
    after_miss = int(line.split("(")[1].split()[0])
    assert f"{after_miss} after a simulated miss, {after_miss + 1} simulated)" in line
    sim = next(ln for ln in res.output.splitlines() if ln.startswith("simulation: "))
    simulated, reused = int(sim.split()[1]), int(sim.split(", ")[1].split()[0])
    assert simulated >= 1 and reused >= 0  # deployment runs (trimtab.sim.reuse)


def test_plan_json_format(tmp_path, small_spec_path):
    # the file format does not depend on the spec: the one-workload one plans fastest
    out = tmp_path / "p.json"
    assert run("plan", small_spec_path, "-o", out, "--format", "json").exit_code == 0
    assert json.loads(out.read_text())["spec"] == "small"


def test_plan_to_stdout(small_spec_path):
    res = run("plan", small_spec_path)
    assert res.exit_code == 0
    assert "cost_usd_per_hour:" in res.stdout


def test_check_passes_on_emitted_plan(quickstart_plan):
    res = run("check", quickstart_plan, "--spec", QUICKSTART)
    assert res.exit_code == 0, res.output
    assert "check passed" in res.output


def test_check_fails_exit5_when_rates_tripled(quickstart_plan, tmp_path):
    spec = yaml.safe_load(QUICKSTART.read_text())
    for w in spec["workloads"]:
        w["rate_rps"] *= 3
    tripled = tmp_path / "x3.yaml"
    tripled.write_text(yaml.safe_dump(spec, sort_keys=False))
    res = run("check", quickstart_plan, "--spec", tripled)
    assert res.exit_code == ExitCode.CHECK_FAILED
    fails = [line for line in res.output.splitlines() if line.startswith("FAIL workload")]
    assert {f.split()[2].rstrip(":") for f in fails} == {"autocomplete", "chat", "summarize"}
    assert all("deployment" in f for f in fails)


def test_check_json_report(quickstart_plan):
    res = run("check", quickstart_plan, "--spec", QUICKSTART, "--format", "json")
    d = json.loads(res.stdout)
    assert d["ok"] is True and set(d["workloads"]) == {"autocomplete", "chat", "summarize"}


def test_check_detects_tampered_plan(quickstart_plan, tmp_path):
    data = yaml.safe_load(quickstart_plan.read_text())
    data["deployments"][0]["replicas"] = 40  # more GPUs than the inventory, and a wrong cost
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data, sort_keys=False))
    res = run("check", bad, "--spec", QUICKSTART)
    assert res.exit_code == ExitCode.CHECK_FAILED
    assert "inventory:" in res.output and "cost:" in res.output


def test_check_plan_from_another_spec(quickstart_plan, small_spec_path):
    res = run("check", quickstart_plan, "--spec", small_spec_path)
    # issue 6: a plan from another spec is invalid input (exit 1) naming the plan's field path
    assert res.exit_code == ExitCode.INVALID_INPUT
    assert "not in the spec" in res.output and "deployments[" in res.output


def test_malformed_plan_is_exit1(tmp_path, small_spec_path):
    bad = tmp_path / "p.yaml"
    bad.write_text("spec: x\ndeployments: 3\n")
    res = run("check", bad, "--spec", small_spec_path)
    assert res.exit_code == ExitCode.INVALID_INPUT
    assert "p.yaml:2: deployments" in res.output


@pytest.mark.parametrize("edit, field", [
    (("rate_rps: 5", "rate_rps: -1"), "rate_rps"),
    (("ttft_ms: 1000", "ttft_ms: fast"), "slo.ttft_ms"),
    (("type: l4,", "type: l5,"), "gpus[1].type"),
    (("version: 1", "version: 2"), "version"),
])
def test_invalid_spec_exit1_names_field(tmp_path, edit, field):
    p = tmp_path / "s.yaml"
    p.write_text(SMALL_SPEC.replace(*edit))
    res = run("plan", p)
    assert res.exit_code == ExitCode.INVALID_INPUT
    assert field in res.output and "s.yaml:" in res.output


def test_missing_spec_file_exit1(tmp_path):
    res = run("plan", tmp_path / "nope.yaml")
    assert res.exit_code == ExitCode.INVALID_INPUT and "file not found" in res.output


def test_usage_error_exit2():
    res = run("plan")
    assert res.exit_code == ExitCode.USAGE
    assert run("plan", QUICKSTART, "--solver", "gurobi").exit_code == ExitCode.USAGE


def test_infeasible_slo_exit3_says_closest_value(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(SMALL_SPEC.replace("ttft_ms: 1000", "ttft_ms: 5"))
    res = run("plan", p)
    assert res.exit_code == ExitCode.INFEASIBLE
    assert "short: TTFT p90 5 ms cannot be met" in res.output
    assert ("the fastest candidate (" in res.output
            and "relax workloads[0].slo.ttft_ms to at least" in res.output.lower())


def test_infeasible_inventory_exit3_says_what_to_raise(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(SMALL_SPEC.replace("rate_rps: 5", "rate_rps: 5000").replace("budget_usd_per_hour: 100\n",
                                                                             ""))
    res = run("plan", p)
    assert res.exit_code == ExitCode.INFEASIBLE
    assert "raise gpus[" in res.output and "count from 8 to at least" in res.output


def test_budget_too_small_exit3(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(SMALL_SPEC.replace("budget_usd_per_hour: 100", "budget_usd_per_hour: 0.5"))
    res = run("plan", p)
    assert res.exit_code == ExitCode.INFEASIBLE
    assert "raise budget_usd_per_hour from 0.5 to at least" in res.output


def test_solver_without_solution_exit4(tmp_path, small_spec_path):
    # The real HiGHS held to no branch-and-bound node (solver.node_limit: 0) stops without a solution: exit 4
    # with the solver's own reason, never a traceback (PuLP's reader indexed the solution it never produced).
    spec = yaml.safe_load(Path(small_spec_path).read_text())
    spec["solver"] = {"node_limit": 0}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    res = run("plan", path)
    assert res.exit_code == ExitCode.NO_SOLUTION, res.output
    assert "stopped without a plan in round 1" in res.output and "mip_max_nodes 0" in res.output


LORA_STOP_SPEC = """\
version: 1
name: lora-stop
solver: {node_limit: 0}
gpus:
  - {type: h100-sxm, count: 16}
  - {type: a100-80gb, count: 16}
  - {type: l40s, count: 16}
models:
  - name: llama-3.1-8b
    adapters_from: {count: 40, rank: 16, traffic: {zipf: {s: 1.1}}}
workloads:
  - name: many
    model: llama-3.1-8b
    adapter: "*"
    rate_rps: 20
    input_tokens: {lognormal: {median: 700, p99: 4000}}
    output_tokens: {lognormal: {median: 180, p99: 900}}
    slo: {ttft_ms: 1500, tpot_ms: 60, percentile: 99}
"""


def test_adapter_planner_solver_without_solution_exit4(tmp_path):
    # Issue 35 item 5: the adapter (LoRA) planner solves its own MILP (trimtab.planning.lora.solve), where
    # PuLP's reader once raised IndexError on a solution HiGHS never produced. The real HiGHS held to no
    # node there too: exit 4 with the solver's reason, no traceback (run() fails on one).
    path = tmp_path / "lora.yaml"
    path.write_text(LORA_STOP_SPEC)
    res = run("plan", path, "-o", tmp_path / "plan.yaml")
    assert res.exit_code == ExitCode.NO_SOLUTION, res.output
    assert "stopped without a plan in round 1" in res.output and "mip_max_nodes 0" in res.output
    assert not (tmp_path / "plan.yaml").exists()


def test_predict_json_keys():
    res = run("predict", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tp", "1", "--isl", "1024",
              "--osl", "256", "--concurrency", "32", "--format", "json")
    assert res.exit_code == 0
    d = json.loads(res.stdout)
    assert {"ttft_ms", "tpot_ms", "output_tokens_per_s", "output_tokens_per_s_per_gpu", "requests_per_s",
            "fits", "max_concurrency"} <= set(d)
    assert d["fits"] is True and d["max_concurrency"] > 32


def test_predict_concurrency_max():
    res = run("predict", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--tp", "4", "--isl", "2048",
              "--osl", "512", "--concurrency", "max", "--format", "json")
    d = json.loads(res.stdout)
    assert d["concurrency"] == d["max_concurrency"] and d["fits"] is True


def test_predict_model_that_does_not_fit():
    args = ("predict", "--model", "llama-3.1-405b", "--gpu", "l4", "--isl", "100", "--osl", "10",
            "--concurrency")
    res = run(*args, "1", "--format", "json")
    assert res.exit_code == 0 and json.loads(res.stdout)["fits"] is False
    res = run(*args, "max")
    assert res.exit_code == ExitCode.INVALID_INPUT and "not one request" in res.output


def test_predict_unknown_names_exit1():
    res = run("predict", "--model", "gpt-5", "--gpu", "h100-sxm", "--isl", "1", "--osl", "1", "--concurrency",
              "1")
    assert res.exit_code == ExitCode.INVALID_INPUT and "--model" in res.output


def test_schema_and_profiles():
    s = json.loads(run("schema", "spec").stdout)
    assert "workloads" in s["properties"]
    assert "deployments" in json.loads(run("schema", "plan").stdout)["properties"]
    lst = run("profiles", "list")
    assert lst.exit_code == 0 and "mi300x" in lst.output and "mixtral-8x7b" in lst.output
    show = run("profiles", "show", "h100-sxm")
    assert "spec_sheet:" in show.stdout and "fit:" in show.stdout
    assert run("profiles", "show", "nope").exit_code == ExitCode.INVALID_INPUT


def test_what_if_shows_changes(small_spec_path):
    res = run("what-if", small_spec_path, "--set", "workloads.short.rate_rps=50")
    assert res.exit_code == 0
    assert "cost_usd_per_hour:" in res.output
