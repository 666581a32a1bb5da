"""Disaggregated roles of one replica (docs/disaggregation.md): a prefill-only replica (an M/G/1 prefill
server with no decode batch) and a decode-only one (steps of the decode batch alone), their steady states and
capacities at SLO. Mixed into ``ReplicaModel``.
"""
from __future__ import annotations

import math
from dataclasses import replace

from trimtab.cost.queueing import _prefill_queue, _z, batch_var, ctx_sq, map_slope, over_caps
from trimtab.cost.search import bisect_max
from trimtab.cost.records import UNSTABLE, ReplicaState, TrafficClass
from trimtab.cost.moe import kv_elements


class ReplicaRoles:
    @property
    def kv_bytes_per_token(self) -> float:
        """KV bytes of one token of context for the whole model (all layers and KV heads): what a prefill
        instance hands to a decode instance per input token (MLA: the compressed latent per layer)."""
        if self.mla:
            return self.L * kv_elements(self.model)[0] * self.kvbytes
        return 2 * self.L * self.kv_heads * self.head_dim * self.kvbytes

    def evaluate_prefill(self, classes: list[TrafficClass] | tuple[TrafficClass, ...],
                         percentile: float = 99.0) -> ReplicaState:
        """Steady state of a prefill-only replica: every step carries prompt chunks and nothing decodes (the
        first token comes out of the prefill, the rest on a decode replica). The same M/G/1 prefill server as
        ``evaluate`` with a decode batch of 0: service of a prompt = isl / chunk steps of T(0, chunk), waiting
        time at the percentile from the exponential tail. KV: only the prompts being prefilled (handed off
        after)."""
        lam = sum(c.rate_rps for c in classes)
        n = len(classes)
        fe = self.request_overhead
        if lam <= 0:
            ttft = tuple(fe + self.prefill_s(c.tail, 0, 0) for c in classes)
            mean = tuple(fe + self.prefill_s(c.isl_mean, 0, 0) for c in classes)
            return ReplicaState(True, "", 0.0, ttft, mean, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        K = self.max_batched_tokens
        rho, steps_total, s = 0.0, 0.0, []
        for c in classes:
            per_step = min(c.isl_mean, K)
            steps = c.isl_mean / per_step
            t = self.iteration_s(0, 0, per_step, (c.isl_mean - per_step) / 2)
            s.append(steps * t)
            rho += c.rate_rps * steps * t
            steps_total += c.rate_rps * steps
        if rho >= 1:
            inf = (UNSTABLE,) * n
            return ReplicaState(False, f"prefill saturated (utilisation {rho:.2f})", 0.0, inf, inf, 1.0, 0.0,
                                UNSTABLE, UNSTABLE, UNSTABLE, 0.0)
        wait_p, wait_mean, pre_tokens = _prefill_queue(classes, s, lam, rho, percentile)
        kv_used = rho * pre_tokens / max(steps_total, 1e-12)
        ttft = tuple(fe + wait_p + self.prefill_s(c.tail, 0, 0) for c in classes)
        mean = tuple(fe + wait_mean + self.prefill_s(c.isl_mean, 0, 0) for c in classes)
        return ReplicaState(True, "", 0.0, ttft, mean, rho, 0.0, kv_used, wait_p, wait_mean, 0.0)

    def evaluate_decode(self, classes: list[TrafficClass] | tuple[TrafficClass, ...],
                        percentile: float = 99.0, max_iter: int = 200) -> ReplicaState:
        """Steady state of a decode-only replica: requests arrive with their prompt's KV (transferred) and
        decode osl - 1 tokens; every step is decode-only, T_d = T(b, mean context). Little's law gives
        b = (sum rate x (osl - 1)) x T_d; iterate to the fixed point. Without prompts interleaved the step
        time does not jump, so TPOT at the percentile is the step time at the batch size the number of
        requests in the system reaches at that percentile, b_p = b + z sd (normal approximation; variance
        ``batch_var``: Poisson, widened by the batch's feedback on its own step time; the batch changes on the
        time scale of a request's own decode, so its steps do not average it out)."""
        n = len(classes)
        D = sum(c.rate_rps * max(c.osl_mean - 1, 0.0) for c in classes)
        if D <= 0:
            t1 = self.iteration_s(1, max((c.tail for c in classes), default=0.0))
            return ReplicaState(True, "", t1, (0.0,) * n, (0.0,) * n, 0.0, 0.0, 0.0, 0.0, 0.0, t1)
        ctx = sum(c.rate_rps * max(c.osl_mean - 1, 0.0) * (c.isl_mean + c.osl_mean / 2) for c in classes) / D
        b = 1.0
        step_s = self.step_s  # (the loop's hot path: a local, and max() as a conditional expression)
        for _ in range(max_iter):
            t_d = step_s(b, ctx)
            b_new = D * t_d
            if b_new > self.max_num_seqs:
                inf = (UNSTABLE,) * n
                return ReplicaState(False,
                                    f"needs a decode batch of {b_new:.0f} > max_num_seqs {self.max_num_seqs}",
                                    UNSTABLE, inf, inf, 1.0, b_new, UNSTABLE, 0.0, 0.0, UNSTABLE)
            if abs(b_new - b) <= 1e-4 * (1.0 if 1.0 > b_new else b_new):  # max(b_new, 1.0)
                b_in, b = b, b_new
                break
            b_in, b = b, b_new  # b = f(b_in): the batch map's last step
        kv_used, kv_cap = b * ctx, self.memory.kv_cache_tokens
        slope = 0.0
        if kv_used > kv_cap:
            why = f"KV cache needs {kv_used:.0f} tokens > capacity {kv_cap}"
        else:  # the batch map f(b) = D x T_d(b)'s slope at the fixed point widens the batch's spread
            slope = map_slope(lambda x: D * step_s(x, ctx), b_in, b) if percentile > 50 else 0.0
            why = over_caps(b, kv_used, ctx, ctx_sq(classes), percentile, self.max_num_seqs, kv_cap, slope)
        if why:  # (seats and KV at the percentile too: trimtab.cost.queueing.over_caps)
            inf = (UNSTABLE,) * n
            return ReplicaState(False, why, UNSTABLE, inf, inf, 1.0, b, kv_used, 0.0, 0.0, UNSTABLE)
        tpot = self.iteration_s(max(b, 1.0), ctx)
        tpot_p = tpot
        if percentile > 50:
            z = _z(percentile)
            tpot_p = self.iteration_s(max(b + z * math.sqrt(batch_var(max(b, 1.0), slope)), 1.0), ctx)
        return ReplicaState(True, "", tpot_p, (0.0,) * n, (0.0,) * n, 0.0, b, kv_used, 0.0, 0.0, tpot)

    def prefill_meets(self, cls: TrafficClass, rate: float, ttft_ms: float, percentile: float,
                      transfer_s: float = 0.0) -> bool:
        """Whether a prefill replica meets ``ttft_ms`` (the KV hand-off ``transfer_s`` included) with ``cls``
        at ``rate``: the predicate of its capacity search (``capacity_rps_role``), so that one evaluation
        tells a rate it cannot reach from one it may."""
        st = self.evaluate_prefill([TrafficClass(rate, cls.isl_mean, 1.0, cls.isl_tail, cls.isl_cv2)],
                                   percentile)
        return st.stable and (st.ttft_s[0] + transfer_s) * 1e3 <= ttft_ms

    def capacity_rps_role(self, role: str, cls: TrafficClass, ttft_ms: float, tpot_ms: float,
                          percentile: float, transfer_s: float = 0.0, rel_tol: float = 0.005) -> float:
        """``capacity_rps`` for a ``prefill`` replica (TTFT, the KV hand-off ``transfer_s`` included, within
        ``ttft_ms``) or a ``decode`` replica (TPOT within ``tpot_ms``, prompt plus output in its KV cache)."""
        kv = self.memory.kv_cache_tokens
        if role == "prefill":
            if kv < cls.tail:
                return 0.0
        elif kv < cls.tail + cls.osl_mean or cls.osl_mean <= 1:
            return 0.0
        compiled = getattr(self.step_s, "role_capacity", None)
        if compiled is not None and all(getattr(type(self), f) is getattr(ReplicaRoles, f)
                                        for f in ("evaluate_prefill", "evaluate_decode", "prefill_meets")):
            # the search below, compiled (compiler/cost/_queue.c): the same points and rate
            return compiled(role == "prefill", (
                self.max_batched_tokens, self.max_num_seqs, kv, self.request_overhead, percentile,
                _z(percentile) if percentile > 50 else 0.0, ttft_ms, tpot_ms, transfer_s, cls.isl_mean,
                cls.osl_mean, cls.tail, cls.isl_cv2), rel_tol)
        if role == "prefill":

            def ok(rate: float) -> bool:
                return self.prefill_meets(cls, rate, ttft_ms, percentile, transfer_s)

            per_step = min(cls.isl_mean, self.max_batched_tokens)
            hi = 1.01 / (cls.isl_mean / per_step * self.iteration_s(0, 0, per_step, 0))
        else:
            # replace(cls, rate_rps=rate, cached_tokens=0.0, prefix_reserved=0.0)
            at_rate = replace(cls, cached_tokens=0.0, prefix_reserved=0.0).at_rates()

            def ok(rate: float) -> bool:
                st = self.evaluate_decode([at_rate(rate)], percentile)
                return st.stable and st.tpot_s * 1e3 <= tpot_ms

            hi = 1.01 * self.max_num_seqs / ((cls.osl_mean - 1) * self.iteration_s(1, cls.isl_mean))
        if not ok(1e-9):
            return 0.0
        return bisect_max(ok, 0.0, hi, rel_tol)
