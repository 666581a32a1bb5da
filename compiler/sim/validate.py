"""SLO attainment judged over several seeds, with a confidence interval (docs/simulator.md, "Seeds and
confidence").

One simulation is one random sample of the traffic: a plan tuned until seed 0 passes may fail at seed 1.
So ``plan`` validates on ``PLAN_SEEDS`` seeds and keeps a plan only when every workload's attainment has a
**lower** 95 % bound at or above its target; ``check`` replays seeds the planner did not use and fails a
workload only when its **upper** bound is below the target (a miss the evidence shows); a point estimate under
the target with the target inside the interval is reported as inconclusive (``--strict`` fails it too).

The interval uses batch means: each run's measured requests of a workload, in arrival order, are cut into
``BATCHES`` consecutive batches; the batch attainments over all seeds give the variance of the pooled mean
(consecutive requests share queues, so requests are not independent; batches much longer than a busy period
nearly are). The standard error is never below the binomial one with one extra miss and one extra success
(so a run without a single miss still has an interval), and Student's t with (batches - 1) degrees of
freedom gives the bound.

Batch means assume a congestion episode is much shorter than a batch. Near saturation it is not: one seed's
run can spend most of its length in one long queue while another drains, and the batch attainments of a seed
then move together, so batch means understate the variance (the diurnal example's busiest window: lower bound
0.91 over seeds 0-2, attainment 0.83 over seeds 1000-1002, 0.65 at seed 1000). Two tests catch it:

* consecutive batches of a run that are correlated (lag-1 autocorrelation of the batch attainments, pooled
  over runs, above its one-sided 95 % null bound z / sqrt(pairs));
* runs whose own attainments spread more than their batches predict (F test at 95 %, (runs - 1,
  batches - 1) degrees of freedom).

Either way, with two or more runs the runs are the independent samples: the standard error is the runs' one
(independent replications, weighted by requests) and Student's t has (runs - 1) degrees of freedom. The
**lower** bound (what ``plan`` requires) takes them wherever the runs spread more than their batches predict
at all (se of the replications above the batch means' one), test or no test: with three to seven runs the F
test rarely rejects, and a lower bound narrower than the runs' own spread accepted plans that fail at unused
seeds (the quickstart's summarize at p90: seeds 0-6 at 86-99 %, batch-means lower bound 90.27 % at
SEQUENTIAL_CONFIDENCE, the replications' 87.2 %; seeds 0-39 per run 43-100 %, 20 unused seeds pooled 88.55 %).
The **upper** bound (what ``check`` fails on) keeps the tests: with two or three runs the replications' t has
one or two degrees of freedom, and a single replica that misses at one seed of two (attainment 67 % against 90
%) would have an upper bound of 99.6 %, no miss shown. Each bound errs on the side
of its user's caution: ``plan`` accepts less, ``check`` fails no less than before. That also
holds for a transient (the first minutes after a boundary, where every seed misses early and meets later: its
batches are correlated, its runs agree). A single run has only the AR(1) correction: its batch variance scaled
by (1 + r) / (1 - r), the variance of a mean of correlated batches (r capped at R_MAX).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from trimtab.sim import aim_counts, closure, default_requests, simulate
from trimtab.sim.metrics import SimResult
from trimtab.sim.scenario import build_scenario

PLAN_SEEDS = 3  # plan validates on seeds seed .. seed + PLAN_SEEDS - 1
CHECK_SEEDS = 3  # check's default number of seeds ...
CHECK_SEED_BASE = 1000  # ... starting here (moved past any seed the plan records)
CONFIDENCE = 0.95  # one-sided
# plan stops after one seed when every lower bound leaves at most this share of allowed misses
EARLY_ACCEPT = 0.5
# plan runs at most EXTRA_SEEDS more seeds, on the workloads the PLAN_SEEDS leave undecided, whose bounds are
# then at SEQUENTIAL_CONFIDENCE (repeated looks; docs/simulator.md), LOOK_SEEDS seeds a look, run side by side
# (trimtab.sim.parallel)
EXTRA_SEEDS = 12
SEQUENTIAL_CONFIDENCE = 0.9975
LOOK_SEEDS = 2
R_MAX = 0.9  # cap on the lag-1 batch autocorrelation used to widen the interval (factor 19 on the variance)


@dataclass(frozen=True)
class Interval:
    """Pooled attainment of one workload over one or more runs, with its one-sided CONFIDENCE bounds."""

    mean: float
    lower: float
    upper: float
    requests: int
    batches: int


def interval(runs: list[list[tuple[int, int]]], confidence: float = CONFIDENCE) -> Interval:
    """Pooled interval of ``runs``: one list per run (seed) of its batches, [(requests meeting the SLO,
    requests), ...] in arrival order. Batch means, or independent replications when batches are correlated or
    the runs disagree more than their batches allow (module docstring)."""
    runs = [[(ok, n) for ok, n in r if n > 0] for r in runs]
    runs = [r for r in runs if r]
    batches = [b for r in runs for b in r]
    n_tot = sum(n for _, n in batches)
    if not n_tot:
        return Interval(0.0, 0.0, 1.0, 0, 0)
    ok_tot = sum(ok for ok, _ in batches)
    mean = ok_tot / n_tot
    m = len(batches)
    p_adj = (ok_tot + 1) / (n_tot + 2)
    se = math.sqrt(p_adj * (1 - p_adj) / n_tot)
    # scipy.special's inverse CDFs, the functions scipy.stats' norm/t/f .ppf call (the same values): importing
    # scipy.stats costs ~1 s of a fresh process's first plan, scipy.special a fraction of it
    from scipy.special import fdtri, ndtri, stdtrit

    dof = max(m - 1, 1)
    low = (se, dof)  # the lower bound's (standard error, degrees of freedom): at least as wide as the upper's
    if m >= 2:
        se_batch = math.sqrt(_weighted_var(batches, mean, n_tot) / m)
        ar1 = _ar1_factor(runs, mean, float(ndtri(CONFIDENCE)))
        k = len(runs)
        if k >= 2 and m > k:
            # Several runs: when batches are correlated or the runs disagree more than their batches allow,
            # the runs themselves are the independent samples (right for a transient every seed shares too).
            se_rep = math.sqrt(_weighted_var([(sum(o for o, _ in r), sum(n for _, n in r)) for r in runs],
                                             mean, n_tot) / k)
            ratio = (se_rep / se_batch) ** 2 if se_batch > 0 else (math.inf if se_rep > 0 else 0.0)
            if ar1 > 1.0 or ratio > float(fdtri(k - 1, m - 1, CONFIDENCE)):
                se, dof = max(se, se_rep), k - 1
            else:
                se = max(se, se_batch)
            # the lower bound (what plan requires) never narrower than the runs' own spread (module docstring)
            low = (max(low[0], se_rep), k - 1) if se_rep > se_batch else (se, dof)
        else:  # one run: only the AR(1) correction
            se = max(se, se_batch * math.sqrt(ar1))
            low = (se, dof)
    q = float(stdtrit(dof, confidence))
    lower = low[0] * float(stdtrit(low[1], confidence))
    return Interval(mean, max(0.0, mean - max(lower, q * se)), min(1.0, mean + q * se), n_tot, m)


def _ar1_factor(runs: list[list[tuple[int, int]]], mean: float, z: float) -> float:
    """(1 + r) / (1 - r) for the pooled lag-1 autocorrelation r of consecutive batch attainments within runs
    when r is above its one-sided null bound z / sqrt(pairs) (module docstring), else 1."""
    num = den = 0.0
    pairs = 0
    for r in runs:
        d = [ok / n - mean for ok, n in r]
        den += sum(x * x for x in d)
        num += sum(a * b for a, b in zip(d, d[1:]))
        pairs += len(d) - 1
    if pairs < 2 or den <= 0:
        return 1.0
    rho = num / den
    if rho <= z / math.sqrt(pairs):
        return 1.0
    rho = min(rho, R_MAX)
    return (1 + rho) / (1 - rho)


def _weighted_var(groups: list[tuple[int, int]], mean: float, n_tot: int) -> float:
    """Request-weighted sample variance of the groups' attainments [(ok, n), ...] around the pooled ``mean``,
    scaled as an unbiased variance of one group (x g / (g - 1))."""
    g = len(groups)
    return sum(n / n_tot * (ok / n - mean) ** 2 for ok, n in groups) * g / (g - 1)


@dataclass
class SeedsResult:
    """Several runs of one plan (one per seed) and each workload's pooled interval."""

    seeds: tuple[int, ...]
    runs: list[SimResult]
    intervals: dict[str, Interval]
    targets: dict[str, float]

    def runs_of(self, name: str) -> list[SimResult]:
        """The runs that report workload ``name`` (every run but the ones a planner's selective seeds left it
        out of: ``simulate_seeds``)."""
        return [r for r in self.runs if name in r.workloads]

    def at_target(self, name: str) -> bool:
        """The pooled attainment (point estimate) is at or above the target."""
        return self.intervals[name].mean >= self.targets[name] - 1e-12

    def demonstrated(self, name: str) -> bool:
        """The lower bound reaches the target: the runs show the SLO is met (what ``plan`` requires)."""
        return self.intervals[name].lower >= self.targets[name] - 1e-12

    def too_few(self, name: str) -> bool:
        """Too few requests of this workload in the runs for any outcome to demonstrate its target: even every
        request meeting the SLO would give a lower bound below it (a rare workload, p99 of ~100 requests;
        docs/simulator.md, "Seeds and confidence")."""
        perfect = [[(n, n) for _, n in r.workloads[name].batches] for r in self.runs_of(name)]
        return interval(perfect).lower < self.targets[name] - 1e-12

    def accepted(self, name: str) -> bool:
        """What ``plan`` requires of a workload: demonstrated, or, where the runs hold too few of its requests
        to demonstrate anything (``too_few``), a pooled attainment at or above its target (the point estimate
        ``check`` calls a pass)."""
        if self.demonstrated(name):
            return True
        return self.at_target(name) and self.too_few(name)

    def undersampled(self) -> list[str]:
        """Workloads accepted on their point estimate only (``accepted`` but not ``demonstrated``), sorted."""
        return sorted(n for n in self.intervals if not self.demonstrated(n) and self.accepted(n))

    def missed(self, name: str) -> bool:
        """The upper bound is below the target: the runs show the SLO is missed (what fails ``check``)."""
        return self.intervals[name].upper < self.targets[name] - 1e-12

    def verdict(self, name: str) -> str:
        """pass (pooled attainment at or above target), fail (a shown miss) or inconclusive (in between)."""
        if self.missed(name):
            return "fail"
        return "pass" if self.at_target(name) else "inconclusive"

    @property
    def ok(self) -> bool:
        """Every workload accepted (the planner's criterion: demonstrated, or too rare to demonstrate and at
        or above target)."""
        return all(self.accepted(n) for n in self.intervals)

    def worst_deployment(self, name: str) -> str:
        """The deployment with the most misses of this workload over all runs."""
        misses: dict[str, float] = {}
        for r in self.runs_of(name):
            for d, (n, a) in r.workloads[name].by_deployment.items():
                misses[d] = misses.get(d, 0.0) + n * (1 - a)
        live = {d: m for d, m in misses.items() if m > 0 and d != "(no route)"}
        return max(sorted(live), key=lambda d: live[d]) if live else ""

    def failures(self) -> list[str]:
        """One line per workload the runs do not show meeting its SLO (``failure``)."""
        return [self.failure(n) for n in self.intervals if not self.accepted(n)]

    def failure(self, name: str) -> str:
        """One line: the pooled attainment with its bounds (``describe``), the only attainment on the line,
        then what misses in the worst run (``WorkloadStats.misses``: the metric over its SLO and by how
        much)."""
        runs = self.runs_of(name)
        i = min(range(len(runs)), key=lambda k: runs[k].workloads[name].attainment)
        worst = runs[i].workloads[name]
        detail = worst.misses() if not worst.passed else "every run at or above target"
        return f"workload {name}: {self.describe(name)}; worst seed ({runs[i].seed}): {detail}"

    def describe(self, name: str) -> str:
        iv, t = self.intervals[name], self.targets[name]
        return (f"attainment {iv.mean:.2%} (95% bounds {iv.lower:.2%}-{iv.upper:.2%}, {iv.requests:,} "
                f"requests, {len(self.runs_of(name))} seed(s)) vs target {t:.0%}")


