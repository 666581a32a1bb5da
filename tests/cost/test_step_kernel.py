"""The compiled step time (compiler/cost/_step.c) against its reference, ``ReplicaStep._step_py``: the same
float to the last bit on every bundled model and engine, over the layouts the planner draws (tp, pp, attention
dp, expert ep; CUDA-graph and eager steps; a live KV tier's remote share), and arguments from an idle step to
a full token budget. The kernel is only worth having if it is exact: the planner's candidates, and so its
plans, are compared byte for byte across versions."""
from __future__ import annotations

import math
import pickle
import random

import pytest

from trimtab.cost import step as step_mod
from trimtab.cost.model import ReplicaModel
from trimtab.cost.records import KvTier, TrafficClass
from trimtab.profiles.loader import load_profiles

GPUS = ("h100-sxm", "a100-80gb", "l4", "mi300x", "b200", "a10g")
# (tp, pp, dp, ep): the MoE block's three communication modes (none; attention DP alone; expert parallel),
# and expert groups within a node and across two
LAYOUTS = ((1, 1, 1, 1), (2, 1, 1, 1), (4, 2, 1, 1), (8, 1, 1, 1), (1, 1, 2, 2), (2, 1, 4, 8), (2, 1, 2, 1),
           (4, 1, 4, 1), (8, 1, 2, 16), (8, 2, 1, 8))


def _replicas():
    p = load_profiles()
    for mname, model in sorted(p.models.items()):
        for gname in GPUS:
            for ename, engine in sorted(p.engines.items()):
                for tp, pp, dp, ep in LAYOUTS:
                    for dtype in ("bf16", "fp8"):
                        try:
                            yield ReplicaModel(model, p.gpus[gname], engine, tp, pp, dtype, dp=dp, ep=ep,
                                               max_batched_tokens=2048)
                        except ValueError:
                            continue
                    if dp == 1:  # a live KV tier (no attention DP with one)
                        try:
                            yield ReplicaModel(model, p.gpus[gname], engine, tp, pp, "bf16",
                                               kv_tier=KvTier("offload", 200_000, 25.0))
                        except ValueError:
                            continue


def _args(rng: random.Random, rm: ReplicaModel) -> tuple:
    limit = rm.graph_tokens * rm.pp
    b = rng.choice((0, 1, 2.0, rng.randint(1, 512), rng.uniform(0.0, 600.0), limit, limit + 1, limit - 0.5))
    ctx = rng.choice((0, 0.0, rng.uniform(0.0, 32000.0), float(rng.randint(1, 9000))))
    p = rng.choice((0.0, 0, rng.randint(1, 8192), rng.uniform(0.0, 8192.0), max(limit - b, 0.0)))
    pctx = rng.choice((0.0, rng.uniform(0.0, 16000.0)))
    seqs = rng.choice((1.0, 1, rng.randint(1, 32), rng.uniform(0.5, 12.0)))
    r = rng.choice((0.0, 0.0, rng.uniform(0.0, 1.0), 1.0)) if rm.kv_tier is not None else 0.0
    return b, ctx, p, pctx, seqs, r


@pytest.mark.skipif(not step_mod.KERNEL, reason="TRIMTAB_COST_KERNEL=python")
def test_the_kernel_is_built():
    # an install that could not compile it runs the reference alone, and a scipy without gammaincc in its C
    # API the interpreted queueing: CI sees either here
    assert step_mod._step is not None and step_mod.queueing_compiled()


@pytest.mark.skipif(not step_mod.KERNEL, reason="the kernel is not built or switched off")
def test_the_kernel_gives_the_reference_float_to_the_bit():
    rng = random.Random(35)
    n = kinds = 0
    seen, modes = set(), set()
    for rm in _replicas():
        kernel = rm._step_fn
        assert type(kernel) is step_mod._step.Step and rm.step_s is kernel
        seen.add((rm.moe is not None, rm.graph_tokens > 0, rm.kv_tier is not None, rm.dp > 1, rm.pp > 1))
        if rm.moe is not None:
            modes.add((rm.moe._comm_fold[0], rm.moe._spread_fold[1] > 0))
        for _ in range(12):
            a = _args(rng, rm)
            want, got = rm._step_py(*a), kernel(*a)
            assert type(got) is float
            assert math.isnan(want) and math.isnan(got) or want.hex() == got.hex(), (rm.model.name, a)
            n += 1
        # keywords and defaults as the Python signature takes them
        assert kernel(3, 100.0) == rm._step_py(3, 100.0)
        assert kernel(3, 100.0, prefill_seqs=2.0, prefill_tokens=50) == rm._step_py(3, 100.0, 50, 0.0, 2.0)
        kinds += 1
    # every branch of the reference is reached: MoE or dense, graphs or eager, a tier, attention DP, pipelines
    assert len(seen) >= 12 and n > 10_000, (len(seen), n, kinds)
    assert modes >= {(0, False), (1, False), (2, False), (2, True), (1, True)}, modes


