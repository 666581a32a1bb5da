"""The one planning driver: every kind of spec goes through the same rounds.

    candidates --precheck--> ( solve --build--> Plan + Assessment --assess--> derate )*  --simulate on seeds-->
        ( derate --solve-- ... )*  --finish (placement, physics guard, simulation record)--> PlanResult

A ``Planner`` supplies the stages that differ between unified serving
(``trimtab.planning.planners.UnifiedPlanner``:
unified, P/D and KV-tier candidates, the MILP of ``compiler/milp/formulate.py``) and adapters
(``trimtab.planning.lora.LoraPlanner``: shared candidates and the adapter-placement MILP). The driver owns the
loop and nothing else: each round is a function of the derates it is given, and the corrections
(``trimtab.planning.rounds``) return new derates instead of editing them.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from trimtab.milp.assess import Assessment
from trimtab.errors import InfeasibleError, NoSolutionError
from trimtab.ir.model import ProblemIR
from trimtab.util.jobs import gc_paused
from trimtab.contract.schema import Plan
from trimtab.planning.rounds import (LORA_PREFIX, MAX_ROUNDS, SIM_ROUNDS, derate_analytic, derate_breaches,
                                     family_of,
                             first_try_worth, lowest, misses_of, prior_derates, prior_on_miss, simulate_and_derate,
                             simulate_past_misses, stuck)
from trimtab.solvers import SolveOptions, SolveResult, get_backend


@dataclass(frozen=True)
class PlanResult:
    plan: Plan
    ir: ProblemIR
    candidates: Any  # trimtab.milp.candidates.CandidateSet
    assessment: Assessment
    solve: SolveResult
    rounds: int
    seconds: dict[str, float] = field(default_factory=dict)  # per stage wall time
    # validating simulation: (deployment runs taken from a former round, deployment runs simulated); see
    # trimtab.sim.reuse
    sim_runs: tuple[int, int] = (0, 0)
    simulations: int = 0  # validating simulations run, one per round that simulated


class Planner(Protocol):
    """The stages of one kind of planning problem (``C``: its candidate structure)."""

    def candidates(self, ir: ProblemIR) -> Any: ...

    def precheck(self, ir: ProblemIR, cands: Any) -> list[str]:
        """Impossibilities found before solving (each a line for ``InfeasibleError``)."""

    def solve(self, ir: ProblemIR, cands: Any, derate: dict[str, float], backend, options: SolveOptions
              ) -> SolveResult: ...

    def build(self, ir: ProblemIR, cands: Any, res: SolveResult, rounds: int,
              warnings: list[str]) -> tuple[Plan, Assessment]:
        """The plan of a solution, with the predictions of its deployments under their real traffic."""

    def fill(self, cands: Any, res: SolveResult, derate: dict[str, float]) -> dict[str, float]:
        """Per deployment bought: the share of its (derated) capacity the solution uses."""

    def infeasible(self, ir: ProblemIR, cands: Any, backend, options: SolveOptions) -> list[str]:
        """Lines saying why no plan exists and what to relax."""

    def candidate_set(self, cands: Any) -> Any:
        """The ``CandidateSet`` a ``PlanResult`` carries."""

    def peers(self, cands: Any, fitted: bool = False) -> dict[str, tuple[str, ...]]:
        """workload -> ids of the candidates that serve only it ({}: none such; see
        ``trimtab.planning.rounds``);
        ``fitted``: only those of a kind ``profiles/sim_capacity.yaml`` was fitted on."""

    # Optional: ``simulate(plan, spec, ir, seeds, requests, derate, fill) -> (SeedsResult, derate)`` replaces
    # ``trimtab.planning.rounds.simulate_and_derate`` (the schedule planner simulates every window).


@gc_paused()
def drive(planner: Planner, spec, ir: ProblemIR, *, backend: str | None = None, time_limit_s: float | None = None,
          validate: bool = True, seed: int = 0, t0: float | None = None,
          progress: Callable[[str], None] | None = None) -> PlanResult:
    """Cheapest plan meeting every SLO. Raises InfeasibleError (exit 3) or NoSolutionError (exit 4).

    Rounds: solve on the cost model's capacities; a plan over the speed-of-light bound (``trimtab.cost.physics``) is
    re-solved with those deployments held within it (``trimtab.planning.rounds.derate_breaches``) before anything else;
    where the cost model's assessment of the solved plan finds a
    miss, derate the deployment at fault and re-solve (at most MAX_ROUNDS); once it finds none and ``validate``,
    simulate on PLAN_SEEDS seeds from ``seed`` and derate (every candidate of the workload) while a workload's lower
    95 % bound on attainment is below target (SIM_ROUNDS more). After the first simulated miss every candidate the
    prior was fitted on is also held to the capacity prior fitted against the simulator
    (``trimtab.planning.rounds.prior_derates``; dropped if no plan meets it): a plan the simulation confirms on the model's
    capacities keeps their lower cost, the others reach a confirmed plan in about one more round. A planner with
    its own ``simulate`` (schedules: derates per window) gets no prior. A spec of so many workloads that a first
    plan on the model's capacities would almost surely miss (``trimtab.planning.rounds.first_try_worth``) starts at the
    prior instead (dropped, as above, if no plan meets it). Adapter specs (``trimtab.planning.rounds.family_of``) take the
    prior per workload a round shows missing instead (``trimtab.planning.rounds.prior_on_miss``). A workload that misses
    again on the same shape after it was derated, no better than before, has that shape alone cut further
    (``trimtab.planning.rounds.stuck``: its tail is not set by load). A simulated miss that leaves the derates
    unchanged ends the rounds (the next solve would repeat this plan and its verdict). Where a first plan would
    almost surely miss in simulation as well (``trimtab.planning.rounds.simulate_past_misses``: many
    workloads, or
    adapters), a plan with an analytic miss is simulated in the same round and the next solve takes both
    corrections (each candidate at the lower factor): the simulated ones no longer wait a round behind the
    analytic ones. Each round's simulation takes the runs of deployments the last one already simulated with the
    same inputs (``trimtab.sim.reuse``; the same result as simulating them again). The whole drive runs with the
    garbage collector paused (``trimtab.util.jobs.gc_paused``). ``progress``, when given, is told each step as
    it starts (a few words: the CLI shows them on stderr, as planning can take minutes)."""
    from trimtab.cost.physics import breaches
    from trimtab.milp.extract import finish_plan
    from trimtab.sim import default_requests
    from trimtab.sim.reuse import RunCache
    from trimtab.sim.validate import validation_seeds

    say = progress or (lambda _: None)
    t0 = time.perf_counter() if t0 is None else t0
    t1 = time.perf_counter()
    say("building candidates")
    cands = planner.candidates(ir)
    t2 = time.perf_counter()
    problems = planner.precheck(ir, cands)
    if problems:
        raise InfeasibleError(problems)
    be = get_backend(backend or spec.solver.backend)
    opts = SolveOptions(time_limit_s=time_limit_s or spec.solver.time_limit_s)
    simulated = validate and ir.objective != "max_goodput"
    peers = planner.peers(cands) if simulated else {}
    # Where the simulation will judge the plan and a first plan on the cost model's own capacities misses, go
    # straight to the capacities it confirms (trimtab.planning.rounds): the cheap plan is tried first, the prior bounds the
    # rounds after a miss.
    prior = prior_derates(ir, planner.peers(cands, fitted=True) if simulated else {})
    derate: dict[str, float] = {}
    with_prior: tuple | None = None  # (derates with the prior, derates without it) once added; None: not yet
    per_workload = family_of(ir) == LORA_PREFIX  # the prior goes to the workloads a round shows missing only
    past_misses = simulate_past_misses(ir)  # an analytic miss is simulated in the same round, not re-solved first
    if prior and getattr(planner, "simulate", None) is None and not per_workload and not first_try_worth(ir):
        derate, with_prior = dict(prior), (dict(prior), {})  # many workloads: the cheap first plan would miss
    solve_s = 0.0
    sim_s = 0.0
    sim_rounds = 0
    simulations = 0
    sim_requests = default_requests(ir)
    seeds = validation_seeds(seed)
    runs = RunCache()  # deployment runs a round's simulation can take from the last one (trimtab.sim.reuse)
    last_sim = None
    missed: dict[str, tuple[str, float, float]] = {}  # workload -> its last simulated miss (trimtab.planning.rounds.stuck)
    best = None
    warnings = list(ir.warnings)
    for rnd in range(1, MAX_ROUNDS + (SIM_ROUNDS if validate else 0) + 1):
        left = SolveOptions(max(opts.time_limit_s - solve_s, 0.01), opts.mip_rel_gap, opts.threads)
        solved_with = derate
        say(f"round {rnd}: solving")
        res = planner.solve(ir, cands, derate, be, left)
        solve_s += res.seconds
        if not res.has_solution:
            if with_prior is not None and derate == with_prior[0]:
                derate = with_prior[1]  # the prior asks for more GPUs or budget than the spec has: rounds decide alone
                with_prior = (None, None)  # tried once
                continue
            if best is not None:
                break  # keep the last plan; its misses are stated below
            if res.status.value == "infeasible":
                raise InfeasibleError(planner.infeasible(ir, cands, be, opts))
            raise NoSolutionError([f"solver {be.name} stopped without a plan ({res.termination.value}"
                                   + (f": {res.message}" if res.message else "") + f") after {res.seconds:.1f} s;"
                                   " raise --time-limit or try --solver cbc"])
        plan_, a = planner.build(ir, cands, res, rnd, warnings)
        best = (plan_, a, res, rnd)
        last_sim = None
        fill = planner.fill(cands, res, derate)  # (of the derates this plan was solved with)
        broken = breaches(plan_, ir)
        if broken:  # over the speed-of-light bound: re-solve within it before judging SLOs (derate_breaches)
            derate = derate_breaches(broken, derate, fill)
            continue
        misses = a.misses()
        own = getattr(planner, "simulate", None)  # a schedule simulates every window, derates per window
        analytic = None  # the analytic corrections of this round's misses
        if misses:
            analytic = derate_analytic(misses, derate, _needed(ir, plan_, misses, fill, planner, cands, derate))
            if not (simulated and own is None and past_misses):
                derate = analytic
                continue
            # many workloads: the simulation would miss too; take its corrections in this round (simulate_past_misses)
        if not simulated:
            break  # (the simulator offers every workload's full rate; a goodput plan serves part of it)
        ts = time.perf_counter()
        say(f"round {rnd}: simulating the plan on {len(seeds)} seed(s)")
        if own is not None:
            last_sim, derate = own(plan_, spec, ir, seeds, sim_requests, derate, fill)
        else:
            last_sim, derate = simulate_and_derate(plan_, spec, ir, seeds, sim_requests, derate, fill, peers, runs)
            now = misses_of(last_sim, len(seeds), solved_with)
            derate = stuck(derate, now, missed)
            missed = {**missed, **now}
        sim_s += time.perf_counter() - ts
        simulations += 1
        if analytic is not None:
            derate = lowest(derate, analytic)
            if last_sim.ok:
                continue  # the assessment's misses alone: re-solve on its corrections
        elif last_sim.ok:
            break
        sim_rounds += 1
        if per_workload and prior and own is None and with_prior != (None, None):
            alone = derate  # the candidates of the workloads this round did not confirm at most at the prior
            derate = prior_on_miss(ir, last_sim, len(seeds), derate, prior, peers)
            with_prior = (derate, alone)
        elif with_prior is None and prior and own is None:  # first simulated miss: fitted candidates at most at prior
            alone = derate
            derate = lowest(derate, prior)
            with_prior = (derate, alone)
        if derate == solved_with:
            # Nothing to correct: every workload the runs do not confirm has no miss to derate (e.g. too few of its
            # requests in the run for its bound to reach the target at 100 % attainment). The next solve would get
            # the same derates, return this plan and the same seeds the same verdict: stop, with its misses stated.
            break
    plan_, a, res, rnd = best
    extra = [f"{p.workload}: could not be brought within its SLO after {rnd} rounds ({p.reason})" for p in a.misses()]
    if not extra and last_sim is not None and not last_sim.ok:
        extra = [f"{line.removeprefix('workload ')}; not brought within its SLO by simulation after {rnd} rounds"
                 for line in last_sim.failures()]
    if extra:
        plan_, a = planner.build(ir, cands, res, rnd, warnings + extra)
    say("placing replicas on nodes and final checks")
    plan_ = finish_plan(plan_, spec, ir, last_sim, sim_requests, sim_rounds)
    t3 = time.perf_counter()
    return PlanResult(plan_, ir, planner.candidate_set(cands), a, res, rnd,
                      {"lower": t1 - t0, "candidates": t2 - t1, "solve": solve_s, "simulate": sim_s, "total": t3 - t0},
                      (runs.hits, runs.misses), simulations)


def _needed(ir: ProblemIR, plan_: Plan, misses, fill: dict[str, float], planner, cands,
            derate: dict[str, float]) -> dict[str, float]:
    """Candidate id -> the capacity factor at which the cost model has it meet the SLO of an analytic miss, for the
    deployment at fault and the other unified candidates of its workload given the same traffic mix
    (``trimtab.milp.assess.analytic_needs``; for ``trimtab.planning.rounds.derate_analytic``). The lowest
    factor where two
    misses name the same candidate."""
    from trimtab.milp.assess import analytic_needs

    cset = planner.candidate_set(cands)
    by_id = {c.id: c for c in getattr(cset, "candidates", ())}
    peers = planner.peers(cands)
    out: dict[str, float] = {}
    for p in misses:
        d = p.worst_deployment
        if d and d in fill:
            mine = [by_id[c] for c in peers.get(p.workload, ()) if c in by_id]
            for cid, f in analytic_needs(ir, plan_, d, p.workload, fill[d], mine, derate).items():
                out[cid] = min(out.get(cid, 1.0), f)
    return out
