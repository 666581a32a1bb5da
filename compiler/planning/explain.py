"""Why a spec is infeasible, said in the spec's own terms and with the numbers to change.

* ``precheck(ir, cands)``: before solving, workloads or length buckets no candidate can serve at all
  (the model fits no GPU; an SLO below what the fastest candidate reaches even at low load; a budget
  below one replica of the cheapest candidate of every workload).
* ``relaxations(ir, cands, backend, options)``: after an infeasible solve, an elastic copy of the model
  with a slack on each relaxable constraint (GPU counts, budget) says which to raise and to what.
* ``explain(ir, backend, options) -> Explanation``: what ``trimtab explain`` prints. For an infeasible
  spec, alternatives, each a set of ``Change``s that together make the spec feasible: the elastic
  relaxation of GPU counts and budget, and single changes found by bisection on one number (one GPU
  count, the budget, one workload's TTFT or TPOT SLO) against the real feasibility test (candidates
  rebuilt, pre-checks, MILP). For a feasible spec, the binding constraints and what would get cheaper.
  Every number is verified feasible before it is printed (tests/crosscheck applies each one).
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace

from trimtab.milp.candidates import build_candidates
from trimtab.cost.search import smallest_true
from trimtab.deployment.shape import CandidateSet
from trimtab.deployment.price import fleet_usd_per_hour
from trimtab.milp.decompose import MIN_CANDIDATES
from trimtab.milp.formulate import formulate, n_var, slack_var
from trimtab.milp.solve import solve_ir
from trimtab.planning.feasibility import (Counts, cost_ir, min_cost, precheck,
                                          precheck_by_workload, repairing_workloads, with_workload)
from trimtab.ir.model import ProblemIR
from trimtab.spec.paths import SpecPath
from trimtab.solvers.base import Backend, SolveOptions, SolveResult
from trimtab.solvers.model import MilpModel


# Above this many integer variables (replica counts) the elastic MILP is not solved, its LP relaxation is: on
# a spec of 3,110 candidates (benchmarks/specgen_alt.py, target size, seed 16) HiGHS found no solution in
# 120 s even at a limit of 200 nodes (the root node's work, which no node limit bounds), and the LP took
# 0.7 s. The threshold is the decomposition's (``MIN_CANDIDATES``: below it the whole MILP solves in well
# under a second), so a decision by the model's size, the same on any machine.
EXACT_MAX_INTEGERS = MIN_CANDIDATES


def elastic_changes(ir: ProblemIR, model: MilpModel, backend: Backend,
                    options: SolveOptions) -> list[Change] | None:
    """The smallest joint relaxation of ``model``'s relaxable rows (``MilpModel.elastic``; ``model`` built
    with the bounds only those rows should limit loosened, e.g. ``formulate(..., elastic=True)``), each row's
    slack turned into a change of the spec number its ``origin`` names (``SpecPath``). None: no relaxation of
    those rows repairs the model; []: it needs none (numerically infeasible).

    A model of more than EXACT_MAX_INTEGERS integer variables gets its LP relaxation's slacks instead,
    rounded up: every relaxation that repairs the MILP repairs its LP, so each number is one the spec must
    reach at least (a lower bound, as ``Change.render`` words it), not one proven to suffice."""
    return _elastic(model, backend, options)[0]


def _exact(model: MilpModel) -> bool:
    return sum(v.kind == "integer" for v in model.variables.values()) <= EXACT_MAX_INTEGERS


def _elastic(model: MilpModel, backend: Backend, options: SolveOptions,
             lp: bool = False) -> tuple[list[Change] | None, dict[str, float]]:
    """(``elastic_changes``, the solution it read them from); ``lp``: the LP relaxation's at any size."""
    elastic = model.elastic(slack_var)
    res = backend.solve(elastic if _exact(model) and not lp else elastic.relaxed(), options)
    if not res.has_solution:
        return None, {}
    return _row_changes(model, {c.name: res.values.get(slack_var(c.name), 0.0) for c in model.constraints
                                if c.relaxable}), res.values


