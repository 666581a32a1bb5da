"""Multi-LoRA co-location and tenant isolation (issue 5): spec, cost model, MILP decisions, verifier,
simulator."""
from __future__ import annotations

import pytest

from trimtab.api import load_spec, plan
from trimtab.gate.analytic import check
from trimtab.gate.analytic import verify
from trimtab.cost.lora import LoraReplicaModel, adapter_bytes
from trimtab.cost.model import ReplicaModel
from trimtab.errors import InputError
from trimtab.ir.lower import lower
from trimtab.contract.write import plan_to_data
from trimtab.contract.schema import Plan
from trimtab.profiles.loader import load_profiles
from trimtab.sim import simulate

ALL = "[q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]"
TRAFFIC = """    input_tokens: {fixed: 800}
    output_tokens: {fixed: 150}
    slo: {ttft_ms: 1500, tpot_ms: 40}
"""


def _spec(text: str):
    return load_spec("t.yaml", text=text)


COLD = """\
version: 1
name: cold
gpus:
  - {type: h100-sxm, count: 16}
models:
  - name: llama-3.1-8b
    adapters_from: {count: 30, rank: 16}
workloads:
  - name: many
    model: llama-3.1-8b
    adapter: "*"
    rate_rps: 3
""" + TRAFFIC

HOT = f"""\
version: 1
name: hot
gpus:
  - {{type: h100-sxm, count: 32}}
models:
  - name: llama-3.1-8b
    adapters:
      - {{name: hot, rank: 64, target_modules: {ALL}}}
    adapters_from: {{count: 60, rank: 64, target_modules: {ALL}, prefix: cold-}}
workloads:
  - name: hot
    model: llama-3.1-8b
    adapter: hot
    rate_rps: 120
""" + TRAFFIC + """  - name: tail
    model: llama-3.1-8b
    adapter: "*"
    rate_rps: 3
""" + TRAFFIC

TENANTS = """\
version: 1
name: tenants
gpus:
  - {type: h100-sxm, count: 32}
models:
  - name: llama-3.1-8b
    adapters:
      - {name: a1, rank: 8}
      - {name: a2, rank: 8}
      - {name: a3, rank: 16}
      - {name: a4, rank: 16}
workloads:
""" + "".join(f"""  - name: w{i}
    model: llama-3.1-8b
    adapter: a{i}
    tenant: {t}
    rate_rps: 0.5
""" + TRAFFIC for i, t in ((1, "acme"), (2, "globex"), (3, "initech"), (4, "umbrella"))) + """  - name: base
    model: llama-3.1-8b
    rate_rps: 0.5
""" + TRAFFIC + """tenants:
  - {name: acme, dedicated: true}
  - {name: globex, not_shared_with: [initech]}
  - {name: initech}
"""


@pytest.fixture(scope="module")
def cold_plan():
    s = _spec(COLD)
    return s, plan(s, validate=False).plan


@pytest.fixture(scope="module")
def hot_plan():
    s = _spec(HOT)
    return s, plan(s, validate=False).plan


@pytest.fixture(scope="module")
def tenant_plan():
    s = _spec(TENANTS)
    return s, plan(s, validate=False).plan


def test_cold_adapters_are_consolidated(cold_plan):
    spec, p = cold_plan
    holding = [d for d in p.deployments if d.adapters]
    assert len(holding) == 1, [d.name for d in p.deployments]
    d = holding[0]
    assert len(d.adapters) == 30 and d.replicas == 1 and d.max_loras > 1
    assert "--enable-lora" in d.engine_args and f"--max-cpu-loras={d.max_cpu_loras}" in d.engine_args
    assert len({r.adapter for r in p.adapter_routes}) == 30
    assert check(p, spec).ok


def test_hot_adapter_gets_its_own_replicas(hot_plan):
    spec, p = hot_plan
    own = [d for d in p.deployments if d.adapters == ["hot"]]
    assert own and sum(d.replicas for d in own) >= 2
    hot_share = sum(r.share for r in p.adapter_routes if r.adapter == "hot"
                    and r.deployment in {d.name for d in own})
    assert hot_share > 0.5
    cold_homes = {d.name for d in p.deployments if any(a.startswith("cold-") for a in d.adapters)}
    assert len(cold_homes) == 1  # the 60 cold adapters share one deployment
    assert check(p, spec).ok


def test_isolation_is_never_violated(tenant_plan):
    spec, p = tenant_plan
    ir = lower(spec)
    rep = verify(p, ir)
    assert rep.ok, rep.violations
    served: dict[str, set[str]] = {}
    tenant_of = {"w1": "acme", "w2": "globex", "w3": "initech", "w4": "umbrella", "base": ""}
    for r in p.routes:
        served.setdefault(r.deployment, set()).add(tenant_of[r.workload])
    for d, ts in served.items():
        if "acme" in ts:
            assert ts == {"acme"}, (d, ts)
        assert not {"globex", "initech"} <= ts, (d, ts)


def test_verifier_catches_isolation_and_placement_breaches(tenant_plan):
    spec, p = tenant_plan
    ir = lower(spec)
    data = plan_to_data(p)
    acme = next(r["deployment"] for r in data["routes"] if r["workload"] == "w1")
    other = next(r["deployment"] for r in data["routes"] if r["workload"] == "w2")
    for r in data["routes"]:
        if r["workload"] == "w1":
            r["deployment"] = other
    for r in data["adapter_routes"]:
        if r["workload"] == "w1":
            r["deployment"] = other
    bad = verify(Plan.model_validate(data), ir).violations
    assert any(v.startswith("isolation:") and "acme" in v for v in bad), bad
    assert any("does not hold the adapter" in v for v in bad), bad
    assert acme != other


