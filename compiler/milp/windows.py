"""The schedule MILP: one copy of ``trimtab.milp.formulate``'s model per window, joined by the fleet held and
the
cost of switching (docs/online.md, "The schedule MILP").

Notation (besides compiler/milp/formulate.py's, which each window t uses with its own rates rate_t[w]):
    T windows of H hours; n[t,c], x[t,b,c]: window t's replicas and routes (named ``w<t>:...``)
    held[c] in Z+: replicas of c the fleet holds at some time (max over windows)
    up[t,c], down[t,c] >= 0: replicas of c started / stopped at the start of window t
    su[c] = usd[c] x startup_s[c] / 3600: what starting one replica costs (it holds its GPUs, serving nothing,
            for startup_s before its window: trimtab.cost.startup)
Constraints:
    window t's demand, capacity, KV-tier and P/D rows of trimtab.milp.formulate, with window t's derates
    (``window_derate``)                                                        (w<t>:<family>[...])
    n[t,c] <= held[c]                                                          (held[t,c])
    sum_{c on g} gpus[c] held[c] <= count[g]                                   (inventory[g], relaxable)
    up[t,c] >= n[t,c] - n[t-1,c];  down[t,c] >= n[t-1,c] - n[t,c]              (switch[t,c])
        t - 1 of window 0: the last window when ``cyclic``, else none (n = 0 before the period)
    n[t,c] >= sum_{k < L} up[t-k,c]       (L = min_lifetime_windows > 1)       (lifetime[t,c])
    sum_c up[t,c] + down[t,c] <= N        (N = max_changes_per_window)         (changes[t])
Objective:
    min sum_t H x (window t's min_cost objective) + sum_{t,c} su[c] up[t,c]
        + EPS_SWITCH x sum_{t,c} (up[t,c] + down[t,c]) + EPS_HELD x sum_c usd[c] held[c]
    (the two epsilon terms only make held and down exact: the fewest replicas held and no phantom stops)
The per-window inventory rows are implied by held and dropped; every replica of every window has a GPU in the
fleet held, so one placement of ``held`` serves every window (replicas start and stop in place, none moves).
"""
from __future__ import annotations

from dataclasses import replace

from trimtab.deployment.price import startup_usd
from trimtab.deployment.shape import CandidateSet
from trimtab.milp.formulate import formulate, n_var
from trimtab.ir.model import ProblemIR
from trimtab.spec.paths import SpecPath
from trimtab.solvers.base import SolveResult
from trimtab.solvers.model import Constraint, MilpModel

EPS_SWITCH = 1e-5  # $ per replica started or stopped: ties only
EPS_HELD = 1e-6  # share of a held replica's $/h: ties only


def window_ir(ir: ProblemIR, rates: dict[str, float]) -> ProblemIR:
    """``ir`` with each workload's rate replaced by its rate in one window."""
    return replace(ir, workloads=tuple(replace(w, rate_rps=rates.get(w.name, w.rate_rps))
                                       for w in ir.workloads))


def wvar(t: int, name: str) -> str:
    return f"w{t}:{name}"


class WindowKey(str):
    """A derate of one candidate in one window (``trimtab.planning.schedule``), beside the plain
    per-candidate derates in one dict. A str whose text, ``w<t>:cid``, is for display and ordering only (the
    derates are sorted and compared as before); the window and the candidate are read from ``window`` and
    ``cid``."""

    window: int
    cid: str

    def __new__(cls, t: int, cid: str) -> WindowKey:
        key = super().__new__(cls, wvar(t, cid))
        key.window, key.cid = t, cid
        return key

    def __getnewargs__(self) -> tuple[int, str]:  # pickle and copy rebuild it from its parts, not its text
        return self.window, self.cid


def held_var(cid: str) -> str:
    return f"held[{cid}]"


def up_var(t: int, cid: str) -> str:
    return f"up[{t},{cid}]"


def down_var(t: int, cid: str) -> str:
    return f"down[{t},{cid}]"


