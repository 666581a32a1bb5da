"""Lowering keeps every token (issue 11): prompts are cut to the context window, outputs only where prompt +
output exceeds it, pair by pair. The oracle samples each distribution with numpy (nothing of the quantile
grid) and applies the same rule to each sampled pair; the buckets' mean prompt and output must be within 2 %
of it."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from trimtab.spec.lengths import make_buckets, quantile_grid, truncation
from trimtab.spec.schema import TokenDist

N = 400_000
WINDOWS = [2048, 4096, 8192, 131072]
Z99 = 2.3263478740408408

DISTS = {
    "fixed": {"fixed": 900},
    "uniform": {"uniform": {"min": 200, "max": 6000}},
    "lognormal-median": {"lognormal": {"median": 1000, "p99": 8000}},
    "lognormal-short": {"lognormal": {"median": 70, "p99": 1800}},
    "lognormal-mu": {"lognormal": {"mu": 6.0, "sigma": 0.8}},
    "histogram": {"histogram": {"edges": [0, 256, 1024, 4096, 16384], "weights": [0.4, 0.3, 0.2, 0.1]}},
    "samples": {"samples": {"path": "lens.csv", "column": "n"}},
}
OUT = {"lognormal": {"median": 180, "p99": 900}}


def _samples_file(tmp_path) -> np.ndarray:
    vals = np.random.default_rng(7).integers(1, 12000, 3000)
    (tmp_path / "lens.csv").write_text("n\n" + "\n".join(str(v) for v in vals) + "\n")
    return vals


def draw(d: dict, rng: np.random.Generator, samples: np.ndarray | None) -> np.ndarray:
    """Independent sampler of a spec distribution (numpy's own generators)."""
    if "fixed" in d:
        x = np.full(N, float(d["fixed"]))
    elif "uniform" in d:
        x = rng.uniform(d["uniform"]["min"], d["uniform"]["max"], N)
    elif "lognormal" in d:
        ln = d["lognormal"]
        mu, sigma = (ln["mu"], ln["sigma"]) if "mu" in ln else (math.log(ln["median"]),
                                                                 math.log(ln["p99"] / ln["median"]) / Z99)
        x = rng.lognormal(mu, sigma, N)
    elif "histogram" in d:
        e, w = np.array(d["histogram"]["edges"], float), np.array(d["histogram"]["weights"], float)
        k = rng.choice(len(w), N, p=w / w.sum())
        x = rng.uniform(e[k], e[k + 1])
    else:
        x = rng.choice(samples, N).astype(float)
    return np.maximum(1.0, np.round(x))


def oracle(isl: np.ndarray, osl: np.ndarray, ctx: int) -> tuple[float, float]:
    i = np.minimum(isl, ctx - 1)
    o = np.maximum(1, np.minimum(osl, ctx - i))
    return float(i.mean()), float(o.mean())


def lowered(d_in: dict, d_out: dict, ctx: int, base: str) -> tuple[float, float]:
    isl = quantile_grid(TokenDist.model_validate(d_in), base)
    osl = quantile_grid(TokenDist.model_validate(d_out), base)
    bs = make_buckets(np.minimum(isl, ctx - 1), osl, 99, ctx)
    assert abs(sum(b.prob for b in bs) - 1) < 1e-9
    return sum(b.prob * b.isl_mean for b in bs), sum(b.prob * b.osl_mean for b in bs)


@pytest.mark.parametrize("ctx", WINDOWS)
@pytest.mark.parametrize("kind", sorted(DISTS))
def test_bucket_means_match_sampled_pairs(kind, ctx, tmp_path):
    samples = _samples_file(tmp_path)
    rng = np.random.default_rng(1)
    want_i, want_o = oracle(draw(DISTS[kind], rng, samples), draw(OUT, rng, None), ctx)
    got_i, got_o = lowered(DISTS[kind], OUT, ctx, str(tmp_path))
    assert got_i == pytest.approx(want_i, rel=0.02)
    assert got_o == pytest.approx(want_o, rel=0.02)


@settings(max_examples=25, deadline=None)
@given(median=st.floats(20, 20000), spread=st.floats(1.5, 40), out_median=st.floats(5, 3000),
       ctx=st.sampled_from(WINDOWS))
def test_lognormal_pairs_keep_their_tokens(median, spread, out_median, ctx):
    d_in = {"lognormal": {"median": median, "p99": median * spread}}
    d_out = {"lognormal": {"median": out_median, "p99": out_median * 5}}
    if median >= ctx:  # a distribution beyond the window is refused by lower (tested elsewhere)
        return
    rng = np.random.default_rng(3)
    want_i, want_o = oracle(draw(d_in, rng, None), draw(d_out, rng, None), ctx)
    got_i, got_o = lowered(d_in, d_out, ctx, ".")
    assert got_i == pytest.approx(want_i, rel=0.02)
    assert got_o == pytest.approx(want_o, rel=0.02)


def test_window_reaching_inputs_keep_their_outputs():
    """The case the old lowering broke: inputs reaching a 4k window cut *every* output to one token."""
    isl = quantile_grid(TokenDist.model_validate(DISTS["lognormal-short"]))
    osl = quantile_grid(TokenDist.model_validate(OUT))
    bs = make_buckets(np.minimum(isl, 4095), osl, 99, 4096)
    assert sum(b.prob * b.osl_mean for b in bs) > 0.95 * osl.mean()
    cut = truncation(isl, osl, 4096)
    assert 0 < cut.requests < 0.01 and 0 < cut.tokens < 0.02  # a few pairs cut, a small share of tokens
    rng = np.random.default_rng(5)
    i, o = draw(DISTS["lognormal-short"], rng, None), draw(OUT, rng, None)
    share = float(np.mean((i >= 4096) | (np.minimum(i, 4095) + o > 4096)))
    assert cut.requests == pytest.approx(share, rel=0.15, abs=2e-4)


def test_buckets_route_on_prompt_length_only():
    isl = quantile_grid(TokenDist.model_validate(DISTS["lognormal-median"]))
    osl = quantile_grid(TokenDist.model_validate(OUT))
    bs = make_buckets(isl, osl, 99, 131072)
    assert [b.name for b in bs] == [f"in{int(b.isl_min)}-{int(b.isl_max)}" for b in bs]
    assert all("out" not in b.name for b in bs)
    # ranges partition the prompts: each starts above the previous one's end
    assert all(a.isl_max < b.isl_min for a, b in zip(bs, bs[1:]))
    # no window cut at 128k: every range sees the whole output distribution
    assert all(b.osl_mean == pytest.approx(osl.mean(), rel=1e-9) for b in bs)
    assert all(abs(sum(q for _, q in b.osl_points) - 1) < 1e-9 for b in bs)