def combine(seeds: tuple[int, ...], runs: list[SimResult], looked: frozenset[str] = frozenset(),
            skip: frozenset[str] = frozenset()) -> SeedsResult:
    """The runs of ``seeds`` pooled per workload (the first run reports every workload; later ones may report
    fewer: ``simulate_seeds``). ``looked``: workloads given extra seeds after an undecided verdict, whose
    bounds are at SEQUENTIAL_CONFIDENCE. ``skip``: workloads left out (nothing of theirs offered)."""
    names = [n for n in runs[0].workloads if n not in skip]
    return SeedsResult(seeds, runs,
                       {n: interval([r.workloads[n].batches for r in runs if n in r.workloads],
                                    SEQUENTIAL_CONFIDENCE if n in looked else CONFIDENCE) for n in names},
                       {n: runs[0].workloads[n].target for n in names})


def clearly(res: SeedsResult, name: str) -> bool:
    """Workload ``name``'s lower bound leaves at most EARLY_ACCEPT of its allowed misses: 1 - lower <=
    EARLY_ACCEPT x (1 - target). Stricter than ``demonstrated`` (which allows all of them)."""
    return 1 - res.intervals[name].lower <= EARLY_ACCEPT * (1 - res.targets[name]) + 1e-12


def clear_pass(res: SeedsResult) -> bool:
    """Every workload passes ``clearly``."""
    return all(clearly(res, n) for n in res.intervals)


