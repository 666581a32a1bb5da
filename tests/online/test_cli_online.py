"""The CLI around schedules and re-planning: ``check`` of a schedule reports every window and the worst, and
exits 5 when a window misses; ``replan`` prints its moves as JSON; bad ``--fail`` is exit 1 without a
traceback."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from trimtab.cli.main import app
from trimtab.api import plan
from trimtab.contract.write import emit
from tests.online.test_schedule import TINY, tiny


def test_check_of_an_unvalidated_schedule_fails_its_overloaded_windows(tmp_path):
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY.format(extra=""))
    p = tmp_path / "plan.yaml"
    p.write_text(emit(plan(tiny(), validate=False).plan))  # the cost model alone: 4 and 9 rps run too close
    r = CliRunner().invoke(app, ["check", str(p), "--spec", str(spec), "--seeds", "1", "--requests", "1500"])
    assert r.exit_code == 5, r.output
    lines = r.output.splitlines()
    assert sum(line.split()[0] in ("ok", "~", "FAIL") and " window " in line for line in lines) >= 4
    assert "FAIL window 2" in r.output and "worst window:" in r.output and "check failed" in r.output


def test_replan_json_and_bad_failure(tmp_path):
    spec = tmp_path / "tiny.yaml"
    text = TINY.format(extra="").replace("schedule: {window_s: 3600}\n", "").replace(
        "rate_profile: {rps: [1, 4, 9, 2]}", "rate_rps: 4")
    spec.write_text(text)
    p = tmp_path / "plan.yaml"
    from trimtab.spec.load import load_spec

    p.write_text(emit(plan(load_spec(spec), validate=False).plan))
    spec.write_text(text.replace("rate_rps: 4", "rate_rps: 9"))
    r = CliRunner().invoke(app, ["replan", "--plan", str(p), "--spec", str(spec), "--analytic",
                                 "--format", "json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)  # (progress goes to stderr)
    assert data["replan"]["moves"] >= 1 and data["replan"]["moves"] <= data["from_scratch"]["moves"]
    r = CliRunner().invoke(app, ["replan", "--plan", str(p), "--spec", str(spec), "--fail", "node=nope"])
    assert r.exit_code == 1 and "no node 'nope'" in r.output and "Traceback" not in r.output
