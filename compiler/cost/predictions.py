"""Benchmark-style predictions of one replica (``trimtab predict``, the accuracy report, calibration): a
request alone at zero load, a closed loop of N clients, a static batch, an open-loop rate, a burst. Mixed into
``ReplicaModel``; each is built on its step time and its steady state (``compiler/cost/model.py``).
"""
from __future__ import annotations

import math
from collections import deque

from trimtab.cost.records import (UNSTABLE, BatchPrediction, BurstPrediction, ClosedLoopPrediction,
                                   MemoryFit, ReplicaState, TrafficClass)
from trimtab.cost.search import bisect_steps, grow


class ReplicaPredictions:
    def zero_load(self, cls: TrafficClass) -> tuple[float, float]:
        """(TTFT ms, TPOT ms) of a lone request: the best this replica can ever do for ``cls``."""
        if self.kv_tier is None:
            ttft = (self.request_overhead + self.prefill_s(cls.tail, 0, 0, 0.0, cls.tail_cached)
                    + self.reload_s(cls.tail_host_cached))  # host-tier prefix hits: reloaded first
            tpot = self.iteration_s(1, cls.tail + cls.osl_mean / 2)
            return ttft * 1e3, tpot * 1e3
        ctx = cls.tail + cls.osl_mean / 2
        ttft = self.request_overhead + self.prefill_s(cls.tail, 0, 0, self.remote_share(cls.tail),
                                                      cls.tail_cached)
        tpot = self.iteration_s(1, ctx, 0.0, 0.0, 1.0, self.remote_share(ctx))
        return ttft * 1e3, tpot * 1e3

    def max_concurrency(self, isl: float, osl: float) -> int:
        """Largest number of requests whose full context fits in the KV cache at once."""
        return int(self.memory.kv_cache_tokens // (isl + osl))

    def predict_closed_loop(self, isl: float, osl: float, concurrency: int,
                            frontend: bool = True) -> ClosedLoopPrediction:
        """Steady state with ``concurrency`` requests always in flight (a benchmark client's setting).

        Finds the arrival rate at which Little's law gives ``concurrency`` requests in the system,
        N = rate x (mean TTFT + (osl - 1) x TPOT), then reports mean TTFT, TPOT and throughputs.
        ``frontend=False`` leaves the engine's per-request front-end time out of the loop: for a burst of
        queued requests (offline throughput runs) it overlaps with GPU work instead of holding a slot.
        """
        mem = self.memory
        maxc = self.max_concurrency(isl, osl)
        fits = mem.kv_cache_tokens > 0 and concurrency <= maxc
        wide = self.plain(max(self.max_num_seqs, concurrency))
        # Let the KV check pass for an over-full request (predict reports fits=False instead of failing).
        wide.__dict__["memory"] = MemoryFit(*[getattr(mem, f) for f in MemoryFit.__slots__[:-1]], 10**12)
        if not frontend:
            wide.request_overhead = 0.0

        def in_system(rate: float) -> tuple[float, ReplicaState]:
            st = wide.evaluate([TrafficClass(rate, isl, osl)], 50.0)
            if not st.stable:
                return UNSTABLE, st
            return rate * (st.ttft_mean_s[0] + max(osl - 1, 0) * st.tpot_mean_s), st

        def below(rate: float) -> bool:
            return in_system(rate)[0] < concurrency

        rate = bisect_steps(below, *grow(below, 0.0, 1.0, 1e6), 60)
        st = in_system(rate)[1]
        if not st.stable:  # concurrency beyond what the engine can batch: report saturation
            rate, st = 0.0, wide.evaluate([TrafficClass(1e-9, isl, osl)], 50.0)
        gpus = self.gpus
        return ClosedLoopPrediction(
            ttft_ms=st.ttft_mean_s[0] * 1e3, tpot_ms=st.tpot_mean_s * 1e3, requests_per_s=rate,
            output_tokens_per_s=rate * osl, output_tokens_per_s_per_gpu=rate * osl / gpus,
            concurrency=concurrency, fits=fits, max_concurrency=maxc, kv_cache_tokens=mem.kv_cache_tokens,
        )

    def predict_static_batch(self, isl: float, osl: float, batch: int) -> BatchPrediction:
        """``batch`` prompts of ``isl`` tokens prefilled together (in steps of at most ``max_batched_tokens``
        tokens, whole prompts per step when they fit), then ``osl - 1`` decode steps of the whole batch with
        the context growing from isl to isl + osl (mean isl + osl / 2). No front-end time: these are the
        engines' offline latency benchmarks (gptSessionBenchmark, benchmark_latency)."""
        per_step = max(1, int(self.max_batched_tokens // isl)) if isl <= self.max_batched_tokens else 0
        t_pre = 0.0
        if per_step:
            full, rest = divmod(batch, per_step)
            if full:
                t_pre += full * self.iteration_s(0, 0, per_step * isl, 0, per_step)
            if rest:
                t_pre += self.iteration_s(0, 0, rest * isl, 0, rest)
        else:
            t_pre = batch * self.prefill_s(isl, 0, 0)
        t_dec = self.iteration_s(batch, isl + osl / 2) if osl > 1 else 0.0
        e2e = t_pre + max(osl - 1, 0) * t_dec
        fits = self.memory.kv_cache_tokens >= batch * (isl + osl)
        tput = batch * osl / e2e
        return BatchPrediction(t_pre * 1e3, t_dec * 1e3, e2e * 1e3, tput, tput / (self.gpus), batch, fits)

    def predict_open_loop(self, isl: float, osl: float, rate_rps: float) -> ClosedLoopPrediction:
        """Poisson arrivals at ``rate_rps`` (a serving benchmark's request rate): mean TTFT and TPOT."""
        st = self.evaluate([TrafficClass(rate_rps, isl, osl)], 50.0)
        mem = self.memory
        maxc = self.max_concurrency(isl, osl)
        conc = rate_rps * (st.ttft_mean_s[0] + max(osl - 1, 0) * st.tpot_mean_s) if st.stable else UNSTABLE
        return ClosedLoopPrediction(
            ttft_ms=st.ttft_mean_s[0] * 1e3, tpot_ms=st.tpot_mean_s * 1e3,
            requests_per_s=rate_rps if st.stable else 0.0,
            output_tokens_per_s=rate_rps * osl if st.stable else 0.0,
            output_tokens_per_s_per_gpu=rate_rps * osl / (self.gpus) if st.stable else 0.0,
            concurrency=int(math.ceil(conc)) if math.isfinite(conc) else 0, fits=st.stable,
            max_concurrency=maxc, kv_cache_tokens=mem.kv_cache_tokens)

    def predict_burst(self, isl: list[float] | tuple[float, ...], osl: list[float] | tuple[float, ...],
                      frontend: bool = False, streaming: bool = False) -> "BurstPrediction":
        """All requests (``isl[i]``, ``osl[i]``) queued at time 0 and served to the end, step by step, the way
        a continuous-batching engine does: admit in order while a slot (max_num_seqs) and KV room are free; a
        step carries prompt chunks (the token budget left, first come first served) only while admitted
        prompts have tokens left to prefill, so once they are all prefilled the steps are pure decode; a
        request leaves after its last token. Whether the running requests decode in a step that carries chunks
        follows the engine profile's ``prefill_schedule`` (docs/cost-model.md, "Bursts"): ``mixed`` (absent
        too) decodes them in the same step, the budget less one token each (vLLM V1's scheduler,
        vllm/v1/core/sched/scheduler.py; TensorRT-LLM's in-flight batching with chunked context);
        ``prefill_first`` runs the chunks alone, with the whole budget, and the running requests wait for the
        next step without prompt work (SGLang's Scheduler.get_next_batch_to_run runs a prefill batch first
        whenever one can be formed, and --enable-mixed-chunk is off by default,
        python/sglang/srt/server_args.py). KV admission follows the engine profile's ``kv_admission``:
        ``reserve`` (room for prompt and output, never evicts: TensorRT-LLM's guaranteed-no-evict) or
        ``on_demand`` (room for the prompt; when decode growth overflows the cache the newest requests are
        preempted and recomputed later: vLLM, SGLang). ``streaming``: the requests are served over the
        engine's HTTP front end, one streamed event per output token; with the engine profile's
        ``stream_tokens_per_s`` S a step that emits n tokens (one per decoding request, one per finished
        prompt) is delivered in no less than n / S (the front end is one serial server per replica: API server
        and detokeniser; docs/cost-model.md). Offline benchmarks (trtllm-bench) stream nothing. Deterministic;
        reports the makespan, throughputs, mean TTFT (queueing included) and mean TPOT, the statistic ``vllm
        bench serve`` prints (vllm/benchmarks/serve.py, calculate_metrics): the mean over the requests with
        more than one output token of (e2e - TTFT) / (output tokens - 1), TTFT the end of the step that
        finishes the prompt (a preempted request keeps its first) and e2e the end of its last token's step.
        This is the drain that steady-state formulas miss: as long requests finish last, the batch thins
        out."""
        n = len(isl)
        if n == 0 or len(osl) != n:
            raise ValueError("isl and osl must be non-empty and of equal length")
        cap = self.memory.kv_cache_tokens
        K = self.max_batched_tokens
        reserve = (self.engine.kv_admission or "on_demand") == "reserve"
        apart = self.engine.prefill_schedule == "prefill_first"
        fe = self.request_overhead if frontend else 0.0
        s_rate = self.engine.stream_tokens_per_s
        per_token = 1.0 / s_rate.value if streaming and s_rate is not None else 0.0
        queue = deque((float(isl[i]), float(osl[i]), i) for i in range(n))
        first = [-1.0] * n
        tpot = [0.0] * n
        kv_used = 0.0  # reserve: reserved tokens; on_demand: tokens held now
        # running: [prompt tokens left, prompt length, tokens generated since admission,
        # tokens still owed, index]
        running: list[list[float]] = []
        t = 0.0
        done = 0
        while done < n:
            while queue and len(running) < self.max_num_seqs:
                pi, oi, i = queue[0]
                need = pi + oi if reserve else pi
                if kv_used + need > cap and running:
                    break
                queue.popleft()
                running.append([pi, pi, 0.0, oi, float(i)])
                kv_used += need
            dec = [r for r in running if r[0] <= 0]
            if apart and len(dec) < len(running):  # prefill_first: prompt work pending, a prefill-only step
                dec = []
            b = len(dec)
            ctx = sum(r[1] + r[2] for r in dec) / b if b else 0.0
            budget = max(K - b, 0)
            p_tok, p_ctx, seqs, chunks = 0.0, 0.0, 0, []
            for r in running:
                if r[0] > 0 and budget > 0:
                    c = min(r[0], budget)
                    chunks.append((r, c))
                    p_ctx += (r[1] - r[0]) * c
                    p_tok += c
                    budget -= c
                    seqs += 1
            if b == 0 and p_tok == 0:
                raise ValueError("no progress: a request needs more KV cache than the replica has")
            step = self.iteration_s(b, ctx, p_tok, p_ctx / p_tok if p_tok else 0.0, max(seqs, 1))
            if per_token:
                emitted = b + sum(1 for r, c in chunks if r[0] <= c)
                step = max(step, emitted * per_token)
            t += step
            for r in dec:
                r[2] += 1
            for r, c in chunks:
                r[0] -= c
                if r[0] <= 0:  # the step that finishes a prompt emits the next token
                    r[2] += 1
                    i = int(r[4])
                    if first[i] < 0:
                        first[i] = t
            if not reserve:
                kv_used += b
            keep = []
            for r in running:
                if r[0] <= 0 and r[2] >= r[3]:
                    i = int(r[4])
                    o = float(osl[i])
                    tpot[i] = (t - first[i]) / (o - 1) if o > 1 else 0.0
                    kv_used -= (r[1] + r[3]) if reserve else (r[1] + r[2])
                    done += 1
                else:
                    keep.append(r)
            running = keep
            while not reserve and kv_used > cap and len(running) > 1:
                r = running.pop()  # preempt the newest: its KV is freed and recomputed on readmission
                kv_used -= r[1] + r[2] if r[0] <= 0 else r[1]
                queue.appendleft((r[1] + r[2], r[3] - r[2], int(r[4])))
        out_tok = float(sum(osl))
        in_tok = float(sum(isl))
        gpus = self.gpus
        multi = max(sum(1 for o in osl if o > 1), 1)
        return BurstPrediction(makespan_s=t, requests_per_s=n / t, output_tokens_per_s=out_tok / t,
                               output_tokens_per_s_per_gpu=out_tok / t / gpus,
                               total_tokens_per_s=(in_tok + out_tok) / t,
                               ttft_ms=1e3 * (sum(first) / n + fe), tpot_ms=1e3 * sum(tpot) / multi,
                               requests=n)
