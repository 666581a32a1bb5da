"""How benchmarks/accuracy_gpu.py reads a real vLLM run (issue 34): the prompts the load generator actually
cycled through (its own written configuration wins over the profile it was given), and the split of a run's
TTFT error into the front end and the decode steps (``--ttft``). Synthetic folders only: nothing here reads
../shared."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from benchmarks.accuracy_gpu import Run, ran_prompts, read_runs, ttft_breakdown

# inference-perf's dump of the configuration it ran, as in the phase-0 runs' results/config.yaml: the profile
# asked for 9 system prompts x 5 users under keys this release did not know, so its defaults stand
RAN = """api:
  type: completion
  streaming: true
data:
  type: shared_prefix
  shared_prefix:
    num_groups: 10
    num_prompts_per_group: 10
    system_prompt_len: 100
    question_len: 447
    output_len: 248
load:
  type: constant
"""


def _write_run(folder: Path, exp_folder: str, config: str | None) -> None:
    row = {"exp_id": "r1", "exp_folder": exp_folder, "usable": "yes", "model": "meta-llama/Llama-2-7b-hf",
           "precision_label": "FP16", "gpu": "H100-80GB-HBM3 SXM", "tp": "1", "max_num_seqs": "128",
           "max_num_batched_tokens": "2048", "max_model_len": "4096", "workload": "general",
           "stage_rates_rps": "8;20", "stage_durations_s": "600;600",
           "data_generator": "inference-perf shared_prefix, streaming completions, ignore_eos=true",
           "system_prompt_len": "100", "question_len": "447", "output_len_target": "248",
           "num_unique_system_prompts": "9", "users_per_system_prompt": "5", "prompt_len_mean": "575.5",
           "output_len_mean": "209.0", "output_len_mean_derived": "209.0", "ttft_mean_ms": "44.8"}
    with open(folder / "experiments.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(row))
        w.writeheader()
        w.writerow(row)
    with open(folder / "stages.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["exp_id", "stage_index", "ttft_mean_ms", "e2e_mean_ms"])
        w.writeheader()
        w.writerow({"exp_id": "r1", "stage_index": "-1", "ttft_mean_ms": "44.8", "e2e_mean_ms": "3558"})
    if config is not None:
        res = folder / "raw" / exp_folder / "results"
        res.mkdir(parents=True)
        (res / "config.yaml").write_text(config)


def test_the_load_generators_written_configuration_gives_the_prompts_it_cycled(tmp_path):
    _write_run(tmp_path, "20260217-231439-llama-2-7b-tp1-general", RAN)
    assert ran_prompts(tmp_path, "20260217-231439-llama-2-7b-tp1-general") == (10, 10)
    (run,) = read_runs(tmp_path)
    assert (run.groups, run.users, run.system_len) == (10, 10, 100)
    assert run.measured["ttft_mean"] == pytest.approx(44.8)


def test_without_a_run_folder_the_profiles_numbers_stand(tmp_path):
    _write_run(tmp_path, "17-llama-4-scout", None)
    assert ran_prompts(tmp_path, "17-llama-4-scout") is None
    assert ran_prompts(tmp_path, "") is None
    (run,) = read_runs(tmp_path)
    assert (run.groups, run.users) == (9, 5)


def test_a_later_release_writes_the_profiles_own_key_names(tmp_path):
    later = RAN.replace("num_groups: 10", "num_unique_system_prompts: 9").replace(
        "num_prompts_per_group: 10", "num_users_per_system_prompt: 5")
    _write_run(tmp_path, "run", later)
    assert ran_prompts(tmp_path, "run") == (9, 5)


def _run(measured: dict, predicted: dict) -> Run:
    return Run(exp_id="x", model="m", gpu="h100-sxm", usable=True, tp=1, dtype="bf16", max_num_seqs=128,
               max_batched_tokens=2048, max_model_len=None, isl=575, osl=248, osl_client=209.0,
               system_len=100, groups=10, users=10, stages=((8.0, 600.0),), stages_nominal=False,
               measured=measured, predicted=predicted)


def test_ttft_error_is_the_front_end_term_plus_the_step_term():
    # measured: 8.22 ms steps, TTFT 27.1; simulated: 9.0 ms steps, 2.5 of them behind a 10 ms front end
    step_m, step_p, fe = 8.22, 9.0, 10.0
    meas = {"ttft_mean": 27.1, "ttft_p90": 31.2, "e2e_mean": 27.1 + 247 * step_m}
    pred_mean = fe + 2.5 * step_p
    pred = {"ttft_mean": pred_mean, "ttft_p90": pred_mean + 3.6, "e2e_mean": pred_mean + 247 * step_p}
    b = ttft_breakdown(_run(meas, pred), fe)
    assert b["steps"] == pytest.approx(2.5)
    assert (b["step_meas"], b["step_pred"]) == (pytest.approx(step_m), pytest.approx(step_p))
    assert b["fe_own"] == pytest.approx(27.1 - 2.5 * step_m)  # the run's own front end: 6.55 ms
    assert b["fe_term"] + b["step_term"] == pytest.approx(pred["ttft_mean"] - meas["ttft_mean"])
    assert b["step_term"] == pytest.approx(2.5 * (step_p - step_m))
    assert (pred["ttft_mean"] - meas["ttft_mean"]) + b["spread_pred"] - b["spread_meas"] == pytest.approx(
        pred["ttft_p90"] - meas["ttft_p90"])


def test_no_breakdown_without_the_measurements():
    assert ttft_breakdown(_run({"ttft_mean": 27.1}, {"ttft_mean": 30.0}), 10.0) is None
    assert ttft_breakdown(_run({"ttft_mean": 27.1, "ttft_p90": 31.2, "e2e_mean": 2100.0}, {}), 10.0) is None
