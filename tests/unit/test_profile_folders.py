"""A user's own profile folder as a spec field (``profiles``, relative to the spec file) and as ``--profiles
DIR`` on every command that reads a spec: one resolution (``trimtab.spec.load.spec_profiles``), read wherever
the spec is lowered, and bad input named by the field or the option."""
from __future__ import annotations

import yaml

from tests.conftest import run_cli
from trimtab.errors import InputError
from trimtab.ir.lower import lower
from trimtab.profiles import data_dir
from trimtab.profiles.loader import load_profiles
from trimtab.spec.load import load_spec

SPEC = """version: 1
name: own-profiles
gpus:
  - {type: h100-sxm, count: 2}
models:
  - name: llama-3.1-8b
workloads:
  - name: chat
    model: llama-3.1-8b
    rate_rps: 1
    input_tokens: {fixed: 500}
    output_tokens: {fixed: 50}
    slo: {ttft_ms: 2000, tpot_ms: 100, percentile: 90}
"""


def _own_h100(folder, tflops_factor: float = 2.0):
    data = yaml.safe_load((data_dir() / "gpus" / "h100-sxm.yaml").read_text())
    data["bf16_tflops"]["value"] *= tflops_factor
    (folder / "gpus").mkdir(parents=True)
    (folder / "gpus" / "h100-sxm.yaml").write_text(yaml.safe_dump(data))
    return data["bf16_tflops"]["value"]


def test_field_relative_to_the_spec_file_and_option_replacing_it(tmp_path, monkeypatch):
    bundled = load_profiles().gpus["h100-sxm"].bf16_tflops.value
    own = _own_h100(tmp_path / "specs" / "mine")
    (tmp_path / "specs" / "s.yaml").write_text(SPEC + "profiles: mine\n")
    s = load_spec(tmp_path / "specs" / "s.yaml")
    ir = lower(s)
    assert ir.gpus[0].profile.bf16_tflops.value == own != bundled
    # The option, relative to where the command runs, replaces the field; the same folder gives the same hash.
    monkeypatch.chdir(tmp_path)
    s2 = load_spec(tmp_path / "specs" / "s.yaml", profile_dir="specs/mine")
    assert lower(s2).input_hash == ir.input_hash
    plain = tmp_path / "plain.yaml"
    plain.write_text(SPEC)
    ir0 = lower(load_spec(plain))
    assert ir0.gpus[0].profile.bf16_tflops.value == bundled and ir0.input_hash != ir.input_hash
    assert lower(load_spec(plain, profile_dir="specs/mine")).input_hash == ir.input_hash


def test_missing_folder_names_the_field_with_its_line_and_the_option(tmp_path):
    (tmp_path / "s.yaml").write_text(SPEC + "profiles: nowhere\n")
    try:
        load_spec(tmp_path / "s.yaml")
        raise AssertionError("expected InputError")
    except InputError as exc:
        assert exc.problems[0].where == "profiles" and exc.problems[0].line == SPEC.count("\n") + 1
        assert "not found" in exc.problems[0].message
    (tmp_path / "empty").mkdir()
    res = run_cli("plan", tmp_path / "s.yaml", "--profiles", tmp_path / "empty")
    assert res.exit_code == 1 and "--profiles" in res.stderr and "holds no gpus/" in res.stderr


def test_bad_profile_in_the_folder_names_its_file(tmp_path):
    _own_h100(tmp_path / "mine")
    p = tmp_path / "mine" / "gpus" / "h100-sxm.yaml"
    data = yaml.safe_load(p.read_text())
    data["bf16_tflops"]["source"] = "undeclared"
    p.write_text(yaml.safe_dump(data))
    (tmp_path / "s.yaml").write_text(SPEC)
    res = run_cli("plan", tmp_path / "s.yaml", "--profiles", tmp_path / "mine")
    assert res.exit_code == 1 and "h100-sxm.yaml" in res.stderr and "--profiles" in res.stderr


def test_every_command_that_reads_a_spec_takes_the_option():
    for cmd in ("plan", "check", "simulate", "what-if", "sweep", "pareto", "replan", "emit", "loadtest",
                "watch", "explain", "predict", "calibrate"):
        res = run_cli(cmd, "--help")
        assert res.exit_code == 0 and "--profiles" in res.stdout, cmd


def test_plan_and_check_with_the_users_folder(tmp_path):
    _own_h100(tmp_path / "mine", tflops_factor=0.5)
    (tmp_path / "s.yaml").write_text(SPEC)
    plan = tmp_path / "plan.yaml"
    res = run_cli("plan", tmp_path / "s.yaml", "--profiles", tmp_path / "mine", "-o", plan)
    assert res.exit_code == 0, res.output
    res = run_cli("check", "--plan", plan, "--spec", tmp_path / "s.yaml", "--profiles", tmp_path / "mine",
                  "--analytic")
    assert res.exit_code == 0 and "different input" not in res.stdout, res.output
    # without the folder the same spec is another input (the bundled H100 is twice as fast): check says so
    res = run_cli("check", "--plan", plan, "--spec", tmp_path / "s.yaml", "--analytic")
    assert "different input" in res.stdout, res.output


def test_the_processs_own_measurements_stay_on_top_of_the_users_folder(tmp_path):
    """``use_profile_dirs`` (watch --calibrate's refit engine, the end-to-end test's own CPU) replaces a
    profile of the user's folder too: it is the newer measurement."""
    from trimtab.profiles.loader import profile_dirs, use_profile_dirs

    mine = _own_h100(tmp_path / "mine", tflops_factor=2.0)
    newer = _own_h100(tmp_path / "newer", tflops_factor=3.0)
    before = profile_dirs()
    try:
        assert load_profiles((tmp_path / "mine",)).gpus["h100-sxm"].bf16_tflops.value == mine
        use_profile_dirs((tmp_path / "newer",))
        assert load_profiles((tmp_path / "mine",)).gpus["h100-sxm"].bf16_tflops.value == newer
    finally:
        use_profile_dirs(before)