def _row_changes(model: MilpModel, excess: dict[str, float]) -> list[Change]:
    """What raises each relaxable row of ``model`` by its ``excess`` (row name -> amount), in spec terms."""
    changes = []
    for con in model.constraints:
        s = excess.get(con.name, 0.0)
        path = con.origin if s > 1e-6 and con.origin is not None and con.origin.whatif else None
        if path is None:
            continue
        if con.family == "inventory" and (more := math.ceil(s - 1e-6)) >= 1:
            changes.append(Change(path, int(con.rhs), int(con.rhs) + more, "raise"))
        elif con.family == "budget":
            changes.append(Change(path, con.rhs, math.ceil((con.rhs + s) * 100) / 100, "raise"))
    return changes


def relaxations(ir: ProblemIR, cands: CandidateSet, backend: Backend, options: SolveOptions,
                derate: dict[str, float] | None = None) -> list[str]:
    """'raise X from A to at least B' lines, from the smallest relaxation of GPU counts and budget. Past
    EXACT_MAX_INTEGERS that relaxation is its LP's, a bound that may not suffice, so the lines also say what
    does: the LP's plan with each replica count rounded up (``rounded_up``)."""
    model = formulate(ir, cands, derate, elastic=True)
    if _exact(model):
        return relaxation_lines(_elastic(model, backend, options)[0])
    return lp_lines(*lp_relaxation(model, backend, options))


def lp_relaxation(model: MilpModel, backend: Backend,
                  options: SolveOptions) -> tuple[list[Change] | None, list[Change] | None, dict[str, float]]:
    """(the LP relaxation's smallest changes of ``model``'s relaxable rows: each a lower bound; the changes
    its plan rounded up needs, which suffice (``rounded_up``; None: that plan breaks another row); the LP's
    solution). The stage ``relaxations`` words for ``plan`` and ``explain`` offers above
    EXACT_MAX_INTEGERS, where the elastic MILP is not solved."""
    bound, values = _elastic(model, backend, options, lp=True)
    if bound is None:
        return None, None, values
    return bound, rounded_up(model, values), values


def lp_lines(bound: list[Change] | None, more: list[Change] | None, values: dict[str, float]) -> list[str]:
    """``relaxations``' lines from ``lp_relaxation``."""
    if bound is None:
        return relaxation_lines(None)
    lines = [f"{c.render()} (the LP relaxation's bound)" for c in bound]
    if more:
        lines += ["these together suffice (the LP relaxation's plan with each replica count rounded up):"]
        lines += [f"  {c.verb} {c.where} from {_num(c.old)} to {_num(c.new)}" for c in more]
    if lines:
        return lines
    if more is None:
        return ["the solver reports infeasibility, but the LP relaxation of the elastic model needs no "
                "relaxation and its plan rounded up breaks a row that no GPU count or budget relaxes"]
    return relaxation_lines([])  # the rounded plan fits every row: the solver's verdict is numerical


def rounded_up(model: MilpModel, values: dict[str, float]) -> list[Change] | None:
    """The changes to the relaxable rows (GPU counts, budget) that hold ``values`` (a solution of the LP
    relaxation of ``model``'s elastic copy) with every integer variable rounded up: more replicas carry at
    least the same traffic, so it is a plan of whole replicas, and the changes suffice. None where the
    rounded plan breaks another row."""
    up = {n: (math.ceil(values.get(n, 0.0) - 1e-9) if v.kind == "integer" else values.get(n, 0.0))
          for n, v in model.variables.items()}
    excess: dict[str, float] = {}
    for con in model.constraints:
        lhs = model.evaluate(con.expr, up)
        over = (lhs - con.rhs if con.sense == "<=" else con.rhs - lhs if con.sense == ">="
                else abs(lhs - con.rhs))
        if over <= 1e-6 * max(abs(con.rhs), 1.0):
            continue
        if not con.relaxable or con.sense != "<=":
            return None
        excess[con.name] = over
    return _row_changes(model, excess)


