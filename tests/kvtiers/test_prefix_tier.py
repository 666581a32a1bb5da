"""The KV tier engines implement (``kv_tiers: auto`` / ``offload``, docs/kv-tiers.md): a host-memory level of
the prefix cache. Evicted prefix blocks stay in CPU memory and a hit reloads them over PCIe (vLLM's
``--kv-offloading-backend native --kv-offloading-size``, SGLang's HiCache, TensorRT-LLM's host cache).

Checked against hand-computed figures (reload = KV bytes per GPU / PCIe bandwidth), against recomputation (a
reload is far cheaper than the prefill it saves), against the simulator (one request at a time), and end to
end on examples/long-context.yaml: the tier is chosen where it pays (31.2 vs 46.8 $/h with tiers off), every
request still fits HBM, the commands carry the offload flags, and ``check`` passes.
"""
from __future__ import annotations

import pytest

import trimtab as tt
from trimtab.gate.analytic import check as analytic_check
from trimtab.milp.candidates import build_candidates
from trimtab.cost.factory import prefix_hit, prefix_hits, replica_model, traffic_class
from trimtab.cost.model import TrafficClass
from trimtab.ir.lower import lower
from trimtab.contract.schema import KvTiers
from trimtab.sim import simulate
from trimtab.sim.replica import PrefixCache, Request
from trimtab.spec.load import load_spec
from trimtab.spec.overrides import apply_overrides
from tests.conftest import ROOT, golden_plan
from tests.sim.helpers import one_deployment_plan, write_spec

LONG = ROOT / "examples" / "long-context.yaml"
KV_BYTES_70B_TP4 = 2 * 80 * (8 / 4) * 128 * 2  # K and V x layers x KV heads per GPU x head dim x bf16 bytes


@pytest.fixture(scope="module")
def ir():
    return lower(load_spec(LONG))


def _rm(ir, gib: float = 0.0):
    return replica_model(ir, "llama-3.1-70b", "h100-sxm", 4, 1, "bf16", 256, 2048, kv_offload_gib=gib)


