"""Planning and simulating run with Python's cyclic garbage collector paused (``trimtab.util.jobs.gc_paused``:
issue 16, the collector's passes over every live request took 6-13 % of a plan), and give it back as they
found it."""
from __future__ import annotations

import gc
from pathlib import Path

import pytest

import trimtab.planning.driver as driver
from trimtab.api import plan
from trimtab.util.jobs import gc_paused
from trimtab.sim import simulate
from trimtab.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_paused_in_the_block_restored_after_it_nested_and_on_errors(collector_on):
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner block does not turn it back on under the outer one
    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        with gc_paused():
            raise RuntimeError("boom")
    assert gc.isenabled()
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()  # off before: left off


def test_a_simulation_and_a_plan_run_without_it_and_give_it_back(collector_on, monkeypatch):
    spec = load_spec(ROOT / "examples" / "quickstart.yaml")
    seen = []
    p = plan(spec, validate=False).plan
    assert gc.isenabled()
    res = simulate(p, spec, requests=2000, progress=lambda f: seen.append(gc.isenabled()))
    assert seen and not any(seen) and res.requests >= 2000
    assert gc.isenabled()
    inside = []
    solve = driver.get_backend

    def spy(*a, **k):
        inside.append(gc.isenabled())
        return solve(*a, **k)

    monkeypatch.setattr(driver, "get_backend", spy)
    plan(spec, validate=False)
    assert inside == [False] and gc.isenabled()