def relaxation_lines(changes: list[Change] | None) -> list[str]:
    if changes is None:
        return ["the spec is infeasible and no relaxation of GPU counts or budget repairs it"]
    if not changes:
        return ["the solver reports infeasibility but the elastic model needs no relaxation "
                "(numerical issue)"]
    return [c.render() for c in changes]


# ---------------------------------------------------------------------------------------------- explain
@dataclass(frozen=True)
class Change:
    """One number of the spec to change, named by ``origin`` (``relaxed_ir`` applies it from there); ``path``
    and ``where`` are its what-if override path and its display form, for people and scripts."""

    origin: SpecPath  # e.g. SpecPath.gpu(pool, "count"), SpecPath("budget_usd_per_hour")
    old: float
    new: float
    verb: str  # "raise" or "relax"

    @property
    def path(self) -> str | None:  # e.g. "gpus.h100-sxm.count", "workloads.chat.slo.ttft_ms"
        return self.origin.whatif

    @property
    def where(self) -> str:  # e.g. "gpus[0] (h100-sxm).count"
        return str(self.origin)

    def render(self) -> str:
        return f"{self.verb} {self.where} from {_num(self.old)} to at least {_num(self.new)}"

    def as_dict(self) -> dict:
        return {"path": self.path, "where": self.where, "old": self.old, "new": self.new, "verb": self.verb}


def relaxed_ir(ir: ProblemIR, changes: Iterable[tuple[SpecPath, float | None]]) -> ProblemIR:
    """``ir`` with GPU counts and the budget (None: none) set as each (origin, value) says: the numbers the
    relaxable rows name (``elastic_changes``)."""
    for origin, v in changes:
        if origin.section == "budget_usd_per_hour":
            ir = replace(ir, budget_usd_per_hour=v)
        elif origin.section == "gpus" and origin.field == "count":
            ir = replace(ir, gpus=tuple(replace(g, count=int(v)) if g.type == origin.key else g
                                        for g in ir.gpus))
        else:
            raise ValueError(f"{origin}: not a number a relaxation changes")
    return ir


@dataclass(frozen=True)
class Explanation:
    feasible: bool
    problems: list[str] = field(default_factory=list)  # pre-solve impossibilities
    alternatives: list[list[Change]] = field(default_factory=list)  # each set alone makes the spec feasible
    binding: list[str] = field(default_factory=list)  # feasible specs: what limits the plan's cost
    cost_usd_per_hour: float | None = None  # the cost model's cheapest plan (analytic)
    # ``trimtab plan``'s (validated by simulation), when known
    validated_cost_usd_per_hour: float | None = None
    notes: list[str] = field(default_factory=list)  # what the analysis covers and what it does not
    # The cost every binding row's price is a difference against: a cost model's cheapest plan (this spec's,
    # or without n+1 its relaxed spec's), because each relaxation is priced by one more cost-model solve
    # (planning each with validation would take minutes apiece). In the JSON too, so that a script does not
    # subtract a relaxation's price from the validated cost. None: cost_usd_per_hour.
    binding_base_usd_per_hour: float | None = None

    def as_dict(self) -> dict:
        """The JSON form (``trimtab explain --format json``): each change as its path, display form and
        numbers."""
        d = asdict(self)
        d["alternatives"] = [[c.as_dict() for c in alt] for alt in self.alternatives]
        return d

    def lines(self) -> list[str]:
        out = []
        if self.feasible:
            if self.validated_cost_usd_per_hour is not None:
                out.append(f"feasible: trimtab plan's plan costs {self.validated_cost_usd_per_hour:.2f} $/h "
                           "(validated by simulation)")
                out.append(f"analytic (cost model only, not validated): the cheapest plan costs "
                           f"{self.cost_usd_per_hour:.2f} $/h")
            else:
                out.append("feasible (analytic: cost model only, not validated by simulation): the cheapest "
                           f"plan costs {self.cost_usd_per_hour:.2f} $/h")
            if self.binding:
                base = self.binding_base_usd_per_hour
                base = self.cost_usd_per_hour if base is None else base
                out.append(f"binding rows price each relaxation as the cost model's plan, against its "
                           f"{base:.2f} $/h" + ("" if self.validated_cost_usd_per_hour is None else
                                                f", not against the validated "
                                                f"{self.validated_cost_usd_per_hour:.2f} $/h"))
            out += ["binding: " + b for b in self.binding] or ["binding: nothing (no GPU count, budget or "
                                                               "SLO limits the plan)"]
            return out + ["note: " + n for n in self.notes]
        out.append("infeasible:")
        out += ["  " + p for p in self.problems]
        if self.alternatives:
            out.append("any one of these makes the spec feasible:")
            for alt in self.alternatives:
                out.append("  " + " and ".join(c.render() for c in alt))
        else:
            out.append("no single change of GPU counts, budget or SLOs repairs the spec")
        return out + ["note: " + n for n in self.notes]


