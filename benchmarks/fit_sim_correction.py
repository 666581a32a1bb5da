"""Fit the capacity prior of the correction rounds against the simulator (issue 16 item 1).

    python benchmarks/fit_sim_correction.py --size small --n 40 --seed 100 --csv obs.csv \
        --out profiles/sim_capacity.yaml
    python benchmarks/fit_sim_correction.py --size lora \
        --n 12 --seed 100 --csv benchmarks/data/sim_fit_lora.csv
    python benchmarks/fit_sim_correction.py --from-csv benchmarks/data/sim_fit_small.csv \
        benchmarks/data/sim_fit_lora.csv --describe "..." \
        --out profiles/sim_capacity.yaml   # refit, both families

Specs with adapters (the ``lora`` family) are observed under regimes of their own (``lora-p95-mixed``, ...:
``trimtab.planning.rounds.regime(w, lora=True)``), with their own ``lora-default`` and ``lora-first_round``;
the driver applies them per workload shown missing (``trimtab.planning.rounds.prior_on_miss``).

What it measures. Specs of a ``benchmarks/specgen.py`` family are planned with ``trimtab.api.plan`` as
``trimtab plan`` does, **without** the prior (the rounds start from the cost model's own capacities). Every
validating simulation of every round is one observation per workload: its regime
(``trimtab.planning.rounds.regime``),
the load factor x (the highest share of the cost model's capacity, underated, that any of its deployments
carries: fill x derate) and whether the runs demonstrated its SLO (lower 95 % bound at or above target, what
``plan`` requires). A workload's own threshold x* (the load factor up to which the simulation confirms it) is
then censored: a pass at x says x* >= x, a miss says x* < x.

The fit, per regime: the largest factor f among the observed x (and 1.0) such that, among the observations
that decide f (misses at x <= f: x* < f for sure; passes at x >= f: x* >= f for sure), at most ``MISS_SHARE``
(10 %) are misses: a censored estimate of the 10th percentile of x*. A regime with fewer than ``MIN_MISSES``
(3) misses or ``MIN_OBS`` (3) deciding observations is left out and takes the ``default`` entry, the same fit
over every observation. The output is ``profiles/sim_capacity.yaml``: each regime's ``{value, source}`` and a
``sources`` block naming this command,
the family, the seeds and the observation counts.

Fit seeds are not evaluation seeds: the benchmark tables in docs/solvers.md use ``--seed 0``; fit with
``--seed 100`` or above.
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MISS_SHARE = 0.10
MIN_OBS = 3
MIN_MISSES = 3  # a regime of its own only with this many misses; else the default entry


FIELDS = ("spec", "round", "workload", "regime", "x", "passed", "seeds", "attainment", "target")


def observe(size_name: str, n: int, seed: int, time_limit: float | None,
            csv_path: Path | None = None) -> list[dict]:
    """Plan the family without the prior; one row per (spec, simulated round, workload), also appended to
    ``csv_path`` as they come (a long run stopped early keeps what it measured)."""
    import trimtab.planning.driver as driver
    from benchmarks.specgen import family, parse_size
    from trimtab.api import plan
    from trimtab.errors import TrimtabError
    from trimtab.planning.rounds import family_of, regime, simulate_and_derate
    from trimtab.spec.load import load_spec

    rows: list[dict] = []
    current: dict = {}

    def recording(plan_, spec, ir, seeds, requests, derate, fill=None, peers=None, cache=None):
        res, out = simulate_and_derate(plan_, spec, ir, seeds, requests, derate, fill, peers, cache)
        current["round"] += 1
        by_name = {w.name: w for w in ir.workloads}
        for name in res.intervals:
            ids = [c for c in (peers or {}).get(name, ()) if c in (fill or {})]
            if not ids:
                continue
            x = max(fill[c] * derate.get(c, 1.0) for c in ids)
            rows.append({"spec": current["spec"], "round": current["round"], "workload": name,
                         "regime": regime(by_name[name], bool(family_of(ir))), "x": round(x, 6),
                         "passed": res.demonstrated(name),
                         "seeds": len(res.runs_of(name)), "attainment": round(res.intervals[name].mean, 6),
                         "target": res.targets[name]})
        return res, out

    writer = None
    if csv_path:
        fh = csv_path.open("w", newline="")
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        writer.writeheader()
    driver.simulate_and_derate = recording
    driver.prior_derates = lambda ir, peers: {}
    for name, text in family(parse_size(size_name), n, seed):
        current.update(spec=name, round=0)
        t0 = time.perf_counter()
        try:
            r = plan(load_spec(f"{name}.yaml", text=text), time_limit_s=time_limit)
            status = f"rounds {r.rounds}"
        except TrimtabError as exc:
            status = type(exc).__name__
        print(f"  {name}: {status}, {time.perf_counter() - t0:.1f} s, {len(rows)} observations so far",
              file=sys.stderr, flush=True)
        if writer:
            writer.writerows(r for r in rows if r["spec"] == name)
            fh.flush()
    return rows


def family(reg: str) -> str:
    """The family prefix of a regime: ``lora-`` (``trimtab.planning.rounds.LORA_PREFIX``) or '' (unified)."""
    from trimtab.planning.rounds import LORA_PREFIX

    return LORA_PREFIX if reg.startswith(LORA_PREFIX) else ""


def fit(rows: list[dict]) -> dict[str, dict]:
    """regime -> {value, n_pass, n_miss} (see the module docstring), and per family (unified, ``lora-``) a
    ``default`` fitted on every row of that family (for its regimes with too few observations of their
    own)."""
    out = {}
    fams = sorted({family(r["regime"]) for r in rows})
    for reg in sorted({r["regime"] for r in rows}) + [f + "default" for f in fams]:
        default = reg.endswith("default")
        obs = [(float(r["x"]), r["passed"] in (True, "True")) for r in rows
               if (family(r["regime"]) == family(reg) if default else r["regime"] == reg)]
        misses = [x for x, p in obs if not p]
        passes = [x for x, p in obs if p]
        if not default and len(misses) < MIN_MISSES:
            continue  # too little evidence on where this regime misses: the default entry
        best = None
        for f in sorted({x for x, _ in obs if x <= 1.0} | {1.0}, reverse=True):
            bad = sum(1 for x in misses if x <= f)
            good = sum(1 for x in passes if x >= f)
            if bad + good >= MIN_OBS and bad <= MISS_SHARE * (bad + good):
                best = f
                break
        if best is None:
            continue
        out[reg] = {"value": round(best, 3), "n_pass": len(passes), "n_miss": len(misses)}
    return out


def first_round(rows: list[dict]) -> dict[str, dict[str, int]]:
    """Per family (its prefix): observations of the first simulated round (the plan on the cost model's own
    capacities), how many, and how many of them the simulation confirmed. Their ratio q is a workload's chance
    to pass on the model's capacities; a first plan of W workloads then passes with about q ** W
    (``trimtab.planning.rounds.first_try_worth``)."""
    out = {}
    for fam in sorted({family(r["regime"]) for r in rows}):
        first = [r for r in rows if int(r["round"]) == 1 and family(r["regime"]) == fam]
        out[fam] = {"passes": sum(1 for r in first if r["passed"] in (True, "True")),
                    "observations": len(first)}
    return out


def write_yaml(path: Path, table: dict[str, dict], family_desc: str, n_rows: int,
               first: dict[str, dict[str, int]] | None = None) -> None:
    lines = [
        "# Capacity prior of the correction rounds (compiler/planning/rounds.py::prior_derates): per "
        "regime (SLO percentile",
        "# band x one or several prompt-length ranges), the factor on the cost model's "
        "per-replica capacity at",
        "# which the validating simulation confirms the SLO in about 90 % of cases. Written by",
        "# benchmarks/fit_sim_correction.py; do not edit by hand (refit instead). Regimes "
        "not listed: default.",
        "# lora-*: specs with adapters (trimtab.planning.lora.LoraPlanner), applied per workload a "
        "round shows missing",
        "# (compiler/planning/rounds.py::prior_on_miss); regimes of that family not listed: lora-default.",
        "sources:",
        "  fit: {kind: fit, ref: \"benchmarks/fit_sim_correction.py against the simulator (trimtab.sim) on "
        f"{family_desc}: {n_rows} observations (workload x simulated round), censored 10th percentile of the "
        "load factor the simulation confirms\"}",
        "regimes:",
    ]
    for reg, e in table.items():
        lines.append(f"  {reg}: {{value: {e['value']}, source: fit, passes: {e['n_pass']}, "
                     f"misses: {e['n_miss']}}}")
    if first:
        lines += ["# first simulated round (plans on the cost model's own capacities), per "
                  "family: workloads the",
                  "# simulation confirmed, of those observed (compiler/planning/rounds.py::first_try_worth)"]
        for fam, e in first.items():
            lines.append(f"{fam}first_round: {{passes: {e['passes']}, observations: {e['observations']}, "
                         "source: fit}")
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="small")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--seed", type=int, default=100, help="first seed (keep evaluation seeds out: >= 100)")
    ap.add_argument("--time-limit", type=float, default=None)
    ap.add_argument("--csv", type=Path, default=None, help="write the observations here")
    ap.add_argument("--from-csv", type=Path, nargs="*", default=None,
                    help="fit these observations, plan nothing")
    ap.add_argument("--out", type=Path, default=None, help="write the fitted table here (YAML)")
    ap.add_argument("--describe", default=None,
                    help="with --from-csv: the families the observations came from "
                    "(for the table's source)")
    args = ap.parse_args()
    if args.from_csv:
        rows = [r for p in args.from_csv for r in csv.DictReader(p.open())]
        desc = args.describe or f"observations from {', '.join(p.name for p in args.from_csv)}"
    else:
        rows = observe(args.size, args.n, args.seed, args.time_limit, args.csv)
        desc = f"specgen family '{args.size}', {args.n} specs from seed {args.seed}"
    table = fit(rows)
    for reg, e in table.items():
        print(f"{reg}: {e['value']} ({e['n_pass']} passes, {e['n_miss']} misses)")
    first = first_round(rows)
    for fam, e in first.items():
        print(f"{fam or 'unified '}first round: {e['passes']} of {e['observations']} workloads confirmed")
    if args.out:
        write_yaml(args.out, table, desc, len(rows), first)


if __name__ == "__main__":
    main()
