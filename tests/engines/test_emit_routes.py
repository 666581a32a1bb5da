"""The emitted routing rules cover every prompt an engine admits: per workload, contiguous half-open ranges
from 0 to the longest --max-model-len among its backends, and every backend of a rule admits the rule's
longest prompt (read from the emitted commands, as the engine would). The plan's bucket ranges left holes
(chat in45-999, in1001-3140, in3148-22451: 1,000-token prompts and everything above 22,451 had no rule)."""
from __future__ import annotations

import pytest
import yaml

from tests.engines import runtime
from trimtab.deploy import render
from trimtab.deploy.llmd import RANGE_LABEL


NOT_ENGINES = ("weight", "router")


def _max_model_len(argv: list[str]) -> int:
    return int(next(a.split("=", 1)[1] for a in argv if a.startswith("--max-model-len=")))


@pytest.mark.parametrize("stem", ("quickstart", "disaggregated", "multi-lora"))
def test_every_prompt_length_has_exactly_one_rule(plan_of, stem):
    plan, _, spec = plan_of(stem)
    files, _ = render(plan, spec, "k8s")
    objs = [o for text in files.values() for o in yaml.safe_load_all(text)]
    # the engines' (a P/D pair's router, the rule's "router", admits what its pair does)
    mml = {name: _max_model_len(ps[0].argv) for name, ps in runtime.k8s(objs).items()
           if ps[0].argv[:2] == ["vllm", "serve"]}
    table = yaml.safe_load(next(o for o in objs if o["kind"] == "ConfigMap"
                                and o["metadata"]["name"] == "trimtab-routes")["data"]["routes.yaml"])
    assert set(table) == set(plan.buckets)
    for w, rules in table.items():
        names = {n for r in rules for be in r["backends"] for k, n in be.items() if k not in NOT_ENGINES}
        top = max(mml[n] for n in names)
        cover = [0] * top
        for r in rules:
            assert abs(sum(be["weight"] for be in r["backends"]) - 1) < 1e-5
            for be in r["backends"]:
                for k, n in be.items():
                    if k not in NOT_ENGINES:  # the engine admits prompts shorter than its --max-model-len
                        assert mml[n] >= r["prompt_tokens_below"], (w, r, n, mml[n])
            for p in range(r["prompt_tokens_min"], r["prompt_tokens_below"]):
                cover[p] += 1
        assert cover == [1] * top, (w, [i for i, c in enumerate(cover) if c != 1][:5])


@pytest.mark.parametrize("stem", ("quickstart", "disaggregated"))
def test_llmd_pods_carry_the_prompts_they_admit(plan_of, stem):
    """llm-d's context-length-aware scorer reads "min-max" (both included) from the pod label: within what the
    pod's own vLLM admits, and covering every rule it serves."""
    plan, _, spec = plan_of(stem)
    k8s = render(plan, spec, "k8s")[0]
    table = yaml.safe_load(yaml.safe_load(k8s["router.yaml"].split("---\n")[0])["data"]["routes.yaml"])
    for fname, text in render(plan, spec, "llm-d")[0].items():
        for p in runtime.llmd(yaml.safe_load(text)):
            lo, hi = map(int, p.labels[RANGE_LABEL].split("-"))
            assert hi < _max_model_len(p.argv)
            name = fname[len("llm-d-"):-len(".values.yaml")]
            for rules in table.values():
                for r in rules:
                    if any(name in be.values() for be in r["backends"]):
                        assert lo <= r["prompt_tokens_min"] and r["prompt_tokens_below"] - 1 <= hi


def test_rules_follow_the_plan_buckets_as_the_simulator_routes(plan_of):
    """A bucket's own prompts keep its rule, and a prompt between two buckets goes to the lower one, as the
    simulator assigns a trace's prompt (SimWorkload.bucket_of_values), so check judges the emitted rules."""
    plan, _, spec = plan_of("quickstart")
    k8s = render(plan, spec, "k8s")[0]
    table = yaml.safe_load(yaml.safe_load(k8s["router.yaml"].split("---\n")[0])["data"]["routes.yaml"])
    for w, buckets in plan.buckets.items():
        def rule(p, w=w):
            return next(r["bucket"] for r in table[w]
                        if r["prompt_tokens_min"] <= p < r["prompt_tokens_below"])
        order = sorted(buckets, key=lambda x: x.input_tokens_min)
        for lower, upper in zip(order, [*order[1:], None]):
            assert rule(lower.input_tokens_min) == lower.name
            if upper is None:
                assert rule(lower.input_tokens_max) == lower.name
            elif upper.input_tokens_min > lower.input_tokens_max:  # the lower keeps its longest and the gap
                assert rule(lower.input_tokens_max) == rule(upper.input_tokens_min - 1) == lower.name
            else:  # in1-256, in256-1024 share 256: the simulator's router gives it to the upper bucket
                assert rule(upper.input_tokens_min) == upper.name