def _num(x: float) -> str:
    return f"{x:.2f}" if abs(x - round(x)) > 1e-9 else f"{int(round(x))}"


SLO_MAX = {"ttft_ms": 3_600_000.0, "tpot_ms": 60_000.0}  # the spec's upper limits


def adapter_precheck(ir: ProblemIR, stuck: list[tuple[str, str, str]]) -> list[str]:
    """The adapter planner's precheck (``trimtab.planning.lora.LoraPlanner``): ``stuck`` lists its traffic
    units no candidate carries as (workload, base model group, "base", "class" or the adapter). Each gets a
    line naming its field and the value to relax, as the plain planner's precheck gives, and a tenant's
    workload without adapters is not told about LoRA. LoRA only adds work and
    memory to a replica, so what the plain candidates cannot meet no adapter candidate meets either: their
    ``precheck`` lines come first (the plain candidates are built only here, on a failure); a unit it lets
    through (its SLO needs the replica without LoRA's overhead) is named with its workload's SLO."""
    lines = precheck_by_workload(ir, build_candidates(ir))
    out = [line for _, line in lines]
    named = {w for w, _ in lines if w is not None}
    for workload, group, what in stuck:
        if workload in named:
            continue
        named.add(workload)
        w = ir.workload(workload)
        traffic = {"base": "its base model", "class": "its cold adapters"}.get(what,
                                                                                 f"adapter traffic ({what})")
        out.append(f"{workload}: no deployment of {group} meets its SLO (TTFT p{w.slo.percentile:g} "
                   f"{w.slo.ttft_ms:g} ms, TPOT {w.slo.tpot_ms:g} ms) for {traffic} with LoRA enabled on the "
                   f"GPUs of the spec; relax workloads[{w.index}].slo or add faster GPUs")
    return out


def stopped(backend: Backend, res: SolveResult) -> Explanation:
    """The explanation when the solver stops without proving feasibility either way."""
    return Explanation(False, [f"solver {backend.name} stopped without an answer ({res.termination.value}); "
                               "raise --time-limit to explain"])


