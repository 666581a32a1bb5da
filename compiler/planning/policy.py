"""The round policy: how the driver's rounds move the capacity factors (derates) the planner solves with, as
one object the driver calls (``trimtab.planning.driver.drive``). The driver owns the loop (solve, build,
assess, simulate, keep the plans confirmed); the policy owns what a round's evidence does to the next solve:
where the rounds start (the cost model's capacities, or the capacity prior fitted against the simulator), the
corrections after a plan over the speed-of-light bound, an analytic miss and a simulated one, when the prior
is added and when it is dropped, and the derates of the probes below a confirmed plan. Its steps are the
functions of ``trimtab.planning.rounds``, each returning new derates; the policy keeps the ones the next solve
takes (``derate``) and the evidence they rest on.

What differs between planners is read once, here: a planner with its own ``simulate`` (schedules: derates
per window) gets no prior and no search after the rounds; the adapter family (``family_of``) takes the prior
per workload a round shows missing; n+1 plans are not searched per GPU type (their planner holds the whole
fleet); a ``max_goodput`` plan is corrected like any other but its rounds stop at the first plan confirmed
(they only lower capacities, so no later round serves more), and the search after them is the goodput one
between the capacities confirmed and refuted (``trimtab.planning.goodput``), not the probes by cost.
"""
from __future__ import annotations

from trimtab.planning.rounds import (LORA_PREFIX, derate_analytic, derate_breaches, family_of,
                                     first_try_worth, lowest, misses_of, prior_derates, prior_on_miss,
                                     probe_derates, simulate_and_derate, simulate_past_misses, stuck)


def cut(measured: dict[str, float], derate: dict[str, float], at_fault) -> dict[str, float]:
    """``measured`` with each deployment ``at_fault`` at most at its factor in ``derate`` (the correction
    computed from its own load when it missed: an absolute capacity that shape was shown not to hold)."""
    out = dict(measured)
    for d in at_fault:
        if d in derate:
            out[d] = min(out.get(d, 1.0), derate[d])
    return out


