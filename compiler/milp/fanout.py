"""Candidate generation across processes, one workload per task, merged in a fixed order.

Entry point: ``build_split(ir, build, jobs) -> CandidateSet | None`` (``None``: build serially instead).

Candidate generation is independent per workload: every candidate, pruning reason, zero-load best and P/D
candidate belongs to one workload, and dominance compares candidates of one workload only. So the set built
for each workload alone (``build`` on the IR with just that workload), merged the way ``build_candidates``
orders its output (candidates, pruned entries and P/D candidates by id with a stable sort; bests in workload
order), is the set built for all at once, byte for byte, whatever the number of processes.

Processes are forked (the IR is inherited, not pickled); only specs with enough work use them
(``MIN_WORK`` workload x GPU-type pairs), so small specs and the test suite stay in one process.
``TRIMTAB_JOBS`` sets the number of processes (default: the CPUs this process may use; 1 turns it off).
Specs with LoRA tenants (shared adapters across workloads) are built serially, and so are specs that may
borrow KV (``defaults.kv_tiers: experimental-live``: a borrower's size depends on the spare HBM of other
workloads' shapes).
"""
from __future__ import annotations

import multiprocessing
from dataclasses import fields, replace

from trimtab.ir.model import ProblemIR
from trimtab.util.jobs import fork_map, jobs_default
from trimtab.deployment.shape import CandidateSet

MIN_WORK = 40  # workload x GPU-type pairs below which forking costs more than it saves


def build_split(ir: ProblemIR, build, jobs: int | None = None):
    """``build`` (``build_candidates`` with serial building forced) run per workload in ``jobs`` processes and
    merged; None when one process is better (one job, little work, no fork, LoRA tenants)."""
    jobs = jobs_default() if jobs is None else jobs
    n = len(ir.workloads)
    if (jobs <= 1 or n < 2 or n * len(ir.gpus) < MIN_WORK or getattr(ir, "lora", None) is not None
            or getattr(ir, "kv_tiers", "off") == "experimental-live"  # KV borrowing: lenders of any workload
            or "fork" not in multiprocessing.get_all_start_methods() or not _mergeable()):
        return None
    # one workload at a time: their builds differ widely in cost
    return merge(fork_map(lambda w: build(replace(ir, workloads=(w,))), list(ir.workloads), 2, jobs, 1))


MERGED = ("candidates", "pruned", "best", "pd_memo")  # CandidateSet fields merge knows how to order


def _mergeable() -> bool:
    # a new field: build serially until merged here
    return all(f.name in MERGED for f in fields(CandidateSet))


def merge(parts):
    """Per-workload ``CandidateSet``s (in workload order) -> one, ordered as
    ``build_candidates`` orders it."""
    key = (lambda x: x.id)
    # (by id: the set puts its unified candidates first, then its P/D sides, each kind in this order)
    out = {"candidates": tuple(sorted((c for p in parts for c in p.candidates), key=key)),
           "pruned": tuple(sorted((x for p in parts for x in p.pruned), key=key)),
           "best": tuple(b for p in parts for b in p.best)}
    # (entries by workload: the parts' are disjoint; sent back from the workers for later rebuilds here)
    out["pd_memo"] = {k: v for p in parts for k, v in getattr(p, "pd_memo", {}).items()}
    return CandidateSet(**out)