def explain(ir: ProblemIR, backend: Backend, options: SolveOptions, cands: CandidateSet | None = None,
            slo_relax: float = 1.25) -> Explanation:
    """Infeasible: alternatives that repair the spec. Feasible: binding constraints (``slo_relax``: the SLO
    loosening tried to see whether a workload's SLO drives cost). Above EXACT_MAX_INTEGERS (``_explain_lp``)
    the alternatives come from LP relaxations and the SLOs tried are bounded, said in the notes."""
    cands = cands or build_candidates(ir)
    counts = Counts(ir, cands)
    problems = precheck(ir, cands)
    res = None
    if not problems:
        res = solve_ir(cost_ir(ir), cands, backend, options)
    if res is not None and res.has_solution:
        return _explain_feasible(ir, cands, backend, options, res, slo_relax, counts)
    if res is not None and res.status.value != "infeasible":
        return stopped(backend, res)
    if not problems:
        problems = ["no deployment meets every SLO within the GPU counts and budget"]
    # (only when every bucket has a candidate: the solve ran)
    model = None if res is None else formulate(ir, cands, elastic=True, objective="min_cost")
    if model is not None and not _exact(model):
        alts, notes = _explain_lp(ir, cands, counts, model, backend, options)
        return Explanation(False, problems, _dedupe(alts), notes=notes)
    alts: list[list[Change]] = []
    # 1. The elastic relaxation of GPU counts and budget together (only when every bucket has a candidate).
    if model is not None:
        joint = _elastic_changes(ir, counts, model, backend, options)
        if joint:
            alts.append(joint)
    # 2. One number at a time, by bisection against the feasibility test.
    for pool in ir.gpus:
        def ok(n, pool=pool):
            return min_cost(*counts.count(pool.type, int(n)), backend, options) is not None
        top = smallest_true(ok, float(pool.count), float(max(pool.count * 64, 4096)), integer=True)
        if top is not None:
            alts.append([Change(SpecPath.gpu(pool, "count"), pool.count, int(top), "raise")])
    alts += _budget_change(ir, cands, backend, options)
    for w in ir.workloads:
        alts += _slo_changes(ir, cands, w, backend, options)
    return Explanation(False, problems, _dedupe(alts))


# Above EXACT_MAX_INTEGERS, the workloads whose SLOs are searched (``_slo_lp``): up to ~40 LPs of the whole
# spec each (about a second apiece at 100 workloads). The others are named in a note, with why.
SLO_MAX_WORKLOADS = 3


def _explain_lp(ir: ProblemIR, cands: CandidateSet, counts: Counts, model: MilpModel, backend: Backend,
                options: SolveOptions) -> tuple[list[list[Change]], list[str]]:
    """The alternatives of a spec above EXACT_MAX_INTEGERS (``model``: its elastic model), and notes on what
    they rest on and what was not tried. The elastic MILP is not solved there (``EXACT_MAX_INTEGERS``), so
    each change comes from an LP relaxation, as ``relaxations`` words it for ``plan``: the joint change is
    the LP's plan rounded up (it suffices; the LP's own slacks, a lower bound, go in a note); one GPU count
    alone likewise, from the LP with only that row relaxed (``_count_alone``); the budget as on any spec
    (two solves); SLOs only of the workloads that share GPU types with a row the LP relaxes
    (``_slo_workloads``), at most SLO_MAX_WORKLOADS of them, each from LPs (``_slo_lp``). Where a number
    offered may not be the least, a note gives the interval the least lies in. No solve of the whole spec
    but the budget's two: such solves, 20-60 s each at 100 workloads, are what bisection repeats."""
    alts: list[list[Change]] = []
    notes: list[str] = []
    bound, enough, _ = lp_relaxation(model, backend, options)
    if bound:
        notes.append("the LP relaxation bounds the joint change from below: "
                     + "; ".join(c.render() for c in bound))
    if enough and _suffices(ir, cands, counts, enough, backend, options):
        alts.append(enough)
        notes.append("the first alternative is the LP relaxation's plan with each replica count rounded up: "
                     "it suffices, a smaller joint change may too")
    for pool in ir.gpus:
        alt, note = _count_alone(ir, cands, counts, model, pool, backend, options)
        alts += [alt] if alt else []
        notes += [note] if note else []
    alts += _budget_change(ir, cands, backend, options)
    short = {c.origin.key for c in bound or () if c.origin.section == "gpus"}
    names, why = repairing_workloads(ir, cands, short, bound)
    tried = names[:SLO_MAX_WORKLOADS]
    hopeless: list[str] = []
    for name in tried:
        more, said, none = _slo_lp(ir, cands, ir.workload(name), backend, options)
        alts, notes = alts + more, notes + said
        hopeless += [f"{name} {k}" for k in none]
    rest = names[SLO_MAX_WORKLOADS:]
    shown = ", ".join(rest[:10]) + (f" and {len(rest) - 10} more" if len(rest) > 10 else "")
    said = [why] if why else []
    said += [f"SLO relaxations tried for {', '.join(tried)}"] if tried else []
    said += [f"no value of {', '.join(hopeless)} alone repairs the spec (its LP relaxation at the spec's "
             "upper limit has no plan)"] if hopeless else []
    said += [f"not tried for the other {len(rest)} ({shown}): at most {SLO_MAX_WORKLOADS} workloads' SLOs "
             f"are searched on a spec of more than {EXACT_MAX_INTEGERS} candidates"] if rest else []
    notes.append("; ".join(said))
    return alts, notes


