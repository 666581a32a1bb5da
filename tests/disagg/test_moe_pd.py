"""P/D with a different mixture-of-experts layout per phase (docs/moe.md): prefill and decode candidates each
range over tp x dp x ep; a long-prompt, tight-TPOT Qwen3-235B workload splits into a TP prefill side and an
attention-DP + expert-parallel decode side, and the plan passes check."""
from __future__ import annotations

import pytest

from trimtab.api import load_spec, plan
from trimtab.gate.analytic import check
from trimtab.milp.disagg import build_pd_candidates, pd_id
from trimtab.ir.lower import lower

SPEC = """version: 1
name: pdmoe
objective: min_cost
gpus:
  - {type: h100-sxm, count: 32, usd_per_hour: 3.90}
  - {type: h200, count: 32, usd_per_hour: 4.50}
models:
  - name: qwen3-235b-a22b
workloads:
  - name: rag
    model: qwen3-235b-a22b
    dtype: fp8
    rate_rps: 30
    input_tokens: {lognormal: {median: 6000, p99: 16000}}
    output_tokens: {lognormal: {median: 400, p99: 1200}}
    slo: {ttft_ms: 5000, tpot_ms: 40, percentile: 99}
"""


@pytest.fixture(scope="module")
def spec_path(tmp_path_factory):
    p = tmp_path_factory.mktemp("pdmoe") / "pdmoe.yaml"
    p.write_text(SPEC)
    return p


def test_each_phase_ranges_over_moe_layouts(spec_path):
    pd = build_pd_candidates(lower(load_spec(spec_path)))
    # decode keeps attention-DP + EP layouts (each rank its own batch); prefill ones may be dominated by TP
    assert any(c.dp > 1 and c.ep == c.tp * c.dp for c in pd if c.role == "decode")
    for role in ("prefill", "decode"):
        for c in (c for c in pd if c.role == role):
            assert c.id == pd_id(c.workload, c.gpu, c.tp, c.pp, role, c.dp, c.ep)
            assert c.gpus == c.tp * c.pp * c.dp


def test_pd_plan_with_per_phase_layouts_passes_check(spec_path):
    r = plan(load_spec(spec_path), validate=False)
    deps = {d.role: d for d in r.plan.deployments if d.replicas}
    assert set(deps) == {"prefill", "decode"}
    p, d = deps["prefill"], deps["decode"]
    assert (p.tensor_parallel, p.data_parallel, p.expert_parallel) != (d.tensor_parallel, d.data_parallel,
                                                                      d.expert_parallel)
    assert d.data_parallel > 1 and d.expert_parallel == d.tensor_parallel * d.data_parallel
    for dep in (p, d):  # one placement per replica, a stage's tp x dp GPUs
        assert all(len(pl.gpus) == dep.tensor_parallel * dep.data_parallel for pl in dep.placement)
    rep = check(r.plan, load_spec(spec_path))
    assert rep.ok, rep.violations


def test_co_located_pairs_are_dense_style_with_one_id_each(spec_path):
    """Co-located P/D groups (docs/disaggregation.md) pair dense-style layouts only: before, every decode
    layout with attention DP or expert parallelism made a second candidate under the same id (208 candidates,
    68 ids for this spec, with no unified candidate to beat), and the MILP refused the duplicate variable."""
    from trimtab.milp import disagg as dg

    ir = lower(load_spec(spec_path))
    w = ir.workloads[0]
    dec = dg._role_candidates(ir, w, "decode", 50e9)
    assert any(c.dp > 1 or c.ep > 1 for c in dec)  # the input has MoE decode layouts to leave out
    local = dg._local_candidates(ir, w, dec, ())
    ids = [c.id for c in local]
    assert local and len(ids) == len(set(ids))
    assert all(c.pp == 1 and c.dp == 1 and c.ep == 1 for c in local)