def test_verifier_checks_rank_and_base_model(cold_plan):
    spec, p = cold_plan
    ir = lower(spec)
    data = plan_to_data(p)
    d = next(d for d in data["deployments"] if d.get("adapters"))
    d["max_lora_rank"] = 8
    d["adapters"].append("nope")
    bad = verify(Plan.model_validate(data), ir).violations
    assert any("rank 16 > max_lora_rank 8" in v for v in bad), bad
    assert any("adapter nope is not in the spec" in v for v in bad), bad


def test_simulator_loads_and_evicts_adapters(cold_plan):
    spec, p = cold_plan
    res = simulate(p, spec, requests=3000, seed=1, timeline=False)
    assert any(n.startswith("adapters:") and "evictions" in n for n in res.notes), res.notes


def test_adapter_memory_and_overhead():
    prof = load_profiles()
    m, g, e = prof.models["llama-3.1-8b"], prof.gpus["a100-80gb"], prof.engines["vllm"]
    mods = ("q_proj", "k_proj", "v_proj", "o_proj")
    # rank x (in + out) x layers x 2 bytes: (4096+4096) + 2 x (4096+1024) + (4096+4096) per layer at rank 16
    assert adapter_bytes(m, 16, mods) == 16 * (8192 * 2 + 5120 * 2) * 32 * 2
    base = ReplicaModel(m, g, e, 1, 1, "bf16", 256, 8192)
    extra = []
    for slots in (1, 8, 32):
        rm = LoraReplicaModel(m, g, e, 1, 1, "bf16", 256, 8192, slots=slots, rank=16, modules=mods)
        assert rm.memory.kv_cache_tokens < base.memory.kv_cache_tokens
        extra.append(rm.iteration_s(32, 1000) - base.iteration_s(32, 1000))
    assert extra[0] < extra[1] < extra[2]  # grows with the distinct adapters in the batch
    assert 0.5e-3 < extra[2] < 3e-3  # Punica's ~2 ms per token at batch 32 (compiler/cost/lora.py)


@pytest.mark.parametrize("patch, where", [
    (("adapter: \"*\"", "adapter: missing"), "workloads[0] (many).adapter"),
    (("adapters_from: {count: 30, rank: 16}", "adapters: []"), "workloads[0] (many).adapter"),
])
def test_bad_adapter_references(patch, where):
    with pytest.raises(InputError) as exc:
        _spec(COLD.replace(*patch))
    p = exc.value.problems[0]
    assert p.where == where and p.line is not None


def test_unknown_tenant_reference():
    with pytest.raises(InputError) as exc:
        _spec(TENANTS.replace("not_shared_with: [initech]", "not_shared_with: [nobody]"))
    p = exc.value.problems[0]
    assert p.where == "tenants[1] (globex).not_shared_with[0]" and p.line is not None


def test_tenant_naming_itself_is_an_input_error():
    """specgen_mix probe (issue 35): ``not_shared_with`` naming the tenant itself was dropped without a
    word."""
    with pytest.raises(InputError) as exc:
        _spec(TENANTS.replace("not_shared_with: [initech]", "not_shared_with: [initech, globex]"))
    p = exc.value.problems[0]
    assert p.where == "tenants[1] (globex).not_shared_with[1]" and p.line is not None
    assert "names itself" in p.message


def test_specs_without_adapters_keep_their_hash():
    from tests.conftest import QUICKSTART

    ir = lower(load_spec(QUICKSTART))
    assert ir.lora is None
    # The LoRA machinery adds nothing to the hash of a spec without adapters: it is the hash the golden plan
    # of the quickstart was made from (which changes only when the quickstart or its profiles change).
    golden = (QUICKSTART.parent.parent / "tests" / "golden" / "quickstart.plan.yaml").read_text()
    assert f"input_hash: {ir.input_hash}\n" in golden


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_isolation_holds_for_random_tenant_rules(seed):
    import random

    rnd = random.Random(seed)
    tenants = ["t0", "t1", "t2", "t3"]
    rules = []
    for t in tenants:
        ded = rnd.random() < 0.3
        avoid = [o for o in tenants if o != t and rnd.random() < 0.3]
        rules.append(f"  - {{name: {t}, dedicated: {str(ded).lower()}, not_shared_with: "
                     f"[{', '.join(avoid)}]}}\n")
    wls = "".join(f"""  - name: w{i}
    model: llama-3.1-8b
    adapter: a{i % 3}
    tenant: {tenants[i % 4]}
    rate_rps: {rnd.choice([0.3, 1.0, 4.0])}
""" + TRAFFIC for i in range(6))
    text = f"""\
version: 1
name: rnd{seed}
gpus:
  - {{type: h100-sxm, count: 32}}
models:
  - name: llama-3.1-8b
    adapters: [{{name: a0, rank: 8}}, {{name: a1, rank: 16}}, {{name: a2, rank: 8}}]
workloads:
{wls}tenants:
{''.join(rules)}"""
    spec = _spec(text)
    p = plan(spec, validate=False).plan
    ir = lower(spec)
    rep = verify(p, ir)
    assert rep.ok, rep.violations
    lo = ir.lora
    served: dict[str, set[str]] = {}
    for r in p.routes:
        served.setdefault(r.deployment, set()).add(lo.workloads[r.workload].tenant)
    for ts in served.values():
        assert all(lo.may_share(a, b) for a in ts for b in ts), ts