@pytest.mark.skipif(not step_mod.KERNEL, reason="the kernel is not built or switched off")
def test_the_kernel_pickles_and_refuses_bad_calls():
    p = load_profiles()
    rm = ReplicaModel(p.models["mixtral-8x7b"], p.gpus["h100-sxm"], p.engines["vllm"], tp=2)
    k = rm._step_fn
    k2 = pickle.loads(pickle.dumps(k))
    assert k2(16, 900.0, 512, 10.0) == k(16, 900.0, 512, 10.0)
    for bad in ((1,), (1, 2, 3, 4, 5, 6, 7)):
        with pytest.raises(TypeError):
            k(*bad)
    with pytest.raises(TypeError):
        k(1, 2, fresh=3)
    with pytest.raises(TypeError):
        k(1, "2")


def test_a_subclass_that_adds_terms_keeps_its_own_step_time():
    class Slower(ReplicaModel):
        def iteration_s(self, decode_batch, decode_ctx, prefill_tokens=0.0, prefill_ctx=0.0, prefill_seqs=1.0,
                        remote_share=0.0):
            return 2 * super().iteration_s(decode_batch, decode_ctx, prefill_tokens, prefill_ctx)

    p = load_profiles()
    args = (p.models["llama-3.1-8b"], p.gpus["l4"], p.engines["vllm"])
    base, slow = ReplicaModel(*args), Slower(*args)
    assert slow.step_s(4, 500.0) == 2 * base.step_s(4, 500.0) == 2 * base.iteration_s(4, 500.0)


def _reference(rm: ReplicaModel) -> ReplicaModel:
    """The same replica with the interpreted step time, so that ``evaluate`` runs its Python loop."""
    ref = ReplicaModel(rm.model, rm.gpu, rm.engine, rm.tp, rm.pp, rm.dtype, rm.max_num_seqs // rm.dp,
                       rm.rank_batched_tokens, rm.kv_dtype, dp=rm.dp, ep=rm.ep, prefix_tier=rm.prefix_tier)
    ref.__dict__["step_s"] = ref._step_py
    return ref


# (model, GPU, tp, dp, ep, max_num_batched_tokens): dense on one GPU and with TP, MoE with TP, with attention
# DP and EP, and MLA with EP across a node
SHAPES = (("llama-3.1-8b", "l4", 1, 1, 1, 2048), ("llama-3.1-70b", "h100-sxm", 4, 1, 1, 8192),
          ("mixtral-8x7b", "a100-80gb", 2, 1, 1, 2048), ("qwen3-30b-a3b", "h100-sxm", 1, 2, 2, 8192),
          ("deepseek-v3", "b200", 8, 1, 8, 8192))


def _pairs(engines: tuple[str, ...] = ("vllm",), **kw):
    """(model name, engine name, a compiled replica, its interpreted reference) for each of SHAPES and
    ``engines`` (fp8 weights; ``kw``: more of ``ReplicaModel``'s arguments)."""
    p = load_profiles()
    for mname, gname, tp, dp, ep, mbt in SHAPES:
        for ename in engines:
            rm = ReplicaModel(p.models[mname], p.gpus[gname], p.engines[ename], tp, 1, "fp8", dp=dp, ep=ep,
                              max_batched_tokens=mbt, **kw)
            yield mname, ename, rm, _reference(rm)


