"""The planner's fast paths give the answers of the plain ones (issue 6, scale): candidate generation split
across processes, the MILP decomposed by workload, the capacity search's guess and decision mode."""
from __future__ import annotations

import pytest

import trimtab.milp.decompose as decompose
import trimtab.milp.fanout as fanout
from trimtab.milp.candidates import build_candidates
from trimtab.cost.factory import replica_model, traffic_class
from trimtab.milp.formulate import formulate
from trimtab.ir.lower import lower
from trimtab.milp.solve import solve_ir
from trimtab.spec.load import load_spec
from trimtab.solvers import SolveOptions, get_backend
from tests.conftest import QUICKSTART


@pytest.fixture(scope="module")
def ir():
    return lower(load_spec(QUICKSTART))


def test_split_build_is_the_serial_build(ir, monkeypatch):
    monkeypatch.setattr(fanout, "MIN_WORK", 0)
    assert fanout.build_split(ir, lambda sub: build_candidates(sub, jobs=1), 2) is not None  # the split ran
    split, serial = build_candidates(ir, jobs=2), build_candidates(ir, jobs=1)
    assert split == serial
    # the workers send back the P/D sides and floors they made, for the GPU types rebuilt alone later
    assert split.pd_memo and split.pd_memo == serial.pd_memo


def _roomy(ir):
    """The quickstart with inventories no workload mix can exhaust and no budget: the shared rows never
    bind."""
    from dataclasses import replace

    return replace(ir, budget_usd_per_hour=None, gpus=tuple(replace(p, count=4096) for p in ir.gpus))


def test_decomposed_solve_matches_the_whole(ir, monkeypatch):
    roomy = _roomy(ir)
    cands = build_candidates(roomy, jobs=1)
    be = get_backend("highs")
    whole = be.solve(formulate(roomy, cands), SolveOptions())
    monkeypatch.setattr(decompose, "MIN_CANDIDATES", 0)
    split = decompose.solve_split(roomy, cands, be, SolveOptions())
    assert split is not None  # nothing couples the workloads here: the split must be taken
    assert split.status.value == "optimal"
    assert split.objective == pytest.approx(whole.objective, rel=1e-4)
    # the parts' bounds add up to a bound of the whole MILP (they share no row)
    exact = be.solve(formulate(roomy, cands), SolveOptions(mip_rel_gap=1e-9)).objective
    assert split.bound is not None and exact * (1 - 2e-4) <= split.bound <= exact + 1e-6
    assert solve_ir(roomy, cands, be, SolveOptions()).objective == pytest.approx(whole.objective, rel=1e-4)


def test_split_memo_resolves_only_the_workloads_whose_derates_changed(ir, monkeypatch):
    # The planner's rounds keep each workload's MILP solution; a round that derates one workload's candidate
    # solves that workload again and takes the others' from the memo, and the result is a fresh solve's.
    roomy = _roomy(ir)
    cands = build_candidates(roomy, jobs=1)
    monkeypatch.setattr(decompose, "MIN_CANDIDATES", 0)
    solved: list[tuple[str, ...]] = []
    real = get_backend("highs")

    class Counting:  # the real backend, counting which workloads it is asked to solve
        name = real.name

        def solve(self, model, options):
            solved.append(tuple(sorted({v.split("[", 1)[1].split("/", 1)[0] for v in model.variables
                                        if v.startswith("route[")})))
            return real.solve(model, options)

    be = Counting()
    memo: dict = {}
    first = decompose.solve_split(roomy, cands, be, SolveOptions(), {}, memo)
    assert first is not None and len(solved) == len(roomy.workloads)
    solved.clear()
    again = decompose.solve_split(roomy, cands, be, SolveOptions(), {}, memo)
    assert solved == [] and again.values == first.values
    w0 = roomy.workloads[0].name
    bought = next(c for c in cands.candidates if c.workload == w0
                  and round(first.values.get(f"replicas[{c.id}]", 0)))
    derate = {bought.id: 0.5}
    third = decompose.solve_split(roomy, cands, be, SolveOptions(), derate, memo)
    assert solved == [(w0,)]
    fresh = decompose.solve_split(roomy, cands, real, SolveOptions(), derate)
    assert third.values == fresh.values and third.objective == pytest.approx(fresh.objective, rel=1e-12)
    assert third.objective > first.objective  # the derate took effect: more replicas for w0


