"""Simulating prefill/decode pairs: a prefill queue, the KV hand-off, a decode queue.

A request routed to a (prefill, decode) pair is prefilled on a replica of the prefill deployment
(``least_request``; an ordinary ``Replica`` serving a one-token proxy of it: the prompt and the first token),
then its KV moves to the decode deployment for ``tokens x kv_bytes_per_token / bandwidth`` seconds (the
narrower NIC share of the two replicas, ``trimtab.cost.transfer.transfer_s``; for a co-located pair the GPUs'
links inside the node); its first token is delivered when the KV lands, so the hand-off counts in TTFT as the
planner counts it. A ``DecodeReplica`` of the decode deployment (``least_request``, drawn apart) admits it
straight into its decode batch (no prompt to compute) while ``max_num_seqs`` and its KV cache allow, and emits
one token per step; steps are decode-only (``ReplicaModel.iteration_s(batch, context)``).

Simplifications (docs/simulator.md): transfers do not contend for the links (the planner keeps them under
``trimtab.ir.topology.LINK_UTIL`` of each NIC); a decode replica that must preempt re-admits the request later
without recomputing its KV. A co-located pair's request goes to the least-loaded decode replica of the prefill
replica's own group (``PairTarget.group``). A request counts against the prefill deployment when it misses
TTFT and against the decode deployment otherwise (``worst_deployment`` is then the side to derate).
"""
from __future__ import annotations

from heapq import heappush

from trimtab.sim.engine import EventQueue, Simulation, least_request, route_base
from trimtab.sim.replica import Replica, Request


class DecodeReplica(Replica):
    """A replica that only decodes: requests arrive with their prompt's KV and one token already out."""

    __slots__ = ()

    def enqueue(self, r: Request) -> None:
        r.rep = self.index
        self.waiting.append(r)

    def start_step(self, t: float) -> float:
        k = self.k
        while self.n_dec and self.C + self.n_dec * (k + 1) > self.cap:
            self._preempt()
        waiting, running = self.waiting, self.running
        while waiting and len(running) < self.mns:
            r = waiting[0]
            if running and self.C + self.n_dec * (k + 1) + r.prompt + 1 > self.admit_cap:
                break
            waiting.popleft()
            running[r.rid] = r
            if r.t_sched < 0:
                r.t_sched = t
            r.start = k - 1  # decodes from step k on, with context prompt + 1 at step k
            r.c = r.prompt - (k - 1)
            self.n_dec += 1
            self.C += r.c
            heappush(self.dheap, (k - 1 + r.osl - r.gen, r.rid, r.epoch, r))
        n = self.n_dec
        self.sched.clear()
        if n == 0:
            self.busy = False
            return -1.0
        kv = self.C + n * k
        ab = self.lin.get(n)
        if ab is None:
            ab = self.lin[n] = self._linear(n)
        dt = ab[0] + ab[1] * (kv / n) if ab else self.it(n, kv / n, 0.0, 0.0)
        return self._begin(t, dt, n, 0, kv)

    def _preempt(self) -> None:
        """Free the newest request's KV; it waits at the head of the queue (its KV is not recomputed)."""
        _, r = self.running.popitem()
        r.gen = r.gen + (self.k - r.start - 1)
        self.n_dec -= 1
        self.C -= r.c
        r.epoch += 1
        r.start = -1
        r.prompt = r.isl + r.gen - 1
        r.preempted += 1
        self.preemptions += 1
        self.waiting.appendleft(r)