def _suffices(ir: ProblemIR, cands: CandidateSet, counts: Counts, changes: list[Change], backend: Backend,
              options: SolveOptions) -> bool:
    """Whether ``changes`` (from ``rounded_up`` of a model of ``ir`` on ``cands``) admit a plan. Where the
    changed counts leave the candidates as they are, the rounded plan is one: it keeps every row of that
    model, the relaxable ones at their new numbers. Else (a shape appears) the feasibility test says."""
    ir2, cands2 = counts.at(relaxed_ir(ir, ((c.origin, c.new) for c in changes)))
    return cands2.candidates == cands.candidates or min_cost(ir2, cands2, backend, options) is not None


def _count_alone(ir: ProblemIR, cands: CandidateSet, counts: Counts, model: MilpModel, pool,
                 backend: Backend, options: SolveOptions) -> tuple[list[Change] | None, str | None]:
    """(a count of ``pool`` alone that admits a plan, or None; a note on how near the least it is). From the
    LP of ``model`` with only this inventory row relaxed: where it is infeasible, no count of the type alone
    repairs the spec; else its bound (below it no plan, not even a fractional one) and its plan rounded up
    (a plan: that count suffices). Not bisected between the two: each step would be a solve of the whole
    spec (20-60 s at 100 workloads, where the split prices rows out or falls back to the whole MILP)."""
    row = f"inventory[{pool.type}]"
    one = MilpModel(model.name, dict(model.variables),
                    [replace(c, relaxable=c.relaxable and c.name == row) for c in model.constraints],
                    model.objective, model.sense)
    bound, enough, _ = lp_relaxation(one, backend, options)
    if bound is None:
        return None, None
    lo = max([int(c.new) for c in bound] + [pool.count + 1])
    where = SpecPath.gpu(pool, "count")
    # (only this row is relaxable in ``one``: its rounded plan changes this count alone)
    if not enough or not _suffices(ir, cands, counts, enough, backend, options):
        return None, (f"{where}: alone, at least {lo} (the LP relaxation's bound); no count shown to suffice "
                      "(the LP's plan rounded up breaks a row this count does not relax), not bisected")
    hi = int(enough[0].new)
    return [Change(where, pool.count, hi, "raise")], None if hi <= lo else (
        f"{where}: alone, {hi} suffices (the LP relaxation's plan rounded up); the least count is between "
        f"{lo} (the LP's bound) and {hi}, not bisected")


