"""Experimental live KV tiers (``kv_tiers: experimental-live``, docs/kv-tiers.md): live-KV spill to host
memory and KV borrowing, end to end. (The tier engines realise, the prefix cache's host memory, is in
test_prefix_tier.)

Both directions: a tier is chosen where it pays (the long-context traffic without prefix reuse, ``LONG_LIVE``,
borrows and is cheaper than with tiers off; a low-rate 70B RAG spec with loose TPOT offloads) and not where it
does not (short prompts get no tier candidates). The MILP rows bind, ``check`` rejects plans edited beyond the
limits, the simulator agrees with the cost model on a tiered replica, and without a tier the cost model is
unchanged.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import trimtab as tt
from trimtab.gate.analytic import check as analytic_check
from trimtab.milp.candidates import build_candidates
from trimtab.cost.factory import replica_model
from trimtab.cost.model import KvTier, ReplicaModel, TrafficClass
from trimtab.milp.formulate import formulate, n_var
from trimtab.ir.lower import lower
from trimtab.contract.schema import KvTiers
from trimtab.sim import simulate
from trimtab.spec.load import load_spec
from trimtab.spec.overrides import apply_overrides
from trimtab.solvers import SolveOptions, get_backend
from tests.conftest import SMALL_SPEC, unit
from tests.sim.helpers import one_deployment_plan, write_spec

# The long-context example as it was before prefix reuse: chat beside low-rate RAG without reuse, live tiers
# on.
LONG_LIVE = """\
version: 1
name: long-context-live
defaults: {kv_tiers: experimental-live}
gpus:
  - {type: h100-sxm, count: 16}
models:
  - name: llama-3.1-70b
workloads:
  - name: chat
    model: llama-3.1-70b
    rate_rps: 6
    input_tokens: {lognormal: {median: 800, p99: 4000}}
    output_tokens: {fixed: 200}
    slo: {ttft_ms: 2000, tpot_ms: 60, percentile: 90}
  - name: rag
    model: llama-3.1-70b
    rate_rps: 0.015
    input_tokens: {uniform: {min: 16000, max: 60000}}
    output_tokens: {fixed: 512}
    slo: {ttft_ms: 20000, tpot_ms: 100, percentile: 90}
"""

RAG_ONLY = """\
version: 1
name: rag-offload
defaults: {kv_tiers: experimental-live}
gpus:
  - {type: h100-sxm, count: 8}
models:
  - name: llama-3.1-70b
workloads:
  - name: rag
    model: llama-3.1-70b
    rate_rps: 0.004
    input_tokens: {uniform: {min: 16000, max: 48000}}
    output_tokens: {fixed: 256}
    slo: {ttft_ms: 60000, tpot_ms: 400, percentile: 90}
