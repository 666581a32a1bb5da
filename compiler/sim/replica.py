"""One serving replica: iteration-level continuous batching with chunked prefill (vLLM's scheduler,
simplified).

Every engine step (``start_step`` .. ``finish_step``):

1. Each decoding request produces one token. If the KV cache cannot hold one more token per decoding request,
   the most recently admitted running request is preempted (its KV freed; it goes back to the head of the
   waiting queue and later recomputes its prompt plus the tokens it had generated): vLLM's recompute policy.
2. The token budget left (``max_num_batched_tokens`` minus the decode batch) goes to prompt chunks: first to
   admitted requests whose prompt is partly computed, in admission order, then to waiting requests, first come
   first served, while fewer than ``max_num_seqs`` are running and the KV cache (less a 1 % watermark) can
   hold the whole prompt (reserved at admission). A head-of-queue request that does not fit blocks the queue.
3. The step lasts
   ``ReplicaModel.iteration_s(decode batch, mean decode context, prompt tokens, prompt context)``: the
   planner's own cost model. Several chunks in one step are passed as their total P with the
   prior context that gives the same attention work, sum(c x (ctx + c/2)) = P x (ctx_eq + P/(2m)) for m chunks
   (and m as ``prefill_seqs`` when the cost model takes it).
4. A request whose prompt completes emits its first token at the end of that step, then one token per step.

Prefix reuse (docs/prefix-caching.md): a replica with a prefix cache (``set_prefix``) keeps that many KV
tokens out of what requests may use; a request routed to it finds ``cached`` leading prompt tokens there
(replayed through the replica's LRU of the trace's block hashes; for shared system prompts, its group's
prefix, or with ``prompts_repeat`` its whole prompt, once the replica has served them before (the first
request of a group or prompt computes it: a cold cache); else the planned hit rate x its input length),
computes only the rest (with the cached tokens as prior context), holds KV only for what it computes and
generates, and decodes with its full context. With a host-memory tier (docs/kv-tiers.md) the cache has a
second level: a hit beyond the HBM LRU found in the host LRU (every block is written through to it) is
reloaded over PCIe before the request's first chunk, which lengthens the step that admits it by
``ReplicaModel.reload_s`` of those tokens.

Decoding requests are kept as aggregates so a step costs O(1) in the batch size: request i that started
decoding after step s_i has context c_i + k at step k (c_i = prompt - s_i), so the batch's total context is
sum(c_i) + n x k; completions sit in a heap keyed by the step in which the last token comes out.
"""
from __future__ import annotations

import inspect
import math
import weakref
from collections import deque
from heapq import heappop, heappush
from operator import attrgetter

import numpy as np

from trimtab.cost.model import ReplicaModel
from trimtab.spec.traces import BlockLRU

WATERMARK = 0.01  # share of KV blocks kept free at admission (vLLM's default watermark)


class Request:
    """One request's state and timestamps (seconds; -1.0 until they happen)."""

    __slots__ = ("rid", "w", "dep", "rep", "arrival", "isl", "osl", "prompt", "done", "gen", "start", "c",
                 "epoch", "t_sched", "t_first", "t_done", "preempted", "status", "cached", "row", "host")

    def __init__(self, rid: int, w: int, dep: int, arrival: float, isl: int, osl: int):
        self.rid, self.w, self.dep, self.arrival = rid, w, dep, arrival
        self.rep = -1
        self.isl, self.osl = isl, osl
        self.prompt = isl  # tokens to (re)compute before the next token comes out
        self.done = 0  # prompt tokens computed
        self.gen = 0  # output tokens emitted
        self.start = -1  # step after which it decodes (-1: not decoding)
        self.c = 0
        self.epoch = 0
        self.t_sched = self.t_first = self.t_done = -1.0
        self.preempted = 0
        # 0 in flight or done, 1 too long for the KV cache, 2 no route, 3 prompt beyond the context window
        self.status = 0
        self.cached = 0  # leading prompt tokens found in the replica's prefix cache
        self.host = 0  # of them, found only in its host-memory tier (reloaded at admission)
        self.row = -1  # trace row it replays (-1: drawn from the spec's distributions)


