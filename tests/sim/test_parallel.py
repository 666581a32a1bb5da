"""One simulation's deployment runs in forked processes (compiler/sim/parallel.py) give exactly the result of
running them all in this process: every field of the result, on the real cost model and simulator."""
from __future__ import annotations

import pickle
from pathlib import Path

import pytest

import trimtab.sim.parallel as par
from trimtab.api import plan
from trimtab.sim import simulate
from trimtab.sim.replica import Replica, Request, request_fields, unpack_request
from trimtab.sim.reuse import RunCache
from trimtab.spec.load import load_spec
from tests.conftest import planned

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif("fork" not in __import__("multiprocessing").get_all_start_methods(),
                                reason="needs fork")


def _bytes(res) -> bytes:
    """Everything a simulation reports but its wall seconds."""
    res.wall_s = 0.0
    return pickle.dumps(res)


def _spy(monkeypatch, name: str, what) -> list:
    """``par.<name>`` replaced by itself recording ``what(*args)`` of each call (in this process); the
    records."""
    seen = []
    real = getattr(par, name)

    def spy(*a):
        seen.append(what(*a))
        return real(*a)

    monkeypatch.setattr(par, name, spy)
    return seen


def _both(monkeypatch, p, spec, cached: bool = False, **kw) -> tuple[bytes, bytes, list]:
    """(the run in one process, the run with 2 processes, what the parallel path ran); ``cached``: each with a
    new ``RunCache``, as the planner runs them."""
    monkeypatch.setenv("TRIMTAB_JOBS", "1")
    one = _bytes(simulate(p, spec, cache=RunCache() if cached else None, **kw))
    monkeypatch.setenv("TRIMTAB_JOBS", "2")
    monkeypatch.setattr(par, "MIN_ARRIVALS", 0)
    calls = _spy(monkeypatch, "run_deployments", lambda sim, orders, jobs: sorted(orders, key=str))
    two = _bytes(simulate(p, spec, cache=RunCache() if cached else None, **kw))
    return one, two, calls


@pytest.fixture(scope="module")
def quickstart():
    spec = load_spec(ROOT / "examples" / "quickstart.yaml")
    return planned("quickstart", validate=False).plan, spec


def test_request_fields_travel_whole():
    """Every field of a request is sent and set back (a new field would otherwise be dropped silently)."""
    r = Request(0, 0, 0, 0.0, 0, 0)
    for i, s in enumerate(Request.__slots__):
        setattr(r, s, i + 0.5 if s in ("arrival", "t_sched", "t_first", "t_done") else i + 1)
    back = unpack_request(request_fields(r))
    assert [getattr(back, s) for s in Request.__slots__] == [getattr(r, s) for s in Request.__slots__]
    # every replica field is sent, kept by the parent (the cost model, the prefix cache) or checked empty
    assert set(par.REPLICA_FIELDS) | {"it", "pfx", "done"} | set(par._QUEUES) == set(Replica.__slots__)


def test_forked_runs_equal_one_process(monkeypatch, quickstart):
    p, spec = quickstart
    one, two, calls = _both(monkeypatch, p, spec, seed=3, requests=5000)
    assert calls and len(calls[0]) >= 3  # the parallel path ran, over several deployments
    assert two == one


def test_forked_runs_equal_one_process_with_reuse(monkeypatch, quickstart):
    """Runs adopted from a child go into the planner's cache and are reused as they are by the next round."""
    p, spec = quickstart
    monkeypatch.setenv("TRIMTAB_JOBS", "2")
    monkeypatch.setattr(par, "MIN_ARRIVALS", 0)
    cache = RunCache()
    first = _bytes(simulate(p, spec, seed=4, requests=4000, timeline=False, cache=cache))
    again = _bytes(simulate(p, spec, seed=4, requests=4000, timeline=False, cache=cache))
    assert cache.hits == cache.misses >= 3
    monkeypatch.setenv("TRIMTAB_JOBS", "1")
    assert first == again == _bytes(simulate(p, spec, seed=4, requests=4000, timeline=False))


def test_runs_stopped_at_the_drain_limit_are_run_by_the_parent(monkeypatch, quickstart):
    """An overloaded plan's deployments still hold requests at the drain limit: they are not sent back, the
    parent runs them, and the result is the one-process one."""
    p, spec = quickstart
    spec = spec.model_copy(update={"workloads": [w.model_copy(update={"rate_rps": w.rate_rps * 16})
                                                 for w in spec.workloads]})
    small = p.model_copy(update={"deployments": [d.model_copy(update={"replicas": 1})
                                                 for d in p.deployments]})
    one, two, calls = _both(monkeypatch, small, spec, seed=1, requests=6000)
    assert calls
    assert pickle.loads(one).stopped_early
    assert two == one


