"""The planners' correction rounds: after a solve, assess the plan analytically and then by simulation;
where a workload misses, lower the capacity of the deployment at fault (``derate``) so the next solve buys
more of it.

Used by the one driver (``trimtab.planning.driver.drive``) for every kind of spec. Each function returns new
derates; the ones it is given are left as they were.

Two corrections make the first simulated round pass more often (issue 16 item 1, docs/simulator.md "Capacities
the simulation confirms"):

* ``prior_derates``: before the first solve, each workload's candidates start at the capacity factor of its
  *regime* (SLO percentile band x one or several prompt-length ranges), fitted against the simulator by
  ``benchmarks/fit_sim_correction.py`` on specgen families and committed with its provenance in
  ``profiles/sim_capacity.yaml``;
* in ``simulate_and_derate``, a workload the simulation does not confirm has the same factor applied to every
  candidate of that workload (``peers``), not only to the deployment at fault: the model's error is the
  workload's regime, so the next solve does not move the traffic to a sibling shape that misses the same way.
"""
from __future__ import annotations

from functools import cache
from importlib.resources import files

import yaml

from trimtab.contract.schema import Goodput, Plan
from trimtab.contract.write import plan_to_data
from trimtab.sim.validate import simulate_seeds

MAX_ROUNDS = 8
DERATE = 0.85  # capacity factor applied to a deployment at fault per analytic miss, at least ...
ANALYTIC_FLOOR = 0.1  # ... and at most this much further where the cost model asks for more (derate_analytic)
# SIM_DERATE_RANGE: capacity factor for a deployment at fault in simulation (see sim_derate), whose floor is
# FAR_FLOOR but in adapter plans (0.85); FAR_MISS: a workload missing this many times the misses its target
# allows is a far miss (read at the target, not at ``demonstrable``)
SIM_DERATE_RANGE = (0.85, 0.97)
FAR_MISS = 3.0
FAR_FLOOR = 0.7
MARGIN_DERATE = 0.95
SIM_ROUNDS = 6  # extra rounds allowed for re-solves after a simulated miss
PROBES = 3  # lazy probes below the cheapest confirmed plan (trimtab.planning.driver.probe_measured)
LORA_PREFIX = "lora-"  # regimes (and the first-round entry) of specs the adapter planner plans
# extra capacity factor for a shape whose attainment did not rise when its load fell (stuck)
STUCK_FACTOR = 0.5
# a deployment over its speed-of-light bound is re-solved this far below it (derate_breaches)
LIGHT_MARGIN = 0.01
FIRST_TRY_MIN = 0.5  # first solve on the model's own capacities only while it passes with this chance or more


def derate_analytic(misses, derate: dict[str, float],
                    needed: dict[str, float] | None = None) -> dict[str, float]:
    """``derate`` with the capacity of each missing workload's worst deployment lowered by DERATE, or by more
    where ``needed`` (candidate id -> the capacity factor at which the cost model has it meet the SLO with the
    traffic mix it missed with: ``trimtab.milp.assess.analytic_needs``) asks for more, down to ANALYTIC_FLOOR
    per round; the other candidates in ``needed`` (the workload's other shapes, given the same mix) by what
    they need, down to the same floor. A tail that barely responds to load (prompt-length ranges mixed on one
    deployment) took a solve per 15 % step and per shape before: 5-10 rounds on some specs of specgen's target
    family."""
    out = dict(derate)
    needed = needed or {}
    worst = {p.worst_deployment for p in misses if p.worst_deployment}
    for d in sorted(worst):
        out[d] = out.get(d, 1.0) * min(DERATE, max(ANALYTIC_FLOOR, needed.get(d, DERATE)))
    for cid in sorted(set(needed) - worst):
        out[cid] = out.get(cid, 1.0) * max(ANALYTIC_FLOOR, needed[cid])
    return out