def _slo_lp(ir: ProblemIR, cands: CandidateSet, w, backend: Backend,
            options: SolveOptions) -> tuple[list[list[Change]], list[str], list[str]]:
    """(each SLO of ``w`` relaxed alone to a value that admits a plan; notes; the SLO keys no value of
    which repairs the spec), from LP relaxations of the whole spec with ``w``'s candidates rebuilt: none
    where the LP at the spec's upper limit is infeasible (no value of that SLO repairs it); else the least
    value whose LP is feasible (to 2 %, as ``_slo_changes``) where its LP plan rounded up fits every row (a
    plan: it suffices); else the least value whose LP plan rounded up fits, with the bound in a note. Each
    value tried is one LP, not a solve of the whole MILP (``_slo_changes``'s bisection: 20-60 s a step at
    100 workloads)."""
    alts, notes, none = [], [], []
    for key in ("ttft_ms", "tpot_ms"):
        cur = getattr(w.slo, key)
        seen: dict[float, tuple[bool, bool]] = {}

        def lp(v: float, key=key) -> tuple[bool, bool]:
            """(the LP is feasible, its plan rounded up fits every row)"""
            if v not in seen:
                ir2, c2 = with_workload(ir, cands, replace(w, slo=replace(w.slo, **{key: v})))
                if precheck(ir2, c2):
                    seen[v] = (False, False)
                else:
                    m = formulate(ir2, c2, objective="min_cost")
                    r = backend.solve(m.relaxed(), options)
                    seen[v] = (r.has_solution, r.has_solution and rounded_up(m, r.values) == [])
            return seen[v]
        if not lp(SLO_MAX[key])[0]:
            none.append(key)
            continue
        lo = smallest_true(lambda v: lp(v)[0], cur, SLO_MAX[key], integer=False)
        where = SpecPath.workload(w, f"slo.{key}")
        if lp(float(math.ceil(lo)))[1]:
            alts.append([Change(where, cur, float(math.ceil(lo)), "relax")])  # the LP's bound suffices
            continue
        top = smallest_true(lambda v: lp(v)[1], max(cur, lo / 2), SLO_MAX[key], integer=False)
        if top is None or not lp(float(math.ceil(top)))[1]:
            notes.append(f"{where}: at least {math.ceil(lo)} (the LP relaxation's bound); no value "
                         "shown to suffice (the LP's plan rounded up breaks a row), not bisected")
            continue
        need = float(math.ceil(top))
        alts.append([Change(where, cur, need, "relax")])
        if math.ceil(lo) < need:
            notes.append(f"{where}: {_num(need)} suffices (the LP relaxation's plan rounded up); the least "
                         f"is between {math.ceil(lo)} (the LP's bound) and {_num(need)}, not bisected")
    return alts, notes, none


def _budget_change(ir: ProblemIR, cands: CandidateSet, backend: Backend,
                   options: SolveOptions) -> list[list[Change]]:
    """The budget that admits a plan, if any: exact, the cheapest plan without a budget costs C*, and any
    budget >= C* admits it."""
    if ir.budget_usd_per_hour is None:
        return []
    b0 = ir.budget_usd_per_hour
    r = min_cost(replace(ir, budget_usd_per_hour=None), cands, backend, options)
    if r is None:
        return []
    cost = fleet_usd_per_hour((round(r.values.get(n_var(c.id), 0.0)), c.usd_per_hour)
                              for c in cands.candidates)
    need = math.ceil(cost * 100 - 1e-6) / 100
    if min_cost(replace(ir, budget_usd_per_hour=need), cands, backend, options) is None:
        return []
    return [[Change(SpecPath("budget_usd_per_hour"), b0, need, "raise")]]


def _slo_changes(ir: ProblemIR, cands: CandidateSet, w, backend: Backend,
                 options: SolveOptions) -> list[list[Change]]:
    """The smallest TTFT and TPOT SLO of ``w`` (each alone) that admits a plan, by bisection."""
    out = []
    for key in ("ttft_ms", "tpot_ms"):
        cur = getattr(w.slo, key)

        def ok_s(v, key=key):
            w2 = replace(w, slo=replace(w.slo, **{key: v}))
            return min_cost(*with_workload(ir, cands, w2), backend, options) is not None
        top = smallest_true(ok_s, cur, SLO_MAX[key], integer=False)
        if top is not None:
            need = float(math.ceil(top))
            if not ok_s(need):  # rounding up keeps feasibility (monotone); guard against numerics anyway
                continue
            out.append([Change(SpecPath.workload(w, f"slo.{key}"), cur, need, "relax")])
    return out


def _dedupe(alts: list[list[Change]]) -> list[list[Change]]:
    seen, out = set(), []
    for a in alts:
        key = tuple((c.path, c.new) for c in a)
        if key not in seen:
            seen.add(key)
            out.append(a)
    return out


def _elastic_changes(ir: ProblemIR, counts: Counts, model: MilpModel, backend: Backend,
                     options: SolveOptions) -> list[Change]:
    """The elastic MILP's joint change (``elastic_changes`` of ``model``, ``ir``'s elastic model), verified
    by the feasibility test before it is offered."""
    changes = elastic_changes(ir, model, backend, options)
    if not changes:
        return []
    if min_cost(*counts.at(relaxed_ir(ir, ((c.origin, c.new) for c in changes))), backend, options) is None:
        return []
    return changes


