"""The architecture as the code has it (issue 12): no import cycle, no import from a lower stage to a higher
one, no module over MAX_LINES. Imports are read with ``ast`` (function-level imports included: a lazy import
is still a dependency), so the test sees what a reader sees.

    python -m pytest tests/architecture -q
"""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("compiler", "solvers", "cli")
MAX_LINES = 600

# Stages, lowest first; a module may import its own stage or lower ones. Prefix match, longest prefix wins.
STAGES = [
    ("foundation", ["compiler.errors", "compiler.yamlio", "compiler.profiles", "compiler.spec", "compiler.lora.spec",
                    "compiler.validation", "compiler.traces", "compiler.lengths", "compiler.ir", "solvers",
                    "compiler.engines", "compiler.online.profile", "compiler.jobs"]),
    ("lower", ["compiler.lower", "compiler.lora.spec", "compiler.topology", "compiler.whatif"]),
    ("cost model", ["compiler.cost", "compiler.lora.model", "compiler.physics", "compiler.online.startup"]),
    ("deployment", ["compiler.deployment", "compiler.kvtiers", "compiler.layouts"]),
    ("candidates", ["compiler.candidates", "compiler.disagg", "compiler.fanout"]),
    ("formulate / solve", ["compiler.formulate", "compiler.decompose", "compiler.solve", "compiler.online.milp"]),
    ("assess", ["compiler.assess"]),
    ("extract / place", ["compiler.plan", "compiler.placement", "compiler.spread", "compiler.lora.verify", "compiler.lora.emit",
                         "compiler.engines.realise"]),
    ("simulate", ["compiler.sim"]),
    ("check / explain", ["compiler.check", "compiler.sim.check", "compiler.sim.cli", "compiler.explain",
                         "compiler.diff", "compiler.rounds", "compiler.online.check", "compiler.nodeloss"]),
    ("planners / driver", ["compiler.planners", "compiler.lora.plan", "compiler.lora", "compiler.driver",
                           "compiler.pareto", "compiler.api", "compiler.bench", "compiler.calibrate", "compiler",
                           "compiler.deploy"]),
    ("cli", ["cli"]),
]


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in (ROOT / pkg).rglob("*.py"):
            name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = p
    return out


def import_graph() -> nx.DiGraph:
    mods = modules()
    g = nx.DiGraph()
    for m, p in mods.items():
        g.add_node(m)
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for t in targets:  # the most specific module named: `from compiler.sim import arrivals` -> the module
                if t in mods and t != m:
                    g.add_edge(m, t)
                    break
    return g


def stage(module: str) -> int:
    best, rank = -1, None
    for i, (_, prefixes) in enumerate(STAGES):
        for pre in prefixes:
            if (module == pre or module.startswith(pre + ".")) and len(pre) > best:
                best, rank = len(pre), i
    assert rank is not None, f"{module} has no stage in STAGES"
    return rank


def test_no_import_cycle():
    cycles = list(nx.simple_cycles(import_graph()))
    assert cycles == []


def test_no_import_from_a_lower_stage_to_a_higher_one():
    up = [f"{a} ({STAGES[stage(a)][0]}) imports {b} ({STAGES[stage(b)][0]})"
          for a, b in import_graph().edges if stage(a) < stage(b)]
    assert up == []


def test_no_module_over_max_lines():
    long = {m: n for m, p in modules().items() if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


def test_the_checks_can_fail():
    """The graph sees function-level imports and the stage map ranks every module (a stale map fails above)."""
    g = import_graph()
    assert g.has_edge("compiler.api", "compiler.driver")
    assert stage("compiler.sim.engine") > stage("compiler.cost.model")
    assert g.number_of_edges() > 100


SIM_CORE = ("compiler.sim.scenario", "compiler.sim.engine", "compiler.sim.replica", "compiler.sim.disagg",
            "compiler.sim.arrivals", "compiler.sim.metrics", "compiler.sim.lora", "compiler.sim.schedule")
PLANNER_STAGES = ("lower", "candidates", "formulate / solve", "assess", "planners / driver")


def test_the_simulator_reads_plan_and_cost_model_only():
    """The simulator's scenario and event loop depend on the plan, the spec, the IR, records and the cost model,
    never on how the planner got the plan (issue 12): no lowering, candidates, formulation, assessment, planner,
    KV-tier allocation (``compiler.kvtiers``) or LoRA verification."""
    g = import_graph()
    bad = [f"{a} imports {b}" for a in SIM_CORE if a in g for b in g.successors(a)
           if STAGES[stage(b)][0] in PLANNER_STAGES or b in ("compiler.kvtiers", "compiler.lora.verify")]
    assert bad == []
