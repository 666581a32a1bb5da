"""Prefill/decode pairs as ``trimtab watch`` reads them (docs/online.md, "Prefill/decode plans").

A P/D router (``trimtab emit --to k8s``: vllm-router; llm-d's sidecar; Dynamo's frontend) sends each request
to a prefill engine for one token, then to a decode engine with the prefiller's KV transfer parameters. Both
engines count the request: the prefiller as a one-token request (its ``time_to_first_token`` is the prompt's
queueing and prefill), the decoder as the whole request (the prompt's length, every output token, and a
``time_to_first_token`` from its arrival there: pulling the KV and the first decode step). So the decode side
is where requests, their lengths and TPOT are read, once per request; the prefill side adds its first-token
time, and a client's first token is the sum of the two.

Entry points: ``route_refs(plan, rates)`` (the reference rate of each workload on the deployment that
completes its requests, and on the prefill deployments), ``prefill_of(plan)``, ``FirstToken`` (the end-to-end
first-token time of a pair from the two histograms).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from trimtab.online.metrics import Hist


def route_refs(plan, rates: dict[str, float]) -> tuple[dict, dict]:
    """(``ref``, ``prefill_ref``): per (workload, deployment) the rate the plan routes there at ``rates`` (a
    unified deployment, or the decode side of a pair: the side a request ends on), and per (workload, prefill
    deployment) the same requests' rate on their prefill side."""
    ref: dict[tuple[str, str], float] = {}
    pre: dict[tuple[str, str], float] = {}
    for r in plan.routes:
        rate = rates[r.workload] * r.share
        k = (r.workload, r.deployment or r.decode)
        ref[k] = ref.get(k, 0.0) + rate
        if r.prefill:
            pre[(r.workload, r.prefill)] = pre.get((r.workload, r.prefill), 0.0) + rate
    return ref, pre


def prefill_of(plan) -> dict[str, list[str]]:
    """Per decode deployment, the prefill deployments the plan pairs it with."""
    out: dict[str, set[str]] = {}
    for r in plan.routes:
        if r.prefill:
            out.setdefault(r.decode, set()).add(r.prefill)
    return {d: sorted(p) for d, p in sorted(out.items())}


@dataclass(frozen=True)
class FirstToken:
    """A client's first-token time through a P/D pair: the prefiller's first token (``prefill``, pooled over
    its endpoints) plus the decoder's (``decode``: from the request's arrival there), taken as independent
    (two engines' queues), one observation per request the decoder finished (``count``). It answers what
    ``trimtab.online.drift.met`` and the latency report ask of a TTFT histogram."""

    prefill: Hist
    decode: Hist

    @property
    def count(self) -> float:
        return self.decode.count

    def _parts(self):
        """(lower bound, share) of each prefill bucket with observations."""
        lo, below = 0.0, 0.0
        for b, c in zip(self.prefill.bounds, self.prefill.cum):
            if c > below:
                yield lo, (c - below) / self.prefill.count
            lo, below = (lo if math.isinf(b) else b), c

    def share_at_most_upper(self, x: float) -> float:
        """The largest share of first tokens within ``x`` the buckets allow: each prefill bucket at its lower
        bound, the decoder's share read as ``Hist.share_at_most_upper`` does (so a miss is shown only beyond
        the buckets' resolution, as for a unified deployment)."""
        if self.prefill.count <= 0 or self.decode.count <= 0:
            return math.nan
        return sum(p * (self.decode.share_at_most_upper(x - lo) if x >= lo else 0.0)
                   for lo, p in self._parts())

    def quantile(self, q: float) -> float:
        """The first-token time at quantile ``q`` of the sum (each prefill bucket at its lower bound, the
        decoder's linear within its buckets, by bisection); nan without observations."""
        if self.prefill.count <= 0 or self.decode.count <= 0:
            return math.nan

        def share(x: float) -> float:
            return sum(p * self.decode.share_at_most(max(0.0, x - lo)) for lo, p in self._parts())

        lo, hi = 0.0, self.prefill.quantile(1.0) + self.decode.quantile(1.0) + 1e-9
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if share(mid) < q else (lo, mid)
        return hi