def test_decomposition_never_returns_a_plan_over_inventory(ir, monkeypatch):
    from dataclasses import replace

    monkeypatch.setattr(decompose, "MIN_CANDIDATES", 0)
    cands = build_candidates(ir, jobs=1)
    be = get_backend("highs")

    def used(res):
        out: dict[str, int] = {}
        for c in cands.candidates:
            out[c.gpu] = out.get(c.gpu, 0) + round(res.values.get(f"replicas[{c.id}]", 0.0)) * c.gpus
        return out

    split = decompose.solve_split(_roomy(ir), cands, be, SolveOptions())
    assert split is not None
    u = used(split)
    g = max(u, key=u.get)
    # One GPU fewer of the busiest type than the workloads' own optima use together.
    tight = replace(ir, gpus=tuple(replace(p, count=u[g] - 1) if p.type == g else p for p in ir.gpus))
    again = decompose.solve_split(tight, cands, be, SolveOptions())
    assert again is None or all(n <= tight.gpu(k).count for k, n in used(again).items())


def test_capacity_guess_changes_nothing_but_work(ir):
    w = ir.workloads[0]
    rm = replica_model(ir, w.model, ir.gpus[0].type, 4, 1, w.dtype, 256, 2048)
    for b in w.buckets:
        cls = traffic_class(b, 0.0)
        ref = rm.capacity_rps(cls, w.slo.ttft_ms, w.slo.tpot_ms, w.slo.percentile)
        for f in (0.3, 0.97, 1.0, 1.003, 1.5, 40.0):
            got = rm.capacity_rps(cls, w.slo.ttft_ms, w.slo.tpot_ms, w.slo.percentile,
                                  guess=max(ref, 0.01) * f)
            assert got == ref


def test_capacity_search_without_the_zero_load_probe_first_finds_the_same_rates_in_fewer_evaluations(
        ir, monkeypatch):
    """The search evaluates the bisection's first FIRST_HALVINGS points before asking whether the SLO is met
    at all (a rate of 1e-9): where one of them meets it, that question is answered by monotonicity. With
    FIRST_HALVINGS = 0 the search asks it first, as it did before. Both give the same rates, 0.0 where nothing
    meets the SLO (a TTFT of 1 ms); the default takes fewer evaluations where there is a capacity, and
    FIRST_HALVINGS more where there is none (rare among the candidates: specgen's target spec 0, 133,343 ->
    126,237 evaluations in all)."""
    import trimtab.cost.model as cm

    calls = [0]
    plain = cm.ReplicaModel.meets_at  # one evaluation each (compiled or not)

    def counted(self, *a, **k):
        calls[0] += 1
        return plain(self, *a, **k)

    monkeypatch.setattr(cm.ReplicaModel, "meets_at", counted)
    # the interpreted search, whose evaluations can be counted (the compiled one takes the same points:
    # tests/cost/test_step_kernel.py)
    monkeypatch.setattr(cm.ReplicaModel, "_offer", lambda *a: None)
    got, spent = {}, {}
    for k in (0, cm.FIRST_HALVINGS):
        monkeypatch.setattr(cm, "FIRST_HALVINGS", k)
        for case in ("slo", "none"):
            calls[0] = 0
            rates = []
            for w in ir.workloads:
                for tp, mbt in ((1, 2048), (2, 8192), (4, 2048)):
                    rm = replica_model(ir, w.model, ir.gpus[0].type, tp, 1, w.dtype, 256, mbt)
                    for b in w.buckets:
                        ttft = w.slo.ttft_ms if case == "slo" else 1.0  # 1 ms: no rate meets it
                        rates.append(rm.capacity_rps(traffic_class(b, 0.0), ttft, w.slo.tpot_ms,
                                                     w.slo.percentile))
            got[k, case], spent[k, case] = rates, calls[0]
    k = cm.FIRST_HALVINGS
    assert k > 0
    assert got[k, "slo"] == got[0, "slo"] and sum(r > 0 for r in got[0, "slo"]) >= len(got[0, "slo"]) // 2
    assert got[k, "none"] == got[0, "none"] == [0.0] * len(got[0, "none"])
    assert spent[k, "slo"] < spent[0, "slo"]
    assert spent[k, "none"] == (k + 1) * spent[0, "none"]