"""


def _spec(tmp_path: Path, text: str, name: str = "spec.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return load_spec(p)


def _tiers(plan) -> dict[str, KvTiers]:
    return {d.name: d.kv for d in plan.deployments if d.kv is not None}


# ---------------------------------------------------------------------------------------------- cost model
def test_no_tier_is_the_hbm_only_model(tmp_path):
    ir = lower(_spec(tmp_path, LONG_LIVE))
    base = replica_model(ir, "llama-3.1-70b", "h100-sxm", 2, 1, "bf16", 256, 2048)
    tiered = replica_model(ir, "llama-3.1-70b", "h100-sxm", 2, 1, "bf16", 256, 2048, kv_borrow_gib=20.0)
    assert base.kv_tier is None and base.kv_capacity_tokens == base.memory.kv_cache_tokens
    assert tiered.memory == base.memory and tiered.kv_capacity_tokens > base.kv_capacity_tokens
    for args in [(8, 20000.0), (8, 20000.0, 1024.0, 5000.0, 2.0), (1, 0.0)]:
        # remote share 0: bit-identical step times with or without a tier
        assert tiered.iteration_s(*args) == base.iteration_s(*args)
    # KV read over the tier link costs more the larger the remote share, for decode and for prefill chunks
    t = [tiered.iteration_s(8, 20000.0, 1024.0, 5000.0, 2.0, r) for r in (0.0, 0.25, 0.5)]
    assert t[0] < t[1] < t[2]
    assert tiered.remote_share(base.memory.kv_cache_tokens) == 0.0
    assert tiered.remote_share(2 * base.memory.kv_cache_tokens) == pytest.approx(0.5)


def test_offload_link_is_slower_than_nvlink_borrowing(tmp_path):
    ir = lower(_spec(tmp_path, LONG_LIVE))
    off = replica_model(ir, "llama-3.1-70b", "h100-sxm", 2, 1, "bf16", 256, 2048, kv_offload_gib=20.0)
    bor = replica_model(ir, "llama-3.1-70b", "h100-sxm", 2, 1, "bf16", 256, 2048, kv_borrow_gib=20.0)
    assert off.kv_tier.gbps_per_gpu == 64 and bor.kv_tier.gbps_per_gpu == 450  # PCIe Gen5 x16, NVLink 4
    assert off.iteration_s(4, 40000.0, 0, 0, 1, 0.4) > bor.iteration_s(4, 40000.0, 0, 0, 1, 0.4)


def test_kv_tier_rejects_nonsense():
    with pytest.raises(ValueError, match="prefix, offload or borrow"):
        KvTier("disk", 10, 1.0)
    with pytest.raises(ValueError):
        KvTier("offload", 10, 0.0)


# ---------------------------------------------------------------------------------------------- candidates
def test_short_prompts_get_no_tier_candidates(tmp_path):
    spec = _spec(tmp_path, SMALL_SPEC.replace("name: small\n",
                                              "name: small\ndefaults: {kv_tiers: experimental-live}\n"))
    cs = build_candidates(lower(spec), jobs=1)
    assert cs.candidates
    assert not [c.id for c in cs.candidates if c.kv_offload_gib or c.kv_borrow_gib]


def test_tiers_off_by_default_and_hash_unchanged(tmp_path):
    spec = _spec(tmp_path, RAG_ONLY.replace("defaults: {kv_tiers: experimental-live}\n", ""))
    ir = lower(spec)
    assert ir.kv_tiers == "off"
    assert not [c for c in build_candidates(ir, jobs=1).candidates if c.kv_offload_gib or c.kv_borrow_gib]
    explicit = _spec(tmp_path, RAG_ONLY.replace("{kv_tiers: experimental-live}", '{kv_tiers: "off"}'),
                     "b.yaml")
    assert lower(explicit).input_hash == ir.input_hash  # an explicit "off" is the default
    assert lower(_spec(tmp_path, RAG_ONLY, "c.yaml")).input_hash != ir.input_hash


# ---------------------------------------------------------------------------------------------- planning
def test_offload_chosen_where_it_pays(tmp_path):
    spec = _spec(tmp_path, RAG_ONLY)
    tiered = tt.plan(spec, validate=False).plan
    off = tt.plan(apply_overrides(spec, {"defaults.kv_tiers": "off"}), validate=False).plan
    kv = _tiers(tiered)
    assert any(k.offload_gib > 0 for k in kv.values()), kv
    assert tiered.cost_usd_per_hour < off.cost_usd_per_hour  # 2 GPUs with host memory instead of 4
    # live KV in host memory is no engine's offload: marked experimental, the command carries no offload flags
    assert all(k.live for k in kv.values() if k.offload_gib > 0)
    assert not any("--kv-offloading-size" in a for d in tiered.deployments for a in d.engine_args)
    assert any(w.startswith("experimental: ") for w in tiered.warnings)
    assert analytic_check(tiered, spec).ok
    auto = tt.plan(apply_overrides(spec, {"defaults.kv_tiers": "auto"}), validate=False).plan
    # no prefix reuse: the host tier has nothing to hold
    assert auto.cost_usd_per_hour == off.cost_usd_per_hour


def test_kv_offload_row_binds(tmp_path):
    """With the host memory of the nodes below one replica's offload, the MILP cannot use offload."""
    spec = _spec(tmp_path, RAG_ONLY)
    ir = lower(spec)
    cands = build_candidates(ir, jobs=1)
    offl = [c for c in cands.candidates if c.kv_offload_gib > 0]
    assert offl
    be = get_backend("highs")
    opts = SolveOptions(time_limit_s=30)
    m = formulate(ir, cands)
    row = next(c for c in m.constraints if c.name == "kv_offload[h100-sxm]")
    assert row.family == "kv_offload" and "cpu_memory_gib" in str(row.origin)
    res = be.solve(m, opts)
    assert sum(round(res.values.get(n_var(c.id), 0)) for c in offl) >= 1  # integers, within HiGHS's tolerance
    small = replace(ir, gpus=tuple(replace(p, cpu_memory_gib=min(c.kv_offload_gib for c in offl))
                                   for p in ir.gpus))
    res = be.solve(formulate(small, cands), opts)  # HOST_KV_SHARE of it is less than one replica's offload
    assert res.has_solution
    assert sum(res.values.get(n_var(c.id), 0) for c in offl) == 0


