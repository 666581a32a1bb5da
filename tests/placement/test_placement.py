"""Topology from the spec (or derived), CP-SAT placement of replicas, and check's placement verifier."""
from __future__ import annotations

import pytest
import yaml

import trimtab as tt
from trimtab.gate.analytic import check as analytic_check
from trimtab.errors import InfeasibleError, InputError
from trimtab.ir.lower import lower
from trimtab.milp.placement import place
from trimtab.spec.load import load_spec
from trimtab.ir.topology import build_topology
from tests.conftest import SMALL_SPEC, golden_plan, unit

NODES = """\
nodes:
  - {name: hgx, gpu: h100-sxm, count: 2, gpus_per_node: 8, nvlink_domain: 4, rack: r1}
  - {name: pcie, gpu: l4, count: 1, gpus_per_node: 8, rack: r2, nic_gbps: 12.5}
network: {inter_rack_gbps: 50}
"""


def spec_and_ir(text: str):
    s = load_spec("s.yaml", text=text)
    return s, lower(s)


def test_derived_topology_fills_nodes():
    s, ir = spec_and_ir(SMALL_SPEC.replace("count: 8, usd_per_hour: 4.0", "count: 12, usd_per_hour: 4.0"))
    topo = build_topology(s, ir)
    assert [(n.name, n.gpus) for n in topo.nodes if n.gpu == "h100-sxm"] == [("h100-sxm-0", 8),
                                                                             ("h100-sxm-1", 4)]


def test_declared_topology_and_bandwidths():
    s, ir = spec_and_ir(SMALL_SPEC + NODES)
    topo = build_topology(s, ir)
    assert [n.name for n in topo.nodes] == ["hgx-0", "hgx-1", "pcie"]
    assert topo.bandwidth_gbps("hgx-0", "hgx-0") == 450  # NVLink
    assert topo.bandwidth_gbps("hgx-0", "hgx-1") == 400  # two NICs on one rack switch
    assert topo.bandwidth_gbps("hgx-0", "pcie") == 12.5  # the PCIe node's NIC is the bottleneck
    g = topo.graph()
    assert g.edges["rack:r1", "core"]["gbps"] == 50


def test_nodes_must_hold_the_listed_gpus():
    with pytest.raises(InputError) as exc:
        s, ir = spec_and_ir(SMALL_SPEC + NODES.replace("count: 2, gpus_per_node: 8",
                                                       "count: 1, gpus_per_node: 4"))
        build_topology(s, ir)
    assert "gpus[0] (h100-sxm).count: 8 GPUs listed but the nodes hold only 4" in exc.value.lines[0]


def test_bad_nodes_are_refused_at_load_with_their_line():
    """specgen_mix seed 32 (issue 35): an NVLink domain of 3 on 2-GPU nodes planned for 15 s and was refused
    only when the plan was placed, without a line, and beside it a false "the nodes hold only 0 h100-sxm"
    (the group with the bad domain was not counted). The loader now names each problem with its line before
    any planning, and counts the group's GPUs."""
    bad_domain = NODES.replace("count: 2, gpus_per_node: 8, nvlink_domain: 4",
                               "count: 4, gpus_per_node: 2, nvlink_domain: 3")
    with pytest.raises(InputError) as exc:
        load_spec("s.yaml", text=SMALL_SPEC + bad_domain)
    assert exc.value.lines == ["s.yaml:17: nodes[0] (hgx).nvlink_domain: 3 does not divide gpus_per_node 2"]
    unlisted = NODES + "  - {name: big, gpu: b200, count: 1}\n"
    unlisted = SMALL_SPEC + unlisted.replace("network: {inter_rack_gbps: 50}\n", "") + "network: {}\n"
    with pytest.raises(InputError) as exc:
        load_spec("s.yaml", text=unlisted)
    assert exc.value.lines == ["s.yaml:19: nodes[2] (big).gpu: GPU type 'b200' is not listed under gpus"]
    twice = NODES.replace("{name: pcie,", "{name: hgx-1,")
    with pytest.raises(InputError) as exc:
        load_spec("s.yaml", text=SMALL_SPEC + twice)
    assert exc.value.lines == ["s.yaml:18: nodes[1] (hgx-1).name: node name 'hgx-1' is used twice"]