def derate_breaches(broken, derate: dict[str, float], fill: dict[str, float]) -> dict[str, float]:
    """``derate`` with each deployment whose routed tokens/s break its speed-of-light bound (``broken``:
    ``trimtab.cost.physics.breaches`` of a solved plan) held to the share of its present load that the bound
    allows: its capacity factor times its fill (the share of its derated capacity in use) times bound /
    promised, less LIGHT_MARGIN. Why the cost model can promise more than the bound: the bound's batch is the
    KV cache over a request's whole context (prompt + output), the cost model's KV check counts a decoding
    request's mean context (prompt + half its output), so a deployment whose batch its KV cache limits (a
    small GPU, long outputs) gets a capacity the bound does not grant. The bound is the one ``check`` and the
    trust acceptance apply, so the plan is re-solved within it instead of failing at the end (specgen's target
    family, ``plan --analytic``: 2 of 20 specs stopped with an internal error)."""
    out = dict(derate)
    for b in broken:
        share = min(fill.get(b.deployment, 1.0) * b.bound / b.promised, 1.0)
        out[b.deployment] = out.get(b.deployment, 1.0) * share * (1 - LIGHT_MARGIN)
    return out


def regime(w, lora: bool = False) -> str:
    """The regime of a workload (``WorkloadIR``) for the capacity prior: its SLO percentile band (p90 and
    below, p95 and below, above) and whether its prompts fall in one length range or several (ranges mixed on
    one deployment lengthen the short prompts' wait behind the long ones); ``lora``: planned by the adapter
    planner (shared candidates, the LoRA cost model, adapter loads in simulation), a family of regimes of its
    own (``lora-...``), fitted on specs with adapters."""
    p = w.slo.percentile
    band = "p90" if p <= 90 else "p95" if p <= 95 else "p99"
    return f"{LORA_PREFIX if lora else ''}{band}-{'mixed' if len(w.buckets) > 1 else 'single'}"


def family_of(ir) -> str:
    """``LORA_PREFIX`` for a spec the adapter planner plans (``ir.lora``), else '' (the unified family)."""
    return LORA_PREFIX if getattr(ir, "lora", None) is not None else ""


@cache
def _sim_capacity() -> dict:
    """``profiles/sim_capacity.yaml``, read once, every entry's source checked against its ``sources``."""
    data = yaml.safe_load((files("trimtab.profiles") / "sim_capacity.yaml").read_text())
    named = [(f"regimes.{k}", e) for k, e in data["regimes"].items()]
    named += [(k, data[k]) for k in ("first_round", LORA_PREFIX + "first_round") if data.get(k)]
    for where, entry in named:
        if entry["source"] not in data["sources"]:
            raise ValueError(f"profiles/sim_capacity.yaml: {where}.source {entry['source']!r} "
                             f"is not in sources")
    return data


def capacity_prior_table() -> dict[str, float]:
    """regime -> capacity factor, from ``profiles/sim_capacity.yaml`` (each value with its source)."""
    return {key: float(entry["value"]) for key, entry in _sim_capacity()["regimes"].items()}


def first_round_share(family: str = "") -> float | None:
    """The share of workloads the first simulated round confirmed on the cost model's own capacities, from
    ``profiles/sim_capacity.yaml``'s ``first_round`` (``lora-first_round`` for the adapter family; None
    without one)."""
    entry = _sim_capacity().get(family + "first_round")
    return entry["passes"] / entry["observations"] if entry else None


def first_try_worth(ir) -> bool:
    """Whether the first solve should use the cost model's own capacities (the cheap plan, kept when the
    simulation confirms it) rather than start at the capacity prior: only while a first plan of this many
    workloads passes with a chance of FIRST_TRY_MIN or more, q ** W (q = ``first_round_share``, W the
    workloads; each workload's verdict taken as independent; q of the spec's family: ``family_of``). Past it
    (8 workloads at q = 0.905) the first round almost surely misses and costs a solve and a simulation for
    nothing: a spec of 100 workloads has a chance of 5e-5. (The driver asks it for the unified family only:
    adapter specs take the prior per workload shown missing, ``prior_on_miss``.)"""
    q = first_round_share(family_of(ir))
    return q is None or q ** len(ir.workloads) >= FIRST_TRY_MIN