def test_too_little_cpu_memory_cannot_offload(tmp_path):
    text = RAG_ONLY + "nodes:\n  - {name: n, gpu: h100-sxm, count: 1, cpu_memory_gib: 8}\n"
    plan = tt.plan(_spec(tmp_path, text), validate=False).plan
    assert not any(k.offload_gib > 0 for k in _tiers(plan).values())


def test_borrowing_chosen_for_long_context_traffic(tmp_path):
    spec = _spec(tmp_path, LONG_LIVE)
    res = tt.plan(spec)
    plan = res.plan
    kv = _tiers(plan)
    borrowers = {n: k for n, k in kv.items() if k.borrowed_gib > 0}
    assert borrowers, kv
    for name, k in borrowers.items():
        assert k.borrowed_from and all(kv[lender].lent_gib > 0 for lender in k.borrowed_from)
        nodes = {p.node for p in next(d for d in plan.deployments if d.name == name).placement}
        lender_nodes = {p.node for d in plan.deployments if d.name in k.borrowed_from for p in d.placement}
        assert nodes <= lender_nodes  # borrowing stays on the node's NVLink
    assert plan.simulation is not None and plan.simulation.passed
    rep = analytic_check(plan, spec)
    assert rep.ok, rep.violations
    off = tt.plan(apply_overrides(spec, {"defaults.kv_tiers": "off"}), validate=False).plan
    assert plan.cost_usd_per_hour < off.cost_usd_per_hour  # 23.4 vs 31.2 $/h (docs/kv-tiers.md)
    assert not any(d.kv for d in off.deployments)
    # marked experimental: borrowers and lenders are live, the plan says no engine flag realises them
    for name, k in kv.items():
        assert k.live == (k.borrowed_gib > 0 or k.lent_gib > 0 or k.offload_gib > 0), name
        if k.live:
            assert any(w.startswith(f"experimental: {name} plans live KV beyond HBM")
                       and "no engine flag" in w
                       for w in plan.warnings), plan.warnings
    assert not any(": the engine admits" in w for w in plan.warnings)
    # the realisable tier on the same traffic: nothing to gain without prefix reuse, the HBM-only cost
    auto = tt.plan(apply_overrides(spec, {"defaults.kv_tiers": "auto"}), validate=False).plan
    assert auto.cost_usd_per_hour == off.cost_usd_per_hour


def test_borrowing_needs_a_lender(tmp_path):
    """The same RAG traffic alone: nothing on the GPUs has spare HBM KV to lend, so nothing borrows."""
    plan = tt.plan(_spec(tmp_path, RAG_ONLY), validate=False).plan
    assert not any(k.borrowed_gib > 0 for k in _tiers(plan).values())


# ---------------------------------------------------------------------------------------------- check
@pytest.fixture(scope="module")
def long_plan(tmp_path_factory):
    spec = _spec(tmp_path_factory.mktemp("live"), LONG_LIVE)
    return tt.plan(spec, validate=False).plan, spec


def _edit(plan, name, **kv):
    deps = [d.model_copy(update={"kv": d.kv.model_copy(update=kv)}) if d.name == name else d
            for d in plan.deployments]
    return plan.model_copy(update={"deployments": deps})


def test_check_rejects_over_borrowing(long_plan):
    plan, spec = long_plan
    borrower = next(d for d in plan.deployments if d.kv.borrowed_gib > 0)
    bad = analytic_check(_edit(plan, borrower.name, borrowed_gib=borrower.kv.borrowed_gib * 3), spec)
    assert not bad.ok
    assert any("kv_borrow[h100-sxm]" in v for v in bad.violations), bad.violations
    lender = borrower.kv.borrowed_from[0]
    bad = analytic_check(_edit(plan, lender, lent_gib=500.0), spec)
    assert any(v.startswith(f"deployment {lender}: lends 500 GiB") for v in bad.violations), bad.violations


def test_check_rejects_over_offloading(long_plan):
    plan, spec = long_plan
    name = plan.deployments[0].name
    bad = analytic_check(_edit(plan, name, offload_gib=5000.0), spec)
    assert not bad.ok
    assert any(f"deployment {name}: offloads 5000 GiB" in v for v in bad.violations), bad.violations
    assert any(v.startswith("kv_offload[h100-sxm]") for v in bad.violations)