@pytest.mark.skipif(not step_mod.KERNEL, reason="the kernel is not built or switched off")
def test_the_compiled_fixed_point_gives_the_same_steady_states():
    """``evaluate``'s decode-batch fixed point (``Step.fixed_point``) against its Python loop: every field of
    every state equal, over one or three classes, prefix hits and host-tier reloads, rates from idle to past
    saturation (each way a loop can end), plain and decision mode, and starts from a lower rate's batch."""
    rng = random.Random(7)
    ends = set()
    for mname, _, rm, ref in _pairs(prefix_tier=KvTier("prefix", 400_000, 16.0)):
        assert hasattr(rm.step_s, "fixed_point") and not hasattr(ref.step_s, "fixed_point")
        for _ in range(150):
            classes = []
            for _ in range(rng.choice((1, 1, 3))):
                isl = rng.uniform(50, 12000)
                cached = rng.choice((0.0, 0.0, rng.uniform(0, 0.9) * isl))
                points = ((10.0, 0.3), (400.0, 0.7)) if rng.random() < .3 else ()
                classes.append(TrafficClass(rng.uniform(0.01, 40.0), isl, rng.uniform(2, 1500),
                                            isl * rng.uniform(1.0, 3.0), rng.uniform(0, 1.5), cached,
                                            osl_points=points,
                                            host_cached_tokens=cached * rng.choice((0.0, 0.5))))
            slo = rng.choice((None, (rng.uniform(200, 5000), rng.uniform(10, 150))))
            b0 = rng.choice((0.0, rng.uniform(0, 64)))
            got = rm.evaluate(classes, 99.0, slo_ms=slo, b0=b0)
            want = ref.evaluate(classes, 99.0, slo_ms=slo, b0=b0)
            assert got == want, (mname, classes, slo, b0)
            ends.add(got.reason.split(" ")[0] if not got.stable else "stable")
    assert {"stable", "prefill", "needs", "KV"} <= ends, ends


@pytest.mark.skipif(not step_mod.KERNEL, reason="the kernel is not built or switched off")
def test_the_compiled_decision_is_the_python_one():
    """``meets_at`` by ``Step.decide`` against ``evaluate`` in decision mode and ``meets``: the same verdict
    and the same decode batch to the bit, over prefix hits and reserves, host-tier reloads, output-length
    mixes, percentiles at and above the median, engines with and without async scheduling, and rates from
    idle to past saturation; every way a decision can fall (TTFT, seats or KV at the percentile, the TPOT
    tail, each end of the fixed point) is reached."""
    rng = random.Random(11)
    verdicts = {True: 0, False: 0}
    ways = set()
    edges = 0
    for mname, ename, rm, ref in _pairs(tuple(sorted(load_profiles().engines)),
                                        prefix_tier=KvTier("prefix", 400_000, 16.0)):
        assert hasattr(rm.step_s, "decide") and not hasattr(ref.step_s, "decide")
        for _ in range(120):
            isl = rng.uniform(50, 12000)
            cached = rng.choice((0.0, 0.0, rng.uniform(0, 0.9) * isl))
            points = rng.choice(((), ((1.0, 0.2), (10.0, 0.3), (400.0, 0.5)), ((2.0, 1.0),)))
            cls = TrafficClass(rng.choice((1e-9, rng.uniform(0.01, 40.0), rng.uniform(0.01, 2.0))), isl,
                               rng.uniform(1, 1500), isl * rng.uniform(1.0, 3.0), rng.uniform(0, 1.5),
                               cached, rng.choice((0.0, 0.0, 5000.0)), points,
                               cached * rng.choice((0.0, 0.5)))
            slo = (rng.uniform(100, 8000), rng.uniform(5, 200), rng.choice((50.0, 90.0, 99.0, 99.9)))
            b0 = rng.choice((0.0, rng.uniform(0, 64)))
            got, want = rm.meets_at(cls, *slo, b0), ref.meets_at(cls, *slo, b0)
            assert got[0] is want[0] and got[1].hex() == want[1].hex(), (mname, ename, cls, slo, b0)
            verdicts[got[0]] += 1
            st = ref.evaluate([cls], slo[2], slo_ms=slo[:2], b0=b0)
            ways.add(st.reason.split(" ")[0] if not st.stable else "met" if got[0]
                     else "ttft" if max(st.ttft_s) * 1e3 > slo[0] else "tpot")
            if not st.stable:
                continue
            # SLOs on the reference's own TTFT and TPOT percentile, and one float below: a verdict that
            # agrees there agrees on the floats themselves, not just far from the boundary
            ttft = max(st.ttft_s) * 1e3
            tpot = ref.evaluate([cls], slo[2], b0=b0).tpot_s * 1e3
            for t1, t2 in ((ttft, 1e9), (math.nextafter(ttft, 0), 1e9), (1e9, tpot),
                           (1e9, math.nextafter(tpot, 0)), (1e9, tpot * (1 + 1e-4)), (ttft, tpot)):
                a, b = rm.meets_at(cls, t1, t2, slo[2], b0), ref.meets_at(cls, t1, t2, slo[2], b0)
                assert a[0] is b[0] and a[1].hex() == b[1].hex(), (mname, ename, cls, t1, t2)
                edges += 1
    assert min(verdicts.values()) > 300, verdicts
    # met; missed on TTFT or the TPOT tail; unstable: prefill saturated, a batch past max_num_seqs, seats
    # ("a decode batch of ...") or KV at the percentile, the KV cache's mean
    assert ways >= {"met", "ttft", "tpot", "prefill", "needs", "a", "KV"}, ways
    assert edges > 3000, edges


