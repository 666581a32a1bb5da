"""CLI contracts a script or a CI job relies on (issue 36, finding 9): progress on stderr and never on stdout,
one way to name a plan (``--plan``), ``--format json`` on every command with errors as a JSON document too,
``sweep``'s JSON, one attainment per line of ``check``, ``explain`` saying which cost its relaxations are
priced against. (``loadtest``'s minimum requests per percentile: tests/loadtest/test_loadtest.py.)"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import typer

from trimtab.cli.main import app
from trimtab.errors import ExitCode
from tests.conftest import SMALL_SPEC, run_cli

run = run_cli


def _commands() -> dict[tuple[str, ...], object]:
    root = typer.main.get_command(app)
    out = {}
    for name, cmd in root.commands.items():
        if hasattr(cmd, "commands"):
            out.update({(name, n2): c2 for n2, c2 in cmd.commands.items()})
        else:
            out[(name,)] = cmd
    return out


def _options(cmd) -> set[str]:
    return {o for p in cmd.params for o in getattr(p, "opts", [])}


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("contracts")
    spec = d / "small.yaml"
    spec.write_text(SMALL_SPEC)
    plan = d / "plan.yaml"
    res = run("plan", spec, "-o", plan)
    assert res.exit_code == 0, res.output
    return spec, plan


def test_plan_shows_progress_on_stderr_never_on_stdout(small):
    """`plan` of a day-long schedule is silent for 50-90 s today: each step is said on stderr as it starts
    (one line per step off a terminal, as here), while stdout holds the plan alone."""
    spec, _ = small
    res = run("plan", spec, "-o", "-", "--format", "json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["spec"] == "small"  # stdout: the document alone
    steps = [line for line in res.stderr.splitlines() if line.startswith("planning small: ")]
    assert any("round 1: solving" in s for s in steps) and any("simulating" in s for s in steps), res.stderr
    assert any("placing replicas" in s for s in steps), res.stderr
    assert all(re.search(r"\(\d+\.\d s\)$", s) for s in steps), steps  # the seconds so far on each line


def test_check_and_simulate_say_they_are_simulating(small):
    spec, plan = small
    res = run("check", "--plan", plan, "--spec", spec, "--requests", "300", "--seeds", "1",
              "--format", "json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["ok"] and "simulating: 300 requests" in res.stderr


def test_every_command_that_reads_a_plan_takes_it_as_plan_option():
    """One spelling: --plan PLAN (loadtest's), for check, simulate, emit, replan and watch too."""
    cmds = _commands()
    readers = [k for k, c in cmds.items()
               if any("written by trimtab plan" in (getattr(p, "help", "") or "") for p in c.params)]
    assert sorted(readers) == [("check",), ("emit",), ("loadtest",), ("replan",), ("simulate",),
                               ("watch",)], readers
    for k in readers:
        assert "--plan" in _options(cmds[k]), k


def test_the_old_spellings_still_work_with_a_note(small, tmp_path):
    spec, plan = small
    res = run("check", plan, "--spec", spec, "--analytic")  # positional, as before
    assert res.exit_code == 0 and "check passed" in res.stdout, res.output
    assert "positional PLAN is deprecated" in res.stderr and "--plan" in res.stderr
    res = run("check", "--plan", plan, "--spec", spec, "--analytic")
    assert res.exit_code == 0 and "deprecated" not in res.stderr, res.output
    res = run("check", plan, "--plan", plan, "--spec", spec, "--analytic")  # both: a usage error
    assert res.exit_code == ExitCode.USAGE and "give the plan once" in res.output
    res = run("check", "--spec", spec, "--analytic")  # neither
    assert res.exit_code == ExitCode.USAGE and "--plan" in res.output
    res = run("emit", "--plan", plan, "--spec", spec, "--to", "compose", "-o", tmp_path / "out",
              "--format", "json")
    assert res.exit_code == 0 and json.loads(res.stdout)["written"], res.output
    res = run("replan", "--current", plan, "--spec", spec, "--analytic", "--format", "json")
    assert res.exit_code == 0 and "--current is deprecated" in res.stderr, res.output
    assert "replan" in json.loads(res.stdout)
    assert "re-plan: round 1: solving" in res.stderr  # replan's progress


def test_every_command_has_json_and_its_errors_are_json(tmp_path):
    """--format json on every command (schema prints JSON only); an expected error under it prints a JSON
    document on stdout (ok false, the exit code, its kind, the problems), the lines on stderr as before."""
    missing = tmp_path / "missing.yaml"
    args = {("plan",): [missing], ("check",): ["--plan", missing, "--spec", missing],
            ("simulate",): ["--plan", missing, "--spec", missing],
            ("emit",): ["--plan", missing, "--spec", missing, "--to", "k8s", "-o", "-"],
            ("replan",): ["--plan", missing, "--spec", missing],
            ("loadtest",): ["--plan", missing, "--spec", missing, "--endpoint", "http://127.0.0.1:9"],
            ("watch",): ["--plan", missing, "--spec", missing, "--metrics", "http://127.0.0.1:9", "--once"],
            ("explain",): [missing], ("what-if",): [missing, "--set", "a=1"], ("sweep",): [missing],
            ("pareto",): [missing],
            ("predict",): ["--model", "nope", "--gpu", "h100-sxm", "--isl", "1", "--osl", "1",
                           "--concurrency", "1"],
            ("calibrate",): [tmp_path / "no-such-dir", "-o", tmp_path / "gpu.yaml"],
            ("profiles", "show"): ["no-such-profile"]}
    cmds = _commands()
    for k, c in cmds.items():
        if k in (("schema",),):
            continue
        assert "--format" in _options(c), k
        if k in (("bench",), ("profiles", "list")):
            continue  # no input to get wrong (bench needs a device; its json: tests/cost/test_cost_bench.py)
        res = run(*k, *args[k], "--format", "json")
        assert res.exit_code == ExitCode.INVALID_INPUT, (k, res.output)
        doc = json.loads(res.stdout)
        assert doc["ok"] is False and doc["exit_code"] == 1 and doc["kind"] == "invalid input", (k, doc)
        assert doc["problems"] and "error (invalid input)" in res.stderr, (k, doc)


def test_infeasible_error_as_json_has_exit_code_3(tmp_path):
    spec = tmp_path / "tight.yaml"
    spec.write_text(SMALL_SPEC.replace("ttft_ms: 1000", "ttft_ms: 1"))
    res = run("plan", spec, "-o", "-", "--format", "json")
    assert res.exit_code == ExitCode.INFEASIBLE
    doc = json.loads(res.stdout)
    assert doc["exit_code"] == 3 and doc["kind"] == "infeasible"
    assert "ttft" in " ".join(doc["problems"]).lower()


def test_sweep_json(small):
    spec, _ = small
    res = run("sweep", spec, "--set", "workloads.short.rate_rps=2,4", "--serial", "--analytic",
              "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["spec"] == "small" and [p["overrides"] for p in doc["points"]] == [
        {"workloads.short.rate_rps": 2}, {"workloads.short.rate_rps": 4}]
    assert all(p["status"] == "ok" and p["cost_usd_per_hour"] > 0 for p in doc["points"])
    assert "planning: 2/2 done" in res.stderr  # progress off a terminal


def test_explain_says_which_cost_its_relaxations_are_priced_against(tmp_path):
    """The binding rows are cost-model solves: differences against the cost model's plan, which may be cheaper
    than the validated plan `explain` also prints (quickstart: 36.60 vs 46.80 $/h); the output says so."""
    from tests.crosscheck.test_crosscheck import spec_text

    spec = tmp_path / "bound.yaml"  # one h100, eight l4, 95 rps: the h100 count binds (tests/crosscheck)
    spec.write_text(spec_text(h100=1, l4=8, rate=95))
    res = run("explain", spec, "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["feasible"] and doc["binding"], doc
    assert doc["binding_base_usd_per_hour"] == pytest.approx(doc["cost_usd_per_hour"], abs=0.01)
    assert doc["validated_cost_usd_per_hour"] is not None and "planning: round 1" in res.stderr
    res = run("explain", spec)
    lines = res.stdout.splitlines()
    said = [line for line in lines if "binding rows price each relaxation" in line]
    assert len(said) == 1 and f"against its {doc['cost_usd_per_hour']:.2f} $/h" in said[0], lines
    assert f"not against the validated {doc['validated_cost_usd_per_hour']:.2f} $/h" in said[0]
    assert all("the cost model's plan would cost" in line or "no cheaper plan" in line
               for line in lines if line.startswith("binding: ")), lines
