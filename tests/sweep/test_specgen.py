"""The spec-family generators behind benchmarks/plan_families.py: deterministic, loadable, and drawing what
the issue-16 families need (405B and MoE models, heavy tails, long contexts, adapters, P/D-shaped
workloads)."""
from __future__ import annotations

import pytest
import yaml

from benchmarks.specgen import SIZES, Size, family, generate, generate_data, parse_size
from trimtab.spec.load import load_spec


@pytest.mark.parametrize("name", sorted(SIZES))
def test_same_seed_same_text_and_specs_load(name):
    size = SIZES[name]
    for seed in (0, 7):
        text = generate(size, seed)
        assert text == generate(size, seed)
        spec = load_spec(f"{name}-{seed}.yaml", text=text)  # schema and cross-references
        assert spec.name == f"gen-{size.key}-s{seed}"
    assert generate(size, 0) != generate(size, 1)


def test_target_size_matches_its_numbers():
    for seed in range(3):
        d = generate_data(SIZES["target"], seed)
        assert len(d["workloads"]) == 100
        assert len(d["gpus"]) == 8 and sum(g["count"] for g in d["gpus"]) == 4096
        models = {m["name"] for m in d["models"]}
        assert len(models) == 8 and {"llama-3.1-405b", "mixtral-8x7b"} <= models
        assert {w["model"] for w in d["workloads"]} == models


def test_families_have_heavy_tails_long_contexts_and_pd_workloads():
    ws = [w for s in range(5) for w in generate_data(SIZES["target"], s)["workloads"]]
    tails = [w["input_tokens"]["lognormal"]["p99"] / w["input_tokens"]["lognormal"]["median"]
             for w in ws if "lognormal" in w["input_tokens"]]
    assert max(tails) >= 10
    longs = [w for w in ws if w["name"].startswith("long-")]
    assert longs and all(w["model"] in ("llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b") for w in longs)
    assert max(w["input_tokens"]["lognormal"]["p99"] for w in longs) > 32000
    pds = [w for w in ws if w["name"].startswith("pd-")]
    assert pds and all(w["slo"]["tpot_ms"] <= 45 for w in pds)
    for s in range(5):  # a spec with P/D-shaped traffic rents both the prefill and the decode GPU
        d = generate_data(SIZES["target"], s)
        if any(w["name"].startswith("pd-") for w in d["workloads"]):
            assert {"h100-sxm", "h200"} <= {g["type"] for g in d["gpus"]}


def test_adapter_family_counts_and_rate():
    d = generate_data(SIZES["lora"], 3)
    assert sum(m["adapters_from"]["count"] for m in d["models"]) == 1000
    assert [m["name"] for m in d["models"]] == ["llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b", "qwen2.5-32b",
                                                "qwen2.5-72b", "mistral-7b", "mixtral-8x7b"]
    star = [w for w in d["workloads"] if w.get("adapter") == "*"]
    assert len(star) == 7 and 100 < sum(w["rate_rps"] for w in star) <= 200
    assert {t["name"] for t in d["tenants"]} == {"acme", "globex"}


def test_family_and_sizes_parse():
    names = [n for n, _ in family(SIZES["small"], 3, seed=5)]
    assert names == [f"gen-{SIZES['small'].key}-s{s}" for s in (5, 6, 7)]
    assert parse_size("30/3/256") == Size(30, 3, 256)
    assert parse_size("lora:50/2").adapters == 50
    with pytest.raises(ValueError, match="W/G/N"):
        parse_size("huge")
    assert yaml.safe_load(generate(parse_size("12/3/96/2"), 1))["workloads"][11]["name"].endswith("011")
