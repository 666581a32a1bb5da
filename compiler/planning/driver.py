"""The one planning driver: every kind of spec goes through the same rounds.

    candidates --precheck--> ( solve --build--> Plan + Assessment --assess--> derate )*
        --simulate on seeds--> ( derate --solve-- ... )*
        --finish (placement, physics guard, simulation record)--> PlanResult

A ``Planner`` supplies the stages that differ between unified serving
(``trimtab.planning.planners.UnifiedPlanner``:
unified, P/D and KV-tier candidates, the MILP of ``compiler/milp/formulate.py``) and adapters
(``trimtab.planning.lora.LoraPlanner``: shared candidates and the adapter-placement MILP). The driver owns the
loop and nothing else: each round is a function of the derates it is given, and the round policy
(``trimtab.planning.policy.RoundPolicy``) says what each round's evidence makes of them for the next solve,
its steps the corrections of ``trimtab.planning.rounds``, which return new derates instead of editing them.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Protocol, TypeVar

from trimtab.milp.assess import Assessment, analytic_needs
from trimtab.errors import InfeasibleError, NoSolutionError, SafetyNetError
from trimtab.ir.model import ProblemIR
from trimtab.util.jobs import gc_paused
from trimtab.contract.schema import Plan
from trimtab.deployment.shape import CandidateSet
from trimtab.planning.goodput import refine as refine_goodput
from trimtab.planning.net import net_lines
from trimtab.planning.policy import RoundPolicy
from trimtab.planning.rounds import (MAX_ROUNDS, PROBES, SIM_ROUNDS, derate_analytic, derate_breaches, lowest,
                                     simulate_and_derate)
from trimtab.solvers import (Backend, NetExpired, NettedBackend, SafetyNet, SolveOptions, SolveResult, Status,
                             Termination, get_backend, spec_options)
from trimtab.cost.physics import breaches
from trimtab.ir.lower import lower
from trimtab.sim import default_requests
from trimtab.sim.reuse import RunCache
from trimtab.sim.validate import validation_seeds
from trimtab.spec.load import spec_profiles

# A planner's candidate structure: a CandidateSet (unified, P/D, KV tiers; schedules, n+1, re-plans), or the
# adapter planner's LoraProblem (shared candidates and traffic units). Only the planner reads inside it; the
# driver passes it from one stage to the next and asks for a CandidateSet of it (candidate_set).
C = TypeVar("C")


@dataclass(frozen=True)
class PlanResult:
    plan: Plan
    ir: ProblemIR
    candidates: CandidateSet
    assessment: Assessment
    solve: SolveResult
    rounds: int
    seconds: dict[str, float] = field(default_factory=dict)  # per stage wall time
    # validating simulation: (deployment runs taken from a former round, deployment runs simulated); see
    # trimtab.sim.reuse
    sim_runs: tuple[int, int] = (0, 0)
    simulations: int = 0  # validating simulations run, one per round that simulated


class Planner(Protocol[C]):
    """The stages of one kind of planning problem (``C``: its candidate structure)."""

    def candidates(self, ir: ProblemIR) -> C: ...

    def precheck(self, ir: ProblemIR, cands: C) -> list[str]:
        """Impossibilities found before solving (each a line for ``InfeasibleError``)."""

    def solve(self, ir: ProblemIR, cands: C, derate: dict[str, float], backend: Backend,
              options: SolveOptions) -> SolveResult: ...

    def build(self, ir: ProblemIR, cands: C, res: SolveResult, rounds: int,
              warnings: list[str]) -> tuple[Plan, Assessment]:
        """The plan of a solution, with the predictions of its deployments under their real traffic."""

    def fill(self, cands: C, res: SolveResult, derate: dict[str, float]) -> dict[str, float]:
        """Per deployment bought: the share of its (derated) capacity the solution uses."""

    def infeasible(self, ir: ProblemIR, cands: C, backend: Backend, options: SolveOptions) -> list[str]:
        """Lines saying why no plan exists and what to relax."""

    def candidate_set(self, cands: C) -> CandidateSet:
        """The ``CandidateSet`` a ``PlanResult`` carries."""

    def peers(self, cands: C, fitted: bool = False) -> dict[str, tuple[str, ...]]:
        """workload -> ids of the candidates that serve only it ({}: none such; see
        ``trimtab.planning.rounds``);
        ``fitted``: only those of a kind ``profiles/sim_capacity.yaml`` was fitted on."""

    # Optional: ``simulate(plan, spec, ir, seeds, requests, derate, fill, net) -> (SeedsResult, derate)``
    # replaces ``trimtab.planning.rounds.simulate_and_derate`` (the schedule planner simulates every window);
    # where it runs several simulations it asks ``net`` (``SafetyNet``) between them, raising ``NetExpired``.


@gc_paused()
def drive(planner: Planner[C], spec, ir: ProblemIR, *, backend: str | None = None,
          time_limit_s: float | None = None, validate: bool = True, seed: int = 0, t0: float | None = None,
          profiles: Any = None, runs: Any = None, progress: Callable[[str], None] | None = None,
          above: float | None = None, cands: C | None = None,
          net: SafetyNet | None = None) -> PlanResult | None:
    """Cheapest plan meeting every SLO. Raises InfeasibleError (exit 3) or NoSolutionError (exit 4).
    ``above``: None as soon as the first solve with a solution costs that much or more (every later solve is
    at capacities no higher, so no plan of this drive can cost less; ``single_types``). ``cands``: the
    candidates of ``ir`` where the caller has them (``single_types``); else they are built.

    Rounds: solve on the cost model's capacities; a plan over the speed-of-light bound
    (``trimtab.cost.physics``) is re-solved with those deployments held within it
    (``trimtab.planning.rounds.derate_breaches``) before anything else; where the cost model's assessment of
    the solved plan finds a miss, derate the deployment at fault and re-solve (at most MAX_ROUNDS); once it
    finds none and ``validate``, simulate on PLAN_SEEDS seeds from ``seed`` and derate (every candidate of the
    workload) while a workload's lower 95 % bound on attainment is below target (SIM_ROUNDS more). After the
    first simulated miss every candidate the prior was fitted on is also held to the capacity prior fitted
    against the simulator (``trimtab.planning.rounds.prior_derates``; dropped if no plan meets it): a plan the
    simulation confirms on the model's capacities keeps their lower cost, the others reach a confirmed plan in
    about one more round. A planner with its own ``simulate`` (schedules: derates per window) gets no prior. A
    spec of so many workloads that a first plan on the model's capacities would almost surely miss
    (``trimtab.planning.rounds.first_try_worth``) starts at the prior instead (dropped, as above, if no plan
    meets it). Adapter specs (``trimtab.planning.rounds.family_of``) take the prior per workload a round shows
    missing instead (``trimtab.planning.rounds.prior_on_miss``). A workload that misses again on the same
    shape after it was derated, no better than before, has that shape alone cut further
    (``trimtab.planning.rounds.stuck``: its tail is not set by load). A simulated miss that leaves the derates
    unchanged ends the rounds (the next solve would repeat this plan and its verdict). Where a first plan
    would almost surely miss in simulation as well (``trimtab.planning.rounds.simulate_past_misses``: many
    workloads, or adapters), a plan with an analytic miss is simulated in the same round and the next solve
    takes both corrections (each candidate at the lower factor): the simulated ones no longer wait a round
    behind the analytic ones. Each round's simulation takes the runs of deployments the last one already
    simulated with the same inputs (``trimtab.sim.reuse``; the same result as simulating them again). The
    whole drive runs with the garbage collector paused (``trimtab.util.jobs.gc_paused``). After the rounds,
    the lazy probes (``probe_measured``) look below the cheapest confirmed plan with only the cuts each
    shape's own misses measured, and the answer is the cheapest plan confirmed. ``progress``, when given, is
    told each step as it starts (a few words: the CLI shows them on stderr, as planning can take minutes).

    ``net``: the run's wall-clock safety net (``trimtab.solvers.SafetyNet``; by default ``time_limit_s`` from
    ``t0``), shared by every solve and simulation of the drive and of those it starts (``single_types``). Each
    solve gets what is left of it; before each solve and each validating simulation, and before the search
    below a confirmed plan and the finish, the drive stops if it expired: ``SafetyNetError`` (exit 4, no
    plan), saying how far it got and what was not validated (``net_lines``)."""
    # lazy: keeps import trimtab light (the plan extraction loads on use)
    from trimtab.milp.extract import finish_plan

    say = progress or (lambda _: None)
    t0 = time.perf_counter() if t0 is None else t0
    t1 = time.perf_counter()
    say("building candidates")
    cands = planner.candidates(ir) if cands is None else cands
    t2 = time.perf_counter()
    problems = planner.precheck(ir, cands)
    if problems:
        raise InfeasibleError(problems)
    be = get_backend(backend or spec.solver.backend)
    opts = spec_options(spec, time_limit_s)
    net = SafetyNet(opts.time_limit_s, t0) if net is None else net
    simulated = validate
    policy = RoundPolicy(ir, planner, cands, simulated)  # the derates each round solves with
    solve_s = 0.0
    sim_s = 0.0
    sim_rounds = 0
    simulations = 0
    sim_requests = default_requests(ir)
    seeds = validation_seeds(seed)
    # deployment runs a round's simulation can take from the last one, and plans simulated before
    # (trimtab.sim.reuse; shared with the drives of single_types)
    runs = RunCache() if runs is None else runs
    last_sim = None
    best = None  # (plan, assessment, result, round, simulation) of the last plan solved outside the probe
    confirmed: list[tuple] = []  # (cost, round, plan, assessment, result, simulation) of each plan confirmed
    # this round re-solves at trimtab.planning.rounds.probe_derates after a plan was confirmed
    probing = False
    warnings = list(ir.warnings)
    last_round = MAX_ROUNDS + (SIM_ROUNDS if validate else 0)
    solved_on: set[str] = set()  # the GPU types of every plan the rounds solved
    sim_round = 0  # the round of the last validating simulation

    def stop(where: str, unsimulated: tuple[int, float, str] | None = None, sims: int = 0):
        """The safety net expired (``net``): stop here, saying what was not validated (``sims``: simulations
        the step that stopped ran, beside those counted)."""
        n = simulations + sims
        raise SafetyNetError(net_lines(net, where, n, confirmed, last_sim, sim_round, unsimulated), where, n)

    for rnd in range(1, last_round + 2):
        if rnd > last_round and not probing:
            break  # one round past the limit: the probe's only
        if net.expired():
            stop(f"before round {rnd}'s solve")
        left = net.options(opts)
        solved_with = policy.derate
        say(f"round {rnd}: solving")
        res = planner.solve(ir, cands, solved_with, be, left)
        solve_s += res.seconds
        if above is not None and res.has_solution and best is None and not confirmed:
            if res.objective is not None and res.objective >= above - 1e-6:
                return None  # this drive's lower bound: nothing it plans can be cheaper than ``above``
        cheapest = min((c[4].objective for c in confirmed), default=None)
        if probing and not (res.has_solution and res.objective < cheapest - 1e-6):
            break  # the probe finds nothing cheaper than the plans confirmed: nothing to simulate
        if res.termination == Termination.TIME_LIMIT:  # the net expired in the solve: no answer from it
            stop(f"in round {rnd}'s solve, stopped after {res.seconds:.1f} s")
        if not res.has_solution:
            if res.status != Status.INFEASIBLE:  # a solver that stopped without an answer is one (exit 4)
                raise NoSolutionError(no_solution_lines(be.name, res, rnd))
            if policy.drop_prior():  # it asked for more GPUs or budget than the spec has
                continue
            if best is not None:
                break  # the corrections ask for more than the spec has: the last plan, its misses stated
            # (a search below ``above`` shows no reasons: relaxations take a solve each, under the net)
            try:
                lines = (planner.infeasible(ir, cands, NettedBackend(be, net, "the relaxations"), opts)
                         if above is None else ["no plan within the spec's GPUs and budget"])
            except NetExpired as exc:
                stop(f"after round {rnd}'s infeasible solve, {exc}")
            raise InfeasibleError(lines)
        plan_, a = planner.build(ir, cands, res, rnd, warnings)
        solved_on |= {g for g, n in plan_.gpus.items() if n}
        fill = planner.fill(cands, res, solved_with)
        broken = breaches(plan_, ir)
        misses = a.misses()
        if probing and (broken or misses):
            break  # the probe's plan is kept only as it is, confirmed
        if not probing:
            best = (plan_, a, res, rnd, None)
        if broken:  # over the speed-of-light bound: re-solve within it before judging SLOs
            policy.breaches(broken, fill)
            continue
        analytic = None  # the analytic corrections of this round's misses, taken with its simulation
        if misses:
            analytic = policy.analytic(misses, _needed(ir, plan_, misses, fill, planner, cands, solved_with))
            if analytic is None:
                continue  # re-solve on them first
        if not simulated:
            confirmed.append((plan_.cost_usd_per_hour, rnd, plan_, a, res, None))
            break
        if net.expired():
            stop(f"before round {rnd}'s simulation", (rnd, plan_.cost_usd_per_hour, "was not simulated"))
        ts = time.perf_counter()
        say(f"round {rnd}: simulating the plan on {len(seeds)} seed(s)")
        try:
            last_sim = policy.simulate(plan_, spec, seeds, sim_requests, fill, solved_with, runs, net)
        except NetExpired as exc:  # (only a planner's own simulate asks the net between its runs)
            stop(f"in round {rnd}'s simulation ({exc})",
                 (rnd, plan_.cost_usd_per_hour, "was simulated in part only"), exc.sims)
        sim_s += time.perf_counter() - ts
        simulations += 1
        sim_round = rnd
        if probing:
            if last_sim.ok:
                confirmed.append((plan_.cost_usd_per_hour, rnd, plan_, a, res, last_sim))
            break
        best = (plan_, a, res, rnd, last_sim)
        if analytic is not None:
            policy.take(analytic)
            if last_sim.ok:
                continue  # the assessment's misses alone: re-solve on its corrections
        elif last_sim.ok:
            confirmed.append((plan_.cost_usd_per_hour, rnd, plan_, a, res, last_sim))
            if not policy.probe(solved_with):
                break
            probing = True  # a cheaper plan may pass where the rounds lowered capacities on others' evidence
            continue
        sim_rounds += 1
        policy.missed_in_simulation(last_sim, len(seeds), solved_with)
        if policy.derate == solved_with:
            # Nothing to correct: every workload the runs do not confirm has no miss to derate (e.g. too few
            # of its requests in the run for its bound to reach the target at 100 % attainment). The next
            # solve would get the same derates, return this plan and the same seeds the same verdict: stop,
            # with its misses stated.
            break
    # After a confirmed plan, one search below it (both simulate what they find and keep it only confirmed):
    # min_cost: probes at the capacities the misses measured; max_goodput: between the capacities confirmed
    # and refuted, for more traffic served (the drive stopped at its first confirmed plan: ``solved_with``
    # holds that plan's derates)
    search = None
    if confirmed and policy.probes_worth():
        search = ("probing below the confirmed plan at the capacities its misses measured",
                  "in the probes below the confirmed plan", lambda: probe_measured(
                      planner, spec, ir, cands, be, opts, policy.probe_start(), confirmed, seeds,
                      sim_requests, runs, warnings, rnd + 1, net))
    elif confirmed and policy.goodput_search_worth():
        search = ("searching between the confirmed and the refuted capacities for more goodput",
                  "in the goodput search", lambda: refine_goodput(
                      planner, spec, ir, cands, be, opts, solved_with, policy.failed_with, confirmed, seeds,
                      sim_requests, runs, warnings, rnd + 1, net))
    if search is not None:
        what, where, run_search = search
        say(what)
        try:
            ps, pm, pn = run_search()
        except NetExpired as exc:
            stop(f"{where} ({exc})", sims=exc.sims)
        solve_s += ps
        sim_s += pm
        simulations += pn
    # "assess": the time after the candidates outside the solver and the simulator (prechecks, building and
    # assessing each round's plan), so that the stages add up to the total
    assess_s = time.perf_counter() - t2 - solve_s - sim_s
    seconds = {"lower": t1 - t0, "candidates": t2 - t1, "solve": solve_s, "simulate": sim_s,
               "assess": assess_s}
    # The cheapest plan confirmed on one GPU type alone, if cheaper than the rest (single_types). Its solves
    # and simulations are under the run's safety net: --time-limit bounds the whole run, and a search it stops
    # gives no plan (a plan then would depend on the load).
    if confirmed and policy.single_types_worth():
        ts = time.perf_counter()
        say("planning each GPU type alone where it may be cheaper")
        if net.expired():
            stop("before the search on each GPU type alone")
        try:
            single = single_types(planner, spec, ir, cands, be, opts, validate, seed,
                                  min(c[0] for c in confirmed), solved_on, policy.start, profiles, runs, net)
        except NetExpired as exc:
            stop(f"in the search on each GPU type alone ({exc})", sims=exc.sims)
        seconds["single types"] = time.perf_counter() - ts
        if single is not None:  # its plan and rounds; the simulations and runs of both drives
            seconds.update({"finish": 0.0, "total": time.perf_counter() - t0})
            return replace(single, ir=ir, candidates=planner.candidate_set(cands), seconds=seconds,
                           simulations=simulations + single.simulations)  # (runs: shared, counted there)
    if confirmed:  # the cheapest plan confirmed (the earliest of equal cost); max_goodput: the search's last
        _, rnd, plan_, a, res, last_sim = (confirmed[-1] if policy.goodput
                                           else min(confirmed, key=lambda c: (c[0], c[1])))
    else:
        plan_, a, res, rnd, last_sim = best
    extra = [f"{p.workload}: could not be brought within its SLO after {rnd} rounds ({p.reason})"
             for p in a.misses()]
    missing = sorted({p.workload for p in a.misses()})
    if not extra and last_sim is not None and not last_sim.ok:
        extra = [f"{line.removeprefix('workload ')}; not brought within its SLO by simulation after "
                 f"{rnd} rounds" for line in last_sim.failures()]
        missing = sorted(n for n in last_sim.intervals if not last_sim.accepted(n))
    if net.expired():
        stop("before placing the plan's replicas on nodes and its final checks")
    ts = time.perf_counter()
    if extra:
        plan_, a = planner.build(ir, cands, res, rnd, warnings + extra)
    say("placing replicas on nodes and final checks")
    plan_ = finish_plan(plan_, spec, ir, last_sim, sim_requests, sim_rounds)
    if missing:  # not a plan to deploy: the CLI writes it only with --allow-misses (PlanMissesError)
        plan_ = plan_.model_copy(update={"misses": missing})
    t3 = time.perf_counter()
    seconds.update({"finish": t3 - ts, "total": t3 - t0})
    return PlanResult(plan_, ir, planner.candidate_set(cands), a, res, rnd, seconds, (runs.hits, runs.misses),
                      simulations)


def probe_measured(planner: Planner[C], spec, ir: ProblemIR, cands: C, be: Backend, opts: SolveOptions,
                   derate: dict[str, float], confirmed: list, seeds, requests: int, runs, warnings: list[str],
                   rnd: int, net: SafetyNet) -> tuple[float, float, int]:
    """Lazy probes below the cheapest confirmed plan (appended to ``confirmed`` when one is found); returns
    the seconds they took (solving, simulating) and the simulations they ran. Each solves at the first solve's
    derates with only the cuts measured on each shape itself (``derate``: ``measured`` on top of the start),
    none spread to a workload's other shapes nor the prior added after a miss; a cheaper plan is simulated,
    kept when confirmed, and a miss cuts the deployment at fault alone before the next probe (at most PROBES;
    a plan over the speed-of-light bound or with an analytic miss is cut the same way, unsimulated). Why: the
    rounds' workload-wide corrections are guesses, and a guess made on one plan's miss can price out a shape
    no run showed missing, so a spec that only got cheaper took another path to a dearer plan (the quickstart
    with the A100 price halved: its first plan put summarize on two TP2 A100s, which missed, and every
    summarize shape was derated: 27.30 $/h, while the plan at the normal price, 24.50 $/h at the halved one,
    was never shown missing). A plan confirmed for a harder spec stays feasible here unless a run measured one
    of its shapes missing at its own load: the probe's optimum is then at most its cost. Raises ``NetExpired``
    where ``net`` expired before a probe's solve or simulation."""
    solve_s = sim_s = 0.0
    sims = 0
    for k in range(PROBES):
        cheapest = min(c[0] for c in confirmed)
        if net.expired():
            raise NetExpired(f"before probe {k + 1}'s solve", sims)
        res = planner.solve(ir, cands, derate, be, net.options(opts))
        solve_s += res.seconds
        if res.termination == Termination.TIME_LIMIT:  # the wall clock never decides (trimtab.solvers.base)
            raise NetExpired(f"in probe {k + 1}'s solve, stopped after {res.seconds:.1f} s", sims)
        if not (res.has_solution and res.objective is not None and res.objective < cheapest - 1e-6):
            break  # nothing cheaper within the evidence: the confirmed plan stands
        plan_, a = planner.build(ir, cands, res, rnd + k, warnings)
        if plan_.cost_usd_per_hour >= cheapest - 1e-6:
            break
        fill = planner.fill(cands, res, derate)
        broken = breaches(plan_, ir)
        if broken:
            derate = derate_breaches(broken, derate, fill)
            continue
        misses = a.misses()
        if misses:
            cut = derate_analytic(misses, derate, _needed(ir, plan_, misses, fill, planner, cands, derate))
            at_fault = {p.worst_deployment for p in misses if p.worst_deployment}
            derate = lowest(derate, {d: cut[d] for d in at_fault if d in cut})
            continue
        if net.expired():
            raise NetExpired(f"before probe {k + 1}'s simulation (a plan at {plan_.cost_usd_per_hour:.2f} "
                             "$/h)", sims)
        ts = time.perf_counter()
        sim, cut = simulate_and_derate(plan_, spec, ir, seeds, requests, derate, fill, {}, runs)
        sim_s += time.perf_counter() - ts
        sims += 1
        if sim.ok:
            confirmed.append((plan_.cost_usd_per_hour, rnd + k, plan_, a, res, sim))
            break  # the next probe would solve at the same derates: this plan again
        if cut == derate:
            break  # no deployment at fault to cut: the next probe would repeat this plan
        derate = cut
    return solve_s, sim_s, sims