def test_a_failing_child_leaves_its_work_to_the_parent(monkeypatch, quickstart):
    p, spec = quickstart

    def broken(sim, queue, orders, counter, conn):
        par._take(queue, counter)  # takes a deployment, then fails
        raise RuntimeError("child failed")

    monkeypatch.setattr(par, "_child", broken)
    one, two, calls = _both(monkeypatch, p, spec, seed=5, requests=4000)
    assert calls and two == one


def test_pd_pair_groups_run_in_children_like_deployments(monkeypatch):
    """A plan with two groups of P/D pairs and a unified deployment (the planner's runs, with a cache): each
    group is a unit of its own in the queue the processes share, beside the unified deployment; the same
    result as in one process, and as the one event loop over all arrivals."""
    from tests.sim.helpers import two_pair_groups

    p, spec = two_pair_groups()
    one, two, calls = _both(monkeypatch, p, spec, seed=2, requests=6000, cached=True)
    units = calls[0]
    assert sum(type(u) is tuple for u in units) == 2 and sum(type(u) is int for u in units) >= 1
    assert two == one
    monkeypatch.setenv("TRIMTAB_JOBS", "1")
    assert _bytes(simulate(p, spec, seed=2, requests=6000, progress=lambda f: None)) == one


def test_small_runs_and_one_job_stay_in_this_process(monkeypatch, quickstart):
    p, spec = quickstart
    calls = []
    monkeypatch.setattr(par, "run_deployments", lambda *a: calls.append(a))
    monkeypatch.setenv("TRIMTAB_JOBS", "2")
    simulate(p, spec, seed=0, requests=2000)  # below MIN_ARRIVALS
    monkeypatch.setenv("TRIMTAB_JOBS", "1")
    monkeypatch.setattr(par, "MIN_ARRIVALS", 0)
    simulate(p, spec, seed=0, requests=2000)
    assert calls == []


def _seeds(p, spec, cache=None) -> list[bytes]:
    """Every run of seeds 0-2 of ``p`` (5,000 requests each)."""
    from trimtab.sim.validate import simulate_seeds

    return [_bytes(r) for r in simulate_seeds(p, spec, None, (0, 1, 2), 5000, cache=cache).runs]


def _serial_then(monkeypatch, p, spec, jobs: str) -> list[bytes]:
    """The seeds' runs in one process; then ``jobs`` processes for every run after it, however small."""
    monkeypatch.setenv("TRIMTAB_JOBS", "1")
    serial = _seeds(p, spec)
    monkeypatch.setenv("TRIMTAB_JOBS", jobs)
    monkeypatch.setattr(par, "MIN_ARRIVALS", 0)
    return serial


def test_seeds_side_by_side_equal_one_after_another(monkeypatch, quickstart):
    """The seeds after the first in forked children (``run_seeds``): the same runs in seed order, and the
    children's deployment runs land in the cache, where the next round reuses them with the same result."""
    p, spec = quickstart
    serial = _serial_then(monkeypatch, p, spec, "2")
    batches = _spy(monkeypatch, "run_seeds", lambda run_one, seeds, cache, jobs: list(seeds))
    cache = RunCache()
    side = _seeds(p, spec, cache)
    assert batches == [[1, 2]] and side == serial
    assert {slot[0] for slot in cache.by_seed} == {0, 1, 2}  # seed 2 ran in a child: its runs came back
    n = cache.misses
    # every deployment run of every seed reused; seed 2's child names the runs the parent already has by key
    # alone
    by_key = _spy(monkeypatch, "_unpack_cache", lambda packed, before: sum(run is None for _, run in packed))
    again = _seeds(p, spec, cache)
    assert again == serial and cache.misses == n and cache.hits == n
    assert by_key and by_key[0] >= 3


def test_a_failing_seed_child_leaves_its_seed_to_the_parent(monkeypatch, quickstart):
    p, spec = quickstart
    serial = _serial_then(monkeypatch, p, spec, "2")
    monkeypatch.setattr(par, "_seed_child", lambda *a: (_ for _ in ()).throw(RuntimeError("child failed")))
    assert _seeds(p, spec, RunCache()) == serial


def test_seeds_side_by_side_share_the_processes(monkeypatch, quickstart):
    """With 4 processes and 2 seeds side by side, each seed's deployment runs use its share (2): forks inside
    the seed's own child too; the same runs."""
    p, spec = quickstart
    serial = _serial_then(monkeypatch, p, spec, "4")
    shares = _spy(monkeypatch, "run_deployments", lambda sim, orders, jobs: jobs)
    assert _seeds(p, spec, RunCache()) == serial
    assert shares and set(shares) <= {2, 4} and 2 in shares  # seed 0 alone: 4; seed 1 here beside seed 2: 2
    assert par.jobs_here(4) == 4  # the share is given back after the seeds