def formulate_schedule(ir: ProblemIR, cands: CandidateSet, rates: list[dict[str, float]], window_s: int,
                       startup_s: dict[str, float], derate: dict[str, float] | None = None, *,
                       cyclic: bool = True, min_lifetime: int = 1, max_changes: int | None = None,
                       current: dict[str, int] | None = None) -> tuple[MilpModel, list[dict[str, str]]]:
    """The schedule MILP (module docstring) over windows with ``rates[t]`` per workload, and per window its
    variables' names in ``trimtab.milp.formulate``'s model (``window_result`` reads a window's solution
    through it). ``current`` (replicas per candidate running now) replaces window -1 when the period is not
    cyclic."""
    m = MilpModel(name=f"trimtab-schedule:{ir.name}")
    hours = window_s / 3600.0
    allc = cands.candidates
    T = len(rates)
    objective: list[tuple[str, float]] = []
    names: list[dict[str, str]] = []
    for t, r in enumerate(rates):
        mt = formulate(window_ir(ir, r), cands, window_derate(derate, t))
        names.append({})
        for v in mt.variables.values():
            names[t][m.add_var(wvar(t, v.name), v.kind, v.lb, v.ub, v.family)] = v.name
        for con in mt.constraints:
            if con.family in ("inventory", "budget"):
                continue  # inventory: on held below; budget: per window, below
            m.add(replace(con, name=wvar(t, con.name), expr=tuple((wvar(t, n), a) for n, a in con.expr)))
        objective += [(wvar(t, n), a * hours) for n, a in mt.objective]
        if ir.budget_usd_per_hour is not None:
            m.add(Constraint(wvar(t, "budget"), "budget",
                             tuple((wvar(t, n_var(c.id)), c.usd_per_hour) for c in allc), "<=",
                             ir.budget_usd_per_hour, origin=SpecPath("budget_usd_per_hour"), relaxable=True))
    by_gpu: dict[str, list] = {}
    for c in allc:
        ub = ir.gpu(c.gpu).count // c.gpus
        m.add_var(held_var(c.id), "integer", 0, ub)
        objective.append((held_var(c.id), EPS_HELD * c.usd_per_hour))
        by_gpu.setdefault(c.gpu, []).append(c)
        for t in range(T):
            m.add(Constraint(f"held[{t},{c.id}]", "held",
                             ((wvar(t, n_var(c.id)), 1.0), (held_var(c.id), -1.0)), "<=", 0.0,
                             origin=SpecPath("schedule")))
    for pool in ir.gpus:
        cs = by_gpu.get(pool.type, [])
        m.add(Constraint(f"inventory[{pool.type}]", "inventory",
                         tuple((held_var(c.id), float(c.gpus)) for c in cs), "<=", float(pool.count),
                         origin=SpecPath.gpu(pool, "count"), relaxable=True))
    for c in allc:
        ub = ir.gpu(c.gpu).count // c.gpus
        for t in range(T):
            m.add_var(up_var(t, c.id), "continuous", 0.0, float(ub))
            m.add_var(down_var(t, c.id), "continuous", 0.0, float(ub))
    for c in allc:
        su = startup_usd(c.usd_per_hour, startup_s.get(c.id, 0.0))
        for t in range(T):
            now = wvar(t, n_var(c.id))
            if t > 0 or cyclic:
                prev: tuple = ((wvar((t - 1) % T, n_var(c.id)), -1.0),)
                before = 0.0
            else:
                prev, before = (), float((current or {}).get(c.id, 0))
            # up >= now - prev  <=>  now - prev - up <= 0 ; down >= prev - now  <=>  prev - now - down <= 0
            m.add(Constraint(f"switch_up[{t},{c.id}]", "switch",
                             ((now, 1.0),) + prev + ((up_var(t, c.id), -1.0),), "<=", before,
                             origin=SpecPath("schedule")))
            m.add(Constraint(f"switch_down[{t},{c.id}]", "switch",
                             ((now, -1.0),) + tuple((n, -a) for n, a in prev) + ((down_var(t, c.id), -1.0),),
                             "<=", -before, origin=SpecPath("schedule")))
            objective += [(up_var(t, c.id), su + EPS_SWITCH), (down_var(t, c.id), EPS_SWITCH)]
            if min_lifetime > 1:
                ks = [(t - k) % T if cyclic else t - k for k in range(min(min_lifetime, T))]
                ks = [k for k in ks if k >= 0]
                m.add(Constraint(f"lifetime[{t},{c.id}]", "lifetime",
                                 tuple((up_var(k, c.id), 1.0) for k in dict.fromkeys(ks)) + ((now, -1.0),),
                                 "<=", 0.0, origin=SpecPath("schedule", field="min_lifetime_windows")))
    if max_changes is not None:
        for t in range(T):
            if t == 0 and not cyclic and current is None:
                # the first window of a period starting from nothing: starting its fleet is not a change
                continue
            m.add(Constraint(f"changes[{t}]", "changes",
                             tuple((v(t, c.id), 1.0) for c in allc for v in (up_var, down_var)), "<=",
                             float(max_changes), origin=SpecPath("schedule", field="max_changes_per_window"),
                             relaxable=True))
    m.objective = tuple(objective)
    return m, names


