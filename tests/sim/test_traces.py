"""Trace readers on tiny fixture files, malformed rows with line numbers, and traces in a spec."""
from __future__ import annotations

import numpy as np
import pytest

from trimtab.errors import InputError
from trimtab.ir.lower import lower
from trimtab.sim import simulate
from trimtab.spec.load import load_spec
from trimtab.spec.traces import read_trace
from tests.sim.helpers import one_deployment_plan

AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:47.1805900,396,109
2023-11-16 18:15:49.6805900,1200,0
"""

MOONCAKE = """{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2]}
{"timestamp": 250, "input_length": 7322, "output_length": 490, "hash_ids": [0, 14]}

{"timestamp": 1000, "input_length": 2290, "output_length": 316, "hash_ids": []}
"""


def test_azure_csv(tmp_path):
    p = tmp_path / "az.csv"
    p.write_text(AZURE)
    tr = read_trace(p, "azure")
    np.testing.assert_allclose(tr.times_s, [0.0, 0.5, 3.0])
    assert tr.input_tokens.tolist() == [374, 396, 1200]
    assert tr.output_tokens.tolist() == [44, 109, 1]  # a 0-token output (failed request) counts as 1
    assert tr.rate_rps == pytest.approx(2 / 3.0)


def test_azure_with_utc_offsets(tmp_path):
    p = tmp_path / "az24.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00.009930+00:00,10,2\n"
                 "2024-05-10 00:00:01.009930+00:00,20,3\n")
    assert read_trace(p, "azure").times_s.tolist() == pytest.approx([0.0, 1.0])


def test_mooncake_jsonl(tmp_path):
    p = tmp_path / "mc.jsonl"
    p.write_text(MOONCAKE)
    tr = read_trace(p, "mooncake")
    np.testing.assert_allclose(tr.times_s, [0.0, 0.25, 1.0])  # milliseconds
    assert tr.input_tokens.tolist() == [6758, 7322, 2290]
    assert tr.output_tokens.tolist() == [500, 490, 316]


def test_plain_csv_with_named_columns(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("arrival,prompt,completion,user\n0.0,100,10,a\n0.5,200,20,b\n2.0,300,30,c\n")
    tr = read_trace(p, "csv", {"timestamp": "arrival", "input": "prompt", "output": "completion"})
    assert tr.input_tokens.tolist() == [100, 200, 300]
    with pytest.raises(InputError) as exc:
        read_trace(p, "csv")
    assert "no column 'timestamp'" in exc.value.lines[0] and "t.csv:1" in exc.value.lines[0]


def test_malformed_rows_are_reported_with_line_numbers(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:15:46.6805900,374,44\n"
                 "2023-11-16 18:15:47.1805900,abc,109\n"  # line 3
                 "2023-11-16 18:15:48.1805900,100\n"  # line 4: missing field
                 "not a time,100,10\n"  # line 5
                 "2023-11-16 18:15:40.0000000,100,10\n"  # line 6: goes backwards
                 "2023-11-16 18:15:49.1805900,0,10\n")  # line 7: empty prompt
    with pytest.raises(InputError) as exc:
        read_trace(p, "azure")
    lines = exc.value.lines
    assert [line.split(":")[1] for line in lines] == ["3", "4", "5", "6", "7"]
    assert "backwards" in lines[3]
    m = tmp_path / "bad.jsonl"
    m.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1, '
                 '"input_length": 5}\n'
                 "{oops\n")
    with pytest.raises(InputError) as exc:
        read_trace(m, "mooncake")
    assert [line.split(":")[1] for line in exc.value.lines] == ["2", "3"]


SPEC_WITH_TRACE = """\
version: 1
name: traced
gpus:
  - {type: h100-sxm, count: 8}
models:
  - name: llama-3.1-8b
workloads:
  - name: w
    model: llama-3.1-8b
    trace: {path: trace.csv, format: csv, rate_scale: 2}
    slo: {ttft_ms: 2000, tpot_ms: 100, percentile: 90}
"""


def test_trace_in_a_spec_gives_rate_lengths_and_arrivals(tmp_path):
    rng = np.random.default_rng(0)
    t = np.cumsum(rng.exponential(1.0, 400))
    isl = rng.integers(100, 3000, 400)
    osl = rng.integers(5, 200, 400)
    rows = "\n".join(f"{a:.6f},{i},{o}" for a, i, o in zip(t, isl, osl))
    (tmp_path / "trace.csv").write_text("timestamp,input_tokens,output_tokens\n" + rows + "\n")
    sp = tmp_path / "s.yaml"
    sp.write_text(SPEC_WITH_TRACE)
    spec = load_spec(sp)
    ir = lower(spec)
    w = ir.workloads[0]
    assert w.rate_rps == pytest.approx(399 / (t[-1] - t[0]) * 2)
    assert sum(b.prob for b in w.buckets) == pytest.approx(1.0)
    res = simulate(one_deployment_plan(sp), spec, requests=400, seed=0)
    # Replayed from the first row at twice the speed: the last of 400 arrivals comes at half the trace's span.
    assert res.duration_s == pytest.approx((t[-1] - t[0]) / 2, rel=1e-6)
    assert res.workloads["w"].requests > 300


def test_trace_rows_errors_surface_from_the_spec(tmp_path):
    (tmp_path / "trace.csv").write_text("timestamp,input_tokens,output_tokens\n0,10,5\n1,x,5\n")
    sp = tmp_path / "s.yaml"
    sp.write_text(SPEC_WITH_TRACE)
    with pytest.raises(InputError) as exc:
        lower(load_spec(sp))
    assert "trace.csv:3" in exc.value.lines[0]


def test_spec_without_lengths_or_trace_is_rejected(tmp_path):
    sp = tmp_path / "s.yaml"
    sp.write_text(SPEC_WITH_TRACE.replace("    trace: {path: trace.csv, format: csv, rate_scale: 2}\n", ""))
    with pytest.raises(InputError) as exc:
        load_spec(sp)
    assert "rate_rps" in " ".join(exc.value.lines)


def test_trace_rows_beyond_the_context_window_are_rejected_and_counted(tmp_path):
    """A real engine refuses a prompt longer than --max-model-len: the replay does the same, counts it as a
    miss (unserved) and warns, instead of simulating a request of 99,999,999,999 tokens."""
    from trimtab.gate.simulated import check_simulated
    from tests.sim.helpers import write_spec

    rows = [(0.5 * k, 99_999_999_999 if k % 20 == 19 else 300 + k, 40) for k in range(200)]
    (tmp_path / "t.csv").write_text("timestamp,input_tokens,output_tokens\n"
                                    + "\n".join(f"{a},{i},{o}" for a, i, o in rows) + "\n")
    sp = write_spec(tmp_path, rate=2.0, isl="{fixed: 512}", osl="{fixed: 40}", pct=99)
    spec = load_spec(sp)
    plan = one_deployment_plan(sp)
    tr = read_trace(tmp_path / "t.csv", "csv")
    res = simulate(plan, spec, requests=200, seed=0, trace=tr)
    w = res.workloads["w"]
    assert 8 <= w.unserved <= 10 and w.completed == w.requests - w.unserved
    assert any("10 of 200 requests of w" in n and "--max-model-len" in n for n in res.notes), res.notes
    rep, _ = check_simulated(plan, spec, requests=200, trace=tr)  # 5 % refused: a p99 SLO fails
    assert not rep.ok and "unserved" in " ".join(rep.violations)