def test_pd_flows_pair_within_a_gpu_type_for_moe_layouts(spec_path):
    """P/D routes pair each GPU type's flows among themselves before crossing types (the MILP prices
    inter-rack hand-offs per type). The type is read off the candidate, not its id: an id with ``-dp``/``-ep``
    (an MoE layout) once parsed to no type at all, and three types' flows were paired north-west across
    them."""
    from dataclasses import replace

    from trimtab.milp.pair_routes import pair_routes

    ir = lower(load_spec(spec_path))
    pd = build_pd_candidates(ir)
    pre = next(c for c in pd if c.role == "prefill")
    dec = next(c for c in pd if c.role == "decode" and c.ep > 1)

    def on(c, gpu):
        return replace(c, gpu=gpu, id=pd_id(c.workload, gpu, c.tp, c.pp, c.role, c.dp, c.ep))

    ps = [on(pre, g) for g in ("a100-80gb", "h100-sxm")]
    ds = [on(dec, g) for g in ("a100-80gb", "h100-sxm", "h200")]
    assert all("-ep" in d.id for d in ds)
    flows = {("rag", ir.workloads[0].buckets[0].name): ([(ps[0].id, 15.0), (ps[1].id, 15.0)],
                                                         [(ds[0].id, 7.5), (ds[1].id, 15.0),
                                                          (ds[2].id, 7.5)])}
    by_id = {c.id: c for c in ps + ds}
    got = sorted((by_id[r.prefill].gpu, by_id[r.decode].gpu, round(r.share, 6))
                 for r in pair_routes(ir, flows, by_id))
    assert got == [("a100-80gb", "a100-80gb", 0.25), ("a100-80gb", "h200", 0.25),
                   ("h100-sxm", "h100-sxm", 0.5)]


def test_two_type_moe_pd_plan_pairs_within_a_type_and_the_milp_prices_every_crossing(spec_path, tmp_path):
    """Issue 37: a two-GPU-type MoE P/D spec with a thin inter-rack link (1 GB/s). Every P/D route variable,
    the ``-dp``/``-ep`` layouts' too, enters the MILP's inter-rack rows; the plan pairs each GPU type's flows
    among themselves first, so per bucket only what one type prefills beyond what it decodes changes racks
    (what those rows charge), and the crossing KV stays within the row's share of the link."""
    from trimtab.milp.candidates import build_candidates
    from trimtab.milp.disagg import LINK_UTIL
    from trimtab.milp.pair_routes import pair_flows
    from trimtab.milp.formulate import formulate, x_var
    from trimtab.spec.paths import SpecPath

    p = tmp_path / "pdmoe-racks.yaml"
    # the spec's 32 H200s: the cheapest plan (12 H100s and 30 H200s, 181.8 $/h; with the link all but
    # forbidden, 237.6) decodes some H200-prefilled KV on the H100s. (At 26 H200s it ties with a plan that
    # crosses nothing.)
    p.write_text(SPEC + "network: {inter_rack_gbps: 1}\n")
    spec = load_spec(p)
    ir = lower(spec)
    cands = build_candidates(ir)
    rack = SpecPath("network", field="inter_rack_gbps")
    priced = {v for con in formulate(ir, cands).constraints if con.origin == rack for v, _ in con.expr}
    assert any(c.dp > 1 or c.ep > 1 for c in cands.disagg)
    assert [c.id for c in cands.disagg for b, _ in c.capacity_rps
            if c.pd_group is None and x_var(c.workload, b, c.id) not in priced] == []

    r = plan(spec, validate=False)
    deps = {d.name: d for d in r.plan.deployments if d.replicas}
    assert {d.gpu for d in deps.values() if d.role} == {"h100-sxm", "h200"}
    assert any(d.data_parallel > 1 or d.expert_parallel > 1 for d in deps.values() if d.role)
    rate = ir.workloads[0].rate_rps
    flows: dict[tuple[str, str], dict[str, float]] = {}  # (bucket, gpu) -> prefilled, decoded, crossing rps
    for x in r.plan.routes:
        pg, dg = deps[x.prefill].gpu, deps[x.decode].gpu
        pre, dec = flows.setdefault((x.bucket, pg), {}), flows.setdefault((x.bucket, dg), {})
        pre["p"] = pre.get("p", 0.0) + x.share * rate
        dec["d"] = dec.get("d", 0.0) + x.share * rate
        pre["x"] = pre.get("x", 0.0) + (x.share * rate if pg != dg else 0.0)
    both = [b for b, _ in flows if all(flows.get((b, g), {}).get("p") for g in ("h100-sxm", "h200"))]
    assert both  # a bucket both types prefill: where the pairing decides what crosses
    assert any(f.get("x", 0.0) > 1e-3 for f in flows.values())  # the link is used, not avoided
    for key, f in sorted(flows.items()):
        assert f.get("x", 0.0) == pytest.approx(max(0.0, f.get("p", 0.0) - f.get("d", 0.0)), abs=1e-4), key
    crossing = sum(bps for pre, dec, bps, _ in pair_flows(r.plan, ir) if deps[pre].gpu != deps[dec].gpu)
    assert 0 < crossing <= LINK_UTIL * 1e9 * (1 + 1e-6)
    rep = check(r.plan, spec)
    assert rep.ok, rep.violations
