"""KV tiers of one replica (docs/kv-tiers.md): the prefix cache's reloads from its host tier, the share of
live KV beyond HBM, and the decode step a request sees while that share is read over the tier link. Mixed into
``ReplicaModel``.
"""
from __future__ import annotations

import math
from statistics import NormalDist


class ReplicaTiers:
    def reload_s(self, tokens: float) -> float:
        """Seconds to reload ``tokens`` prefix-cache tokens from the host tier into HBM: each GPU copies its
        KV shard over its own PCIe link (``prefix_tier.gbps_per_gpu``). Counted as engine time before the
        request's first prefill chunk, not overlapped (conservative: vLLM's connector loads
        asynchronously)."""
        if not tokens or self.prefix_tier is None:
            return 0.0
        return tokens * self.memory.kv_bytes_per_token_per_gpu / (self.prefix_tier.gbps_per_gpu * 1e9)

    def remote_share(self, kv_tokens_used: float) -> float:
        """Share of the KV in use that lives in the tier: max(0, used - HBM) / used (0 without a tier)."""
        if self.kv_tier is None or kv_tokens_used <= 0:
            return 0.0
        return max(0.0, kv_tokens_used - self.memory.kv_cache_tokens) / kv_tokens_used

    def _tier_decode_s(self, b: float, ctx: float, kv_pre: float, kv_floor: float,
                       z: float | None = None) -> float:
        """Decode step time a request sees on a replica with a KV tier, over the number of requests decoding
        with it: itself plus N ~ Poisson(b) others (M/G/inf), each step with N' = 1 + N requests of context
        ``ctx`` whose KV beyond HBM (at least ``kv_floor``, plus ``kv_pre`` of prompts being prefilled) is
        read over the tier link. The mean E[T(N')] (``z`` None), or T at N' = 1 + b + z sqrt(b) (a percentile;
        normal approximation). The step time grows faster than linearly in N' once KV spills to the tier, so
        the mean over N' is longer than the step at the mean: bursts of long requests slow each other down."""
        def step(n: float, own: float = ctx) -> float:
            held = own + (n - 1.0) * ctx  # the request's own context plus n - 1 others of the mean context
            kv = max(held + kv_pre, kv_floor)
            return self.iteration_s(n, held / n, 0.0, 0.0, 1.0, self.remote_share(kv))

        b = max(b, 0.0)
        # the request at the percentile: a tail-length one (its own KV spills most), in a burst
        if z is not None:
            return step(min(1.0 + b + z * math.sqrt(b), float(self.max_num_seqs)), max(kv_floor, ctx))
        if b > 40:  # normal approximation at 16 equally likely points
            nd = NormalDist(b, math.sqrt(b))
            pts = [min(max(1.0 + nd.inv_cdf((i + 0.5) / 16), 1.0), float(self.max_num_seqs))
                   for i in range(16)]
            return sum(step(n) for n in pts) / 16
        total, pmf, cum, n = 0.0, math.exp(-b), 0.0, 0
        while cum < 1 - 1e-6 and n <= self.max_num_seqs:
            total += pmf * step(1.0 + n)
            cum += pmf
            n += 1
            pmf *= b / n
        return total / max(cum, 1e-12)
