"""Plans of every example, planned once per test session (the engine tests read their commands)."""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import pytest

EXAMPLES = sorted(Path(__file__).resolve().parents[2].joinpath("examples").glob("*.yaml"))
# a replica spanning two nodes (no example does)
MULTI_NODE = Path(__file__).resolve().parent / "big405b.yaml"


GOLDEN = Path(__file__).resolve().parents[1] / "golden"


@lru_cache(maxsize=None)
def planned(stem: str):
    """(plan, ir, spec) of one examples/*.yaml (or big405b), as `trimtab plan` makes it (vLLM), once per
    session. An example with a golden plan reads it: tests/golden holds each example's plan to those bytes
    (the day-long schedule's in the slow suite), so planning it again here would only cost minutes."""
    import trimtab
    from trimtab.ir.lower import lower

    path = next(p for p in [*EXAMPLES, MULTI_NODE] if p.stem == stem)
    spec = trimtab.load_spec(path)
    golden = GOLDEN / f"{stem}.plan.yaml"
    plan = trimtab.load_plan(golden) if golden.exists() else trimtab.plan(spec).plan
    return plan, lower(spec), spec


@pytest.fixture(scope="session")
def example_plans():
    """{name: (plan, ir)} for every examples/*.yaml and big405b.yaml, as `trimtab plan` makes them (vLLM)."""
    return {path.stem: planned(path.stem)[:2] for path in [*EXAMPLES, MULTI_NODE]}


@pytest.fixture(scope="session")
def example_specs():
    import trimtab

    return {p.stem: trimtab.load_spec(p) for p in [*EXAMPLES, MULTI_NODE]}


def for_engine(plan, ir, engine: str):
    """The same plan realised for another engine family (same deployments, that engine's commands)."""
    from trimtab.contract.realise import realise
    from trimtab.profiles.loader import load_profiles

    ir2 = replace(ir, engine=load_profiles().engines[engine])
    return realise(plan, ir2), ir2


def _facts(**kw):
    """A 405B fp8 TP8 x PP2 replica over two 8-GPU nodes (no example spans nodes). A keyword named as a field
    of the shape (``DeploymentSpecView``: tp, dp, role, ...) changes the shape; the others the facts;
    ``model`` (a ModelIdentity) both."""
    from dataclasses import fields

    from trimtab.deployment.shape import DeploymentSpecView
    from trimtab.engines.base import DeploymentFacts, ModelIdentity

    model = kw.pop("model", ModelIdentity("llama-3.1-405b", "meta-llama/Llama-3.1-405B-Instruct", "main",
                                          "llama-405b"))
    in_shape = {f.name for f in fields(DeploymentSpecView)}
    shape = dict(name="big-h100-sxm-tp8-pp2-t2k", model=model.name, gpu="h100-sxm", replicas=1, tp=8, pp=2,
                 dtype="fp8", max_num_seqs=128, max_batched_tokens=2048)
    shape.update({k: v for k, v in kw.items() if k in in_shape})
    base = dict(model=model, context_tokens=8192, kv_cache_tokens=90000, memory_fraction=0.9,
                kv_free_fraction=0.8, prefix_caching=False, nodes_per_replica=2, gpus_per_node=8)
    base.update({k: v for k, v in kw.items() if k not in in_shape})
    return DeploymentFacts(shape=DeploymentSpecView(**shape), **base)


@pytest.fixture(scope="session")
def plan_of():
    """``plan_of(stem) -> (plan, ir, spec)``: one example planned once per session (as example_plans)."""
    return planned