# A request's fields in ``__slots__`` order (tests/sim/test_parallel.py checks they are all of them): what a
# forked run sends back (``trimtab.sim.parallel``) and what a copy takes (``trimtab.sim.reuse.clone``)
request_fields = attrgetter(*Request.__slots__)


def unpack_request(t: tuple) -> Request:
    """A ``Request`` from its fields in ``__slots__`` order (``request_fields``)."""
    r = Request.__new__(Request)
    (r.rid, r.w, r.dep, r.rep, r.arrival, r.isl, r.osl, r.prompt, r.done, r.gen, r.start, r.c, r.epoch,
     r.t_sched, r.t_first, r.t_done, r.preempted, r.status, r.cached, r.row, r.host) = t
    return r


class PrefixCache:
    """A replica's prefix cache in simulation: ``hits`` per workload index (share of input tokens, used when
    ``hashes`` has no trace for the workload) and an LRU of the trace's block hashes
    (``trimtab.spec.traces.BlockLRU`` of the reserved size) replaying real hits. A host tier (``host_tokens``
    > 0): ``host`` per workload is the share of input tokens found only there; replayed hashes go through a
    second LRU of ``host_tokens``. ``sets``: per workload of shared system prompts, (groups, users per group,
    prefix tokens, prompts repeat) (``SimWorkload.prompt_set``); the cache holds every group's prefix (and
    prompt) it has served, as the planner reserves room for all of them."""

    __slots__ = ("hits", "hashes", "lru", "host", "host_lru", "sets", "seen")

    def __init__(self, reserved_tokens: int, hits: dict[int, float], hashes: dict[int, tuple] | None = None,
                 host: dict[int, float] | None = None, host_tokens: int = 0,
                 sets: dict[int, tuple[int, int, int, bool]] | None = None):
        self.hits = hits
        self.hashes = hashes or {}
        self.sets = sets or {}
        self.seen: set[tuple[int, int, int]] = set()  # (workload, group, user or -1 for the group's prefix)
        self.lru = BlockLRU(reserved_tokens)
        self.host = host or {}
        self.host_lru = BlockLRU(host_tokens) if host_tokens > 0 else None

    def cached(self, r: Request) -> int:
        """Leading tokens of ``r`` found in the cache (HBM or host); sets ``r.host`` to those found only in
        the host tier."""
        hs = self.hashes.get(r.w)
        if hs is not None and r.row >= 0:
            hbm = self.lru.serve(hs[r.row], r.isl)
            if self.host_lru is None:
                return hbm
            both = max(self.host_lru.serve(hs[r.row], r.isl), hbm)
            r.host = both - hbm
            return both
        ps = self.sets.get(r.w)
        if ps is not None and r.row >= 0:
            both = self._shared(r, ps)
        else:
            h = self.hits.get(r.w, 0.0)
            both = min(int(h * r.isl + 0.5), r.isl - 1) if h > 0 else 0
        hh = self.host.get(r.w, 0.0)
        if hh > 0:
            r.host = min(int(hh * r.isl + 0.5), both)
        return both

    def _shared(self, r: Request, ps: tuple[int, int, int, bool]) -> int:
        """Cached tokens of request ``r`` of a shared-prompt workload: its whole prompt but the last token if
        its user's prompt repeats and was served here before, else its group's prefix if that was, else none
        (and from now on both are)."""
        _, users, prefix, repeat = ps
        g, u = divmod(r.row, users)
        seen = self.seen
        if repeat:
            key = (r.w, g, u)
            if key in seen:
                return r.isl - 1 if r.isl > 1 else 0
            seen.add(key)
        key = (r.w, g, -1)
        if key in seen:
            return max(min(prefix, r.isl - 1), 0)
        seen.add(key)
        return 0


