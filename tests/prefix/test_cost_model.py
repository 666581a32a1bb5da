"""Prefix hits in the cost model: prefill computes only the uncached tokens (attending to the cached ones),
TTFT falls, capacity rises; the prefix cache's reserve leaves less KV for requests; zero hits change
nothing."""
from __future__ import annotations

import pytest

from trimtab.cost.factory import prefix_cache, prefix_hit, replica_model, traffic_class
from trimtab.cost.model import TrafficClass
from trimtab.ir.lower import lower
from trimtab.spec.load import load_spec
from tests.conftest import SMALL_SPEC


@pytest.fixture(scope="module")
def ir(tmp_path_factory):
    p = tmp_path_factory.mktemp("s") / "s.yaml"
    p.write_text(SMALL_SPEC)
    return lower(load_spec(p))


@pytest.fixture(scope="module")
def rm(ir):
    return replica_model(ir, "llama-3.1-8b", "h100-sxm", 1, 1, "bf16", 256, 8192)


def test_prefill_computes_only_uncached_tokens(rm):
    full = rm.prefill_s(4000, 0, 0)
    hit = rm.prefill_s(4000, 0, 0, 0.0, 3000)
    # 1000 new tokens after 3000 of prior context: one step; its attention still reads the 3000 cached tokens.
    assert hit == rm.iteration_s(0, 0, 1000, 3000)
    assert rm.iteration_s(0, 0, 1000, 0) < hit < full
    assert rm.prefill_s(4000, 0, 0, 0.0, 0.0) == full  # zero cached: the same arithmetic


def test_hits_lower_ttft_and_raise_capacity(rm):
    slo = (800.0, 60.0, 99.0)
    plain = TrafficClass(4.0, 4000, 200, 6000, 0.1)
    hit = TrafficClass(4.0, 4000, 200, 6000, 0.1, cached_tokens=2400, prefix_reserved=50_000)
    a, b = rm.evaluate([plain], 99.0), rm.evaluate([hit], 99.0)
    assert b.ttft_s[0] < a.ttft_s[0] and b.utilization < a.utilization
    assert b.kv_tokens_used < a.kv_tokens_used  # cached blocks are the prefix cache's, not each request's
    cap_a = rm.capacity_rps(plain, *slo)
    cap_b = rm.capacity_rps(hit, *slo)
    assert cap_b > 1.3 * cap_a


def test_zero_hit_is_bit_identical(rm):
    c0 = TrafficClass(3.0, 2000, 150, 3500, 0.2)
    c1 = TrafficClass(3.0, 2000, 150, 3500, 0.2, 0.0, 0.0)
    assert rm.evaluate([c0], 99.0) == rm.evaluate([c1], 99.0)
    assert rm.capacity_rps(c0, 500, 50, 99) == rm.capacity_rps(c1, 500, 50, 99)
    assert rm.zero_load(c0) == rm.zero_load(c1)


def test_reserve_takes_kv_from_requests(rm):
    cap = rm.memory.kv_cache_tokens
    c = TrafficClass(2.0, 4000, 500, None, 0.0, cached_tokens=100, prefix_reserved=cap - 5000)
    st = rm.evaluate([c], 99.0)
    assert not st.stable and "KV cache" in st.reason
    assert rm.capacity_rps(TrafficClass(0.0, 4000, 500, None, 0.0, 100, cap - 4000), 5000, 100, 99) == 0.0


def _with_prefix(ir, hit, ws, curve=()):
    from dataclasses import replace

    return replace(ir.workloads[0], prefix_hit_rate=hit, prefix_working_set=ws, prefix_curve=curve,
                   prefix_source="trace" if curve else "declared")


def test_working_set_bigger_than_the_cache_scales_the_hit_rate(ir, rm):
    w = _with_prefix(ir, 0.6, 10**9)  # far beyond any HBM
    reserved, hit = prefix_cache(w, rm)
    assert 0 < reserved <= rm.memory.kv_cache_tokens - 576  # leaves room for the longest request (512 + 64)
    assert hit == pytest.approx(0.6 * reserved / 10**9)  # LRU, uniform popularity
    small = _with_prefix(ir, 0.6, 20_000)  # fits: the whole working set, the full hit rate
    assert prefix_cache(small, rm) == (20_000, 0.6)
    cls = traffic_class(w.buckets[0], 1.0, small, rm)
    assert cls.cached_tokens == pytest.approx(0.6 * 512) and cls.prefix_reserved == 20_000


def test_measured_curve_is_interpolated(ir):
    w = _with_prefix(ir, 0.5, 4096, ((1024, 0.1), (2048, 0.3), (4096, 0.5)))
    assert prefix_hit(w, 512) == pytest.approx(0.05)
    assert prefix_hit(w, 1536) == pytest.approx(0.2)
    assert prefix_hit(w, 10**6) == 0.5
    assert prefix_hit(w, 0) == 0.0