@pytest.mark.skipif(not step_mod.KERNEL, reason="the kernel is not built or switched off")
def test_the_compiled_tpot_tail_is_the_python_one():
    """The TPOT tail compiled (``trimtab.cost.step.tpot_tail``: what ``decide`` runs, and ``evaluate`` outside
    decision mode) against ``trimtab.cost.queueing.tpot_tail``: the same float, over one to four classes,
    without a bound (the full percentile search) and with bounds drawn at random and at the tail's own
    percentile (the search's end, one float under it); skews from the gamma's to the normal's (a request
    decoding for long enough that the prompts arriving meanwhile average out)."""
    from trimtab.cost.queueing import tpot_tail

    assert step_mod.queueing_compiled()  # scipy's gammaincc found through its C API
    rng = random.Random(3)
    normal = n = 0
    for _ in range(3000):
        t_d = rng.uniform(0.005, 0.08)
        tpot = t_d * rng.uniform(1, 1.5)
        pct = rng.choice((50.0, 90.0, 99.0))
        long = rng.random() < 0.3  # ~1e14 tokens, behind prompts of tens of seconds: skew under 1e-6
        classes, s, k = [], [], []
        for _ in range(rng.choice((1, 1, 2, 4))):
            osl = 1e14 if long else rng.uniform(1, 2000)
            points = rng.choice(((), ((1.0, 0.2), (osl, 0.5), (40.0, 0.3))))
            classes.append(TrafficClass(rng.uniform(0.01, 50), 1000.0, osl, isl_cv2=rng.uniform(0, 2),
                                        osl_points=points))
            k.append(rng.uniform(1, 8))
            s.append(k[-1] * t_d + rng.uniform(5, 100) if long else k[-1] * t_d * rng.uniform(0.9, 4))
        free = tpot_tail(classes, s, k, t_d, tpot, pct)
        normal += long
        for bound in (None, rng.uniform(tpot * 0.9, tpot * 3), free, math.nextafter(free, 0),
                      free * (1 + 2e-4)):
            want = tpot_tail(classes, s, k, t_d, tpot, pct, bound)
            got = step_mod.tpot_tail(classes, s, k, t_d, tpot, pct, bound)
            assert got == want, (classes, s, k, t_d, tpot, pct, bound)
            n += 1
    assert n == 15000 and normal > 500


@pytest.mark.skipif(not step_mod.KERNEL, reason="the kernel is not built or switched off")
def test_the_compiled_capacity_search_finds_the_same_rate():
    """``capacity_rps`` by ``Step.capacity`` (the search of ``capacity_rps`` and ``trimtab.cost.search``'s
    ``bracket`` and ``bisect_max``, compiled) against the interpreted search over the interpreted decision:
    the same rate to the bit, without a guess and with guesses below, at, near and above the answer (a sibling
    shape's capacity), where no rate meets the SLOs (0.0) and where the replica cannot hold the class."""
    rng = random.Random(5)
    kinds = set()
    for mname, _, rm, ref in _pairs():
        assert rm._offer(TrafficClass(1.0, 100.0, 10.0), 1e3, 50.0, 99.0) is not None
        assert ref._offer(TrafficClass(1.0, 100.0, 10.0), 1e3, 50.0, 99.0) is None
        for _ in range(40):
            isl = rng.uniform(50, 12000)
            points = rng.choice(((), ((1.0, 0.2), (10.0, 0.3), (400.0, 0.5))))
            cls = TrafficClass(0.0, isl, rng.uniform(2, 1500), isl * rng.uniform(1.0, 3.0),
                               rng.uniform(0, 1.5), rng.choice((0.0, rng.uniform(0, 0.8) * isl)),
                               osl_points=points)
            slo = (rng.choice((rng.uniform(100, 8000), 1.0)), rng.uniform(5, 200), rng.choice((90.0, 99.0)))
            want = ref.capacity_rps(cls, *slo)
            for guess in (None, want, want * (1 + rng.uniform(-0.3, 0.3)), want * 1.004, 1e9, 0.5):
                # (with a guess the interpreted search itself may end one step off the unguessed rate: a
                # decision at the edge can tip with the batch its fixed point starts from)
                got = rm.capacity_rps(cls, *slo, guess=guess)
                assert got.hex() == ref.capacity_rps(cls, *slo, guess=guess).hex(), (mname, cls, slo, guess)
            kinds.add("none" if want == 0.0 and rm.holds(cls) else "held not" if want == 0.0 else "rate")
    assert kinds >= {"none", "rate"}, kinds


