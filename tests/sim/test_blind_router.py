"""The simulator's router sees what a real one sees (issue 11): the prompt length, never the output length.
Routing decisions are the same whatever the outputs turn out to be, and a replica's outstanding work counts the
*expected* output (its range's mean), corrected only when the request has finished."""
from __future__ import annotations

import numpy as np

import compiler as tt
from compiler.lower import lower
from compiler.sim.engine import draw_arrivals
from compiler.sim.replica import Replica, Request
from compiler.sim.scenario import build_scenario
from tests.conftest import QUICKSTART
from tests.sim.helpers import LinearModel


def test_routes_do_not_depend_on_output_lengths():
    spec = tt.load_spec(QUICKSTART)
    plan = tt.plan(spec, validate=False).plan
    ir = lower(spec)
    sc = build_scenario(plan, spec, ir)
    a = draw_arrivals(sc, np.random.default_rng(11), 5000, None)
    for w in sc.workloads:  # the same traffic with every output length changed
        w.osl_grid = w.osl_grid[::-1] * 3 + 7
    b = draw_arrivals(sc, np.random.default_rng(11), 5000, None)
    assert not np.array_equal(a.osl, b.osl)
    assert np.array_equal(a.dep, b.dep) and np.array_equal(a.eosl, b.eosl) and np.array_equal(a.isl, b.isl)
    # the expected output is the range's planned mean, one value per prompt-length range
    for wi, w in enumerate(sc.workloads):
        sel = a.w == wi
        assert set(a.eosl[sel].tolist()) <= {int(round(x)) for x in w.expected_osl}


def test_replica_work_uses_the_expected_output():
    rep = Replica(0, 0, LinearModel(per_token_s=1e-4, decode_s=1e-3, max_num_seqs=4))
    r = Request(0, 0, 0, 0.0, isl=100, osl=1000, eosl=50)
    rep.enqueue(r)
    assert rep.work == 100 + 50  # what a router can know
    t = rep.start_step(0.0)
    while t >= 0:  # run the request to completion
        rep.finish_step(t)
        t = rep.start_step(t)
    assert r.t_done > 0 and rep.work == 0  # corrected to the truth once finished