class RoundPolicy:
    """The derates of each round of one drive (module docstring). ``derate``: what the next solve takes;
    ``start``: the first solve's (``single_types`` orders GPU types by it); ``measured``: each shape's cut
    measured on its own misses (the lazy probes' evidence, ``probe_start``)."""

    def __init__(self, ir, planner, cands, simulated: bool):
        self.ir, self.simulated = ir, simulated
        self.goodput = ir.objective == "max_goodput"
        self.failed_with: dict[str, float] | None = None  # the derates of the last plan a simulation refuted
        self.own = getattr(planner, "simulate", None)  # a schedule simulates every window, derates per window
        self.peers = planner.peers(cands) if simulated else {}
        # Where the simulation will judge the plan and a first plan on the cost model's own capacities misses,
        # go straight to the capacities it confirms: the cheap plan is tried first, the prior bounds the
        # rounds after a miss.
        self.prior = prior_derates(ir, planner.peers(cands, fitted=True) if simulated else {})
        self.per_workload = family_of(ir) == LORA_PREFIX  # the prior goes to the workloads shown missing only
        self.past_misses = simulate_past_misses(ir)  # an analytic miss is simulated in the same round
        self.derate: dict[str, float] = {}
        # (derates with the prior, derates without it) once added; None: not yet; (None, None): dropped
        self.with_prior: tuple | None = None
        if self.prior and self.own is None and not self.per_workload and not first_try_worth(ir):
            # many workloads: the cheap first plan would miss
            self.derate, self.with_prior = dict(self.prior), (dict(self.prior), {})
        self.start = dict(self.derate)
        # workload -> its last simulated miss (trimtab.planning.rounds.stuck)
        self.missed: dict[str, tuple[str, float, float]] = {}
        self.measured: dict[str, float] = {}

    def drop_prior(self) -> bool:
        """After a solve with no plan: whether the prior was what asked for more GPUs or budget than the spec
        has, in which case it is dropped (once) and the rounds decide alone."""
        if self.with_prior is not None and self.derate == self.with_prior[0]:
            self.derate = self.with_prior[1]
            self.with_prior = (None, None)
            return True
        return False

    def breaches(self, broken, fill: dict[str, float]) -> None:
        """A plan over the speed-of-light bound: the next solve holds those deployments within it."""
        self.derate = derate_breaches(broken, self.derate, fill)
        self.measured = cut(self.measured, self.derate, {b.deployment for b in broken})

    def analytic(self, misses, needed: dict[str, float]) -> dict[str, float] | None:
        """The cost model's assessment finds ``misses`` (``needed``: ``trimtab.milp.assess.analytic_needs``
        per candidate). None: the next solve takes the corrections now (the driver re-solves); else they are
        returned to be taken with the same round's simulation (``take``), where that simulation would miss as
        well (``simulate_past_misses``)."""
        corrected = derate_analytic(misses, self.derate, needed)
        self.measured = cut(self.measured, corrected,
                            {p.worst_deployment for p in misses if p.worst_deployment})
        if not (self.simulated and self.own is None and self.past_misses):
            self.derate = corrected
            return None
        return corrected

    def simulate(self, plan, spec, seeds, requests: int, fill: dict[str, float], solved_with, runs, net):
        """The plan's validating simulation (the planner's own ``simulate`` where it has one, which asks
        ``net`` between its runs), its corrections kept for the next solve; returns its result."""
        if self.own is not None:
            res, self.derate = self.own(plan, spec, self.ir, seeds, requests, self.derate, fill, net)
            return res
        res, derate = simulate_and_derate(plan, spec, self.ir, seeds, requests, self.derate, fill, self.peers,
                                          runs)
        now = misses_of(res, len(seeds), solved_with)
        self.derate = stuck(derate, now, self.missed)
        self.missed = {**self.missed, **now}
        self.measured = cut(self.measured, self.derate, {dep for dep, _, _ in now.values()})
        return res

    def take(self, corrected: dict[str, float]) -> None:
        """The analytic corrections held back by ``analytic``, taken beside the simulation's."""
        self.derate = lowest(self.derate, corrected)

    def probe(self, solved_with: dict[str, float]) -> bool:
        """A plan solved at ``solved_with`` was confirmed: whether a probe round below it is worth a solve
        (``trimtab.planning.rounds.probe_derates`` lifts some derates; False when it lifts none)."""
        if self.goodput:  # (its search follows the rounds: goodput_search_worth)
            self.derate = solved_with
            return False
        self.derate = probe_derates(solved_with, self.prior if self.own is None else {}, self.missed,
                                    self.peers)
        return self.derate != solved_with

    def missed_in_simulation(self, res, n_seeds: int, solved_with: dict[str, float]) -> None:
        """After a simulated miss of the plan solved at ``solved_with`` (kept: ``failed_with``): the prior,
        per workload shown missing for the adapter family (``prior_on_miss``), else once on every candidate
        it was fitted on (``lowest``)."""
        self.failed_with = solved_with
        if not self.prior or self.own is not None:
            return
        alone = self.derate
        if self.per_workload and self.with_prior != (None, None):
            self.derate = prior_on_miss(self.ir, res, n_seeds, self.derate, self.prior, self.peers)
            self.with_prior = (self.derate, alone)
        elif self.with_prior is None:  # first simulated miss: fitted candidates at most at the prior
            self.derate = lowest(self.derate, self.prior)
            self.with_prior = (self.derate, alone)

    def probe_start(self) -> dict[str, float]:
        """The lazy probes' derates: the first solve's with only the cuts each shape's own misses measured."""
        return lowest(self.start, self.measured)

    def probes_worth(self) -> bool:
        """Whether to probe below the confirmed plan: where a plan relaxed to the evidence has a fair chance
        to pass (``first_try_worth``; never for adapter specs, whose first round confirms 40 % of workloads):
        on 100 workloads each probe missed somewhere and the three doubled the CPU of a plan for 0-0.1 % of
        its cost (docs/solvers.md)."""
        return self.simulated and self.own is None and not self.goodput and first_try_worth(self.ir)

    def single_types_worth(self) -> bool:
        """Whether to search each GPU type alone (``single_types``): where the simulation's corrections
        decide; not for schedules, which simulate their own way, nor n+1 specs, whose planner holds the
        whole fleet."""
        return (self.simulated and len(self.ir.gpus) > 1 and self.own is None
                and self.ir.redundancy != "n+1" and not self.goodput)

    def goodput_search_worth(self) -> bool:
        """Whether to search between the capacities confirmed and refuted for a ``max_goodput`` plan that
        serves more (``trimtab.planning.goodput``): after a simulated miss, not for a planner that simulates
        its own way."""
        return self.goodput and self.simulated and self.own is None and self.failed_with is not None