def test_decision_mode_decides_like_a_full_evaluation(ir):
    for w in ir.workloads:
        rm = replica_model(ir, w.model, ir.gpus[0].type, 8 if "70b" in w.model else 1, 1, w.dtype, 256, 2048)
        for b in w.buckets:
            cap = rm.capacity_rps(traffic_class(b, 0.0), w.slo.ttft_ms, w.slo.tpot_ms, w.slo.percentile)
            for f in (0.2, 0.6, 0.9, 0.98, 1.05, 1.3, 3.0):
                rate = max(cap, 0.05) * f
                full = rm.evaluate([traffic_class(b, rate)], w.slo.percentile)
                fast = rm.evaluate([traffic_class(b, rate)], w.slo.percentile,
                                   slo_ms=(w.slo.ttft_ms, w.slo.tpot_ms))
                assert rm.meets(fast, w.slo.ttft_ms, w.slo.tpot_ms) == rm.meets(full, w.slo.ttft_ms,
                                                                                w.slo.tpot_ms)


def test_an_inventory_row_that_binds_is_priced_out_to_the_whole_milps_optimum(ir, monkeypatch):
    """When the workloads' own optima together buy more of one GPU type than the spec has, the decomposition
    prices that type up (a Lagrangian relaxation of its inventory row) until they fit, and returns the union
    only when it is certified optimal to the MIP gap. The oracle is the whole MILP solved by HiGHS."""
    from dataclasses import replace

    monkeypatch.setattr(decompose, "MIN_CANDIDATES", 0)
    roomy = _roomy(ir)
    cands = build_candidates(roomy, jobs=1)
    be = get_backend("highs")
    base = decompose.solve_split(roomy, cands, be, SolveOptions())
    used = {}
    for c in cands.candidates:
        used[c.gpu] = used.get(c.gpu, 0) + round(base.values.get(f"replicas[{c.id}]", 0.0)) * c.gpus
    g = max(used, key=used.get)
    priced = refuted = 0
    for less in (1, 2, 4, 8):
        tight = replace(roomy, gpus=tuple(replace(p, count=used[g] - less) if p.type == g else p
                                          for p in roomy.gpus))
        whole = be.solve(formulate(tight, cands), SolveOptions())
        split = decompose.solve_split(tight, cands, be, SolveOptions())
        if split is None:
            continue  # not certified: the whole MILP decides (solve_ir)
        if split.status.value == "infeasible":  # no plan fits (a Lagrangian bound above every GPU's worth)
            assert whole.status.value == "infeasible", whole
            refuted += 1
            continue
        if tight.gpu(g).count == 0:  # no GPU of the type left: no part may use it, nothing to price
            assert "priced out" not in split.message
            assert split.objective == pytest.approx(whole.objective, rel=2e-4)
            continue
        assert "priced out" in split.message
        priced += 1
        got = sum(round(split.values.get(f"replicas[{c.id}]", 0.0)) * c.gpus for c in cands.candidates
                  if c.gpu == g)
        assert got <= used[g] - less
        assert split.status.value == "optimal" and split.gap <= SolveOptions().mip_rel_gap
        assert split.objective == pytest.approx(whole.objective, rel=2e-4)
        # the price search's Lagrangian bound is a bound of the whole MILP, as tight as the gap it certifies
        exact = be.solve(formulate(tight, cands), SolveOptions(mip_rel_gap=1e-9)).objective
        assert split.bound <= exact + 1e-6
        assert split.objective - split.bound <= split.gap * split.objective + 1e-6
        # the row binds: the fit costs more than the unconstrained parts
        assert split.objective > base.objective
    assert priced, "no tightened inventory took the price-out path"
    # Every other type held to what the parts bought at the spec's prices: moving off the priced type must not
    # break another row (the union is checked again; None sends the whole MILP to decide).
    snug = replace(roomy, gpus=tuple(replace(p, count=used[g] - 1 if p.type == g else used.get(p.type, 0))
                                     for p in roomy.gpus))
    split = decompose.solve_split(snug, cands, be, SolveOptions())
    whole = be.solve(formulate(snug, cands), SolveOptions())
    if whole.status.value == "infeasible":  # no plan fits: a Lagrangian bound says so without the whole MILP
        assert split is not None and split.status.value == "infeasible" and "no plan fits" in split.message
    elif split is not None:
        for p in snug.gpus:
            assert sum(round(split.values.get(f"replicas[{c.id}]", 0.0)) * c.gpus
                       for c in cands.candidates if c.gpu == p.type) <= p.count
        assert split.objective == pytest.approx(whole.objective, rel=2e-4)


