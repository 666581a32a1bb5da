"""The correction rounds for adapter plans (compiler/planning/rounds.py with
trimtab.planning.lora.LoraPlanner): which shared candidates a workload may use, the ``lora-`` regimes of the
capacity prior, and the workload-wide correction after a simulated miss, on the real cost model, solver and
simulator."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from trimtab.planning.lora import LoraPlanner
from trimtab.planning.lora_candidates import usable
from trimtab.ir.lower import lower
from trimtab.planning.rounds import (FIRST_TRY_MIN, LORA_PREFIX, capacity_prior_table, family_of,
                                     first_round_share,
                             first_try_worth, prior_derates, regime)
from trimtab.spec.load import load_spec
from tests.sim.test_rounds_prior import first_simulated_round

ROOT = Path(__file__).resolve().parents[2]
MULTI_LORA = ROOT / "examples" / "multi-lora.yaml"


def _problem():
    ir = lower(load_spec(MULTI_LORA))
    planner = LoraPlanner()
    return ir, planner, planner.candidates(ir)


def test_peers_are_the_shared_candidates_of_the_workloads_group_and_tenant_colour():
    ir, planner, prob = _problem()
    peers = planner.peers(prob)
    assert set(peers) == {w.name for w in ir.workloads}
    by_id = {c.id: c for c in prob.cands}
    for w in ir.workloads:
        units = [u for u in prob.units if u.workload == w.name]
        # the oracle: every candidate some unit of the workload may be routed to, and nothing else
        assert set(peers[w.name]) == {c.id for c in prob.cands for u in units if usable(u, c)}
        groups = {(by_id[c].lora_group.name, by_id[c].lora_group.color) for c in peers[w.name]}
        assert groups == {(u.group, u.color) for u in units}
    # acme is dedicated: its workload shares no candidate with the other workloads of its base model
    assert not set(peers["acme-legal"]) & (set(peers["globex-support"]) | set(peers["qwen-base"]))
    # globex and the tenant-less base traffic may share replicas
    assert set(peers["globex-support"]) & set(peers["qwen-base"])
    assert planner.peers(prob, fitted=True) == peers


def test_adapter_specs_take_the_lora_regimes_of_the_prior():
    ir, planner, prob = _problem()
    assert (family_of(ir) == LORA_PREFIX
            and family_of(lower(load_spec(ROOT / "examples" / "quickstart.yaml"))) == "")
    table = capacity_prior_table()
    assert any(k.startswith(LORA_PREFIX) for k in table) and LORA_PREFIX + "default" in table
    peers = planner.peers(prob, fitted=True)
    prior = prior_derates(ir, peers)
    for cid in {c for ids in peers.values() for c in ids}:
        users = [w for w in ir.workloads if cid in peers[w.name]]
        factors = [table.get(regime(w, lora=True), table[LORA_PREFIX + "default"]) for w in users]
        assert all(regime(w, lora=True).startswith(LORA_PREFIX) for w in users)
        # a candidate several workloads may use is held to the lowest of their factors
        assert prior.get(cid, 1.0) == min(min(factors), 1.0)


def test_first_try_uses_the_adapter_familys_first_round_share():
    q = first_round_share(LORA_PREFIX)
    assert q is not None and 0 < q < 1 and q != first_round_share()
    lo = SimpleNamespace(lora=object())
    for n in (1, 2, 9):
        assert first_try_worth(SimpleNamespace(workloads=[None] * n, **vars(lo))) == (q ** n >= FIRST_TRY_MIN)


def test_a_simulated_miss_derates_every_shared_candidate_the_workload_may_use():
    # the LoRA cost model's own capacities, no prior, then one simulated round
    res, derate, peers = first_simulated_round(load_spec(MULTI_LORA), LoraPlanner())
    missed = [n for n in res.intervals if not res.accepted(n)]
    assert missed, "the analytic multi-lora plan is expected to miss in simulation"
    for n in missed:
        worst = res.worst_deployment(n)
        assert 0.5 < derate[worst] < 1.0
        # every candidate the workload may be moved to is corrected, not only the deployment at fault
        assert all(derate.get(c, 1.0) < 1.0 for c in peers[n])
    untouched = set().union(*(peers[n] for n in res.intervals if n not in missed)) - set().union(
        *(peers[n] for n in missed))
    assert not any(c in derate for c in untouched)