def simulate_past_misses(ir) -> bool:
    """Whether a plan the cost model's assessment finds missing is simulated in the same round instead of
    being re-solved first: where a first plan would almost surely miss in simulation too (``first_try_worth``
    false: a spec of many workloads, or the adapter family), the simulation's corrections would come one round
    later for nothing. The round then takes both corrections (``lowest``): the analytic ones for the workloads
    the assessment finds missing, the simulated ones for those the runs do not accept. A plan is still kept
    only when both find no miss, so what a plan states (its predictions, ``check --analytic``) is unchanged.
    Measured on specgen's target family (docs/solvers.md): the first plan of 5 of its 18 plannable specs had
    an analytic miss, and every one of them missed in its first simulation as well."""
    return not first_try_worth(ir)


def lowest(*derates: dict[str, float]) -> dict[str, float]:
    """Per candidate, the lowest capacity factor of several derates (1.0 where one has none)."""
    keys = sorted(set().union(*derates))
    return {k: min(d.get(k, 1.0) for d in derates) for k in keys}


def prior_derates(ir, peers: dict[str, tuple[str, ...]]) -> dict[str, float]:
    """Initial derates: every candidate of a workload (``peers``: workload -> candidate ids) at its regime's
    fitted capacity factor (the family's ``default`` for a regime the table does not hold; 1.0 without one). A
    candidate several workloads may use (the adapter planner's shared candidates) takes the lowest of
    theirs."""
    table = capacity_prior_table()
    fam = family_of(ir)
    out: dict[str, float] = {}
    for w in ir.workloads:
        f = table.get(regime(w, bool(fam)), table.get(fam + "default", 1.0))
        if f < 1.0:
            for cid in peers.get(w.name, ()):
                out[cid] = min(f, out.get(cid, 1.0))
    return out


def prior_on_miss(ir, res, n_seeds: int, derate: dict[str, float], prior: dict[str, float],
                  peers: dict[str, tuple[str, ...]]) -> dict[str, float]:
    """The adapter family's use of the prior (``family_of(ir)`` is ``LORA_PREFIX``): after a simulated round
    ``res`` (on ``n_seeds`` seeds) that does not confirm some workloads (``to_derate``), the candidates those
    workloads may use (``peers``) are held at most at their prior factor; the other candidates keep their
    derates. Why not the unified family's rule (every candidate at the prior from the first solve, or from the
    first miss): the LoRA cost model's capacities are confirmed for 40 % of workloads and the fitted factors
    (``lora-`` regimes) are the 10th percentile of what the rest need, so holding every workload to them buys
    capacity the confirmed ones do not need (measured on the lora family, seeds 0-19: plans 18 % dearer at the
    median, up to 64 %); a workload shown missing gets there in one step instead of one 3-15 % correction per
    round."""
    out = dict(derate)
    for name in to_derate(res, n_seeds):
        for cid in peers.get(name, ()):
            if cid in prior:
                out[cid] = min(out.get(cid, 1.0), prior[cid])
    return out


def probe_derates(derate: dict[str, float], prior: dict[str, float],
                  missed: dict[str, tuple[str, float, float]], peers: dict[str, tuple[str, ...]]
                  ) -> dict[str, float]:
    """The derates of the probe round, after a plan solved at ``derate`` was confirmed: each candidate fitted
    by the prior back at its prior factor where the rounds lowered it below, except the candidates (``peers``)
    of a workload whose last simulated miss (``missed``: workload -> (worst deployment, its derate when
    solved, attainment), ``misses_of``) was on a deployment already at or below its prior: there the
    simulation showed the prior too high. Why: a correction is measured on the plan that missed (its shape,
    its fill) and spread to every shape of the workload, so the capacities the rounds end at depend on the
    path they took, and a spec that only got easier took another path to a dearer plan (the quickstart with
    the L4 price halved: 48.00 against 46.80 $/h). The driver simulates the probe's plan only when it is
    cheaper, and keeps it only when confirmed in its turn: one solve, at most one simulation more."""
    keep: set[str] = set()
    for name, (dep, f_solved, _) in missed.items():
        if f_solved <= prior.get(dep, 1.0) + 1e-12:
            keep |= {dep, *peers.get(name, ())}
    out = dict(derate)
    for cid, f in prior.items():
        if cid not in keep and out.get(cid, 1.0) < f:
            out[cid] = f
    return out