def test_parts_that_switch_together_are_selected_to_fit_within_the_certified_gap(ir, monkeypatch):
    """Identical workloads switch off a priced GPU type at the same price, all at once: just below it they buy
    more than the spec has, just above it none, and the Lagrangian's gap is that slack times the price. The
    selection over the plans met keeps as many as fit (``trimtab.milp.columns``). The oracle is the whole
    MILP solved by HiGHS:
    the union fits, costs at least the optimum, and within the gap it certifies."""
    from dataclasses import replace

    monkeypatch.setattr(decompose, "MIN_CANDIDATES", 0)
    roomy = _roomy(ir)
    w = max(roomy.workloads, key=lambda w: w.rate_rps)
    twins = replace(roomy, workloads=tuple(replace(w, name=f"{w.name}-{i}") for i in range(6)))
    cands = build_candidates(twins, jobs=1)
    be = get_backend("highs")
    base = decompose.solve_split(twins, cands, be, SolveOptions())
    every = cands.candidates
    used: dict[str, int] = {}
    for c in every:
        used[c.gpu] = used.get(c.gpu, 0) + round(base.values.get(f"replicas[{c.id}]", 0.0)) * c.gpus
    g = max(used, key=used.get)
    one = used[g] // 6  # what each twin buys of it unconstrained
    tight = replace(twins, gpus=tuple(replace(p, count=used[g] - 2 * one) if p.type == g else p
                                      for p in twins.gpus))
    split = decompose.solve_split(tight, cands, be, SolveOptions())
    whole = be.solve(formulate(tight, cands), SolveOptions())
    assert split is not None and "priced out" in split.message
    assert sum(round(split.values.get(f"replicas[{c.id}]", 0.0)) * c.gpus for c in every if c.gpu == g) \
        <= tight.gpu(g).count
    assert whole.objective - 1e-6 <= split.objective <= whole.objective / (1 - split.gap) + 1e-6
    assert split.gap <= decompose.PRICE_GAP
    # the repair is what fits: four twins keep the priced type (without it all six move off it together)
    kept = [t.name for t in tight.workloads
            if any(round(split.values.get(f"replicas[{c.id}]", 0.0)) for c in every
                   if c.gpu == g and c.workload == t.name)]
    assert len(kept) == 4, kept


