"""The one way the CLI reaches matplotlib: headless, and optional (the `plots` extra), so that the library and
the commands without ``--plot`` never need it."""
from __future__ import annotations

from trimtab.errors import InputError, Problem


def pyplot(option: str = "--plot"):
    """matplotlib's pyplot on the Agg backend; a missing matplotlib is the user's option that cannot be served
    (exit 1, naming the option and the extra that brings it), never a traceback."""
    try:
        import matplotlib
    except ImportError:
        raise InputError([Problem(option, "writing plots needs matplotlib: pip install 'trimtab[plots]'")])
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_frontier(pts, path: str, metric: str, title: str) -> None:
    """``trimtab pareto --plot``: the frontier as a PNG, each point numbered as the table numbers it."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    ax.plot([p.cost_usd_per_hour for p in pts], [p.metric_ms for p in pts], "o-")
    for i, p in enumerate(pts, 1):
        ax.annotate(str(i), (p.cost_usd_per_hour, p.metric_ms), textcoords="offset points", xytext=(4, 4))
    ax.set_xlabel("cost ($/h)")
    ax.set_ylabel(f"predicted {metric} (ms, worst workload)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)