def test_check_rejects_tiers_when_spec_has_them_off(long_plan):
    plan, spec = long_plan
    bad = analytic_check(plan, apply_overrides(spec, {"defaults.kv_tiers": "off"}))
    assert any("defaults.kv_tiers: off" in v for v in bad.violations)
    # a live plan checked against a spec whose tier is the prefix cache's host memory: live KV is named
    bad = analytic_check(plan, apply_overrides(spec, {"defaults.kv_tiers": "auto"}))
    assert any("holds live KV beyond HBM" in v
               and "experimental-live" in v for v in bad.violations), bad.violations


# ---------------------------------------------------------------------------------------------- simulator
def _tiered_replica_plan(tmp_path, rate):
    sp = write_spec(tmp_path, rate=rate, isl="{fixed: 40000}", osl="{fixed: 256}", ttft=60000, tpot=500,
                    gpu="l4", extra="defaults: {kv_tiers: experimental-live}\n")
    plan = one_deployment_plan(sp, gpu="l4", mbt=2048)
    d = plan.deployments[0]
    d = d.model_copy(update={"kv": KvTiers(hbm_tokens=d.kv_cache_tokens, borrowed_gib=20.0,
                                           borrowed_from=["x"])})
    spec = load_spec(sp)
    rm = replica_model(lower(spec), "llama-3.1-8b", "l4", 1, 1, "bf16", 256, 2048, kv_borrow_gib=20.0)
    return plan.model_copy(update={"deployments": [d]}), spec, rm


def test_simulator_agrees_with_cost_model_on_a_tiered_replica(tmp_path):
    """8B on one L4: 36k tokens of HBM KV, 40k-token prompts; the rest of each request's KV over PCIe. One
    request at a time, the median TPOT is the cost model's zero-load TPOT (whose remote share is the request's
    own) within the 2 % of tests/sim/test_cost_model_agreement.py; the median TTFT is its prefill time."""
    plan, spec, rm = _tiered_replica_plan(tmp_path, 0.004)
    assert rm.memory.kv_cache_tokens < 40000 < rm.kv_capacity_tokens
    res = simulate(plan, spec, requests=300, seed=3)
    w = res.workloads["w"]
    ttft0, tpot0 = rm.zero_load(TrafficClass(0.0, 40000, 256))
    assert w.tpot_ms["p50"] == pytest.approx(tpot0, rel=0.02)
    assert w.ttft_ms["p50"] == pytest.approx(ttft0, rel=0.02)
    hbm_only = ReplicaModel(rm.model, rm.gpu, rm.engine, 1, 1, "bf16", 256, 2048)
    assert tpot0 > 1.5 * hbm_only.iteration_s(1, 40128)  # the tier link is what sets it


def test_simulator_steady_state_on_a_tiered_replica(tmp_path):
    """At load, mean TPOT within 25 % of ``evaluate`` (docs/kv-tiers.md: overlapping long requests slow each
    other down; the cost model's Poisson average of the step time over co-resident requests captures most of
    it, and is low by about 20 % here: measured 159 ms simulated vs 131 ms)."""
    plan, spec, rm = _tiered_replica_plan(tmp_path, 0.005)
    res = simulate(plan, spec, requests=1500, seed=3)
    st = rm.evaluate([TrafficClass(0.005, 40000, 256)], 90.0)
    assert st.stable
    assert res.workloads["w"].tpot_ms["mean"] == pytest.approx(st.tpot_mean_s * 1e3, rel=0.25)
    assert res.workloads["w"].tpot_ms["mean"] >= st.tpot_mean_s * 1e3 * 0.98  # the model errs low, not high


# ---------------------------------------------------------------------------------------------- placement /
# spec
def _two_nodes():
    from trimtab.ir.topology import Node, Topology

    return Topology(tuple(Node(f"n{i}", "h100-sxm", 8, 8, 400.0, 450.0, "r") for i in range(2)))


