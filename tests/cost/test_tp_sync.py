"""Issue 34: the engine's per-step time from a tensor-parallel degree up (``tp_sync_ms``, ``tp_sync_min_tp``):
one worker process per GPU prepares and launches each step, and every all-reduce waits for the slowest GPU."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from trimtab.cost.model import ReplicaModel
from trimtab.profiles.loader import load_profiles


def _engine(**upd):
    eng = load_profiles().engines["vllm"]
    src = dict(eng.sources, sync_test={"kind": "assumption", "ref": "tests/cost/test_tp_sync.py"})
    return eng.model_validate({**eng.model_dump(), "sources": src, **upd})


def test_step_overhead_adds_the_sync_from_its_tp_up_hand_computed():
    eng = _engine(step_overhead_ms={"value": 1.25, "source": "overhead"},
                  tp_sync_ms={"value": 0.75, "source": "sync_test"}, tp_sync_min_tp=4)
    # 1.25 ms below TP 4; 1.25 + 0.75 = 2.0 ms at TP 4 and (no data beyond: held) at TP 8
    assert [eng.step_overhead_s(tp) for tp in (1, 2, 4, 8)] == pytest.approx([1.25e-3, 1.25e-3, 2e-3, 2e-3])


def test_every_step_of_the_replica_pays_it_and_only_at_that_tp():
    p = load_profiles()
    gpu, model = p.gpus["h100-sxm"], p.models["llama-3.1-70b"]
    with_sync = _engine(tp_sync_ms={"value": 0.75, "source": "sync_test"}, tp_sync_min_tp=4)
    without = _engine(tp_sync_ms=None, tp_sync_min_tp=None)
    for tp, extra in ((2, 0.0), (4, 0.75e-3), (8, 0.75e-3)):
        a, b = ReplicaModel(model, gpu, with_sync, tp=tp), ReplicaModel(model, gpu, without, tp=tp)
        for step in ((16, 800, 0), (0, 0, 2048), (64, 1000, 4096)):  # decode, prefill, mixed (eager) steps
            assert a.iteration_s(*step) - b.iteration_s(*step) == pytest.approx(extra, abs=1e-12)


def test_the_sync_needs_a_declared_source_and_is_not_negative():
    with pytest.raises(ValidationError):
        _engine(tp_sync_ms={"value": 0.5, "source": "nowhere"}, tp_sync_min_tp=4)
    with pytest.raises(ValidationError):
        _engine(tp_sync_ms={"value": -0.1, "source": "sync_test"}, tp_sync_min_tp=4)
    with pytest.raises(ValidationError):
        _engine(tp_sync_ms={"value": 0.5, "source": "sync_test"}, tp_sync_min_tp=1)