def test_tp_group_stays_in_one_domain():
    s, ir = spec_and_ir(SMALL_SPEC + NODES)
    topo = build_topology(s, ir)
    pl = place([unit("a", "h100-sxm", 4, 1, 3), unit("b", "h100-sxm", 2, 1, 2)], topo)
    used = set()
    for name, stages in pl.items():
        for st in stages:
            assert len({g // 4 for g in st.gpus}) == 1  # one NVLink domain of 4
            for g in st.gpus:
                assert (st.node, g) not in used
                used.add((st.node, g))
    assert len(pl["a"]) == 3 and len(pl["b"]) == 2
    assert len(used) == 16


def test_tp_larger_than_domain_is_reported():
    s, ir = spec_and_ir(SMALL_SPEC + NODES)
    with pytest.raises(InfeasibleError) as exc:
        place([unit("big", "h100-sxm", 8, 1, 1)], build_topology(s, ir))
    assert "largest domain in the nodes has 4" in exc.value.lines[0]


def test_fragmentation_is_reported():
    # Two domains of 6 GPUs hold 12 GPUs, but only one TP4 group each: three TP4 groups (12 GPUs) do not fit.
    text = SMALL_SPEC.replace("count: 8, usd_per_hour: 4.0", "count: 12, usd_per_hour: 4.0") + \
        "nodes:\n  - {name: n, gpu: h100-sxm, count: 1, gpus_per_node: 12, nvlink_domain: 6}\n" \
        "  - {name: l, gpu: l4, count: 1}\n"
    s, ir = spec_and_ir(text)
    with pytest.raises(InfeasibleError) as exc:
        place([unit("a", "h100-sxm", 4, 1, 3)], build_topology(s, ir))
    assert "fragmentation" in exc.value.lines[0]


def test_planned_quickstart_has_verified_placement(tmp_path):
    spec = tt.load_spec("examples/quickstart.yaml")
    p = golden_plan("quickstart")  # trimtab plan's (tests/golden)
    for d in p.deployments:
        assert len(d.placement) == d.replicas * d.pipeline_parallel
    assert analytic_check(p, spec).ok
    # Tamper: put two deployments on the same GPU; check must catch it.
    data = yaml.safe_load(tt.emit(p))
    placed = [d for d in data["deployments"] if d["placement"]]
    placed[1]["placement"][0]["node"] = placed[0]["placement"][0]["node"]
    placed[1]["placement"][0]["gpus"] = placed[0]["placement"][0]["gpus"][: placed[1]["tensor_parallel"]]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data, sort_keys=False))
    rep = analytic_check(tt.load_plan(bad), spec)
    assert not rep.ok and any(v.startswith("placement") for v in rep.violations)


def test_cpsat_model_agrees_with_greedy_packing():
    from trimtab.milp.placement import _first_fit_decreasing, _solve_cpsat

    s, ir = spec_and_ir(SMALL_SPEC + NODES)
    topo = build_topology(s, ir)
    deps = [unit("a", "h100-sxm", 4, 1, 2), unit("b", "h100-sxm", 2, 1, 3), unit("c", "h100-sxm", 1, 1, 2)]
    bins = [(n, j) for n in topo.nodes for j in range(n.domains)]
    greedy, exact = _first_fit_decreasing(deps, bins), _solve_cpsat(deps, bins, 10)
    used = lambda counts: len({k for (_, k) in counts})  # noqa: E731
    assert used(greedy) == used(exact) == 4  # 16 GPUs of groups fill exactly four domains of 4
    for counts in (greedy, exact):
        for di, d in enumerate(deps):
            assert sum(n for (i, _), n in counts.items() if i == di) == d.replicas
