"""Sweeps: many plans of one spec, over a grid of overrides or over sampled traffic scenarios, serially or as
Ray tasks; and robust planning (the cheapest plan that meets SLOs in at least a share q of the scenarios).

    points = grid_points(spec, parse_sets(["workloads.chat.rate_rps=2,4,8", "gpus.h100-sxm.count=8,16"]))
    points = scenario_points(spec, 20, rate_cv=0.3, length_cv=0.2, seed=0)
    results = run_points(spec, points, executor=make_executor("ray"))      # [PointResult], in point order
    rob = robust_plan(spec, q=0.9, n=50, rate_cv=0.3, seed=0)              # RobustResult

Nothing here re-derives the planner: every point is ``apply_overrides`` (the what-if paths) +
``trimtab.api.plan``, every scenario check is ``trimtab.gate.simulated.check_simulated`` (``trimtab check``).
What this module adds is which specs to plan (grids, sampled scenarios, quantile candidates) and where to run
them.

Determinism: a scenario's multipliers come from ``numpy.random.default_rng([seed, index])``, so scenario i is
the same whether it runs first, last, alone or on another machine; points are planned independently and
returned in point order. Serial and Ray runs of the same points give the same results (``PointResult``
compares everything but wall seconds); the one exception is the planner's own, a solve cut short by its time
limit.

Scenarios scale, per workload, ``rate_rps`` by a lognormal multiplier of mean 1 and coefficient of variation
``rate_cv``, the output-length distribution by one of CV ``length_cv`` and the prompt-length distribution by
one of CV ``input_cv`` (each a multiplier of every length, so the shape and tail of the distribution are
kept). Robust planning checks one plan against every scenario, and a plan's routes name prompt-length ranges
of the spec it was made from (``trimtab.spec.lengths``): scaled prompts are other ranges, so ``robust_plan``
refuses ``input_cv > 0``.
"""
from __future__ import annotations

import importlib.util
import itertools
import math
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np
import yaml

from trimtab.errors import InfeasibleError, InputError, Problem, TrimtabError
from trimtab.spec.schema import Spec
from trimtab.spec.overrides import apply_overrides
from trimtab.api import plan
from trimtab.contract.write import plan_to_data
from trimtab.gate.simulated import check_simulated

ROBUST_LEVELS = (0.5, 0.75, 0.9, 0.95, 1.0)  # quantiles of the sampled multipliers planned as candidates


