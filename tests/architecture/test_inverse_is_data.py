"""The solver's inverse is data (issue 37): stages after the solve find what a variable stands for from the
variable (``Var.family``) or the adapter MILP's index (``trimtab.planning.lora.LoraIndex``), what a row is
about from its ``key``, and what a candidate is from the candidate (``Candidate.pd_group``, ``lora_group``,
``gpu``, ``Pruned.workload``, a schedule's ``WindowKey`` and per-window names), and what number of the spec a
change names from its ``SpecPath``, never by parsing a variable name, a candidate id or a what-if path, whose
spelling is for display, the solver backends and the user only. This test greps the planner's stages for the
parsing idioms that once did it."""
from __future__ import annotations

import re

from tests.architecture.grep import ROOT, matching_lines, offenders

STAGES = ("milp", "planning", "gate", "online", "sim", "deploy", "study")
IDIOMS = [
    re.compile(r"""\.startswith\(\s*f?["'](route|replicas|groups|spread|survive|capacity|hold|use)\["""),
    re.compile(r"""\[len\(\s*f?["'](route|replicas|groups|spread|survive)\["""),
    re.compile(r"""\b(id|cid)\.(startswith|endswith|split|rsplit|partition|removeprefix|removesuffix)\("""),
    re.compile(r"""re\.(match|search|fullmatch|compile)\(.*(tp\\d|prefill|decode|local)"""),
    # a prefix held in a variable, cut off or tested for (a schedule window's ``w<t>:`` names once)
    re.compile(r"""\w\[len\(\s*\w+\s*\):"""),
    re.compile(r"""\.startswith\(\s*(pre|prefix)\b"""),
    re.compile(r"""\bwvar\([^()]*,\s*["']{2}\)"""),
    re.compile(r"""["']:["']\s+(not\s+)?in\s+\w+\b"""),
    # a what-if path taken apart or compared as text to find the number it names
    re.compile(r"""\b(path|whatif)\.(split|rsplit|partition|rpartition)\("""),
    re.compile(r"""\bpath\s*==\s*f?["']"""),
    # a pruned shape's kind read back out of its message (``Pruned.cause`` holds it)
    re.compile(r"""\breason\.(split|rsplit|partition|startswith)\("""),
    # a row or variable looked up by a name spelled out again (the adapter MILP's rows carry their candidate
    # as ``key``, its variables are in ``trimtab.planning.lora.LoraIndex``)
    re.compile(r"""\[f["']\w+\["""),
    re.compile(r"""\{f["']\w+\[\{"""),  # ... or a table keyed by such names
    re.compile(r"""\bvalues\.get\(\w*_name\("""),
]


def test_no_stage_parses_variable_names_or_candidate_ids():
    files = (p for stage in STAGES for p in sorted((ROOT / "compiler" / stage).rglob("*.py")))
    assert offenders(files, IDIOMS) == []


def test_the_grep_sees_the_idioms():
    """Each idiom as the code once wrote it is caught (a pattern that matches nothing would pass anything)."""
    once = ['values.update({k: v for k, v in bal.values.items() if k.startswith("route[")})',
            'cost = sum(by_id[k[len("replicas["):-1]].usd_per_hour * round(v) for k, v in r.values.items()',
            'if p.id.startswith(w.name + "-")',
            'm = re.match(rf"^{re.escape(workload)}-(.+?)-tp\\d+(-pp\\d+)?-(prefill|decode)$", cid)',
            'out = {k: v for k, v in derate.items() if ":" not in k}',
            'pre = wvar(t, "")',
            'if k.startswith(pre):',
            'return replace(res, values={k[len(pre):]: v for k, v in res.values.items()})',
            'if c.path == "budget_usd_per_hour":',
            'gpu = c.path.split(".")[1]',
            'gpu = path.split(".")[1]',
            'reasons = sorted({p.reason.split(":")[0] for p in cands.pruned if p.workload == w.name})',
            'tuple(t for t in rows[f"capacity[{c.id}]"].expr if t[0] != n_var(c.id))',
            'got = [(c.id, values.get(x_name(u, c), 0.0)) for c in prob.cands if c.id in live]',
            'unified = {f"capacity[{c.id}]": c for c in cands.candidates}']
    assert [line for line in once if not matching_lines(line, IDIOMS)] == []