def _bought(res, cands) -> dict[str, int]:
    used: dict[str, int] = {}
    for c in cands.candidates:
        used[c.gpu] = used.get(c.gpu, 0) + round(res.values.get(f"replicas[{c.id}]", 0.0)) * c.gpus
    return used


def test_rows_that_bind_in_turn_are_priced_out_together(ir, monkeypatch):
    """Pricing the most-bought GPU type out moves its parts onto another type; hold that one to fewer GPUs
    than they then want and both rows bind: one price searched alone cannot fit both, so the decomposition
    prices them together (``trimtab.milp.columns``). The oracle is the whole MILP solved by HiGHS: the union
    fits every row, and costs the optimum within the gap it certifies."""
    from dataclasses import replace

    monkeypatch.setattr(decompose, "MIN_CANDIDATES", 0)
    roomy = _roomy(ir)
    cands = build_candidates(roomy, jobs=1)
    be = get_backend("highs")
    used = _bought(decompose.solve_split(roomy, cands, be, SolveOptions()), cands)
    g = max(used, key=used.get)
    tight = replace(roomy, gpus=tuple(replace(p, count=used[g] - 2) if p.type == g else p
                                      for p in roomy.gpus))
    moved = _bought(decompose.solve_split(tight, cands, be, SolveOptions()), cands)
    h = max((t for t in moved if t != g), key=lambda t: moved[t] - used.get(t, 0))
    assert moved[h] > used.get(h, 0) + 1, (used, moved)
    both = replace(tight, gpus=tuple(replace(p, count=(used.get(h, 0) + moved[h]) // 2) if p.type == h else p
                                     for p in tight.gpus))
    split = decompose.solve_split(both, cands, be, SolveOptions())
    whole = be.solve(formulate(both, cands), SolveOptions())
    assert split is not None and "priced out together" in split.message, split
    got = _bought(split, cands)
    assert all(got.get(p.type, 0) <= p.count for p in both.gpus), got
    assert whole.objective - 1e-6 <= split.objective <= whole.objective / (1 - split.gap) + 1e-6
    assert split.gap <= decompose.PRICE_GAP


def test_where_no_selection_of_known_plans_fits_the_repair_solves_the_rest_together():
    """Two workloads whose known plans fit no row together (each buys 2 of X's 3 GPUs or 4 of Y's 3): no
    selection exists, while the selection's LP relaxation takes one workload's X plan whole and splits the
    other. The repair solves the split one, the whole one choosing again among its plans (its plans are
    handed over); what the joint solve answers is the answer (``trimtab.milp.columns._repair``)."""
    import trimtab.milp.columns as columns
    from trimtab.milp.parts import Plan
    from trimtab.solvers.base import SolveResult, Status, Termination

    def plan(cost, **gpus):
        return Plan(SolveResult(Status.OPTIMAL, Termination.CONVERGED, objective=cost), gpus)

    plans = {"a": [plan(10.0, x=2), plan(30.0, y=4)], "b": [plan(10.0, x=2), plan(31.0, y=4)]}
    count, types = {"x": 3, "y": 3}, ["x", "y"]
    be = get_backend("highs")
    assert columns._select(plans, count, types, be, SolveOptions()) is None
    asked = []
    fits = SolveResult(Status.OPTIMAL, Termination.CONVERGED, objective=12.0)

    def joint(names, others):
        asked.append((list(names), others))
        return {n: fits for n in list(names) + list(others)}

    chosen, together = columns._repair(plans, count, types, be, SolveOptions(), joint)
    assert together == 1 and len(asked) == 1
    (free,), others = asked[0]
    kept = ({"a", "b"} - {free}).pop()
    assert others == {kept: plans[kept]}
    assert chosen == {"a": fits, "b": fits}
    # no answer from the joint solve: no repair (the whole MILP decides)
    assert columns._repair(plans, count, types, be, SolveOptions(), lambda *a: None) == (None, 0)


def test_parts_solved_together_give_each_part_a_solution_of_the_joint_milp(ir):
    """``Parts.joint`` (the repair's solve): one workload's candidates in one MILP in which another chooses
    among its known plans, within a row that binds. The union (the solved part's values by its own model's
    variables, the other's chosen plan) is a solution of the whole MILP of both at the joint's objective."""
    from dataclasses import replace

    from trimtab.milp.parts import Parts

    roomy = _roomy(ir)
    a, b = [w.name for w in roomy.workloads][:2]
    both = replace(roomy, workloads=tuple(w for w in roomy.workloads if w.name in (a, b)))
    cands = build_candidates(both, jobs=1)
    be = get_backend("highs")
    ps = Parts(both, cands, be, SolveOptions(), {}, {})
    assert ps.split()
    alone = ps.solve([a, b])
    bought = _bought(alone[a], cands)
    for t, n in _bought(alone[b], cands).items():
        bought[t] = bought.get(t, 0) + n
    g = max(bought, key=bought.get)  # the type both buy most of, one GPU short
    tight = replace(both, gpus=tuple(replace(p, count=bought[g] - 1) if p.type == g else p
                                     for p in both.gpus))
    ps = Parts(tight, cands, be, SolveOptions(), {}, {})
    assert ps.split()
    pb = ps.plan(b, ps.solve([b])[b], {})
    got = ps.joint([a], {b: [pb]}, 0.0)
    assert got is not None and set(got) == {a, b} and got[b] is pb.result  # b's one plan, chosen
    values = {**got[a].values, **got[b].values}
    m = formulate(tight, cands)
    assert set(values) == set(m.variables)
    assert m.violations(values) == []
    assert got[a].objective + got[b].objective == pytest.approx(m.evaluate(m.objective, values), rel=1e-9)


def test_parts_solved_in_processes_are_the_parts_solved_in_one(ir, monkeypatch):
    """The workload MILPs of a price search are solved in forked processes when there are many; each part's
    answer is the same in any process, so the split's answer does not depend on ``TRIMTAB_JOBS``."""
    import trimtab.milp.parts as parts

    monkeypatch.setattr(decompose, "MIN_CANDIDATES", 0)
    monkeypatch.setattr(parts, "MIN_FORK", 2)
    roomy = _roomy(ir)
    cands = build_candidates(roomy, jobs=1)
    be = get_backend("highs")
    got = {}
    for jobs in ("1", "2"):
        monkeypatch.setenv("TRIMTAB_JOBS", jobs)
        ps = parts.Parts(roomy, cands, be, SolveOptions(), {}, {})
        assert ps.split()
        prices = {roomy.gpus[0].type: 1.5}
        got[jobs] = {n: (r.objective, r.values) for n, r in ps.solve([w.name for w in roomy.workloads],
                                                                      prices).items()}
    assert got["1"] == got["2"]


def test_rows_no_fractional_plan_fits_make_the_split_infeasible(ir, monkeypatch):
    """Each GPU type held to the most any one workload buys of it: every part fits alone, their union does
    not, and no price can fit it (the LP relaxation is infeasible), so the split answers infeasible at once
    instead of searching prices. The oracle is the whole MILP solved by HiGHS."""
    from dataclasses import replace

    from trimtab.milp.parts import Parts

    monkeypatch.setattr(decompose, "MIN_CANDIDATES", 0)
    roomy = _roomy(ir)
    cands = build_candidates(roomy, jobs=1)
    be = get_backend("highs")
    ps = Parts(roomy, cands, be, SolveOptions(), {}, {})
    assert ps.split()
    most: dict[str, int] = {}
    for n, r in ps.solve([w.name for w in roomy.workloads]).items():
        for t, k in ps.plan(n, r, {}).gpus.items():
            most[t] = max(most.get(t, 0), k)
    held = replace(roomy, gpus=tuple(replace(p, count=most.get(p.type, 0)) for p in roomy.gpus))
    assert be.solve(formulate(held, cands), SolveOptions()).status.value == "infeasible"
    split = decompose.solve_split(held, cands, be, SolveOptions())
    assert split is not None and split.status.value == "infeasible", split


def test_a_part_whose_optimum_cannot_have_moved_is_not_solved_again(ir, monkeypatch):
    """A price step that raises only types a part's optimum does not buy leaves that optimum optimal (every
    other plan costs as much or more, it costs the same): the part is not solved again, and its answer costs
    what the part solved afresh at the new prices costs (the oracle: HiGHS on the part from scratch, no
    memo). Raising a type the optimum buys solves it again."""
    import trimtab.milp.parts as parts

    monkeypatch.setenv("TRIMTAB_JOBS", "1")
    roomy = _roomy(ir)
    cands = build_candidates(roomy, jobs=1)
    be = get_backend("highs")
    calls = []

    class Counting:
        name = be.name

        def solve(self, model, options):
            calls.append(model.name)
            return be.solve(model, options)

    ps = parts.Parts(roomy, cands, Counting(), SolveOptions(), {}, {})
    assert ps.split()
    names = [w.name for w in roomy.workloads]
    bought = {n: ps.plan(n, r, {}).gpus for n, r in ps.solve(names).items()}
    unused = sorted({c.gpu for c in cands.candidates} - {t for g in bought.values() for t in g})
    assert unused  # the case this test is for
    calls.clear()
    raised = {t: 2.0 for t in unused}
    got = ps.solve(names, raised)
    assert calls == []
    fresh = parts.Parts(roomy, cands, be, SolveOptions(), {}, {})
    assert fresh.split()
    for n, r in fresh.solve(names, raised).items():
        assert abs(got[n].objective - r.objective) <= SolveOptions().mip_rel_gap * r.objective + 1e-9
    used = sorted(bought[names[0]])[0]
    ps.solve(names, {**raised, used: 2.0})
    assert calls  # its optimum's price moved: solved again


def test_parts_are_solved_as_small_milps_to_the_same_optimum(ir, monkeypatch):
    """A decomposed solve gives each workload part ``SolveOptions.small`` (HiGHS without its sub-MIP
    heuristics, feasibility jump and restarts) and nothing else; each part so solved has the default's
    optimum within the MIP gap."""
    from trimtab.solvers.pulp_backend import _highs_model

    monkeypatch.setattr(decompose, "MIN_CANDIDATES", 0)
    roomy = _roomy(ir)
    cands = build_candidates(roomy, jobs=1)
    real = get_backend("highs")
    parts, whole = [], []

    class Spy:
        name = real.name

        def solve(self, model, options):
            (parts if len(model.constraints) < len(formulate(roomy, cands).constraints) else whole).append(
                (model, options))
            return real.solve(model, options)

    monkeypatch.setattr("trimtab.milp.parts.jobs_default", lambda: 1)  # (the spy's records in this process)
    assert decompose.solve_split(roomy, cands, Spy(), SolveOptions()) is not None
    assert len(parts) == len(roomy.workloads) and all(o.small for _, o in parts)
    assert not any(o.small for _, o in whole)
    for model, options in parts:
        small = real.solve(model, options)
        default = real.solve(model, SolveOptions())
        assert small.objective == pytest.approx(default.objective, rel=options.mip_rel_gap)

    def switches(options) -> list:
        h, _ = _highs_model(parts[0][0], options)
        got = [h.getOptionValue(k) for k in ("mip_heuristic_run_rins", "mip_heuristic_run_rens",
                                             "mip_heuristic_run_root_reduced_cost",
                                             "mip_heuristic_run_feasibility_jump", "mip_allow_restart")]
        return [g[1] if isinstance(g, tuple) else g for g in got]  # ((status, value) in newer highspy)

    assert switches(parts[0][1]) == [False] * 5 and switches(SolveOptions()) == [True] * 5
