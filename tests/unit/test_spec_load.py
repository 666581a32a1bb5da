"""Spec loading: every problem named by field path and YAML line; nothing silently dropped."""
from __future__ import annotations

import pytest

from trimtab.errors import InputError
from trimtab.ir.lower import lower
from trimtab.spec.load import load_spec
from tests.conftest import QUICKSTART, SMALL_SPEC


def problems(text: str) -> list[str]:
    with pytest.raises(InputError) as exc:
        load_spec("s.yaml", text=text)
    return exc.value.lines


def test_quickstart_loads_unchanged():
    spec = load_spec(QUICKSTART)
    assert [w.name for w in spec.workloads] == ["chat", "summarize", "autocomplete"]
    assert spec.gpus[0].usd_per_hour == 3.90


def test_negative_rate_names_field_and_line():
    text = SMALL_SPEC.replace("rate_rps: 5", "rate_rps: -1")
    (line,) = problems(text)
    assert line.startswith("s.yaml:12: workloads[0] (short).rate_rps:")


def test_unknown_key_rejected():
    text = SMALL_SPEC.replace("    rate_rps: 5\n", "    rate_rps: 5\n    rate_rpm: 3\n")
    assert any("rate_rpm" in p and "unknown field" in p for p in problems(text))


def test_wrong_type_rejected():
    text = SMALL_SPEC.replace("count: 8, usd_per_hour: 4.0", "count: eight, usd_per_hour: 4.0")
    assert any("gpus[0] (h100-sxm).count" in p for p in problems(text))


def test_unknown_gpu_and_model():
    text = SMALL_SPEC.replace("type: l4,", "type: l5,").replace("- name: llama-3.1-8b", "- name: llama-9")
    ps = problems(text)
    assert any("gpus[1].type" in p and "unknown GPU type 'l5'" in p for p in ps)
    assert any("models[0].name" in p and "unknown model 'llama-9'" in p for p in ps)


def test_duplicate_workload_names():
    extra = SMALL_SPEC.split("workloads:\n")[1]
    ps = problems(SMALL_SPEC + extra)
    assert any("duplicate name 'short'" in p for p in ps)


def test_duplicate_yaml_key_is_error():
    ps = problems(SMALL_SPEC.replace("name: small\n", "name: small\nname: other\n"))
    assert any("duplicate key 'name'" in p for p in ps)


def test_yaml_syntax_error_has_line():
    (line,) = problems("version: 1\nname: [unclosed\n")
    assert line.startswith("s.yaml:") and "YAML syntax error" in line


def test_empty_lists_rejected():
    ps = problems(SMALL_SPEC.split("workloads:")[0] + "workloads: []\n")
    assert any(p.startswith("s.yaml:") and "workloads" in p for p in ps)


def test_workload_model_must_be_listed():
    ps = problems(SMALL_SPEC.replace("    model: llama-3.1-8b", "    model: llama-3.1-70b"))
    assert any("workloads[0] (short).model" in p for p in ps)


def test_lengths_beyond_context_window_is_error_naming_workload():
    spec = load_spec("s.yaml", text=SMALL_SPEC.replace("input_tokens: {fixed: 512}",
                                                       "input_tokens: {fixed: 200000}"))
    with pytest.raises(InputError) as exc:
        lower(spec)
    assert "workloads[0] (short).input_tokens" in exc.value.lines[0]
    assert "context window of 131072" in exc.value.lines[0]


def test_partial_truncation_warns():
    text = SMALL_SPEC.replace("input_tokens: {fixed: 512}",
                              "input_tokens: {uniform: {min: 1000, max: 200000}}")
    ir = lower(load_spec("s.yaml", text=text))
    assert any("short:" in w and "of requests" in w and "of their tokens" in w and "exceed" in w
               for w in ir.warnings)
    assert max(b.isl_max for b in ir.workloads[0].buckets) < 131072


def test_hf_config_model(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text('{"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, '
                   '"num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, '
                   '"max_position_embeddings": 131072}')
    spec_file = tmp_path / "s.yaml"
    spec_file.write_text(SMALL_SPEC.replace("- name: llama-3.1-8b", "- {name: mymodel, config: config.json}")
                         .replace("model: llama-3.1-8b", "model: mymodel"))
    ir = lower(load_spec(spec_file))
    m = ir.models["mymodel"]
    assert abs(m.params_billion.value - 8.03) < 0.05  # the architecture of Llama-3.1-8B
    assert m.sources[m.params_billion.source].kind == "fit"
