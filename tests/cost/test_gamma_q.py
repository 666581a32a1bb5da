"""The incomplete gamma function behind the TPOT tail (scipy.special.gammaincc, imported on first use)."""
from __future__ import annotations

import math

import pytest


def test_gamma_q_matches_closed_forms():
    from trimtab.cost.model import gamma_q

    for x in (0.0, 0.3, 1.0, 2.5, 10.0, 40.0):
        assert gamma_q(1.0, x) == pytest.approx(math.exp(-x), rel=1e-10, abs=1e-15)  # Q(1, x) = e^-x
        assert gamma_q(0.5, x) == pytest.approx(math.erfc(math.sqrt(x)), rel=1e-9, abs=1e-15)
        # Q(3, x) = e^-x (1 + x + x^2/2)
        assert gamma_q(3.0, x) == pytest.approx(math.exp(-x) * (1 + x + x * x / 2), rel=1e-9, abs=1e-15)