# ---------------------------------------------------------------------------------------------- cost model
def test_reload_is_kv_bytes_over_pcie_and_adds_no_live_kv(ir):
    rm, base = _rm(ir, 100.0), _rm(ir)
    assert rm.memory.kv_bytes_per_token_per_gpu == KV_BYTES_70B_TP4 == 81920
    # PCIe Gen5 x16 per direction
    assert rm.prefix_tier.kind == "prefix" and rm.prefix_tier.gbps_per_gpu == 64
    assert rm.prefix_tier.tokens == int(100 * 1024**3 / 4 // KV_BYTES_70B_TP4)
    assert rm.reload_s(10_000) == pytest.approx(10_000 * 81920 / 64e9)  # 12.8 ms
    # a prefix tier holds no running request's KV: capacity and step times are the HBM-only ones
    assert (rm.kv_tier is None
            and rm.kv_capacity_tokens == base.kv_capacity_tokens == base.memory.kv_cache_tokens)
    assert rm.iteration_s(8, 20000.0, 1024.0, 5000.0) == base.iteration_s(8, 20000.0, 1024.0, 5000.0)
    assert base.reload_s(10_000) == 0.0


def test_host_hits_cost_their_reload_not_a_recompute(ir):
    rm = _rm(ir, 400.0)
    host = TrafficClass(0.0, 30000, 512, cached_tokens=18000, prefix_reserved=100000,
                        host_cached_tokens=16000)
    hbm = TrafficClass(0.0, 30000, 512, cached_tokens=18000, prefix_reserved=100000)
    miss = TrafficClass(0.0, 30000, 512, cached_tokens=2000, prefix_reserved=100000)  # host hits recomputed
    t_host, t_hbm, t_miss = (rm.evaluate([c], 90.0).ttft_s[0] for c in (host, hbm, miss))
    assert t_host - t_hbm == pytest.approx(rm.reload_s(16000), rel=1e-9)
    assert t_miss - t_hbm > 20 * (t_host - t_hbm)  # prefilling 16k tokens of 70B vs moving 1.3 GB over PCIe
    # under load the reload occupies the engine too (counted in the prefill server, conservatively)
    at = [rm.evaluate([TrafficClass(0.3, 30000, 512, None, 0.0, 18000, 100000, (), h)],
                      90.0) for h in (0, 16000)]
    assert at[1].utilization > at[0].utilization and at[1].ttft_s[0] > at[0].ttft_s[0]


def test_two_levels_hit_like_one_lru_of_the_larger(ir):
    w = ir.workload("rag")
    reserved, hbm, hit = prefix_hits(w, _rm(ir))
    assert hbm == hit == pytest.approx(0.8 * reserved / 1_500_000)  # declared: LRU under uniform popularity
    r2, hbm2, hit2 = prefix_hits(w, _rm(ir, 457.764))  # room for the whole working set
    assert hbm2 == pytest.approx(prefix_hit(w, r2)) and hit2 == pytest.approx(0.8)
    b = w.buckets[0]
    cls = traffic_class(b, 0.1, w, _rm(ir, 457.764))
    assert cls.cached_tokens == pytest.approx(0.8 * b.isl_mean)
    assert cls.host_cached_tokens == pytest.approx((0.8 - hbm2) * b.isl_mean)


# ---------------------------------------------------------------------------------------------- candidates
def test_only_workloads_with_prefix_reuse_get_a_host_tier(ir):
    cs = build_candidates(ir, jobs=1)
    tiered = [c for c in cs.candidates if c.kv_offload_gib > 0]
    assert tiered and {c.workload for c in tiered} == {"rag"}  # chat declares no prefix reuse
    assert not any(c.kv_borrow_gib or c.kv_spare_gib for c in cs.candidates)  # no live tiers, no lenders
    by = {c.id: c for c in cs.candidates}
    for c in tiered:
        # its share of a node
        assert c.id.endswith("-off") and c.kv_offload_gib <= 2048 * 0.5 * c.gpus / 8 + 1e-9
        base = by.get(c.id[:-4])
        if base is not None:
            assert all(cap > base.capacity(b) for b, cap in c.capacity_rps)
    off = build_candidates(lower(apply_overrides(load_spec(LONG), {"defaults.kv_tiers": "off"})), jobs=1)
    assert not any(c.kv_offload_gib for c in off.candidates)


def test_simulated_prefix_cache_finds_evicted_blocks_in_the_host_tier():
    """Trace replay: a block evicted from the 1-block HBM LRU is still in the 8-block host LRU."""
    pc = PrefixCache(512, {}, {0: ((1, 2), (3, 4), (1, 2))}, host_tokens=8 * 512)
    got = []
    for row in range(3):
        r = Request(row, 0, 0, 0.0, 1500, 8)
        r.row = row
        got.append((pc.cached(r), r.host))
    assert got == [(0, 0), (0, 0), (1024, 1024)]
    plain = PrefixCache(512, {}, {0: ((1, 2), (3, 4), (1, 2))})
    assert [plain.cached(Request(i, 0, 0, 0.0, 1500, 8)) for i in range(3)] == [0, 0, 0]


def test_simulator_agrees_with_the_cost_model_on_a_host_tier(tmp_path):
    """8B on one H100, 20k-token prompts, 60 % of them from a 2M-token working set: one request at a time, the
    simulated median TTFT is the cost model's zero-load TTFT (uncached prefill + reload) within the 2 % of
    tests/sim/test_cost_model_agreement.py, and below the HBM-only replica's."""
    sp = write_spec(tmp_path, rate=0.05, isl="{fixed: 20000}", osl="{fixed: 32}", ttft=60000, tpot=500,
                    extra="defaults: {kv_tiers: auto}\n",
                    name="s.yaml")
    sp.write_text(sp.read_text().replace("    slo:",
                                         "    prefix: {hit_rate: 0.6, cached_tokens: 2000000}\n    slo:"))
    spec = load_spec(sp)
    ir = lower(spec)
    w = ir.workloads[0]
    plan = one_deployment_plan(sp, mbt=2048)
    out = {}
    for gib in (0.0, 250.0):
        d = plan.deployments[0].model_copy(
            update={"kv": KvTiers(hbm_tokens=plan.deployments[0].kv_cache_tokens, offload_gib=gib)})
        p = plan.model_copy(update={"deployments": [d]})
        rm = replica_model(ir, w.model, "h100-sxm", 1, 1, "bf16", 256, 2048, kv_offload_gib=gib)
        ttft0, _ = rm.zero_load(traffic_class(w.buckets[0], 0.0, w, rm))
        sim = simulate(p, spec, requests=200, seed=5).workloads["w"]
        assert sim.ttft_ms["p50"] == pytest.approx(ttft0, rel=0.02), gib
        out[gib] = sim.ttft_ms["p50"]
    assert out[250.0] < 0.6 * out[0.0]


# ---------------------------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def long_plans():
    spec = load_spec(LONG)
    return spec, golden_plan("long-context"), tt.plan(apply_overrides(spec, {"defaults.kv_tiers": "off"}),
                                                validate=False).plan


def test_long_context_example_plans_the_host_tier_where_it_pays(long_plans):
    spec, plan, off = long_plans
    assert plan.cost_usd_per_hour == 31.2 and off.cost_usd_per_hour == 46.8  # one RAG replica instead of two
    rag = [d for d in plan.deployments if d.name.startswith("rag-")]
    assert [d.name for d in rag] == ["rag-h100-sxm-tp4-t2k-off"] and rag[0].replicas == 1
    k = rag[0].kv
    assert k.offload_gib > 0 and not k.live and k.borrowed_gib == 0 and k.lent_gib == 0
    assert plan.prefix["rag"].hit_rate_planned[rag[0].name] == pytest.approx(0.8)
    # HBM only: 8 GPUs for RAG (one TP8 replica since the seat check counts the batch's own feedback, two TP4
    # before), and what HBM alone holds of the prefixes is less than half the hit rate the host tier gives
    off_rag = [d for d in off.deployments if d.name.startswith("rag-")]
    assert sum(d.replicas * d.tensor_parallel for d in off_rag) == 8
    assert all(off.prefix["rag"].hit_rate_planned[d.name] < 0.4 for d in off_rag)
    args = rag[0].engine_args
    assert "--kv-offloading-backend=native" in args and f"--kv-offloading-size={k.offload_gib:g}" in args
    assert "--enable-prefix-caching" in args
    for d in plan.deployments:  # every routed request fits the engine's HBM KV: nothing is capped
        assert d.context_tokens <= d.kv_cache_tokens
    assert rag[0].context_tokens == 60501
    assert not [w for w in plan.warnings if "engine admits" in w or w.startswith("experimental")]
    assert plan.simulation.passed
    rep = analytic_check(plan, spec)
    assert rep.ok, rep.violations


def test_prefix_tier_plan_emits_without_allow_experimental(long_plans):
    from trimtab.deploy import render

    spec, plan, _ = long_plans
    files, _ = render(plan, spec, "k8s")
    assert any("--kv-offloading-size=" in text for text in files.values())


def test_check_rejects_a_host_tier_beyond_the_node(long_plans):
    spec, plan, _ = long_plans
    name = next(d.name for d in plan.deployments if d.kv.offload_gib > 0)
    deps = [d.model_copy(update={"kv": d.kv.model_copy(update={"offload_gib": 1500.0})}) if d.name == name
            else d
            for d in plan.deployments]
    bad = analytic_check(plan.model_copy(update={"deployments": deps}), spec)
    assert any(v.startswith(f"deployment {name}: offloads 1500 GiB") for v in bad.violations), bad.violations
