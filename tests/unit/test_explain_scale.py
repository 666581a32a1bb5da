"""``trimtab explain`` on large specs: its fast paths give the plain paths' answers on small ones (a GPU-count
change reuses candidates, the planner's decomposed solve, the LP-based alternatives above
EXACT_MAX_INTEGERS), and the work they skip is not done."""
from __future__ import annotations

import re
from dataclasses import replace

import pytest

import trimtab.milp.decompose as decompose
import trimtab.planning.explain as ex
import trimtab.planning.feasibility as feas
from trimtab.ir.lower import lower
from trimtab.milp.candidates import build_candidates
from trimtab.spec.load import load_spec
from trimtab.solvers import SolveOptions, get_backend
from tests.conftest import QUICKSTART, ROOT

HIGHS = get_backend("highs")


def _at(ir, count: int, **only):
    """``ir`` with every GPU count (or the types named in ``only``) set to ``count``."""
    return replace(ir, gpus=tuple(replace(p, count=only.get(p.type, count)) for p in ir.gpus))


def _same(a, b) -> None:
    assert a.candidates == b.candidates
    assert a.pruned == b.pruned  # the reasons naming the count included
    assert a.best == b.best


@pytest.mark.parametrize("example,counts", [
    ("moe.yaml", (2, 3, 4, 8, 9, 16, 64)),  # expert-parallel layouts (dp x ep) appear with the count
    ("disaggregated.yaml", (2, 4, 5, 8, 64)),  # P/D sides too
    ("quickstart.yaml", (2, 5)),  # the 70B model fits from 2 GPUs on
])
def test_count_change_reuses_candidates_as_a_full_build(example, counts):
    ir = _at(lower(load_spec(ROOT / "examples" / example)), 1)
    base = build_candidates(ir, jobs=1)
    reuse = feas.Counts(ir, base)
    pool = ir.gpus[0]
    for n in counts:
        ir2, got = reuse.count(pool.type, n)
        assert ir2 == _at(ir, 1, **{pool.type: n})
        _same(got, build_candidates(ir2, jobs=1))
    # a build per layout size crossed, not per count: the counts of one interval share one
    assert len(reuse.built) - 1 <= len(counts)
    if example == "moe.yaml":
        assert len(reuse.built) - 1 < len(counts)
    # back to the start: the set given, reasons and all
    _same(reuse.count(pool.type, 1)[1], base)


@pytest.fixture(scope="module")
def short_ir():
    """The quickstart at four GPUs of each type: infeasible; every one type alone, and autocomplete's TTFT,
    repair it."""
    return _at(lower(load_spec(QUICKSTART)), 4)


def _alts(e) -> list[list[tuple]]:
    return [[(c.path, c.new) for c in alt] for alt in e.alternatives]


@pytest.mark.slow  # three explains of a 3-workload spec, ~20 s
def test_explain_on_the_decomposed_and_lp_paths_gives_the_whole_milps_alternatives(short_ir, monkeypatch):
    opts = SolveOptions()
    whole = ex.explain(short_ir, HIGHS, opts)
    assert not whole.feasible and whole.alternatives
    monkeypatch.setattr(decompose, "MIN_CANDIDATES", 0)  # the planner's split (solve_ir) on every solve
    split = ex.explain(short_ir, HIGHS, opts)
    assert _alts(split) == _alts(whole) and split.notes == whole.notes == []
    # the large-spec path: no bisection, each number from an LP relaxation: a joint change that suffices,
    # and for each single change of the whole-MILP path the same or a larger number offered, or a lower
    # bound below it in a note
    monkeypatch.setattr(ex, "EXACT_MAX_INTEGERS", 0)
    lp = ex.explain(short_ir, HIGHS, opts)
    offered = {a[0][0]: a[0][1] for a in _alts(lp) if len(a) == 1}
    for alt in whole.alternatives:
        if len(alt) > 1:
            continue
        (c,) = alt
        if c.path in offered:
            assert offered[c.path] >= c.new
            continue
        bound = [float(re.search(r"at least (\d+)", n).group(1)) for n in lp.notes if n.startswith(c.where)]
        assert bound and bound[0] <= c.new, (c.render(), lp.notes)
    assert lp.notes[-1].startswith("SLO relaxations tried for ")
    assert any(len(a) > 1 for a in lp.alternatives)  # the LP's plan rounded up
    for alt in lp.alternatives:
        if any(c.origin.section == "workloads" for c in alt):
            continue  # an SLO: verified by its own LP plan rounded up
        ir2 = ex.relaxed_ir(short_ir, ((c.origin, c.new) for c in alt))
        assert feas.min_cost(ir2, build_candidates(ir2, jobs=1), HIGHS, opts) is not None, alt


