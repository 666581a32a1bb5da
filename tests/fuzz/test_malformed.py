"""Malformed-spec corpus: every entry exits 1 with the field path, never a traceback.

Each case mutates a valid small spec (or writes raw text) and runs ``trimtab plan`` through typer's
CliRunner; a hypothesis fuzz then puts random values at random fields and asks only that the exit be one
of the documented codes and never an uncaught exception.
"""
from __future__ import annotations

import copy

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from trimtab.cli.main import app
from trimtab.errors import ExitCode
from tests.conftest import SMALL_SPEC

BASE = yaml.safe_load(SMALL_SPEC)


def mutate(path: tuple, value) -> dict:
    d = copy.deepcopy(BASE)
    node = d
    for p in path[:-1]:
        node = node[p]
    if value is DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return d


DELETE = object()

# (id, spec data or raw text, text the output must contain: the field path)
CORPUS = [
    ("rate_string", mutate(("workloads", 0, "rate_rps"), "fast"), "workloads[0] (short).rate_rps"),
    ("rate_negative", mutate(("workloads", 0, "rate_rps"), -3), "workloads[0] (short).rate_rps"),
    ("rate_huge", mutate(("workloads", 0, "rate_rps"), 1e12), "workloads[0] (short).rate_rps"),
    ("rate_bool", mutate(("workloads", 0, "rate_rps"), True), "workloads[0] (short).rate_rps"),
    ("ttft_wrong_unit", mutate(("workloads", 0, "slo", "ttft_ms"), "2 s"),
     "workloads[0] (short).slo.ttft_ms"),
    ("ttft_zero", mutate(("workloads", 0, "slo", "ttft_ms"), 0), "workloads[0] (short).slo.ttft_ms"),
    ("percentile_100", mutate(("workloads", 0, "slo", "percentile"), 100), "slo.percentile"),
    ("count_negative", mutate(("gpus", 0, "count"), -1), "gpus[0] (h100-sxm).count"),
    ("count_float", mutate(("gpus", 0, "count"), 2.5), "gpus[0] (h100-sxm).count"),
    ("count_huge", mutate(("gpus", 0, "count"), 10**12), "gpus[0] (h100-sxm).count"),
    ("price_negative", mutate(("gpus", 1, "usd_per_hour"), -0.8), "gpus[1] (l4).usd_per_hour"),
    ("budget_zero", mutate(("budget_usd_per_hour",), 0), "budget_usd_per_hour"),
    ("unknown_gpu", mutate(("gpus", 0, "type"), "h900"), "gpus[0].type"),
    ("unknown_model", mutate(("models", 0, "name"), "llama-9-9b"), "models[0].name"),
    ("workload_model_not_listed", mutate(("workloads", 0, "model"), "mistral-7b"),
     "workloads[0] (short).model"),
    ("empty_gpus", mutate(("gpus",), []), "gpus"),
    ("empty_workloads", mutate(("workloads",), []), "workloads"),
    ("empty_models", mutate(("models",), []), "models"),
    ("duplicate_gpu", mutate(("gpus", 1, "type"), "h100-sxm"), "gpus[1].type"),
    ("duplicate_workload", {**BASE, "workloads": BASE["workloads"] * 2}, "workloads[1].name"),
    ("unknown_field", mutate(("workloads", 0, "rate"), 5), "workloads[0] (short).rate"),
    ("missing_slo", mutate(("workloads", 0, "slo"), DELETE), "workloads[0] (short).slo"),
    ("two_length_forms", mutate(("workloads", 0, "input_tokens"),
                                {"fixed": 5, "uniform": {"min": 1, "max": 9}}),
     "workloads[0] (short).input_tokens"),
    ("uniform_reversed", mutate(("workloads", 0, "input_tokens"), {"uniform": {"min": 90, "max": 9}}),
     "workloads[0] (short).input_tokens"),
    ("solver_unknown", mutate(("solver",), {"backend": "gurobi"}), "solver.backend"),
    ("objective_unknown", mutate(("objective",), "max_profit"), "objective"),
    ("version_2", mutate(("version",), 2), "version"),
    ("workloads_not_list", mutate(("workloads",), {"a": 1}), "workloads"),
    ("yaml_syntax", "version: 1\nname: [unclosed\n", "YAML syntax error"),
    ("yaml_tab", "version: 1\n\tname: x\n", "YAML syntax error"),
    ("yaml_duplicate_key", "version: 1\nversion: 1\n", "duplicate key"),
    ("not_a_mapping", "- 1\n- 2\n", "a spec is a YAML mapping"),
    ("empty_file", "", "a spec is a YAML mapping"),
]


def run(args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.mark.parametrize("case", CORPUS, ids=[c[0] for c in CORPUS])
def test_malformed_spec_exit1_with_field_path(case, tmp_path):
    _, data, where = case
    p = tmp_path / "s.yaml"
    p.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    res = run(["plan", p])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exc_info
    assert res.exit_code == ExitCode.INVALID_INPUT, res.output
    assert where in res.output, res.output
    assert "Traceback" not in res.output


def test_plan_from_another_spec_is_exit1(tmp_path):
    from trimtab.api import load_spec, plan
    from trimtab.contract.write import emit

    other = yaml.safe_load(SMALL_SPEC)
    other["workloads"][0]["name"] = "long"
    other["workloads"][0]["input_tokens"] = {"fixed": 3000}
    sp = tmp_path / "other.yaml"
    sp.write_text(yaml.safe_dump(other, sort_keys=False))
    pp = tmp_path / "plan.yaml"
    pp.write_text(emit(plan(load_spec(sp), validate=False).plan))
    mine = tmp_path / "small.yaml"
    mine.write_text(SMALL_SPEC)
    for extra in ([], ["--analytic"]):
        res = run(["check", pp, "--spec", mine, *extra])
        assert res.exit_code == ExitCode.INVALID_INPUT, res.output
        assert "routes[0].workload" in res.output and "another spec" in res.output


FIELDS = [("workloads", 0, "rate_rps"), ("workloads", 0, "slo", "ttft_ms"),
          ("workloads", 0, "slo", "tpot_ms"),
          ("workloads", 0, "slo", "percentile"), ("workloads", 0, "input_tokens"),
          ("workloads", 0, "output_tokens"),
          ("gpus", 0, "count"), ("gpus", 1, "usd_per_hour"), ("budget_usd_per_hour",), ("models", 0, "name"),
          ("gpus", 0, "type"), ("name",), ("workloads", 0, "dtype")]
VALUES = st.one_of(st.none(), st.booleans(), st.integers(-10**15, 10**15),
                   st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                   st.lists(st.integers(-5, 5), max_size=3), st.dictionaries(st.sampled_from(["fixed", "x"]),
                                                                            st.integers(-3, 10**8),
                                                                             max_size=2))


@pytest.mark.slow  # quick suite within 3 minutes; .ci/run runs the slow suite
@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(FIELDS), value=VALUES)
def test_fuzzed_field_never_tracebacks(tmp_path, field, value):
    p = tmp_path / "f.yaml"
    p.write_text(yaml.safe_dump(mutate(field, value), sort_keys=False))
    res = run(["explain", p, "--time-limit", "5"])  # explain: every stage but the simulator, fast
    assert res.exception is None or isinstance(res.exception, SystemExit), (field, value, res.exc_info)
    assert res.exit_code in (0, 1, 3, 4), res.output
