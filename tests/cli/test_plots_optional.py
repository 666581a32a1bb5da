"""matplotlib is optional (the `plots` extra): without it a --plot is refused naming the option and the extra
(exit 1), and the library imports nothing of it."""
from __future__ import annotations

import sys

import pytest

from trimtab.errors import ExitCode, InputError


def test_plot_without_matplotlib_names_the_option_and_the_extra(monkeypatch):
    from trimtab.cli.plots import pyplot

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what an environment without it raises on import
    with pytest.raises(InputError) as e:
        pyplot("--plot")
    assert e.value.exit_code == ExitCode.INVALID_INPUT
    assert "--plot" in str(e.value) and "trimtab[plots]" in str(e.value)


def test_the_library_plans_without_matplotlib(monkeypatch, tmp_path):
    import trimtab
    from tests.conftest import QUICKSTART

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    spec = trimtab.load_spec(QUICKSTART)
    assert trimtab.plan(spec, validate=False).plan.cost_usd_per_hour > 0
