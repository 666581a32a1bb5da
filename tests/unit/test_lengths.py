"""Token-length distributions and buckets."""
from __future__ import annotations

import math

import numpy as np
import pytest

from trimtab.spec.lengths import GRID, LengthError, make_buckets, quantile_grid
from trimtab.spec.schema import TokenDist


def dist(d: dict) -> TokenDist:
    return TokenDist.model_validate(d)


def test_fixed_is_constant():
    x = quantile_grid(dist({"fixed": 200}))
    assert len(x) == GRID and set(x) == {200.0}


def test_uniform_spans_range_with_right_mean():
    x = quantile_grid(dist({"uniform": {"min": 2000, "max": 6000}}))
    assert x[0] >= 2000 and x[-1] <= 6000
    assert abs(x.mean() - 4000) < 5


def test_lognormal_median_p99_reproduced():
    x = quantile_grid(dist({"lognormal": {"median": 1000, "p99": 8000}}))
    assert abs(np.quantile(x, 0.5) - 1000) / 1000 < 0.01
    assert abs(np.quantile(x, 0.99) - 8000) / 8000 < 0.02


def test_lognormal_mu_sigma_form():
    x = quantile_grid(dist({"lognormal": {"mu": math.log(300), "sigma": 0.5}}))
    assert abs(np.median(x) - 300) < 3


def test_histogram_weights_respected():
    x = quantile_grid(dist({"histogram": {"edges": [0, 256, 1024, 4096], "weights": [0.5, 0.4, 0.1]}}))
    assert abs(np.mean(x <= 256) - 0.5) < 0.01
    assert abs(np.mean(x > 1024) - 0.1) < 0.01


def test_samples_from_csv(tmp_path):
    f = tmp_path / "lens.csv"
    f.write_text("prompt,other\n" + "\n".join(f"{v},x" for v in [10, 20, 30, 40]) + "\n")
    x = quantile_grid(dist({"samples": {"path": "lens.csv", "column": "prompt"}}), str(tmp_path))
    assert set(x) == {10.0, 20.0, 30.0, 40.0}


def test_samples_bad_row_names_line(tmp_path):
    f = tmp_path / "lens.csv"
    f.write_text("prompt\n10\nabc\n")
    with pytest.raises(LengthError, match=r"lens.csv:3"):
        quantile_grid(dist({"samples": {"path": "lens.csv", "column": "prompt"}}), str(tmp_path))


def test_samples_missing_column(tmp_path):
    (tmp_path / "lens.csv").write_text("a\n1\n")
    with pytest.raises(LengthError, match="no column 'prompt'"):
        quantile_grid(dist({"samples": {"path": "lens.csv", "column": "prompt"}}), str(tmp_path))


def test_exactly_one_form_required():
    with pytest.raises(ValueError, match="exactly one"):
        dist({"fixed": 3, "uniform": {"min": 1, "max": 2}})


def test_buckets_partition_requests():
    isl = quantile_grid(dist({"lognormal": {"median": 1000, "p99": 8000}}))
    osl = quantile_grid(dist({"lognormal": {"median": 250, "p99": 1500}}))
    bs = make_buckets(isl, osl, 99)
    assert abs(sum(b.prob for b in bs) - 1) < 1e-9
    assert len({b.name for b in bs}) == len(bs) == 3  # prompt-length ranges only (a router sees no output)
    # short prompts and long prompts land in different buckets
    assert min(b.isl_mean for b in bs) < 700 < 3000 < max(b.isl_mean for b in bs)
    # The tail length used for TTFT never exceeds the workload's own percentile length.
    assert all(b.isl_tail <= np.quantile(isl, 0.99) + 1 for b in bs)


def test_degenerate_distribution_gives_one_bucket():
    x = quantile_grid(dist({"fixed": 100}))
    assert len(make_buckets(x, x, 99)) == 1