def test_borrower_is_placed_with_its_lender():
    from trimtab.milp.placement import place, place_kv

    # first fit puts the lender and one big replica on n0, the other big one and the borrower on n1
    deps = [unit("a-lend", "h100-sxm", 4, 1, 1), unit("b-big", "h100-sxm", 4, 1, 2),
            unit("c-borrow", "h100-sxm", 2, 1, 1)]
    plain = place(deps, _two_nodes())
    assert {p.node for p in plain["c-borrow"]} != {p.node for p in plain["a-lend"]}
    kv = {"c-borrow": (10.0, 0.0, 0.0), "a-lend": (0.0, 12.0, 0.0)}
    out = place_kv(deps, _two_nodes(), kv, {"n0": 1000.0, "n1": 1000.0})
    assert {p.node for p in out["c-borrow"]} == {p.node for p in out["a-lend"]}  # CP-SAT pairs them


def test_no_placement_for_borrowing_is_reported_plainly():
    from trimtab.errors import InfeasibleError
    from trimtab.milp.placement import place_kv

    deps = [unit("b-borrow", "h100-sxm", 2, 1, 2), unit("c-lend", "h100-sxm", 2, 1, 1)]
    # two borrowers, one lender: one is left out
    kv = {"b-borrow": (10.0, 0.0, 0.0), "c-lend": (0.0, 12.0, 0.0)}
    with pytest.raises(InfeasibleError, match="no placement exists that keeps every KV borrower"):
        place_kv(deps, _two_nodes(), kv, {"n0": 1000.0, "n1": 1000.0})


def test_bad_kv_tiers_value_names_the_field(tmp_path):
    from trimtab.errors import InputError

    p = tmp_path / "bad.yaml"
    p.write_text(RAG_ONLY.replace("kv_tiers: experimental-live", "kv_tiers: borrow"))  # a value of old
    with pytest.raises(InputError) as e:
        load_spec(p)
    assert "defaults.kv_tiers" in str(e.value)


def test_check_rejects_a_borrower_placed_away_from_its_lenders(long_plan):
    plan, spec = long_plan
    borrower = next(d for d in plan.deployments if d.kv.borrowed_gib > 0)
    lender_nodes = {p.node for d in plan.deployments if d.name in borrower.kv.borrowed_from
                    for p in d.placement}
    other = next(n for n in ("h100-sxm-0", "h100-sxm-1") if n not in lender_nodes)
    moved = [p.model_copy(update={"node": other}) for p in borrower.placement]
    deps = [d.model_copy(update={"placement": moved}) if d.name == borrower.name else d
            for d in plan.deployments]
    bad = analytic_check(plan.model_copy(update={"deployments": deps}), spec)
    assert any(v.startswith(f"node {other}: its replicas borrow") for v in bad.violations), bad.violations


def test_memory_infeasibility_points_at_kv_tiers(tmp_path):
    """RAG prompts that no 2-GPU shape holds in HBM: with tiers off the explanation names the way out, and
    taking it (``kv_tiers: experimental-live``) gives a plan that offloads live KV."""
    from trimtab.errors import InfeasibleError

    two = RAG_ONLY.replace("count: 8", "count: 2")
    with pytest.raises(InfeasibleError) as exc:
        tt.plan(_spec(tmp_path, two.replace("kv_tiers: experimental-live", 'kv_tiers: "off"')),
                validate=False)
    text = "\n".join(exc.value.lines)
    assert "pruned for: memory" in text and "defaults.kv_tiers: experimental-live" in text
    plan = tt.plan(_spec(tmp_path, two, "auto.yaml"), validate=False).plan
    assert any(k.offload_gib > 0 for k in _tiers(plan).values())


def test_emit_refuses_a_live_tier_unless_experimental(long_plan, tmp_path):
    """No engine flag realises live-KV spill or borrowing: ``trimtab emit`` names the field and exits 1, and
    with --allow-experimental the live deployments run with their HBM KV only (no offload flags)."""
    from typer.testing import CliRunner

    from trimtab.cli.main import app

    plan, spec = long_plan
    assert any(d.kv.live for d in plan.deployments)
    path, spec_path = tmp_path / "plan.yaml", tmp_path / "spec.yaml"
    path.write_text(tt.emit(plan))
    spec_path.write_text(LONG_LIVE)
    args = ["emit", str(path), "--spec", str(spec_path), "--to", "k8s", "-o", str(tmp_path / "out")]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    assert ").kv" in r.output and "experimental" in r.output and "--allow-experimental" in r.output
    r = CliRunner().invoke(app, args + ["--allow-experimental"])
    assert r.exit_code == 0, r.output
    text = "".join(p.read_text() for p in (tmp_path / "out").glob("*.yaml"))
    assert "--kv-offloading" not in text