_SEQS_ARG: dict[type, bool] = {}  # cost model class -> whether its iteration_s takes ``prefill_seqs``
_LIN: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # cost model -> its ``Replica._linear`` table


def _takes_seqs(cls: type, step) -> bool:
    """Whether ``step`` (the ``iteration_s`` of a cost model of class ``cls``) takes ``prefill_seqs``: once
    per class (``inspect.signature`` costs more than the rest of a replica's set-up)."""
    got = _SEQS_ARG.get(cls)
    if got is None:
        got = _SEQS_ARG[cls] = "prefill_seqs" in inspect.signature(step).parameters
    return got


def _linear_table(model) -> dict:
    """The decode-step table ``Replica._linear`` fills (decode batch -> (T(n, 0), slope) or False), one per
    cost model: every replica of a deployment, and every simulation of the plan (its scenarios take the IR's
    cost models), shares it, so a batch's line is computed once (a function of the cost model alone). A model
    that cannot be weakly referenced gets a table of its own."""
    try:
        table = _LIN.get(model)
        if table is None:
            table = _LIN[model] = {}
        return table
    except TypeError:
        return {}


BULK_MIN = 48  # decode-only steps in a row from which ``Replica.coast`` takes them with numpy (``_bulk``) ...
BULK_MAX = 4096  # ... at most this many at a time


def _bulk(a: float, slope: float, C: int, n: int, csh: int, kv_pref: int, k: int, m: int, t: float,
          limit: float, top: float, busy: float, kv_area: float, batch_area: float):
    """Decode-only steps k .. k + m - 1 of ``n`` requests (``Replica.coast``) from ``t``, up to the first
    whose end is past ``limit`` or at or past ``top`` (taken: it is in flight): the same floats as one step at
    a time. Each step's time is a + slope x ((C + n j + csh) / n) (integers below 2**53, so numpy's float64
    division rounds as Python's does), and the clock and the statistics are running sums, which
    ``np.add.accumulate`` adds left to right as the loop does. Returns (i: the index of the last step taken,
    its start, its end, busy, KV area, batch area, its KV tokens)."""
    j = np.arange(k, k + m, dtype=np.int64)
    kv_dec = C + n * j
    dt = a + slope * ((kv_dec + csh) / n)
    ends = np.add.accumulate(np.concatenate(((t,), dt)))
    past = (ends[1:] > limit) | (ends[1:] >= top)
    i = int(past.argmax()) if past.any() else m - 1
    dt = dt[:i + 1]
    kv = kv_dec[:i + 1] + kv_pref
    busy = float(np.add.accumulate(np.concatenate(((busy,), dt)))[-1])
    kv_area = float(np.add.accumulate(np.concatenate(((kv_area,), kv * dt)))[-1])
    batch_area = float(np.add.accumulate(np.concatenate(((batch_area,), n * dt)))[-1])
    return i, float(ends[i]), float(ends[i + 1]), busy, kv_area, batch_area, int(kv[-1])