def simulate_and_derate(plan, spec, ir, seeds: tuple[int, ...], requests: int, derate: dict[str, float],
                        fill: dict[str, float] | None = None, peers: dict[str, tuple[str, ...]] | None = None,
                        cache=None):
    """Simulate ``plan`` exactly as it will be written (rounded floats, so ``check`` replays these runs) on
    ``seeds`` (``trimtab.sim.validate``: stop after the first seed when it already shows a miss) and, for each
    workload the runs do not accept (``SeedsResult.accepted``: its lower confidence bound below target, unless
    it is too rare to demonstrate and meets it on the point estimate), derate its worst deployment to
    ``sim_derate`` x the load it carries now: ``fill`` gives each deployment's share of its (derated) capacity
    in use, so a deployment that misses below its capacity gets a capacity the next solve must respect (a
    derate above the fill would change nothing); the same factor goes to every other candidate of that
    workload (``peers``: workload -> candidate ids; see the module docstring). ``cache``
    (``trimtab.sim.reuse.RunCache``): deployments whose shape, replicas and routed requests a former round's
    simulation of the same seed already ran keep that run (the same result as running them again). A workload
    at or above its target on fewer seeds than ``seeds`` (the first seed showed another workload's miss, and
    it shares a deployment with a workload below target: ``trimtab.sim.validate.apart``) is not derated: its
    bound is wide, and its verdict waits for the runs on every seed (derating it cost rounds and GPUs for
    misses no run showed; ``to_derate``). Returns (the ``SeedsResult``, the new derates)."""
    data = plan_to_data(plan)
    written = Plan.model_validate(data)
    key = repr((seeds, requests,
                [data.get(k) for k in ("deployments", "routes", "adapter_routes", "prefix")]))
    res = getattr(cache, "verdicts", {}).get(key)  # the same plan, simulated before: the same result
    if res is None:
        res = simulate_seeds(written, spec, ir, seeds, requests, fail_fast=True, cache=cache,
                             skip=frozenset(Goodput.unserved(written)))
        if cache is not None:
            cache.verdicts[key] = res
    out = dict(derate)
    for name in to_derate(res, len(seeds)):
        worst = res.worst_deployment(name)
        if worst:
            used = min(1.0, (fill or {}).get(worst, 1.0))
            f = sim_derate(res, name, far=not written.adapter_routes)
            for cid in {worst, *(peers or {}).get(name, ())}:
                # (old * f) * used, in that order: another order rounds differently, and plans hang on it
                out[cid] = out.get(cid, 1.0) * f * used
    return res, out


def misses_of(res, n_seeds: int, solved_with: dict[str, float]) -> dict[str, tuple[str, float, float]]:
    """workload -> (its worst deployment, that deployment's derate in the solve ``res`` judged, the workload's
    pooled attainment) for each workload the round corrects (``to_derate``); the record ``stuck`` compares."""
    out = {}
    for name in to_derate(res, n_seeds):
        worst = res.worst_deployment(name)
        if worst:
            out[name] = (worst, solved_with.get(worst, 1.0), res.intervals[name].mean)
    return out


def stuck(derate: dict[str, float], now: dict[str, tuple[str, float, float]],
          before: dict[str, tuple[str, float, float]]) -> dict[str, float]:
    """``derate`` with the shape at fault of each workload that is stuck cut by STUCK_FACTOR more. A workload
    is stuck when the same deployment is at fault as at its last simulated miss (``misses_of``), its capacity
    was derated since, and the attainment did not rise. Its tail is then not set by load: queues behind long
    prompts, a TTFT that the prompt lengths set, or a TPOT that the prefill chunks set. More replicas of that
    shape do not fix it. The workload-wide correction derates every shape of the workload alike, so the
    cheapest shape stays the same, and the rounds would buy more of it until they run out (the lora family's
    seed 15: Mistral 7B on one MI300X at 86-95 % against 95 % while its capacity fell from 0.55 to 0.35 of the
    model's, 14 rounds). The extra cut on that shape alone makes the next solve try another one."""
    out = dict(derate)
    for name, (dep, f_now, att_now) in now.items():
        prev = before.get(name)
        if prev and prev[0] == dep and f_now < prev[1] and att_now <= prev[2]:
            out[dep] = out.get(dep, 1.0) * STUCK_FACTOR
    return out