def _explain_feasible(ir: ProblemIR, cands: CandidateSet, backend: Backend, options: SolveOptions,
                      res: SolveResult, slo_relax: float, counts: Counts) -> Explanation:
    by_id = cands.by_id()
    used: dict[str, int] = {}
    bought = [(int(round(res.values.get(n_var(cid), 0.0))), c) for cid, c in by_id.items()]
    for n, c in bought:
        used[c.gpu] = used.get(c.gpu, 0) + n * c.gpus
    base = fleet_usd_per_hour((n, c.usd_per_hour) for n, c in bought)
    binding = []

    def delta(r: SolveResult | None) -> str:
        if r is None:
            return "no cheaper plan"
        new = r.objective or 0.0  # cost + EPS_GPU x GPUs (< 0.005 $/h)
        return (f"the cost model's plan would cost {new:.2f} $/h ({new - base:+.2f})" if new < base - 0.005
                else "no cheaper plan")

    for pool in ir.gpus:
        smallest = min((c.gpus for c in cands.unified if c.gpu == pool.type), default=None)
        if smallest is None or pool.count - used.get(pool.type, 0) >= smallest:
            continue
        more = max(pool.count * 2, pool.count + 8)
        r = min_cost(*counts.count(pool.type, more), backend, options)
        binding.append(f"gpus[{pool.index}] ({pool.type}).count: {used.get(pool.type, 0)} of {pool.count} "
                       f"used; with {more}, {delta(r)}")
    if ir.budget_usd_per_hour is not None:
        cheapest = min(c.usd_per_hour for c in cands.unified)
        if ir.budget_usd_per_hour - base < cheapest:
            r = min_cost(replace(ir, budget_usd_per_hour=None), cands, backend, options)
            binding.append(f"budget_usd_per_hour: {base:.2f} of {ir.budget_usd_per_hour:g} $/h used; "
                           f"without it, {delta(r)}")
    # Above EXACT_MAX_INTEGERS candidates, the SLOs of the SLO_MAX_WORKLOADS workloads that cost most, each a
    # solve of the whole spec (20-60 s at 100 workloads); the others named in a note
    spend: dict[str, float] = {}
    for n, c in bought:
        spend[c.workload] = spend.get(c.workload, 0.0) + n * c.usd_per_hour
    priced = list(ir.workloads)
    notes = []
    if len(cands.candidates) > EXACT_MAX_INTEGERS and len(priced) > SLO_MAX_WORKLOADS:
        priced = sorted(priced, key=lambda w: -spend.get(w.name, 0.0))[:SLO_MAX_WORKLOADS]
        notes.append(f"SLOs priced for the {SLO_MAX_WORKLOADS} workloads whose replicas cost most "
                     f"({', '.join(w.name for w in priced)}), not for the other "
                     f"{len(ir.workloads) - len(priced)}: each is a solve of the whole spec, on a spec of "
                     f"more than {EXACT_MAX_INTEGERS} candidates")
        priced.sort(key=lambda w: w.index)
    for w in priced:
        w2 = replace(w, slo=replace(w.slo, ttft_ms=min(w.slo.ttft_ms * slo_relax, SLO_MAX["ttft_ms"]),
                                    tpot_ms=min(w.slo.tpot_ms * slo_relax, SLO_MAX["tpot_ms"])))
        r = min_cost(*with_workload(ir, cands, w2), backend, options)
        d = delta(r)
        if d != "no cheaper plan":
            binding.append(f"workloads[{w.index}] ({w.name}).slo: TTFT {w.slo.ttft_ms:g} ms, TPOT "
                           f"{w.slo.tpot_ms:g} ms; {slo_relax - 1:.0%} looser, {d}")
    return Explanation(True, binding=binding, cost_usd_per_hour=base, binding_base_usd_per_hour=base,
                       notes=notes)