def window_derate(derate: dict[str, float] | None, t: int) -> dict[str, float]:
    """Window ``t``'s capacity factors: a candidate's own (``cid``, every window) times its window's
    (``WindowKey(t, cid)``, from a simulated miss in a window at least as full; trimtab.planning.schedule)."""
    derate = derate or {}
    out = {k: v for k, v in derate.items() if not isinstance(k, WindowKey)}
    for k, v in derate.items():
        if isinstance(k, WindowKey) and k.window == t:
            out[k.cid] = out.get(k.cid, 1.0) * v
    return out


def window_result(res: SolveResult, names: dict[str, str]) -> SolveResult:
    """One window's part of a schedule solution (``names``: that window's of ``formulate_schedule``), under
    the names of ``trimtab.milp.formulate`` (so extraction and the balance LP read it as one window's
    plan)."""
    return replace(res, values={names[k]: v for k, v in res.values.items() if k in names})


def switching(res: SolveResult, cands: CandidateSet, T: int, cyclic: bool = True) -> list[tuple[int, int]]:
    """(started, stopped) replicas at the start of each window, from the replicas of consecutive windows (not
    from up and down, which only tie terms bind: within the MIP gap they may hold phantom starts or stops).
    Without a cycle, window 0 starts its whole fleet."""
    allc = cands.candidates
    n = [{c.id: round(res.values.get(wvar(t, n_var(c.id)), 0.0)) for c in allc} for t in range(T)]
    out = []
    for t in range(T):
        prev = n[(t - 1) % T] if (t > 0 or cyclic) else {c.id: 0 for c in allc}
        out.append((sum(max(0, n[t][c.id] - prev[c.id]) for c in allc),
                    sum(max(0, prev[c.id] - n[t][c.id]) for c in allc)))
    return out


def move_var(kind: str, cid: str) -> str:
    return f"{kind}[{cid}]"


def add_move_rows(m: MilpModel, cands: CandidateSet, current: dict[str, int], start_usd: dict[str, float],
                  horizon_h: float, stop_usd: float = 0.0, max_moves: int | None = None,
                  fixed_moves: int = 0, replicas: dict | None = None) -> None:
    """Re-planning from a running deployment (``trimtab replan``; docs/online.md, "Re-planning"), on a
    ``trimtab.milp.formulate`` model:
        start[c] >= n[c] - cur[c];  stop[c] >= cur[c] - n[c]                      (move[c])
        sum_c start[c] + stop[c] <= max_moves - fixed_moves                        (moves, relaxable)
        min  horizon_h x (the model's $/h objective) + sum_c (su[c] + EPS_SWITCH) start[c]
                                                     + (stop_usd + EPS_SWITCH) stop[c]
    cur[c]: replicas of c running now (after failures); su[c]: a start's cost (trimtab.cost.startup);
    ``fixed_moves``: replicas that stop whatever the plan (deployments no candidate of the new
    spec matches). ``replicas``: candidate -> its n[c] where the model is not ``formulate``'s (the adapter
    MILP's, from its index ``trimtab.planning.lora.LoraIndex``)."""
    m.objective = tuple((n, a * horizon_h) for n, a in m.objective)
    obj = list(m.objective)
    moves = []
    for c in cands.candidates:
        n = replicas[c] if replicas is not None else n_var(c.id)
        ub = float(m.variables[n].ub or 0.0)
        cur = float(current.get(c.id, 0))
        up, down = move_var("start", c.id), move_var("stop", c.id)
        m.add_var(up, "continuous", 0.0, max(ub, 0.0))
        m.add_var(down, "continuous", 0.0, max(cur, 0.0))
        m.add(Constraint(f"move_start[{c.id}]", "move", ((n, 1.0), (up, -1.0)), "<=", cur,
                         origin=SpecPath("--plan", note="the running plan (trimtab replan)")))
        m.add(Constraint(f"move_stop[{c.id}]", "move", ((n, -1.0), (down, -1.0)), "<=", -cur,
                         origin=SpecPath("--plan", note="the running plan (trimtab replan)")))
        obj += [(up, start_usd.get(c.id, 0.0) + EPS_SWITCH), (down, stop_usd + EPS_SWITCH)]
        moves += [(up, 1.0), (down, 1.0)]
    if max_moves is not None:
        m.add(Constraint("moves", "moves", tuple(moves), "<=", float(max_moves - fixed_moves),
                         origin=SpecPath("--max-moves", note="an option of trimtab replan"), relaxable=True))
    m.objective = tuple(obj)