def to_derate(res, n_seeds: int) -> list[str]:
    """The workloads of ``res`` (a ``SeedsResult`` of a run on ``n_seeds`` seeds, possibly stopped after the
    first, or continued for some workloads only) whose deployments a simulated round derates: those not
    accepted, less those at or above target in fewer than ``n_seeds`` runs (their verdict waits for every
    seed)."""
    return [n for n in res.intervals if not res.accepted(n)
            and not (len(res.runs_of(n)) < n_seeds and res.at_target(n))]


def demonstrable(res, name: str) -> float:
    """The attainment a plan needs in the runs for workload ``name``'s lower bound to reach its target: the
    target plus the width of the bound ``res`` shows (mean - lower; the next round's runs are as long), at
    most 1.0."""
    iv = res.intervals[name]
    return min(res.targets[name] + max(iv.mean - iv.lower, 0.0), 1.0)


def sim_derate(res, name: str, far: bool = True) -> float:
    """Capacity factor for a workload the runs do not show meeting its SLO: by how far its worst run's TTFT or
    TPOT exceeds the SLO (latency grows at least linearly with load near capacity, so 1 / (1 + excess) is
    enough or more), between SIM_DERATE_RANGE; MARGIN_DERATE when no metric exceeds on its own (a joint miss,
    or only the confidence margin missing). Near the target (not a far miss, below), the latency is read at
    the ``demonstrable`` percentile, not at the target's: a plan is kept only when the lower bound reaches the
    target, so a correction aimed at the target itself left the next plan within a few tenths of a point of it
    and undecided, a round more (specgen's target family: seed 17's chat-062 at 95.45 % against 95 %, bound
    93.6 %; seed 12's chat-000 at 99.00 %, then 99.42 %, bound 98.98 %, against 99 %). Where the bound is
    wider than the misses the target allows, that is the run's worst request. A far miss is read at the
    target: its next plan lands well away from this one, and its bound (often one seed's: the first showed the
    miss) is wider than the next round's will be (read at the worst request, the shared-prefix example's rag
    at 78 % bought 15 % more than the plan that passes). The floor of the range is FAR_FLOOR (0.7), not 0.85:
    a step of at most 15 % took two rounds where the latency asked for more, for a far miss (specgen's target
    family, seed 10: chat-093 at 93.0 % against 99 %, derated from 0.72 to 0.59 of the model's capacity, then
    98.4 %, then 0.49 and a pass) and for a near one, whose latency at the ``demonstrable`` percentile asks
    for the cut its bound needs (held-out family, seed 100 on: seed 115's chat-070 at 94.8 % against 95 %,
    TTFT +69 %; seed 119's chat-075 at 98.6 % against 99 %, TPOT +30 %: each still under its bound after a
    15 % step, and a third round). ``far=False`` (adapter plans, ``simulate_and_derate``) keeps 0.85: a miss
    there also takes the workload's candidates to their prior in the same round (``prior_on_miss``), and the
    lower floor on top of it bought capacity the plans did not need (lora family, seeds 0-19: for far misses,
    costs 1.3 % higher at the median, up to 6.8 %, rounds the same but one spec's; for near ones, one third
    round fewer, seed 14's, and six plans 3.9-11.7 % dearer, seed 2 still in three rounds). docs/solvers.md
    has the measurements."""
    run = min(res.runs_of(name), key=lambda r: r.workloads[name].attainment)
    w = run.workloads[name]
    far_miss = 1 - res.intervals[name].mean >= FAR_MISS * (1 - res.targets[name])
    near = None if far_miss else run.latency_at_ms(name, demonstrable(res, name))  # None: no samples kept
    ttft, tpot = near or (w.ttft_at_target_ms, w.tpot_at_target_ms)
    excess = max(ttft / w.ttft_slo_ms, tpot / w.tpot_slo_ms) - 1
    if not excess > 0:
        return MARGIN_DERATE
    lo, hi = SIM_DERATE_RANGE
    if far:
        lo = FAR_FLOOR
    return min(hi, max(lo, 1 / (1 + excess)))