def simulate_seeds(plan, spec, ir, seeds: tuple[int, ...], requests: int | None, *, fail_fast: bool = False,
                   skip: frozenset[str] = frozenset(), **kwargs) -> SeedsResult:
    """Simulate ``plan`` once per seed, judging every workload but ``skip`` (the planner's: those a
    max_goodput plan serves 0 rps, whose runs hold none of their requests). ``fail_fast`` (the planner): after
    the first run, the other seeds run only the workloads it did not show ``clearly`` (with the deployments
    they share: ``closure``), and nothing more when it already shows a clear pass (``clear_pass``: the one-run
    lower 95 % bound, over fewer batches and so wider, far enough above every target that the other seeds
    could not be needed to demonstrate it); those that passed clearly keep their one-run interval. Where the
    first run shows a miss (``missed``: the upper bound below the target), the other seeds run only those of
    them at or above target that share no deployment with one below it (``apart``), and none when there are
    none: the planner re-solves anyway, and those workloads' verdict, on deployments the re-solve has no
    reason to change, is then known in this round instead of the next (docs/simulator.md, "Seeds and
    confidence"). An adapter plan's runs are whole (adapter loads tie its workloads' replicas together), so
    every seed runs whatever the first showed: a workload at target on the first seed and below it on another
    is then derated in this round, not found in the next (the adapter family, seeds 0-19: 4 of the 8 specs
    that took a third round had such a workload in their second). Workloads the seeds leave ``undecided`` get
    up to EXTRA_SEEDS more, LOOK_SEEDS at a time side by side, those ``apart`` from any below target too (a
    miss elsewhere does not hold back their verdict). In the planner's seeds after the first, a workload the
    run gives too few requests (``trimtab.sim.aim_counts``) runs on its own (with its closure) for as long as
    it needs, in a run of its own at that seed (docs/simulator.md, "Runs of their own length"). The seeds
    after the first run side by side in forked processes where each run is large enough
    (``trimtab.sim.parallel``); the result is the same."""
    # lazy: keeps import trimtab light (multiprocessing loads for parallel runs only)
    from trimtab.sim import parallel

    only = None
    # One scenario for every run of this plan (every seed; a run never changes it): built once, not per run
    if ir is not None and not set(kwargs) & {"trace", "trace_workloads", "arrival_cv", "scenario"}:
        kwargs = {**kwargs, "scenario": build_scenario(plan, spec, ir)}
    # The planner's later seeds: workloads a run of ``requests`` gives too few requests run on their own, as
    # long as they need (``trimtab.sim.aim_counts``): every rare workload's count, their aim over the seeds
    # after the first together (the first run's few requests of them rarely decide), the same draws whichever
    # of them a seed runs, so a later round takes the runs of deployments it did not change from the run cache
    # (trimtab.sim.reuse)
    own_length = (fail_fast and ir is not None and requests is not None and not plan.adapter_routes
                  and not set(kwargs) - {"cache", "scenario"})
    rare = aim_counts(plan, ir, requests, frozenset(w.name for w in ir.workloads), max(len(seeds) - 1, 1)) \
        if own_length else {}

    def some(s: int, names: frozenset[str]) -> list:
        """Seed ``s``'s runs of ``names``: at ``requests`` (with their closure) and, for rare ones, of their
        own length; one run or two. An adapter plan's run is whole (adapter loads tie its workloads' replicas
        together), reporting only ``names``."""
        if plan.adapter_routes:
            run = simulate(plan, spec, ir=ir, seed=s, requests=requests, timeline=False, **kwargs)
            return [replace(run, workloads={n: w for n, w in run.workloads.items() if n in names})]
        rest = names - set(rare)
        out = [] if not rest else [simulate(plan, spec, ir=ir, seed=s, requests=requests, timeline=False,
                                            only_workloads=rest, **kwargs)]
        if names & set(rare):
            out.append(simulate(plan, spec, ir=ir, seed=s, counts=rare, only_workloads=names & set(rare),
                                timeline=False, **kwargs))
        return out

    def one(s: int) -> list:
        if only is None:
            return [simulate(plan, spec, ir=ir, seed=s, requests=requests, timeline=False, **kwargs)]
        return some(s, only)

    runs = one(seeds[0])
    if fail_fast and len(seeds) > 1:
        first = combine(seeds[:1], runs, skip=skip)
        if clear_pass(first):
            return first
        shown = any(first.missed(n) for n in first.intervals)  # a miss this run already shows
        if not plan.adapter_routes:  # (adapter plans: every run whole)
            only = frozenset(n for n in first.intervals if not clearly(first, n))
            only = apart(plan, first, only) if shown else only
        if shown and not plan.adapter_routes and not only:
            return first
    # The other seeds side by side where worth it (trimtab.sim.parallel), sized by the requests each run
    # draws; 0 (one after another): a progress bar to drive, a run by duration, or no IR to size it from.
    size = (0 if kwargs.get("progress") is not None else requests if requests is not None
            else default_requests(ir) if ir is not None and kwargs.get("duration_s") is None else 0)
    for got in parallel.seeds_in_processes(one, list(seeds[1:]), kwargs.get("cache"), size):
        runs += got
    res = combine(seeds, runs, skip=skip)
    if not fail_fast or len(runs) < 2:
        return res
    looked: frozenset[str] = frozenset()
    end = seeds[-1] + 1 + EXTRA_SEEDS
    while seeds[-1] + 1 < end:
        pending = apart(plan, res, undecided(res))
        if not pending:
            break
        batch = list(range(seeds[-1] + 1, min(seeds[-1] + 1 + LOOK_SEEDS, end)))
        for got in parallel.seeds_in_processes(lambda s: some(s, pending), batch, kwargs.get("cache"), size):
            runs += got
        seeds += tuple(batch)
        looked |= pending
        res = combine(seeds, runs, looked, skip)
    return res


