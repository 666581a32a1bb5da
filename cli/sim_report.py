"""Presenting a simulation: rich tables, JSON, matplotlib PNGs, and a progress bar for long runs.

Only presentation here; the numbers come from ``trimtab.sim.metrics``.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from trimtab.cli.common import steps
from trimtab.sim.metrics import SimResult
from trimtab.cli.plots import pyplot

PROGRESS_MIN_REQUESTS = 50_000  # show a progress bar from this many simulated requests (on a terminal)


def _ms(v: float) -> str:
    if v is None or not math.isfinite(v):
        return "-"
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def workload_table(res: SimResult, title: str = "simulated workloads") -> Table:
    t = Table(title=title)
    cols = ("workload", "requests", "attainment", "TTFT p50", "p90", "p99", "SLO", "TPOT p50", "p99 ", "SLO ",
            "E2E p50", "p99  ", "queue", "goodput rps", "preempt", "met")
    for c in cols:
        t.add_column(c, justify="left" if c == "workload" else "right")
    for w in res.workloads.values():
        t.add_row(w.name, f"{w.requests:,}", f"{w.attainment:.2%} / {w.target:.0%}",
                  _ms(w.ttft_ms["p50"]), _ms(w.ttft_ms["p90"]), _ms(w.ttft_ms["p99"]), f"{w.ttft_slo_ms:g}",
                  _ms(w.tpot_ms["p50"]), _ms(w.tpot_ms["p99"]), f"{w.tpot_slo_ms:g}",
                  _ms(w.e2e_ms["p50"]), _ms(w.e2e_ms["p99"]), _ms(w.queue_ms["mean"]), f"{w.goodput_rps:.2f}",
                  str(w.preemptions), "[green]yes[/]" if w.passed else "[red]NO[/]")
    t.caption = "milliseconds; attainment = share meeting both TTFT and TPOT / target (the SLO percentile)"
    return t


def deployment_table(res: SimResult) -> Table:
    t = Table(title="simulated deployments")
    for c in ("deployment", "replicas", "requests", "attainment", "busy", "prefill util", "decode batch",
              "KV mean", "KV max", "preempt", "queue ms"):
        t.add_column(c, justify="left" if c == "deployment" else "right")
    for d in res.deployments.values():
        att = "-" if not math.isfinite(d.attainment) else f"{d.attainment:.2%}"
        t.add_row(d.name, str(d.replicas), f"{d.requests:,}", att, f"{d.utilization:.0%}",
                  f"{d.prefill_utilization:.0%}", f"{d.decode_batch:.1f}", f"{d.kv_mean:.0%}",
                  f"{d.kv_max:.0%}", str(d.preemptions), _ms(d.queue_ms_mean))
    return t


def summary_line(res: SimResult) -> str:
    rate = res.requests / res.wall_s if res.wall_s > 0 else 0.0
    return (f"simulated {res.requests:,} requests over {res.duration_s:,.0f} s of arrivals (seed {res.seed}, "
            f"measured after {res.measured_from_s:,.0f} s), {res.steps:,} engine steps, in "
            f"{res.wall_s:.2f} s wall ({rate:,.0f} requests/s)"
            + ("; stopped before every request finished" if res.stopped_early else ""))


@contextmanager
def progress_bar(console: Console, requests: int | None):
    """Yields a ``progress(fraction)`` callback for a bar on a terminal, or None: a short run, or not a
    terminal (CI logs), where one line says the simulation started (``trimtab.cli.common.steps``). None keeps
    the seeds running side by side (``trimtab.sim.validate.simulate_seeds`` runs them one after another to
    drive a bar)."""
    if not console.is_terminal:
        with steps(console, "simulating") as say:
            say(f"{requests:,} requests" if requests is not None else "the plan's requests")
            yield None
        return
    if requests is not None and requests < PROGRESS_MIN_REQUESTS:
        yield None
        return

    with Progress(TextColumn("simulating"), BarColumn(), TextColumn("{task.percentage:>3.0f}% of arrivals"),
                  TimeElapsedColumn(), console=console, transient=True) as prog:
        task = prog.add_task("sim", total=1.0)
        yield lambda f: prog.update(task, completed=f)


def write_plots(res: SimResult, folder: str | Path) -> list[Path]:
    """latency_cdf_<workload>.png (TTFT, TPOT, E2E CDFs with the SLO targets) and timeline.png (per
    deployment: busy share, waiting requests, KV occupancy over time). Returns the files written."""
    plt = pyplot()

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for name, (tt, tp, ee) in res.samples.items():
        w = res.workloads[name]
        fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
        for ax, x, label, slo in ((axes[0], tt, "TTFT (ms)", w.ttft_slo_ms),
                                  (axes[1], tp, "TPOT (ms)", w.tpot_slo_ms),
                                  (axes[2], ee, "end-to-end (ms)", None)):
            xs = np.sort(x[np.isfinite(x)]) * 1e3
            if len(xs):
                ax.plot(xs, np.arange(1, len(xs) + 1) / len(x), lw=1.5)
            if slo is not None:
                ax.axvline(slo, color="red", ls="--", lw=1, label=f"SLO {slo:g} ms")
                ax.legend(loc="lower right")
            ax.axhline(w.target, color="grey", ls=":", lw=1)
            ax.set_xlabel(label)
            ax.set_ylim(0, 1.01)
            ax.grid(alpha=0.3)
        axes[0].set_ylabel("share of requests")
        fig.suptitle(f"{name}: SLO attainment {w.attainment:.2%} (target {w.target:.0%}), "
                     f"{w.requests:,} requests")
        fig.tight_layout()
        p = folder / f"latency_cdf_{name}.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        files.append(p)
    if res.timeline:
        fig, axes = plt.subplots(3, 1, figsize=(11, 8), sharex=True)
        for name, tl in res.timeline.items():
            t = (np.arange(len(tl)) + 0.5) * res.timeline_dt
            keep = t <= res.end_s + res.timeline_dt
            axes[0].plot(t[keep], np.minimum(tl[keep, 0], 1.0), label=name, lw=1)
            axes[1].plot(t[keep], tl[keep, 1], label=name, lw=1)
            axes[2].plot(t[keep], tl[keep, 2], label=name, lw=1)
        axes[0].set_ylabel("busy share")
        axes[1].set_ylabel("waiting requests (max)")
        axes[2].set_ylabel("KV occupancy (max)")
        axes[2].set_xlabel("simulated time (s)")
        for ax in axes:
            ax.axvline(res.measured_from_s, color="grey", ls=":", lw=1)
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=7, loc="upper right")
        fig.tight_layout()
        p = folder / "timeline.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        files.append(p)
    return files