def test_count_bisection_builds_candidates_only_where_a_shape_appears(short_ir, monkeypatch):
    # Each step of a GPU-count bisection was a full candidate build (seconds apiece at 100 workloads); at
    # four GPUs of each type every layout of the quickstart but those of 8 GPUs fits, so the only builds
    # are at the counts that admit one of those.
    built = []
    real = feas.build_candidates

    def counting(ir, *a, **k):
        built.append(tuple(p.count for p in ir.gpus))
        return real(ir, *a, **k)
    monkeypatch.setattr(feas, "build_candidates", counting)
    monkeypatch.setattr(ex, "_slo_changes", lambda *a, **k: [])  # (their per-workload builds aside)
    cands = real(short_ir, jobs=1)
    e = ex.explain(short_ir, HIGHS, SolveOptions(), cands)
    assert ["gpus.l4.count"] in [[c.path for c in a] for a in e.alternatives]
    assert all(any(n >= 8 for n in counts) for counts in built), built
    assert len(built) <= len(short_ir.gpus), built


def test_slo_relaxations_skip_workloads_that_share_no_type_with_the_short_rows():
    ir = replace(lower(load_spec(QUICKSTART)), budget_usd_per_hour=None)
    cands = build_candidates(ir, jobs=1)
    # chat on h100s alone, the others on l4s alone: two parts that share nothing
    keep = tuple(c for c in cands.candidates if (c.workload == "chat") == (c.gpu == "h100-sxm")
                 and c.gpu in ("h100-sxm", "l4"))
    cs = replace(cands, candidates=keep)
    names, why = feas.repairing_workloads(ir, cs, {"h100-sxm"}, [])
    assert names == ["chat"] and why.startswith("2 workloads share no GPU type with h100-sxm")
    names, why = feas.repairing_workloads(ir, cs, {"l4"}, [])
    assert names == [w.name for w in ir.workloads if w.name != "chat"]
    names, why = feas.repairing_workloads(ir, cs, {"h100-sxm", "l4"}, [])
    assert names == [] and why.startswith("no one SLO repairs the spec")
    # a budget couples every workload: none is left out
    assert feas.repairing_workloads(replace(ir, budget_usd_per_hour=100.0), cs, {"l4"}, [])[0] == \
        [w.name for w in ir.workloads]


def test_decomposed_solves_give_the_whole_milps_count_and_joint_alternatives(short_ir, monkeypatch):
    # (the quick suite's check of the split path; the SLO bisections, most of the time, in the slow test)
    monkeypatch.setattr(ex, "_slo_changes", lambda *a, **k: [])
    whole = ex.explain(short_ir, HIGHS, SolveOptions())
    monkeypatch.setattr(decompose, "MIN_CANDIDATES", 0)
    split = ex.explain(short_ir, HIGHS, SolveOptions())
    assert _alts(split) == _alts(whole) and len(whole.alternatives) >= 4


def test_a_large_feasible_spec_prices_the_slos_of_the_costliest_workloads_and_says_so(monkeypatch):
    ir = lower(load_spec(QUICKSTART))
    small = ex.explain(ir, HIGHS, SolveOptions())
    assert small.feasible and small.notes == []
    monkeypatch.setattr(ex, "EXACT_MAX_INTEGERS", 0)
    monkeypatch.setattr(ex, "SLO_MAX_WORKLOADS", 1)
    large = ex.explain(ir, HIGHS, SolveOptions())
    assert large.cost_usd_per_hour == pytest.approx(small.cost_usd_per_hour)
    (note,) = large.notes
    assert note.startswith("SLOs priced for the 1 workloads whose replicas cost most (") and "other 2" in note
    slo = [b for b in large.binding if ".slo:" in b]
    assert len(slo) <= 1 and set(slo) <= set(small.binding)
