"""What every end-to-end test needs of the machine before it starts a vLLM CPU server.

vLLM's CPU engine serves these tests' models in bf16. A CPU without native bf16 arithmetic (AVX2 only: no
AVX512-BF16 or AMX) runs torch's bf16 GEMMs emulated, about a hundred times slower than fp32 (measured on an
AVX2-only AMD EPYC: 0.3 GFLOPS bf16 against 25.6 fp32 for 128 x 1024 x 1024), so a server of even the tiny
test model takes minutes per request and the plan for it is infeasible: such a machine cannot say anything
about fidelity, and the tests skip on it, saying why and with the measured figures."""
from __future__ import annotations

import time

import pytest

EMULATED_BF16_RATIO = 8.0  # bf16 / fp32 GEMM time above which bf16 is emulated (native: below 1-2)


def _gemm_s(a, b, reps: int = 5) -> float:
    a @ b
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def bf16_over_fp32() -> float:
    """Median bf16 / fp32 time of one 128 x 1024 x 1024 GEMM on one thread, as the engine runs it."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, b = torch.randn(128, 1024), torch.randn(1024, 1024)
        return _gemm_s(a.bfloat16(), b.bfloat16()) / _gemm_s(a, b)
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="session", autouse=True)
def native_bf16():
    """Session-wide and first, so that no module's server fixture starts on such a machine."""
    ratio = bf16_over_fp32()
    if ratio > EMULATED_BF16_RATIO:
        pytest.skip(f"this CPU emulates bf16 (a bf16 GEMM takes {ratio:.0f}x the fp32 one; "
                    f"native: under {EMULATED_BF16_RATIO:.0f}x): vLLM's CPU engine would serve the bf16 test "
                    "model at a fraction of a GFLOP/s and no plan for it is feasible")
