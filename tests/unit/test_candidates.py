"""Candidate generation, pruning reasons, and capacity at SLO."""
from __future__ import annotations

from trimtab.milp.assess import assess
from trimtab.milp.candidates import build_candidates
from trimtab.cost.factory import replica_model, traffic_class
from trimtab.deployment.shape import DeploymentSpecView, RouteView
from trimtab.ir.lower import lower
from trimtab.spec.load import load_spec
from tests.conftest import SMALL_SPEC


def ir_of(text: str):
    return lower(load_spec("s.yaml", text=text))


def test_every_candidate_meets_slo_at_its_capacity():
    ir = ir_of(SMALL_SPEC)
    cs = build_candidates(ir)
    w = ir.workloads[0]
    assert cs.candidates
    for c in cs.candidates:
        rm = replica_model(ir, c.model, c.gpu, c.tp, c.pp, c.dtype, c.max_num_seqs, c.max_batched_tokens)
        for b in w.buckets:
            cap = c.capacity(b.name)
            st = rm.evaluate([traffic_class(b, cap)], w.slo.percentile)
            assert rm.meets(st, w.slo.ttft_ms, w.slo.tpot_ms)
            # and 5 % more load breaks it (capacity is the highest such rate, to the bisection tolerance)
            over = rm.evaluate([traffic_class(b, cap * 1.05)], w.slo.percentile)
            assert not rm.meets(over, w.slo.ttft_ms, w.slo.tpot_ms)


def test_memory_pruning_reason():
    text = SMALL_SPEC.replace("llama-3.1-8b", "llama-3.1-70b")
    cs = build_candidates(ir_of(text))
    reasons = {p.id: p.reason for p in cs.pruned}
    assert reasons["short-l4-tp1-t2k"].startswith("memory:")
    assert all(c.gpu == "h100-sxm" or c.tp * c.pp >= 8 for c in cs.candidates)


def test_tp_beyond_node_or_inventory_not_generated():
    text = SMALL_SPEC.replace("count: 8, usd_per_hour: 4.0", "count: 2, usd_per_hour: 4.0")
    cs = build_candidates(ir_of(text))
    assert all(c.tp * c.pp <= 2 for c in cs.candidates if c.gpu == "h100-sxm")
    assert any("needs 4 GPUs, the spec has 2 h100-sxm" in p.reason for p in cs.pruned)


def test_faster_gpu_has_more_capacity_per_replica():
    cs = build_candidates(ir_of(SMALL_SPEC))
    by = {c.id: c for c in cs.candidates}
    b = next(iter(by.values())).capacity_rps[0][0]
    h100 = max(c.capacity(b) for c in cs.candidates if c.gpu == "h100-sxm" and c.tp == 1)
    l4 = max((c.capacity(b) for c in cs.candidates if c.gpu == "l4" and c.tp == 1), default=0.0)
    assert h100 > l4


def test_assess_overload_is_reported_not_crashing():
    ir = ir_of(SMALL_SPEC.replace("rate_rps: 5", "rate_rps: 5000"))
    w = ir.workloads[0]
    dep = DeploymentSpecView(name="d", model="llama-3.1-8b", gpu="h100-sxm", tp=1, pp=1, dtype="bf16",
                             max_num_seqs=256, max_batched_tokens=2048, replicas=1)
    a = assess(ir, [dep], [RouteView(w.name, b.name, "d", b.prob) for b in w.buckets])
    p = a.workloads[w.name]
    assert not p.slo_met and p.worst_deployment == "d"
    assert not a.deployments["d"].stable and a.deployments["d"].reason


def test_assess_unrouted_workload():
    ir = ir_of(SMALL_SPEC)
    a = assess(ir, [], [])
    assert a.workloads["short"].reason == "no route serves this workload"


def test_shapes_dropped_before_their_searches_are_the_ones_dominance_drops(monkeypatch):
    """A shape found dominated without its capacity searches (``_below``: it misses every bucket's SLO at a
    rival's capacities) is one the full comparison drops: the kept candidates and their capacities, the pruned
    shapes and the zero-load bests are those of searching every shape. Two examples of several GPU types and
    budgets, where both token budgets of a shape and smaller tensor-parallel shapes dominate."""
    from trimtab.milp import candidates as cmod

    for name in ("quickstart", "long-context"):
        ir = lower(load_spec(f"examples/{name}.yaml"))
        fast = build_candidates(ir, jobs=1)
        dropped = [p for p in fast.pruned if p.reason.endswith("more capacity on every bucket)")]
        monkeypatch.setattr(cmod, "_below", lambda *a: None)
        full = build_candidates(ir, jobs=1)
        monkeypatch.undo()
        assert fast.candidates == full.candidates and fast.best == full.best
        assert [p.id for p in fast.pruned] == [p.id for p in full.pruned]
        assert {p.id: p.cause for p in dropped} == {p.id: p.cause for p in full.pruned if p.id in
                                                    {d.id for d in dropped}}
        assert dropped or name != "quickstart", "no shape was dropped before its searches"