def only_type(ir: ProblemIR, gpu: str) -> ProblemIR:
    """``ir`` with every GPU type but ``gpu`` at count 0: its solves buy that type alone (candidates stay)."""
    return replace(ir, gpus=tuple(g if g.type == gpu else replace(g, count=0) for g in ir.gpus))


def single_types(planner: Planner[C], spec, ir: ProblemIR, cands: C, be: Backend, opts: SolveOptions,
                 validate: bool, seed: int, cost: float, solved_on: set[str], start: dict[str, float],
                 profiles, runs, net: SafetyNet) -> PlanResult | None:
    """The cheapest plan the rounds confirm on one GPU type alone, where it costs less than ``cost`` (the
    cheapest confirmed on every type together); None if there is none. Why: the corrections after a simulated
    miss lower every shape of the missing workload (``trimtab.planning.rounds``), so a miss on one type can
    price out another type that the rounds, offered it alone, confirm at the model's capacity: more choice
    gave a dearer plan (a 7B chat on L4, A10G, A100 and H100 against L4 alone). A type is planned (the spec
    offering it alone, its own candidates and rounds: the plan `plan` gives that spec, ties between equal
    costs broken the same way) only while the first solve of its own drive is below the best cost so far
    (``drive``'s ``above``: the rounds only lower capacities, so a lower bound of its plan), and before that
    only where the planner's cost floor of the type alone (``one_type_floor``: no candidate set, no solve) is
    below it and the precheck of its candidates passes (``one_type_refused``: known from its unified
    candidates, before its pairs are built). Its candidates are taken from ``cands`` where the planner can
    (``for_one_type``: the type's unified shapes as they are, its P/D pairs built again). The types are tried
    cheapest floor first (planners without a floor: their optimum on ``cands`` at the first solve's derates,
    ``start``). Neither orders more than the search: a prefill/decode pair serves a length bucket only where
    it pays against the cheapest unified shape of any type (``trimtab.milp.disagg.build_pd_candidates``), so
    offered alone a type can plan cheaper than on ``cands`` (the disaggregated example's H100 pairs have no
    capacity on its longest prompts beside the H200: 93.60 $/h on H100 alone against 101.40 on ``cands``).
    Where every plan the rounds solved (``solved_on``) used one type alone, the rounds on that type alone
    would solve the same plans: it is left out. Its solves and drives share the run's safety net (``net``):
    its expiry stops the run, as anywhere (``NetExpired``, with the simulations run: the drive that called
    this one says what was not done)."""
    profiles = profiles or spec_profiles(spec)
    floor = getattr(planner, "one_type_floor", None)
    alone: dict[str, tuple] = {}  # type -> (the spec offering it alone, its IR)
    bounds = []
    for g in ir.gpus:
        if g.count <= 0 or solved_on == {g.type}:
            continue
        # The spec offering this type alone, planned as such: the same answer as `plan` gives it (ties between
        # plans of equal cost included, which the solver breaks by the model it is given)
        one = spec.model_copy(update={"gpus": [p for p in spec.gpus if p.type == g.type],
                                      "nodes": None if spec.nodes is None else
                                      [n for n in spec.nodes if n.gpu == g.type] or None})
        if spec.nodes is not None and one.nodes is None:
            continue
        try:
            ir_one = lower(one, profiles)
        except InfeasibleError:
            continue
        low = floor(cands, ir, ir_one) if floor is not None else 0.0
        if low >= cost - 1e-6:
            continue  # no plan of this type alone can be cheaper (a fluid bound: before any pair is built)
        refused = getattr(planner, "one_type_refused", None)
        if refused is not None and refused(cands, ir, ir_one):
            continue  # its drive would stop at the precheck (InfeasibleError: skipped below), pairs built for
            # nothing
        alone[g.type] = (one, ir_one)
        if floor is None:  # no floor to order by: the optimum on ``cands`` at the first solve's derates
            res = planner.solve(only_type(ir, g.type), cands, start, be, net.options(opts))
            if res.termination == Termination.TIME_LIMIT:  # the net expired: no answer from it
                raise NetExpired(f"in the solve on {g.type} alone, stopped after {res.seconds:.1f} s")
            low = res.objective if res.has_solution and res.objective is not None else float("inf")
        bounds.append((low, g.type))
    best = None
    for _, gpu in sorted(bounds):
        one, ir_one = alone[gpu]
        try:
            derive = getattr(planner, "for_one_type", None)  # its candidates from ``cands``, not rebuilt
            mine = derive(cands, ir, ir_one) if derive else None
            below = getattr(planner, "may_plan_below", None)  # the LP's and the MILP's bounds, under the net
            if mine is not None and below is not None and not below(
                    ir_one, mine, cost, NettedBackend(be, net, f"the bounds on {gpu} alone"), opts):
                continue  # the drive would end without a plan below ``cost``
            r = drive(planner, one, ir_one, backend=be.name, time_limit_s=opts.time_limit_s,
                      validate=validate, seed=seed, profiles=profiles, runs=runs, above=cost, cands=mine,
                      net=net)
        except InfeasibleError:
            continue  # (the derates ask for more of the type than the spec has)
        except SafetyNetError as exc:  # the run's net expired: the run stops, whichever drive it was in
            raise NetExpired(f"on {gpu} alone, {exc.where}", exc.sims) from None
        except NoSolutionError as exc:
            if any("safety net" in line for line in exc.lines):
                raise  # the wall clock never decides (trimtab.solvers.base)
            continue  # a work limit on this type alone: deterministic, and the plan on every type stands
        if r is not None and not r.plan.misses and r.plan.cost_usd_per_hour < cost - 1e-6:
            best, cost = replace(r, plan=r.plan.model_copy(update={"input_hash": ir.input_hash})), \
                r.plan.cost_usd_per_hour
    return best