@pytest.mark.skipif(not step_mod.KERNEL, reason="the kernel is not built or switched off")
def test_the_compiled_role_searches_find_the_same_rates():
    """``capacity_rps_role`` compiled (``Step.role_capacity``: ``evaluate_prefill`` and ``prefill_meets``,
    ``evaluate_decode`` with its seats, KV and TPOT at the percentile, and the bisection) against the
    interpreted search: the same rate to the bit for prefill and decode replicas, with and without a KV
    hand-off, at percentiles at and above the median, including rates of 0."""
    rng = random.Random(9)
    seen = set()
    for mname, ename, rm, ref in _pairs(tuple(sorted(load_profiles().engines))):
        for _ in range(25):
            isl = rng.uniform(50, 20000)
            cls = TrafficClass(0.0, isl, rng.uniform(1, 1500), isl * rng.uniform(1.0, 3.0),
                               rng.uniform(0, 1.5))
            role = rng.choice(("prefill", "decode"))
            args = (role, cls, rng.choice((rng.uniform(100, 9000), 5.0)), rng.uniform(5, 200),
                    rng.choice((50.0, 90.0, 99.0)), rng.choice((0.0, rng.uniform(0, 0.5))))
            got, want = rm.capacity_rps_role(*args), ref.capacity_rps_role(*args)
            assert got.hex() == want.hex(), (mname, ename, args)
            seen.add((role, want > 0))
    assert seen == {("prefill", True), ("prefill", False), ("decode", True), ("decode", False)}, seen


def test_the_switch_runs_the_reference_alone_with_the_same_rates():
    """``TRIMTAB_COST_KERNEL=python`` (docs/cost-model.md): no kernel anywhere (step time, decision, search,
    tail), and the capacities it finds are the kernel's, to the bit."""
    import os
    import subprocess
    import sys

    code = ("import trimtab.cost.step as s; from trimtab.cost.model import ReplicaModel, TrafficClass; "
            "from trimtab.profiles.loader import load_profiles; p = load_profiles(); "
            "rm = ReplicaModel(p.models['mixtral-8x7b'], p.gpus['a100-80gb'], p.engines['vllm'], 2); "
            "assert not s.KERNEL and not s.queueing_compiled() and rm.step_s == rm._step_py; "
            "c = TrafficClass(0.0, 1500.0, 300.0, 4000.0, 0.5, osl_points=((10.0, 0.4), (500.0, 0.6))); "
            "print(rm.capacity_rps(c, 3000.0, 60.0, 99.0).hex(), "
            "rm.capacity_rps_role('decode', c, 3000.0, 60.0, 99.0).hex())")
    env = {**os.environ, "TRIMTAB_COST_KERNEL": "python"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    p = load_profiles()
    rm = ReplicaModel(p.models["mixtral-8x7b"], p.gpus["a100-80gb"], p.engines["vllm"], 2)
    c = TrafficClass(0.0, 1500.0, 300.0, 4000.0, 0.5, osl_points=((10.0, 0.4), (500.0, 0.6)))
    assert out.stdout.split() == [rm.capacity_rps(c, 3000.0, 60.0, 99.0).hex(),
                                  rm.capacity_rps_role("decode", c, 3000.0, 60.0, 99.0).hex()]