def apart(plan, res: SeedsResult, names: frozenset[str]) -> frozenset[str]:
    """Of ``names``, those at or above their target in ``res`` that share no deployment (``closure``) with a
    workload below it: their verdict does not wait on a re-solve of the others."""
    below = frozenset(n for n in res.intervals if not res.at_target(n))
    if not below:
        return names
    blocked = closure(plan, below)[1]
    return frozenset(n for n in names - below if not closure(plan, (n,))[1] & blocked)


def undecided(res: SeedsResult) -> frozenset[str]:
    """Workloads at or above target on their pooled attainment whose runs do not yet accept it (the lower
    bound below target): the planner runs more seeds on these alone (``simulate_seeds``, at most EXTRA_SEEDS,
    on those that share no deployment with a workload below target: ``apart``) instead of derating deployments
    no run showed missing. Each look at further seeds (LOOK_SEEDS of them) is another look at the same
    question, and the chance that noise alone lifts a bound over the target grows with the looks (at a true
    attainment equal to the target: 4 % with the three seeds, 13.5 % with up to EXTRA_SEEDS more at 95 %); so
    the bounds of the workloads looked at again are at SEQUENTIAL_CONFIDENCE, which keeps it near 5 %
    (tests/sim/test_interval.py). An adapter plan's further seeds are whole runs (``simulate_seeds``)."""
    return frozenset(n for n in res.intervals if not res.accepted(n) and res.at_target(n))


def validation_seeds(first: int) -> tuple[int, ...]:
    """The seeds ``plan`` validates on."""
    return tuple(range(first, first + PLAN_SEEDS))


def check_seeds(n: int, first: int | None, used: tuple[int, ...] = ()) -> tuple[int, ...]:
    """``n`` seeds from ``first`` (default: CHECK_SEED_BASE, moved past the seeds the plan was validated
    on)."""
    if first is None:
        first = max([CHECK_SEED_BASE - 1, *used]) + 1
    return tuple(range(first, first + max(n, 1)))
