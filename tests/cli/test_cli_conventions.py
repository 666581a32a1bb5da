"""CLI conventions a platform engineer scripts against (issue #13 item 7): an example in every command's help,
`-o -` puts the document alone on stdout (summary on stderr), `emit -o -` is one YAML stream for kubectl."""
from __future__ import annotations

import json
from pathlib import Path

import typer
import yaml
from typer.testing import CliRunner

from trimtab.cli.main import app

ROOT = Path(__file__).resolve().parents[2]


def _commands():
    cmd = typer.main.get_command(app)
    for name, sub in cmd.commands.items():
        if hasattr(sub, "commands"):
            for n2, s2 in sub.commands.items():
                yield [name, n2]
        else:
            yield [name]


def test_every_command_help_shows_an_example():
    names = list(_commands())
    assert ["emit"] in names and ["profiles", "show"] in names
    for path in names:
        r = CliRunner().invoke(app, [*path, "--help"])
        assert r.exit_code == 0 and "Example: trimtab " + path[0] in r.output, path


def test_plan_to_stdout_is_the_document_alone(small_spec_path):
    # a one-workload spec: where the plan and its summary go does not depend on the spec
    r = CliRunner().invoke(app, ["plan", str(small_spec_path), "-o", "-", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["spec"] == "small"  # nothing but the plan on stdout
    assert "plan for small" in r.stderr


def test_emit_to_stdout_is_one_yaml_stream(tmp_path):
    plan = ROOT / "tests" / "golden" / "quickstart.plan.yaml"  # trimtab plan's bytes (tests/golden)
    r = CliRunner().invoke(app, ["emit", str(plan), "--spec", str(ROOT / "examples/quickstart.yaml"), "--to",
                                 "k8s", "-o", "-"])
    assert r.exit_code == 0, r.output
    docs = list(yaml.safe_load_all(r.stdout))
    assert {d["kind"] for d in docs} >= {"Deployment", "Service", "ScaledObject", "HTTPRoute"}
    r = CliRunner().invoke(app, ["emit", str(plan), "--spec", str(ROOT / "examples/quickstart.yaml"), "--to",
                                 "k8s", "-o", str(tmp_path / "out"), "--format", "json"])
    plan_deps = yaml.safe_load(plan.read_text())["deployments"]
    assert r.exit_code == 0 and len(json.loads(r.stdout)["written"]) == len(plan_deps) + 2  # + shared, router


def test_json_output_is_the_document_alone():
    """--format json: stdout parses as one JSON document (tables and progress, if any, go to stderr)."""
    q = str(ROOT / "examples/long-context.yaml")  # the example that plans fastest
    cases = {("profiles", "list"): "models", ("profiles", "show", "h100-sxm"): "memory_gib",
             ("explain", q): "feasible", ("what-if", q, "--set", "workloads.chat.rate_rps=12"): "changes"}
    for args, key in cases.items():
        r = CliRunner().invoke(app, [*args, "--format", "json"])
        assert r.exit_code == 0, (args, r.output)
        assert key in json.loads(r.stdout), args