def no_solution_lines(backend: str, res: SolveResult, rnd: int) -> list[str]:
    """What ``NoSolutionError`` says of a solve that stopped without a solution: why, and what to try."""
    what = {Termination.TIME_LIMIT: "raise --time-limit",
            Termination.WORK_LIMIT: "try --solver cbc or --solver cpsat"}.get(res.termination,
                                                                               "try --solver cbc")
    why = res.message or res.termination.value
    return [f"solver {backend} stopped without a plan in round {rnd} after {res.seconds:.1f} s: {why}"
            + ("" if what in why else f"; {what}")]


def _needed(ir: ProblemIR, plan_: Plan, misses, fill: dict[str, float], planner, cands,
            derate: dict[str, float]) -> dict[str, float]:
    """Candidate id -> the capacity factor at which the cost model has it meet the SLO of an analytic miss,
    for the deployment at fault and the other unified candidates of its workload given the same traffic mix
    (``trimtab.milp.assess.analytic_needs``; for ``trimtab.planning.rounds.derate_analytic``). The lowest
    factor where two misses name the same candidate."""
    by_id = {c.id: c for c in planner.candidate_set(cands).unified}
    peers = planner.peers(cands)
    out: dict[str, float] = {}
    for p in misses:
        d = p.worst_deployment
        if d and d in fill:
            mine = [by_id[c] for c in peers.get(p.workload, ()) if c in by_id]
            for cid, f in analytic_needs(ir, plan_, d, p.workload, fill[d], mine, derate).items():
                out[cid] = min(out.get(cid, 1.0), f)
    return out
