"""Spec validation of ``prefix``: every error names the field, a valid block lowers to the workload's IR."""
from __future__ import annotations

import pytest

from trimtab.errors import InputError
from trimtab.ir.lower import lower
from trimtab.spec.load import load_spec
from tests.conftest import SMALL_SPEC


def _spec(prefix_yaml: str, trace: str = "") -> str:
    return SMALL_SPEC + f"    prefix: {prefix_yaml}\n" + trace


def _problems(text: str) -> list[str]:
    with pytest.raises(InputError) as exc:
        load_spec("spec.yaml", text=text)
    return [p.render() for p in exc.value.problems]


@pytest.mark.parametrize("prefix, expect", [
    ("{hit_rate: 0.5}", "hit_rate and cached_tokens go together"),
    ("{cached_tokens: 1000}", "hit_rate and cached_tokens go together"),
    ("{hit_rate: 1.0, cached_tokens: 1000}", "less than 1"),
    ("{hit_rate: -0.1, cached_tokens: 1000}", "greater than or equal to 0"),
    ("{hit_rate: 0.5, cached_tokens: 0}", "greater than or equal to 1"),
    ("{hit_rate: 0.5, cached_tokens: 1000, from_trace: true}", "not both"),
    ("{}", "give hit_rate and cached_tokens, or from_trace: true"),
    ("{from_trace: false}", "from_trace: false means nothing"),
    ("{hit_rate: 0.5, cached_tokens: 1000, ratio: 2}", "unknown field"),
])
def test_bad_prefix_names_the_field(prefix, expect):
    msgs = _problems(_spec(prefix))
    assert any("workloads[0] (short).prefix" in m and expect in m for m in msgs), msgs
    assert all(m.startswith("spec.yaml:") for m in msgs)  # with the file (and line)


def test_from_trace_needs_a_mooncake_trace():
    msgs = _problems(_spec("{from_trace: true}"))
    assert any("prefix.from_trace needs a trace" in m for m in msgs), msgs
    msgs = _problems(_spec("{from_trace: true}", "    trace: {path: t.csv, format: azure}\n"))
    assert any("needs a mooncake trace" in m and "'azure'" in m for m in msgs), msgs


def test_declared_prefix_lowers(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(_spec("{hit_rate: 0.4, cached_tokens: 30000}"))
    w = lower(load_spec(p)).workloads[0]
    assert (w.prefix_hit_rate, w.prefix_working_set, w.prefix_curve, w.prefix_source) == (0.4, 30000, (),
                                                                                          "declared")


def test_no_prefix_keeps_the_input_hash(tmp_path):
    """A spec without prefix hashes as before the field existed (plans keep their input_hash)."""
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(SMALL_SPEC)
    b.write_text(_spec("{hit_rate: 0.4, cached_tokens: 30000}"))
    ha, hb = lower(load_spec(a)).input_hash, lower(load_spec(b)).input_hash
    assert ha != hb
    assert lower(load_spec(a)).workloads[0].prefix_source == ""


def test_cli_exits_1_with_the_field(tmp_path):
    from typer.testing import CliRunner

    from trimtab.cli.main import app

    p = tmp_path / "s.yaml"
    p.write_text(_spec("{hit_rate: 0.5}"))
    res = CliRunner().invoke(app, ["plan", str(p), "-o", str(tmp_path / "plan.yaml")])
    assert res.exit_code == 1
    assert "prefix" in res.output and "Traceback" not in res.output
