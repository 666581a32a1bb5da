"""The cost model's measured error per class of deployment: what a plan states beside each prediction, and
what ``trimtab check --margin`` holds an SLO's headroom against.

``error_bars.yaml`` (bundled) is written by the accuracy benchmarks (``python benchmarks/accuracy_gpu.py
--write-error-bars profiles/error_bars.yaml``, which also runs ``benchmarks/accuracy.py``'s rows): per class
of deployment (GPU family, tensor parallel 1 or more, dense or mixture-of-experts, engine) the median and p90
of the absolute % error of TTFT and of TPOT predictions against real runs, with how many runs, and the pooled
figure of all runs. A class with fewer than ``min_runs`` runs of a metric (or none) takes the pooled figure,
and says so: a median of two runs is not a measurement of that class.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

import trimtab.profiles as _bundled
from trimtab.util.validation import validate
from trimtab.util.yamlio import read_yaml_file

METRICS = ("ttft", "tpot")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Stat(_Strict):
    median_pct: float = Field(ge=0, description="median absolute % error, |predicted / measured - 1|")
    p90_pct: float = Field(ge=0, description="90th percentile of the absolute % errors")
    runs: int = Field(ge=1, description="measured runs (or table rows) behind the figures")


class ClassErrors(_Strict):
    gpu: str = Field(description="GPU family: the GPU profile's name up to its first '-' (h100-sxm: h100)")
    tp: Literal["1", ">1"]
    moe: bool
    engine: str = Field(description="engine profile family: vllm, sglang, trt-llm, vllm-cpu")
    ttft: Stat | None = None
    tpot: Stat | None = None


class ErrorBars(_Strict):
    benchmark: str = Field(description="the command that wrote the file")
    data: list[str] = Field(description="the measurements it compared with, one entry per table")
    date: str
    min_runs: int = Field(ge=1, description="a class with fewer runs of a metric takes the pooled figure")
    measured: dict[str, str] = Field(description="per metric: which measured statistic the errors are of")
    pooled: dict[str, Stat]
    classes: list[ClassErrors]


@dataclass(frozen=True)
class Bar:
    """One metric's error bar for one class: the figures, the class they are of, and why (fallback)."""

    metric: str
    cls: str
    stat: Stat
    note: str  # "" when the class's own runs gave it; else why the pooled figure stands in


def gpu_family(gpu: str) -> str:
    return gpu.split("-")[0]


def class_name(gpu: str, tp: int | str, moe: bool, engine: str) -> str:
    """``h100 tp1 dense vllm``: the class as the file and a plan name it (``gpu``: a profile name or a
    family)."""
    t = tp if isinstance(tp, str) else ("1" if tp <= 1 else ">1")
    return f"{gpu_family(gpu)} tp{t} {'moe' if moe else 'dense'} {engine}"


_CACHE: dict[str, ErrorBars] = {}


def bundled_path() -> Path:
    return _bundled.data_dir() / "error_bars.yaml"


def load_error_bars(path: str | Path | None = None) -> ErrorBars:
    """The error bars file (default: the bundled one), validated; InputError naming the field otherwise."""
    p = str(path or bundled_path())
    if p not in _CACHE:
        data, lines = read_yaml_file(p)
        _CACHE[p] = validate(ErrorBars, data, lines, p, "error bars")
    return _CACHE[p]


def error_bar(bars: ErrorBars, gpu: str, tp: int, moe: bool, engine: str, metric: str) -> Bar:
    """``metric``'s error bar for a deployment of this class: the class's own figures when it has ``min_runs``
    runs of the metric, else the pooled figure with a note saying why."""
    name = class_name(gpu, tp, moe, engine)
    own = next((c for c in bars.classes if class_name(c.gpu, c.tp, c.moe, c.engine) == name), None)
    stat = getattr(own, metric) if own is not None else None
    if stat is not None and stat.runs >= bars.min_runs:
        return Bar(metric, name, stat, "")
    why = (f"{stat.runs} run(s) of {name} (fewer than {bars.min_runs})" if stat is not None
           else f"no measured run of {name}")
    return Bar(metric, name, bars.pooled[metric], f"pooled over all classes: {why}")
