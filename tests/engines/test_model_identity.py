"""Model identity: every bundled model profile names its Hugging Face repo; the spec may override it and set a
served name, and the commands use them."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from trimtab.cli.main import app
from trimtab.api import load_spec
from trimtab.errors import InputError
from trimtab.ir.lower import lower
from trimtab.profiles.loader import load_profiles

SPEC = """\
version: 1
name: ids
gpus: [{type: h100-sxm, count: 8}]
models:
  - {name: llama-3.1-8b, hf_id: acme/llama-3.1-8b-support-ft, hf_revision: v2, served_name: support}
  - {name: qwen3-8b}
workloads:
  - {name: a, model: llama-3.1-8b, rate_rps: 1, input_tokens: {fixed: 500}, output_tokens: {fixed: 50},
     slo: {ttft_ms: 2000, tpot_ms: 100}}
  - {name: b, model: qwen3-8b, rate_rps: 1, input_tokens: {fixed: 500}, output_tokens: {fixed: 50},
     slo: {ttft_ms: 2000, tpot_ms: 100}}
"""


def test_every_model_profile_names_its_repo_from_its_config_source():
    for name, m in load_profiles().models.items():
        assert m.hf is not None and "/" in m.hf.repo and m.hf.revision, name
        assert m.hf.repo in m.sources[m.hf.source].ref, name  # the repo the config.json numbers came from


def test_spec_overrides_reach_the_commands(tmp_path):
    path = tmp_path / "ids.yaml"
    path.write_text(SPEC)
    ir = lower(load_spec(path))
    ft, qwen = ir.identities["llama-3.1-8b"], ir.identities["qwen3-8b"]
    assert (ft.model_id, ft.revision, ft.served_name) == ("acme/llama-3.1-8b-support-ft", "v2", "support")
    assert (qwen.model_id, qwen.revision, qwen.served_name) == ("Qwen/Qwen3-8B", "main", "qwen3-8b")
    import trimtab

    plan = trimtab.plan(load_spec(path)).plan
    d = next(d for d in plan.deployments if d.model == "llama-3.1-8b")
    assert d.command[2] == "acme/llama-3.1-8b-support-ft"
    assert "--served-model-name=support" in d.command and "--revision=v2" in d.command


@pytest.mark.parametrize("bad, field", [("hf_id: not-a-repo", "hf_id"), ("served_name: ''", "served_name"),
                                        ("hf_idd: a/b", "hf_idd")])
def test_bad_model_identity_names_the_field(tmp_path, bad, field):
    path = tmp_path / "bad.yaml"
    path.write_text(SPEC.replace("{name: qwen3-8b}", "{name: qwen3-8b, " + bad + "}"))
    with pytest.raises(InputError) as e:
        load_spec(path)
    assert field in str(e.value) and "models[1]" in str(e.value)


def test_profiles_show_prints_the_repo():
    r = CliRunner().invoke(app, ["profiles", "show", "llama-3.1-70b"])
    assert r.exit_code == 0 and "meta-llama/Llama-3.1-70B-Instruct" in r.output


def test_trtllm_says_it_cannot_take_a_revision_or_served_name(tmp_path):
    """specgen_mix probe (issue 35): trtllm-serve takes the model positionally, with no revision or
    served-name flag (docs/deploy.md), and `emit --to k8s` dropped `hf_revision` and `served_name` without a
    word: a deployment of another revision of the weights. Now each is a warning naming the field; a model
    that sets neither gets none."""
    path = tmp_path / "ids.yaml"
    path.write_text(SPEC.replace("name: ids\n", "name: ids\ndefaults: {engine: trt-llm}\n"))
    import trimtab

    plan = trimtab.plan(load_spec(path)).plan
    plan_path = tmp_path / "plan.json"
    from trimtab.contract.write import emit

    plan_path.write_text(emit(plan))
    res = CliRunner().invoke(app, ["emit", "--plan", str(plan_path), "--spec", str(path), "--to", "k8s",
                                   "-o", str(tmp_path / "k8s")])
    assert res.exit_code == 0, res.output
    out = res.output
    assert "not models[].hf_revision v2" in out and "not models[].served_name support" in out
    assert "Qwen/Qwen3-8B is served at its default branch" not in out and "served_name qwen3-8b" not in out