class Replica:
    __slots__ = ("dep", "index", "it", "cap", "admit_cap", "mns", "mbt", "k", "busy", "waiting", "prefilling",
                 "running", "dheap", "n_dec", "C", "kv_pref", "sched", "p_step", "t0",
                 "busy_s", "prefill_s", "kv_area", "kv_max", "batch_area", "preemptions", "steps", "done",
                 "tl", "tl_dt", "seqs_arg", "lin", "pfx", "Csh", "hbm", "tier", "reload", "ahead")

    def __init__(self, dep: int, index: int, model: ReplicaModel, timeline: list | None = None,
                 timeline_dt: float = 0.0):
        self.dep, self.index = dep, index
        self.it = getattr(model, "step_s", model.iteration_s)  # the fastest callable (stand-ins: theirs)
        # A cost model whose step time takes the number of prompts in the step (``prefill_seqs``) gets it.
        self.seqs_arg = _takes_seqs(type(model), model.iteration_s)
        # decode batch -> linear step time
        self.lin: dict[int, tuple[float, float] | bool] = _linear_table(model)
        # KV tier (docs/kv-tiers.md): the replica holds HBM plus tier tokens; each step's time takes the share
        # of its KV in use beyond HBM (``remote_share``), as the cost model's ``evaluate`` does at its steady
        # state.
        self.hbm = model.memory.kv_cache_tokens
        self.tier = getattr(model, "kv_tier", None) is not None  # (stand-in models in tests have none)
        # the prefix cache's host tier: seconds to reload one token's KV over PCIe (0 without one)
        self.reload = model.reload_s(1.0) if getattr(model, "prefix_tier", None) is not None else 0.0
        self.cap = getattr(model, "kv_capacity_tokens", self.hbm)
        self.admit_cap = self.cap * (1.0 - WATERMARK)
        self.mns = model.max_num_seqs
        self.mbt = model.max_batched_tokens
        # Async scheduling (engine ``async_scheduling``): the engine forms step n+1's batch while step n runs,
        # so a request that arrives during step n is first scheduled into step n+2 (docs/simulator.md).
        eng = getattr(model, "engine", None)
        self.ahead = bool(getattr(eng, "async_scheduling", None))
        self.k = 0
        self.busy = False
        self.waiting: deque[Request] = deque()
        self.prefilling: deque[Request] = deque()
        self.running: dict[int, Request] = {}  # admission order: the newest is preempted first
        self.dheap: list = []
        self.n_dec = 0
        self.C = 0
        self.kv_pref = 0  # KV reserved by admitted prompts not yet complete
        self.sched: list = []
        self.p_step = 0
        self.t0 = 0.0
        self.busy_s = self.prefill_s = self.kv_area = self.batch_area = 0.0
        self.kv_max = 0
        self.preemptions = self.steps = 0
        self.done: list[Request] = []
        # Timeline bins: [busy seconds, max waiting, max KV tokens] per bin of width timeline_dt.
        self.tl = timeline
        self.tl_dt = timeline_dt
        self.pfx: PrefixCache | None = None
        self.Csh = 0  # cached prompt tokens of the decoding requests: context they attend to, not their KV

    def set_prefix(self, reserved_tokens: int, cache: PrefixCache) -> None:
        """Keep ``reserved_tokens`` of the KV cache for the prefix cache ``cache``
        (docs/prefix-caching.md)."""
        self.cap -= reserved_tokens
        self.admit_cap = self.cap * (1.0 - WATERMARK)
        self.pfx = cache

    # ------------------------------------------------------------------ admission
    def enqueue(self, r: Request) -> None:
        r.rep = self.index
        if self.pfx is not None:
            r.cached = self.pfx.cached(r)
            r.prompt = r.isl - r.cached
        self.waiting.append(r)

    def _preempt(self) -> None:
        """Free the newest running request's KV; it waits at the head of the queue to recompute."""
        _, r = self.running.popitem()
        if r.start >= 0:
            gen = r.gen + (self.k - r.start - 1)
            self.n_dec -= 1
            self.C -= r.c
            self.Csh -= r.cached
            r.epoch += 1  # its completion entry in the heap is now stale
            r.start = -1
            r.gen = gen
        else:
            self.prefilling.remove(r)
            self.kv_pref -= r.prompt
        r.prompt = r.isl - r.cached + r.gen
        r.done = 0
        r.preempted += 1
        self.preemptions += 1
        self.waiting.appendleft(r)

    # ------------------------------------------------------------------ one step
    def _linear(self, n: int):
        """(T(n, 0), slope) when a decode-only step of ``n`` requests is linear in the context in the cost
        model (it is: weights and overheads fixed, KV traffic and attention FLOPs proportional to the
        context), checked at four contexts; then T(n, ctx) = T(n, 0) + slope x ctx, exactly, without a call
        per step. False when it is not linear (a future cost model): every step calls it."""
        t0 = self.it(n, 0.0, 0.0, 0.0)
        slope = (self.it(n, 1024.0, 0.0, 0.0) - t0) / 1024.0
        for ctx in (16384.0, 262144.0):
            t = self.it(n, ctx, 0.0, 0.0)
            if abs(t0 + slope * ctx - t) > 1e-9 * t:
                return False
        return (t0, slope)

    def line(self, n: int):
        """The decode batch's line (``_linear``) from the table the replicas of one cost model share, filled
        on first use (what ``start_step`` and ``coast`` inline on their hot paths)."""
        ab = self.lin.get(n)
        if ab is None:
            ab = self.lin[n] = self._linear(n)
        return ab

    def start_step(self, t: float) -> float:
        """Schedule the next step at time ``t``; returns its end time, or -1.0 when there is nothing to do."""
        k = self.k
        while self.n_dec and self.C + self.n_dec * (k + 1) + self.kv_pref > self.cap:
            self._preempt()
        n = self.n_dec
        if not self.waiting and not self.prefilling and not self.tier:
            # A decode-only step (most steps): what the general path below computes when nothing is waiting or
            # prefilling, the same operations in the same order, without its loops.
            if n == 0:
                self.busy = False
                return -1.0
            self.sched.clear()
            kv_dec = self.C + n * k
            ab = self.lin.get(n)
            if ab is None:
                ab = self.lin[n] = self._linear(n)
            ctx = kv_dec + self.Csh
            dt = ab[0] + ab[1] * (ctx / n) if ab else self.it(n, ctx / n, 0.0, 0.0)
            return self._begin(t, dt, n, 0, kv_dec + self.kv_pref)
        kv_dec = self.C + n * k
        budget = self.mbt - n
        sched = self.sched
        sched.clear()
        ptok = 0
        attn = 0.0
        reload = 0  # host-tier tokens of the requests admitted this step, reloaded before their first chunk
        if budget > 0:
            for r in self.prefilling:
                c = r.prompt - r.done
                if c > budget:
                    c = budget
                sched.append((r, c))
                attn += c * (r.cached + r.done + c * 0.5)
                ptok += c
                budget -= c
                if budget <= 0:
                    break
            waiting = self.waiting
            running = self.running
            # async scheduling: only requests that had arrived when the step that just ended began (its
            # successor's batch was formed then); an engine with nothing else to run schedules at once
            ready = self.t0 if self.ahead and self.busy and (n or sched) else math.inf
            while budget > 0 and waiting and len(running) < self.mns:
                r = waiting[0]
                if r.arrival > ready:
                    break
                if running and kv_dec + n + self.kv_pref + r.prompt > self.admit_cap:
                    break
                waiting.popleft()
                running[r.rid] = r
                self.prefilling.append(r)
                self.kv_pref += r.prompt
                if r.t_sched < 0:
                    r.t_sched = t
                reload += r.host
                c = r.prompt if r.prompt < budget else budget
                sched.append((r, c))
                attn += c * (r.cached + c * 0.5)
                ptok += c
                budget -= c
        if n == 0 and ptok == 0:
            self.busy = False
            return -1.0
        # the share of the KV held this step (decoding contexts, prompt tokens computed) in the tier
        if self.tier:
            kv = kv_dec + sum(r.done for r in self.prefilling)
            r = (kv - self.hbm) / kv if kv > self.hbm else 0.0
            ctx = (kv_dec + self.Csh) / n if n else 0.0
            if ptok == 0:
                dt = self.it(n, ctx, 0.0, 0.0, 1.0, r)
            else:
                m = len(sched)
                dt = self.it(n, ctx, ptok, attn / ptok - ptok * 0.5 / m, m, r)
        elif ptok == 0:
            ab = self.lin.get(n)
            if ab is None:
                ab = self.lin[n] = self._linear(n)
            # attention context: own KV plus the cached prefixes read from the prefix cache
            ctx = kv_dec + self.Csh
            dt = ab[0] + ab[1] * (ctx / n) if ab else self.it(n, ctx / n, 0.0, 0.0)
        elif self.seqs_arg:
            m = len(sched)
            dt = self.it(n, (kv_dec + self.Csh) / n if n else 0.0, ptok, attn / ptok - ptok * 0.5 / m, m)
        else:
            dt = self.it(n, (kv_dec + self.Csh) / n if n else 0.0, ptok, attn / ptok - ptok * 0.5)
        if reload:
            dt += reload * self.reload
        return self._begin(t, dt, n, ptok, kv_dec + self.kv_pref)

    def coast(self, t: float, limit: float, top: float) -> tuple[float, float | None]:
        """Run decode-only steps back to back from the step in flight, which ends at ``t``, while nothing
        waits or prefills (no arrival comes before ``limit``) and no preemption is due: what ``finish_step``
        then ``start_step`` and ``_begin`` compute for such steps (completions included), the same float
        operations in the same order (the same times and statistics to the last bit), without their calls and
        branches and without the event heap. Most steps of a run are such stretches (docs/simulator.md).

        A step whose end is at most ``limit`` (the next arrival, the drain limit) and before ``top`` (the next
        event of another replica) is taken at once, as the event loop would take it next. Returns (end of the
        last step taken, end of the step now in flight or -1.0 when the replica went idle), or (``t``, None)
        when the step ending at ``t`` needs the general path (``finish_step``). A step in flight at the end
        that was not taken is for the caller to queue."""
        n = self.n_dec
        if self.sched or self.p_step or self.waiting or self.prefilling or self.tier or not n:
            return t, None
        lin = self.lin
        ab = lin.get(n)
        if not ab:
            return t, None
        a, slope = ab
        heap = self.dheap
        k = self.k
        C, csh, kv_pref, cap = self.C, self.Csh, self.kv_pref, self.cap
        busy, kv_area, batch_area, kv_max, steps = (self.busy_s, self.kv_area, self.batch_area, self.kv_max,
                                                    self.steps)
        tl, tl_dt = self.tl, self.tl_dt
        nbins = len(tl) if tl is not None else 0
        t_next: float | None = None
        t0 = self.t0
        lim = limit if limit < top else top
        # The batch's line (a, slope) and whether to try numpy change only when a completion changes the
        # batch: ``fresh`` then. A try that fails keeps failing until then (the clock only gets later, the
        # next completion and preemption stay where they are), so it is not repeated every step; either path
        # gives the same floats.
        fresh = True
        try_bulk = False
        while True:
            # finish_step of the decode-only step k, ending at t
            if heap and heap[0][0] <= k:  # completions: finish_step's own loop, on the state written back
                self.n_dec, self.C, self.Csh = n, C, csh
                self._retire(k, t)
                n, C, csh = self.n_dec, self.C, self.Csh
                fresh = True
            k += 1
            if not n:
                t_next = -1.0
                break
            if C + n * (k + 1) + kv_pref > cap:  # start_step would preempt: its general path does
                break
            if fresh:
                ab = lin.get(n)
                if ab is None:
                    ab = lin[n] = self._linear(n)
                if not ab:
                    break
                a, slope = ab
                try_bulk = not nbins
                fresh = False
            if try_bulk:
                # The steps from k on that nothing but the clock separates: before the next completion (heap)
                # and the next preemption; worth numpy when there are BULK_MIN or more (``_bulk``)
                if lim - t >= BULK_MIN * a:  # (each step takes a or more: room for BULK_MIN of them)
                    last = (cap - C - kv_pref) // n - 1  # the last step start_step would not preempt before
                    if heap and heap[0][0] < last:
                        last = heap[0][0]
                    m = last - k + 1
                    if m >= BULK_MIN:
                        dt0 = a + slope * ((C + n * k + csh) / n)
                        room = lim - t
                        # (step times grow with j: the clock passes room by then)
                        if room < math.inf and dt0 > 0:
                            m = min(m, int(room / dt0) + 2)
                        if m >= BULK_MIN:
                            m = min(m, BULK_MAX)
                            i, t, t_end, busy, kv_area, batch_area, kv = _bulk(
                                a, slope, C, n, csh, kv_pref, k, m, t, limit, top, busy, kv_area, batch_area)
                            steps += i + 1
                            if kv > kv_max:
                                kv_max = kv
                            k += i
                            if t_end > limit or t_end >= top:
                                t0 = t
                                t_next = t_end  # in flight: the caller queues it
                                break
                            t0, t = t, t_end
                            continue
                try_bulk = False
            kv_dec = C + n * k
            dt = a + slope * ((kv_dec + csh) / n)
            kv = kv_dec + kv_pref
            steps += 1
            busy += dt
            kv_area += kv * dt
            batch_area += n * dt
            if kv > kv_max:
                kv_max = kv
            if nbins:
                b = int(t / tl_dt)
                if b < nbins:
                    row = tl[b]
                    row[0] += dt
                    if kv > row[2]:
                        row[2] = kv
            t0, t_end = t, t + dt
            if t_end > limit or t_end >= top:
                t_next = t_end  # in flight: the caller queues it
                break
            t = t_end
        self.k, self.n_dec, self.C, self.Csh = k, n, C, csh
        self.busy_s, self.kv_area, self.batch_area, self.kv_max, self.steps = (busy, kv_area, batch_area,
                                                                               kv_max, steps)
        if t_next is None:  # finished through ``t``; the next step needs start_step's general path
            return t, self.start_step(t)
        self.t0 = t0
        # idle, as start_step leaves it with nothing to do (its ``sched`` is empty here already)
        if t_next < 0:
            self.busy = False
        return t, t_next

    def _begin(self, t: float, dt: float, n: int, ptok: int, kv: int) -> float:
        """Start a step of ``dt`` seconds at ``t`` with ``n`` requests decoding, ``ptok`` prompt tokens and
        ``kv`` KV tokens held: the step's state and the replica's statistics and timeline (every kind of
        replica)."""
        self.busy = True
        self.steps += 1
        self.p_step = ptok
        self.t0 = t
        self.busy_s += dt
        self.kv_area += kv * dt
        self.batch_area += n * dt
        if kv > self.kv_max:
            self.kv_max = kv
        if ptok:
            self.prefill_s += dt
        tl = self.tl
        if tl is not None:
            b = int(t / self.tl_dt)
            if b < len(tl):
                row = tl[b]
                row[0] += dt
                q = len(self.waiting)
                if q > row[1]:
                    row[1] = q
                if kv > row[2]:
                    row[2] = kv
        return t + dt

    def finish_step(self, t: float) -> None:
        """End of the step started last: emit tokens, retire finished requests."""
        s = self.k
        done = self.done
        first_tokens = 0
        if self.sched:
            pref = self.prefilling
            for r, c in self.sched:
                r.done += c
            while pref and pref[0].done >= pref[0].prompt:
                r = pref.popleft()
                self.kv_pref -= r.prompt
                r.gen += 1
                first_tokens += 1
                if r.t_first < 0:
                    r.t_first = t
                if r.gen >= r.osl:
                    r.t_done = t
                    del self.running[r.rid]
                    done.append(r)
                else:
                    r.start = s
                    r.c = r.prompt - s
                    self.n_dec += 1
                    self.C += r.c
                    self.Csh += r.cached
                    heappush(self.dheap, (s + r.osl - r.gen, r.rid, r.epoch, r))
        self._retire(s, t)
        self.k = s + 1

    def _retire(self, s: int, t: float) -> None:
        """The decoding requests whose last token comes out in step ``s`` (ended at ``t``) are done."""
        heap = self.dheap
        done = self.done
        while heap and heap[0][0] <= s:
            _, _, epoch, r = heappop(heap)
            if epoch != r.epoch:
                continue
            r.gen = r.osl
            r.t_done = t
            self.n_dec -= 1
            self.C -= r.c
            self.Csh -= r.cached
            r.start = -1
            del self.running[r.rid]
            done.append(r)
