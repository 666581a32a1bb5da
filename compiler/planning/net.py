"""What a planning run says when its wall-clock safety net (``trimtab.solvers.SafetyNet``, ``--time-limit``)
stopped it between two steps (``trimtab.planning.driver.drive``): exit 4 (``SafetyNetError``), no plan."""
from __future__ import annotations

from trimtab.solvers import SafetyNet


def net_lines(net: SafetyNet, where: str, sims: int, confirmed: list, last_sim, sim_round: int,
              unsimulated: tuple[int, float, str] | None = None) -> list[str]:
    """What ``SafetyNetError`` says of a run the wall-clock safety net stopped ``where`` (a step not taken):
    how far it got, what was not validated (``unsimulated``: the round and cost of a plan solved but not
    simulated, or in part only, and which; ``last_sim``: the last simulation, of round ``sim_round``), and
    that no plan is written. ``confirmed``: the driver's confirmed plans, (cost, round, ...) each."""
    head = (f"planning stopped by the wall-clock time limit (--time-limit or solver.time_limit_s: "
            f"{net.limit_s:g} s, a safety net) after {net.spent():.1f} s, {where}; {sims} validating "
            f"simulation(s) run")
    if confirmed:
        cost, rnd = min((c[0], c[1]) for c in confirmed)
        what = [f"round {rnd}'s plan ({cost:.2f} $/h) was validated, but the run stopped before its answer "
                "was settled (a cheaper plan searched for, the placement on nodes)"]
    else:
        what = [] if unsimulated is None else \
            [f"round {unsimulated[0]}'s plan ({unsimulated[1]:.2f} $/h) {unsimulated[2]}"]
        failed = sorted(n for n in last_sim.intervals if not last_sim.accepted(n)) if last_sim else []
        if last_sim is None:
            what.append("no workload validated" if what else "no plan was simulated: no workload validated")
        elif failed:
            what.append(f"the last plan simulated (round {sim_round}) did not confirm workloads "
                        f"{_some(failed)}")
        what = ["not validated: " + "; ".join(what)]
    return [head, *what, "no plan written (where a run the wall clock stopped had got to depends on the "
                         "machine's load); raise --time-limit"]


def _some(names: list[str], k: int = 8) -> str:
    """``names`` joined, the first ``k`` of them and how many more."""
    return ", ".join(names[:k]) + (f" and {len(names) - k} more" if len(names) > k else "")