class DisaggSimulation(Simulation):
    """``Simulation`` with P/D pairs: route targets >= len(deployments) are pairs (``Scenario.pairs``)."""

    replicas_apart = False  # a prefill replica's step end hands KV to a decode replica

    def __init__(self, scenario, seed=0, requests=None, duration_s=None, timeline=True, cache=None, only=None,
                 counts=None):
        super().__init__(scenario, seed, requests, duration_s, timeline, cache, only, counts)
        for di, d in enumerate(scenario.deployments):
            if d.view.role == "decode":
                self.replicas[di] = [DecodeReplica(di, i, d.model, r.tl, r.tl_dt)
                                     for i, r in enumerate(self.replicas[di])]

    def _prepare(self) -> None:
        super()._prepare()
        self._caps = [d.model.memory.kv_cache_tokens for d in self.sc.deployments]
        self._proxies: dict[int, tuple[Request, int]] = {}  # rid -> (real request, pair index)
        self._seen_done: dict[int, int] = {}
        self._route_decode = route_base(self.seed, 1)  # the decode side's router draws apart from prefill's

    def _base_run(self, order: list[int]) -> bool:
        """A unified deployment's run (apart from the pairs: ``_run_split``) is the base class's: its arrivals
        are admitted (``_on_arrival``'s first branch) and its steps taken (``_on_event``'s) as there."""
        d = self._dep[order[0]] if order else -1
        return 0 <= d < len(self.sc.deployments) and self.sc.deployments[d].view.role == "unified"

    def _on_event(self, t: float, item) -> None:
        """A step end, or (a tuple) a request's KV landing on the decode side of its pair."""
        sc, replicas = self.sc, self.replicas
        if isinstance(item, tuple):  # KV landed on the decode side
            r, dd, lo, hi = item
            r.t_first = t
            r.gen = 1
            if r.osl <= 1:
                r.t_done = t
                return
            rep = least_request(replicas[dd][lo:hi] or replicas[dd], self._route_decode + r.rid)
            rep.enqueue(r)
            self._kick(rep, t)
            return
        rep = item
        if sc.deployments[rep.dep].view.role != "prefill":
            # a unified or decode replica: nothing to hand over, the base event (with its fast paths) is the
            # same
            super()._on_event(t, rep)
            return
        rep.finish_step(t)
        done = rep.done
        k0 = self._seen_done.get(id(rep), 0)
        if len(done) > k0 and sc.deployments[rep.dep].view.role == "prefill":
            pairs = sc.pairs
            for p in done[k0:]:
                real, pi = self._proxies.pop(p.rid)
                real.t_sched = p.t_sched
                real.preempted += p.preempted
                dd = pairs[pi][1]
                grp = getattr(pairs[pi], "group", None)
                if grp:  # co-located: a decode replica of the prefill replica's own group
                    g = rep.index // grp[0]
                    lo, hi = g * grp[1], (g + 1) * grp[1]
                else:
                    lo, hi = 0, len(replicas[dd])
                heappush(self.events.heap, (t + real.isl * sc.pair_xfer_s_per_token[pi],
                                            next(self.events.seq), (real, dd, lo, hi)))
            done.clear()  # proxies: the real requests are counted from reqs
        self._seen_done[id(rep)] = len(done)
        self._next_step(rep, t)

    def _on_arrival(self, i: int, t: float) -> None:
        """Arrival ``i``: targets past the deployments are pairs; a pair request is prefilled as a one-token
        proxy."""
        sc, replicas, caps = self.sc, self.replicas, self._caps
        d = self._dep[i]
        nd = len(sc.deployments)
        pi = d - nd if d >= nd else -1
        r = Request(i, self._ws[i], sc.pairs[pi][0] if pi >= 0 else d, t, self._isl[i], self._osl[i])
        self.requests.append(r)
        if pi < 0:
            self._admit(r, d, caps[d] if d >= 0 else 0, t)
            return
        pd, dd = sc.pairs[pi]
        if not replicas[pd] or not replicas[dd]:
            r.status = 2
            return
        if r.isl + 1 > caps[pd] or r.isl + r.osl > caps[dd]:
            r.status = 1
            return
        self._proxies[r.rid] = (r, pi)
        rep = least_request(replicas[pd], self._route + r.rid)
        rep.enqueue(Request(r.rid, r.w, pd, t, r.isl, 1))
        self._kick(rep, t)

    def _after_run(self) -> None:
        """Attribute each pair request to the side at fault: prefill when it missed TTFT, else decode."""
        ttft_slo = [w.ttft_s for w in self.sc.workloads]
        pairs = self.sc.pairs
        nd, dep = len(self.sc.deployments), self._dep
        for r in self.requests:
            # (a pair request's target is its pair's index past the deployments; one that was never
            # prefilled has no first token)
            pi = dep[r.rid] - nd
            if pi >= 0 and r.t_first >= 0 and r.t_first - r.arrival <= ttft_slo[r.w]:
                r.dep = pairs[pi][1]


