"""The architecture as the code has it (issues 12 and 37): one installed package, ``trimtab``, whose folders
are the stages, in one order; no import cycle; no import from a lower stage to a higher one; no module over
MAX_LINES. Imports are read with ``ast`` (function-level imports included: a lazy import is still a
dependency), so the test sees what a reader sees.

    python -m pytest tests/architecture -q
"""
from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 600

# Where each part of the `trimtab` package lives in the repository (pyproject's package-dir).
FOLDERS = {"trimtab": "compiler", "trimtab.solvers": "solvers", "trimtab.profiles": "profiles",
           "trimtab.cli": "cli"}

# The stages, lowest first: every top-level module or folder of the package, by name. A module may import its
# own stage or lower ones. No catch-all: a new top-level module or folder fails test_every_part_has_a_stage.
STAGES = ["errors", "util", "solvers", "profiles", "engines", "spec", "ir", "cost", "deployment", "contract",
          "milp", "sim", "gate", "deploy", "planning", "api", "study", "field", "online", "cli"]
PUBLIC_FACE = "trimtab"  # compiler/__init__.py: ranked with api, whose functions it re-exports


def modules() -> dict[str, Path]:
    out = {}
    for pkg, folder in FOLDERS.items():
        # (C sources are the compiled modules, pyproject's ext-modules: `from trimtab.sim import _loop` names
        # that module, not its package)
        for p in [*(ROOT / folder).rglob("*.py"), *(ROOT / folder).rglob("*.c")]:
            rel = p.relative_to(ROOT / folder).with_suffix("").parts
            out[".".join((pkg, *rel)).removesuffix(".__init__")] = p
    return out


def import_graph() -> nx.DiGraph:
    mods = modules()
    g = nx.DiGraph()
    for m, p in mods.items():
        g.add_node(m)
        if p.suffix != ".py":  # a compiled module imports nothing of the package
            continue
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            # the most specific module named: `from trimtab.sim import arrivals` -> the module
            for t in targets:
                if t in mods and t != m:
                    g.add_edge(m, t)
                    break
    return g


def stage(module: str) -> int:
    if module == PUBLIC_FACE:
        return STAGES.index("api")
    part = module.split(".")[1]
    assert part in STAGES, f"{module}: its folder or module {part!r} has no stage in STAGES"
    return STAGES.index(part)


def test_every_part_has_a_stage():
    for m in modules():
        stage(m)


def test_no_import_cycle():
    cycles = list(nx.simple_cycles(import_graph()))
    assert cycles == []


def test_no_import_from_a_lower_stage_to_a_higher_one():
    up = [f"{a} ({STAGES[stage(a)]}) imports {b} ({STAGES[stage(b)]})"
          for a, b in import_graph().edges if stage(a) < stage(b)]
    assert up == []


def test_no_module_over_max_lines():
    long = {m: n for m, p in modules().items()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


def test_the_checks_can_fail():
    """The graph sees function-level imports and the stage map ranks every module (a stale map fails
    above)."""
    g = import_graph()
    assert g.has_edge("trimtab.api", "trimtab.planning.driver")
    assert stage("trimtab.sim.engine") > stage("trimtab.cost.model")
    assert g.number_of_edges() > 100
    try:
        stage("trimtab.newthing")
    except AssertionError:
        pass
    else:
        raise AssertionError("an unranked folder was given a stage")


def test_the_wheel_lists_every_package():
    """pyproject lists the packages (find cannot follow package-dir): every folder with an __init__.py is in
    the list, so a new stage cannot be left out of the wheel."""
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert conf["package-dir"] == FOLDERS
    found = {m for m, p in modules().items() if p.name == "__init__.py"}
    assert found == set(conf["packages"])


def test_nothing_imports_the_folder_names():
    """Only `trimtab` is installed: an import of `compiler`, `solvers`, `profiles` or `cli` as a top-level
    package works in a checkout by accident and fails once installed."""
    bad = []
    for p in [*ROOT.glob("compiler/**/*.py"), *ROOT.glob("solvers/**/*.py"), *ROOT.glob("cli/**/*.py"),
              *ROOT.glob("profiles/**/*.py"), *ROOT.glob("tests/**/*.py"), *ROOT.glob("benchmarks/**/*.py")]:
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            bad += [f"{p.relative_to(ROOT)}: {n}" for n in names
                    if n.split(".")[0] in ("compiler", "solvers", "profiles", "cli")]
    assert bad == []


SIM_CORE = ("trimtab.sim.scenario", "trimtab.sim.engine", "trimtab.sim.replica", "trimtab.sim.disagg",
            "trimtab.sim.arrivals", "trimtab.sim.metrics", "trimtab.sim.lora", "trimtab.sim.schedule")
NOT_FOR_THE_SIMULATOR = ("trimtab.milp.", "trimtab.planning.", "trimtab.ir.lower",
                         "trimtab.deployment.kvtiers",
                         "trimtab.gate.")


def test_the_simulator_reads_plan_and_cost_model_only():
    """The simulator's scenario and event loop depend on the plan, the spec, the IR, records and the cost
    model, never on how the planner got the plan (issue 12): no lowering, candidates, formulation, assessment,
    planner, KV-tier allocation or gate."""
    g = import_graph()
    bad = [f"{a} imports {b}" for a in SIM_CORE if a in g for b in g.successors(a)
           if b.startswith(NOT_FOR_THE_SIMULATOR)]
    assert bad == []


def test_presentation_only_under_cli():
    """rich and matplotlib are the CLI's (issue 37): the library computes, the commands present."""
    bad = []
    for m, p in modules().items():
        if m.startswith("trimtab.cli") or p.suffix != ".py":
            continue
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            bad += [f"{m}: {n}" for n in names if n.split(".")[0] in ("rich", "matplotlib")]
    assert bad == []