@dataclass(frozen=True)
class Point:
    """One spec to plan: the base spec with ``overrides`` (``trimtab.spec.overrides`` dotted paths)."""

    index: int
    label: str
    overrides: dict[str, object]
    # scenarios: w -> (rate, out, in)
    multipliers: dict[str, tuple[float, float, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class PointResult:
    """A point's plan, summarised. ``status``: ok, misses (a plan whose own validation still shows a workload
    below its SLO: not a success, as ``plan``'s exit 7), infeasible, no_solution, invalid or internal (the
    ``TrimtabError`` kinds); ``checked``: ``trimtab check`` by simulation passed (None: not checked)."""

    index: int
    label: str
    status: str
    cost_usd_per_hour: float | None = None
    gpus: dict[str, int] = field(default_factory=dict)
    rounds: int | None = None
    validated: bool | None = None
    checked: bool | None = None
    attainment: dict[str, float] = field(default_factory=dict)  # of the check (pooled), when checked
    message: str = ""
    seconds: float = field(default=0.0, compare=False)

    def to_dict(self, point: Point | None = None) -> dict:
        """One point of ``trimtab sweep --format json``: the CSV's row, with its overrides and multipliers."""
        d = asdict(self)
        d["seconds"] = round(self.seconds, 3)
        d["min_attainment"] = min(self.attainment.values()) if self.attainment else None
        if point is not None:
            d["overrides"] = point.overrides
            d["multipliers"] = {w: dict(zip(("rate", "output", "input"), m))
                                for w, m in point.multipliers.items()}
        return d


# ---------------------------------------------------------------------------------------------- points

def _split_values(text: str) -> list[str]:
    """Comma-separated values; commas inside [...] or {...} belong to the value (YAML flow lists/maps)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch in "[{"
        depth -= ch in "]}"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [v.strip() for v in out]


def parse_sets(sets: list[str]) -> list[tuple[str, list[object]]]:
    """``PATH=V1,V2,...`` options to (path, values); each value parsed as YAML (``8`` an int, ``[1,2]`` a
    list). InputError naming ``--set`` and the option on a malformed one."""
    axes: list[tuple[str, list[object]]] = []
    problems = []
    for s in sets:
        if "=" not in s:
            problems.append(Problem("--set", f"{s!r} is not PATH=V1,V2,..."))
            continue
        path, raw = (x.strip() for x in s.split("=", 1))
        vals = _split_values(raw)
        if not path or any(v == "" for v in vals):
            problems.append(Problem("--set",
                                    f"{s!r}: a path and non-empty values are needed (PATH=V1,V2,...)"))
            continue
        if any(p == path for p, _ in axes):
            problems.append(Problem("--set", f"{path} is given twice; list its values in one --set"))
            continue
        try:
            axes.append((path, [yaml.safe_load(v) for v in vals]))
        except yaml.YAMLError as exc:
            problems.append(Problem(f"--set {path}",
                                    f"a value is not valid YAML: {str(exc).splitlines()[0]}"))
    if problems:
        raise InputError(problems, "--set")
    return axes


def grid_points(spec: Spec, axes: list[tuple[str, list[object]]]) -> list[Point]:
    """The Cartesian product of the axes, the last axis fastest. Every point's spec is built (and validated)
    here, before any planning, so a bad path or value fails at once naming the field (exit 1)."""
    if not axes:
        raise InputError([Problem("--set", "give at least one --set PATH=V1,V2,... (or --scenarios N)")])
    points = []
    for i, combo in enumerate(itertools.product(*[vals for _, vals in axes])):
        ov = {p: v for (p, _), v in zip(axes, combo)}
        try:
            apply_overrides(spec, ov)
        except InputError as exc:
            raise InputError([Problem(f"--set {pr.where}", pr.message) for pr in exc.problems],
                             "--set") from None
        points.append(Point(i, ", ".join(f"{p}={v}" for p, v in ov.items()), ov))
    return points


def _scale_dist(d: dict, m: float, where: str) -> dict:
    """A token distribution with every length multiplied by ``m`` (its shape kept); lengths stay >= 1."""
    def r(x: float) -> int:
        return max(1, int(round(x * m)))

    kind, body = next(iter(d.items()))
    if kind == "fixed":
        return {"fixed": r(body)}
    if kind == "uniform":
        return {"uniform": {"min": r(body["min"]), "max": max(r(body["min"]), r(body["max"]))}}
    if kind == "lognormal":
        if "median" in body:
            return {"lognormal": {"median": body["median"] * m, "p99": body["p99"] * m}}
        return {"lognormal": {"mu": body["mu"] + math.log(m), "sigma": body["sigma"]}}
    if kind == "histogram":
        return {"histogram": {"edges": [e * m for e in body["edges"]], "weights": body["weights"]}}
    raise InputError([Problem(where, f"a {kind} distribution cannot be scaled by --length-cv/--input-cv; "
                                     "give it as fixed, uniform, lognormal or histogram, or set the cv "
                                     "to 0")])


def _lognormal_multipliers(rng: np.random.Generator, cv: float, k: int) -> np.ndarray:
    """``k`` multipliers of mean 1 and coefficient of variation ``cv`` (lognormal; ones when cv is 0)."""
    if cv <= 0:
        return np.ones(k)
    s2 = math.log1p(cv * cv)
    return rng.lognormal(-s2 / 2, math.sqrt(s2), k)


def _check_cv(name: str, v: float) -> None:
    if not (v >= 0 and math.isfinite(v)):
        raise InputError([Problem(name, f"must be a finite number >= 0, got {v}")])


def scenario_multipliers(spec: Spec, n: int, rate_cv: float, length_cv: float, input_cv: float,
                         seed: int) -> list[dict[str, tuple[float, float, float]]]:
    """Per scenario, per workload: (rate, output-length, prompt-length) multipliers. Scenario i draws from
    ``default_rng([seed, i])`` in workload order: the same whatever else is sampled or where it runs."""
    if n < 1:
        raise InputError([Problem("--scenarios", f"must be >= 1, got {n}")])
    for name, v in (("--rate-cv", rate_cv), ("--length-cv", length_cv), ("--input-cv", input_cv)):
        _check_cv(name, v)
    names = [w.name for w in spec.workloads]
    out = []
    for i in range(n):
        rng = np.random.default_rng([seed, i])
        rm, om, im = (_lognormal_multipliers(rng, cv, len(names)) for cv in (rate_cv, length_cv, input_cv))
        out.append({w: (float(rm[j]), float(om[j]), float(im[j])) for j, w in enumerate(names)})
    return out


def scaled_overrides(spec: Spec, mult: dict[str, tuple[float, float, float]]) -> dict[str, object]:
    """What-if overrides that apply the multipliers: rates (or a trace's rate_scale) and length
    distributions."""
    data = {w["name"]: w for w in spec.model_dump(mode="python", exclude_none=True)["workloads"]}
    ov: dict[str, object] = {}
    for w, (rm, om, im) in mult.items():
        wd = data[w]
        if rm != 1.0:
            if "rate_rps" in wd:
                ov[f"workloads.{w}.rate_rps"] = round(wd["rate_rps"] * rm, 6)
            else:  # a trace's own rate, sped up
                ov[f"workloads.{w}.trace.rate_scale"] = round(wd["trace"].get("rate_scale", 1.0) * rm, 6)
        for key, m in (("output_tokens", om), ("input_tokens", im)):
            if m != 1.0:
                if key not in wd:
                    raise InputError([Problem(f"workloads.{w}.{key}", "lengths come from a trace and cannot "
                                                                       "be scaled; set that cv to 0")])
                ov[f"workloads.{w}.{key}"] = _scale_dist(wd[key], m, f"workloads.{w}.{key}")
    return ov


def scenario_points(spec: Spec, n: int, rate_cv: float = 0.0, length_cv: float = 0.0, input_cv: float = 0.0,
                    seed: int = 0) -> list[Point]:
    """``n`` sampled traffic scenarios of ``spec`` (see the module docstring), each validated as it is
    built."""
    points = []
    for i, mult in enumerate(scenario_multipliers(spec, n, rate_cv, length_cv, input_cv, seed)):
        ov = scaled_overrides(spec, mult)
        apply_overrides(spec, ov)
        total = sum(m[0] * (w.rate_rps or 0.0) for w, m in zip(spec.workloads, mult.values()))
        points.append(Point(i, f"scenario {i} ({total:.3g} rps)", ov, mult))
    return points


# ---------------------------------------------------------------------------------------------- tasks

def _status(exc: TrimtabError) -> str:
    return {1: "invalid", 3: "infeasible", 4: "no_solution"}.get(int(exc.exit_code), "internal")


def plan_point(spec: Spec, point: Point, opts: dict) -> PointResult:
    """Plan one point (``trimtab.api.plan``) and, with ``opts['check']``, check it by simulation. A Ray task
    and the serial path run this same function. Expected errors become a status, never an exception."""
    t0 = time.perf_counter()
    try:
        s = apply_overrides(spec, point.overrides)
        r = plan(s, backend=opts.get("backend"), time_limit_s=opts.get("time_limit_s"),
                 validate=opts.get("validate", True), seed=opts.get("seed", 0))
    except TrimtabError as exc:
        return PointResult(point.index, point.label, _status(exc), message=exc.lines[0] if exc.lines else "",
                           seconds=time.perf_counter() - t0)
    p = r.plan
    checked, att = None, {}
    if opts.get("check"):
        ok, att = _check(p, s, opts.get("check_seeds", 1))
        checked = ok
    missing = f"its own validation shows {', '.join(p.misses)} below their SLO" if p.misses else ""
    return PointResult(point.index, point.label, "misses" if p.misses else "ok",
                       round(p.cost_usd_per_hour, 6), dict(sorted(p.gpus.items())), r.rounds,
                       bool(p.simulation.passed) if p.simulation else None, checked, att, message=missing,
                       seconds=time.perf_counter() - t0)


def _check(plan, spec: Spec, seeds: int) -> tuple[bool, dict[str, float]]:
    rep, res = check_simulated(plan, spec, seeds=seeds)
    return rep.ok, {k: round(iv.mean, 6) for k, iv in sorted(res.intervals.items())}


def check_scenario(plan, spec: Spec, point: Point, seeds: int) -> tuple[int, bool, dict[str, float]]:
    """``trimtab check`` of a fixed plan under one scenario's spec (robust planning's task)."""
    try:
        ok, att = _check(plan, apply_overrides(spec, point.overrides), seeds)
    except TrimtabError:
        return point.index, False, {}
    return point.index, ok, att


def _plan_spec(spec: Spec, label: str, overrides: dict, opts: dict):
    """Plan ``spec`` with overrides; (label, Plan or None, message, status: ``ok`` or ``_status`` of the
    error). Robust planning's candidate task and a ``trimtab pareto`` point's (``opts['validate']``: False
    plans with the cost model only)."""
    try:
        r = plan(apply_overrides(spec, overrides), backend=opts.get("backend"),
                 time_limit_s=opts.get("time_limit_s"),
                 validate=opts.get("validate", True), seed=opts.get("seed", 0))
    except TrimtabError as exc:
        return label, None, exc.lines[0] if exc.lines else type(exc).__name__, _status(exc)
    return label, r.plan, "", "ok"


def _call(fn_name: str, args: tuple):
    """The one entry point of a task, by name, so a Ray worker imports this module and nothing else is pickled
    but the arguments. Tasks plan serially inside (TRIMTAB_JOBS=1): the parallelism is the tasks'."""
    os.environ["TRIMTAB_JOBS"] = "1"
    return {"plan_point": plan_point, "check_scenario": check_scenario,
            "plan_spec": _plan_spec}[fn_name](*args)


# ---------------------------------------------------------------------------------------------- executors

Progress = Callable[[int, int], None]  # (done, total)


class SerialExecutor:
    """Tasks one after another in this process, in order."""

    name = "serial"

    def map(self, fn_name: str, args: list[tuple], progress: Progress | None = None) -> list:
        out = []
        for i, a in enumerate(args):
            fn = {"plan_point": plan_point, "check_scenario": check_scenario,
                  "plan_spec": _plan_spec}[fn_name]
            out.append(fn(*a))
            if progress:
                progress(i + 1, len(args))
        return out

    def close(self) -> None:
        pass


class RayExecutor:
    """Tasks as Ray tasks (one CPU each), at most ``workers`` in flight, results in submission order.

    ``address=None`` starts a local Ray with ``workers`` CPUs (stopped again by ``close``); an address joins
    an existing cluster (``ray://host:10001`` or ``auto``) and leaves it running. A Ray already initialised in
    this process (a test's, a notebook's) is used as it is."""

    name = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None):
        try:
            import ray
        except ImportError:
            raise InputError([Problem("--address/--workers", "Ray is not installed: pip install "
                                                             "'trimtab[sweep]', or run with --serial")]
                             ) from None
        self.ray = ray
        self.workers = workers or (os.cpu_count() or 1)
        self.owned = False
        if not ray.is_initialized():
            kw = dict(include_dashboard=False, log_to_driver=False, logging_level="ERROR")
            if address is None:
                kw.update(num_cpus=self.workers, object_store_memory=200 * 1024 ** 2)
            try:
                ray.init(address=address, **kw)
            except (ConnectionError, ValueError, RuntimeError) as exc:
                why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise InputError([Problem("--address", f"cannot start or join Ray at {address or 'local'}: "
                                                       f"{why}")]
                                 ) from None
            self.owned = True
        self.remote = ray.remote(num_cpus=1)(_call)

    def map(self, fn_name: str, args: list[tuple], progress: Progress | None = None) -> list:
        ray = self.ray
        out: list = [None] * len(args)
        index: dict = {}
        pending: list = []
        nxt = done = 0
        while done < len(args):
            while nxt < len(args) and len(pending) < self.workers:
                ref = self.remote.remote(fn_name, args[nxt])
                index[ref] = nxt
                pending.append(ref)
                nxt += 1
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                out[index.pop(ref)] = ray.get(ref)
                done += 1
                if progress:
                    progress(done, len(args))
        return out

    def close(self) -> None:
        if self.owned:
            self.ray.shutdown()
            self.owned = False


def ray_available() -> bool:
    return importlib.util.find_spec("ray") is not None


def make_executor(kind: str = "auto", address: str | None = None, workers: int | None = None):
    """``serial``, ``ray``, or ``auto`` (Ray when installed, else serial)."""
    if kind == "serial" or (kind == "auto" and not ray_available() and address is None):
        return SerialExecutor()
    return RayExecutor(address, workers)


def run_points(spec: Spec, points: list[Point], *, executor=None, check: bool = False, check_seeds: int = 1,
               backend: str | None = None, time_limit_s: float | None = None, validate: bool = True,
               seed: int = 0, progress: Progress | None = None) -> list[PointResult]:
    """Plan every point (and check it with ``check``); results in point order."""
    ex = executor or SerialExecutor()
    opts = {"backend": backend, "time_limit_s": time_limit_s, "validate": validate, "seed": seed,
            "check": check, "check_seeds": check_seeds}
    return ex.map("plan_point", [(spec, p, opts) for p in points], progress)


# ---------------------------------------------------------------------------------------------- robust

@dataclass(frozen=True)
class RobustCandidate:
    level: str  # "mean" or a quantile such as "q0.90"
    cost_usd_per_hour: float | None
    passed: int | None  # scenarios whose check passed (None: not checked, being costlier than the chosen one)
    message: str = ""


@dataclass
class RobustResult:
    """The chosen plan (cheapest candidate passing >= q of the scenarios) and the plan for the mean
    scenario."""

    q: float
    scenarios: int
    chosen_level: str
    plan: object  # trimtab.contract.schema.Plan
    passed: int
    mean_plan: object | None
    mean_passed: int | None
    candidates: list[RobustCandidate]
    per_scenario: dict[str, list[bool]] = field(default_factory=dict)  # level -> pass per scenario

    @property
    def share(self) -> float:
        return self.passed / self.scenarios

    def to_dict(self) -> dict:
        """``trimtab sweep --robust --format json``: the choice, every candidate and the chosen plan."""
        return {"q": self.q, "scenarios": self.scenarios, "chosen_level": self.chosen_level,
                "cost_usd_per_hour": self.plan.cost_usd_per_hour, "passed": self.passed, "share": self.share,
                "mean_plan_cost_usd_per_hour": self.mean_plan.cost_usd_per_hour if self.mean_plan else None,
                "mean_passed": self.mean_passed, "candidates": [asdict(c) for c in self.candidates],
                "per_scenario": self.per_scenario, "plan": plan_to_data(self.plan)}


def _quantile_overrides(spec: Spec, mults: list[dict[str, tuple[float, float, float]]], level: float) -> dict:
    """The spec at the ``level`` quantile of each workload's sampled rate and output-length multipliers
    (separately per workload: every workload at its own ``level`` quantile at once, a joint envelope)."""
    names = [w.name for w in spec.workloads]
    q = {w: tuple(float(np.quantile([m[w][k] for m in mults], level,
                                    method="inverted_cdf")) for k in range(3))
         for w in names}
    return scaled_overrides(spec, {w: (rm, om, 1.0) for w, (rm, om, _im) in q.items()})


def robust_plan(spec: Spec, q: float, n: int, *, rate_cv: float = 0.0, length_cv: float = 0.0,
                input_cv: float = 0.0, seed: int = 0, check_seeds: int = 1,
                levels: tuple[float, ...] = ROBUST_LEVELS,
                executor=None, backend: str | None = None, time_limit_s: float | None = None,
                progress: Callable[[str, int, int], None] | None = None) -> RobustResult:
    """The cheapest plan, among the candidates below, whose ``trimtab check`` passes in at least ``q`` of
    ``n`` sampled scenarios.

    Candidates: ``trimtab.api.plan`` (validated by simulation as ``trimtab plan`` does) of the spec with every
    workload's rate and output lengths at the ``level`` quantile of its sampled multipliers, for each of
    ``levels``, and of the spec itself (the mean scenario: the multipliers have mean 1). All candidates are
    planned (in parallel), then checked against every scenario's spec (one Ray task per scenario) in order of
    increasing cost until one passes in >= q of them; costlier ones are not checked, and a candidate whose
    deployments, routes and check runs equal a checked one's takes its verdicts (the same check). The mean
    plan is always checked, for the comparison. InfeasibleError (exit 3) when no candidate reaches q.

    What it guarantees: the chosen plan passed ``check`` (simulation at ``check_seeds`` seeds past the plan's
    own, the check's own verdict: no shown miss) in at least ``q`` of these ``n`` scenarios, and is the
    cheapest of the candidates that did. Not guaranteed: the cheapest plan over all deployments with that
    property (the candidates are quantile envelopes; a plan tuned to a scenario mix could be cheaper), nor the
    share on other scenarios than the sampled ones (with n scenarios the share has a sampling error of about
    sqrt(q(1-q)/n)).
    """
    if not 0 < q <= 1:
        raise InputError([Problem("--robust", f"must be a share in (0, 1], got {q}")])
    if input_cv > 0:
        raise InputError([Problem("--input-cv", "robust planning checks one plan against every scenario, and "
                                                 "a plan's routes name the prompt-length ranges of its own "
                                                 "spec; prompt-length uncertainty is not supported here (use "
                                                 "--length-cv for output lengths)")])
    ex = executor or SerialExecutor()
    mults = scenario_multipliers(spec, n, rate_cv, length_cv, 0.0, seed)
    points = [Point(i, f"scenario {i}", scaled_overrides(spec, m), m) for i, m in enumerate(mults)]
    for p in points:
        apply_overrides(spec, p.overrides)
    opts = {"backend": backend, "time_limit_s": time_limit_s, "seed": 0}
    tasks = [("mean", {}, opts)] + [(f"q{lv:.2f}", _quantile_overrides(spec, mults, lv),
                                     opts) for lv in levels]
    planned = ex.map("plan_spec", [(spec, lab, ov, o) for lab, ov, o in tasks],
                     (lambda d, t: progress("plan candidates", d, t)) if progress else None)
    # a candidate whose own validation still shows a miss is none (plan's exit 7): never the robust plan
    plans = {lab: (None, f"its own validation shows {', '.join(pl.misses)} below their SLO") if pl is not None
             and pl.misses else (pl, msg) for lab, pl, msg, _ in planned}

    per: dict[str, list[bool]] = {}

    def same(a, b) -> bool:
        """One deployment set, routing, and the check's seeds and request count (from ``plan.simulation``):
        the same check, so one verdict per scenario (quantile candidates often plan alike)."""
        def runs(p):
            return (tuple(p.simulation.seeds), p.simulation.requests) if p.simulation else None
        return a.deployments == b.deployments and a.routes == b.routes and runs(a) == runs(b)

    def passes(label: str) -> int:
        pl = plans[label][0]
        twin = next((lab for lab in per if same(plans[lab][0], pl)), None)
        if twin is not None:
            per[label] = list(per[twin])
            return sum(per[label])
        res = ex.map("check_scenario", [(pl, spec, p, check_seeds) for p in points],
                     (lambda d, t: progress(f"check {label}", d, t)) if progress else None)
        per[label] = [ok for _, ok, _ in sorted(res, key=lambda x: x[0])]
        return sum(per[label])

    need = math.ceil(q * n - 1e-9)
    order = sorted((lab for lab, (pl, _) in plans.items() if pl is not None),
                   key=lambda lab: (plans[lab][0].cost_usd_per_hour, lab != "mean", lab))
    mean_passed = passes("mean") if plans["mean"][0] is not None else None
    chosen = None
    for lab in order:
        got = mean_passed if lab == "mean" else passes(lab)
        if got >= need:
            chosen = lab
            break
    cands = [RobustCandidate(lab, round(pl.cost_usd_per_hour, 6) if pl else None,
                             sum(per[lab]) if lab in per else None, msg) for lab, (pl, msg) in plans.items()]
    if chosen is None:
        best = max((c for c in cands if c.passed is not None), key=lambda c: c.passed, default=None)
        raise InfeasibleError([f"no candidate plan met its SLOs in {need} of {n} scenarios (q {q:g})"
                               + (f"; the best, {best.level}, in {best.passed}" if best else "")]
                              + [f"  {c.level}: " + (f"{c.cost_usd_per_hour:.2f} $/h, passed {c.passed}/{n}"
                                                     if c.cost_usd_per_hour is not None else c.message)
                                 for c in cands])
    return RobustResult(q, n, chosen, plans[chosen][0], sum(per[chosen]), plans["mean"][0], mean_passed,
                        cands, per)
