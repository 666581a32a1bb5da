"""Replica start-up time: the seconds a new replica holds its GPUs before it serves (docs/online.md).

    startup_s = weight bytes / (load_gbps x nodes the replica spans) + warmup_s

Weight bytes = the model profile's parameters x bytes per parameter of the dtype (bf16: 2, fp8: 1). The two
constants come from profiles/online.yaml (each with its source) unless the spec's ``schedule.startup``
overrides them. The schedule charges a started replica its price for this long (it is started ahead of its
window and serves nothing meanwhile).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import trimtab.profiles as _bundled
from trimtab.cost.records import BYTES
from trimtab.profiles.loader import Q, _Profile
from trimtab.util.validation import validate
from trimtab.util.yamlio import read_yaml_file


class StartupProfile(_Profile):
    load_gbps: Q
    warmup_s: Q


@dataclass(frozen=True)
class Startup:
    load_gbps: float
    warmup_s: float
    source: str  # where the two numbers come from, for the plan

    def seconds(self, params_billion: float, dtype: str, gpus: int, gpus_per_node: int) -> float:
        nodes = max(1, math.ceil(gpus / max(gpus_per_node, 1)))
        gb = params_billion * BYTES[dtype]  # the checkpoint read: the weights at their precision
        return gb / (self.load_gbps * nodes) + self.warmup_s


def load_startup_profile() -> StartupProfile:
    path = _bundled.data_dir() / "online.yaml"
    data, lines = read_yaml_file(path)
    return validate(StartupProfile, data, lines, str(path), "profile")


def startup_for(spec_startup) -> Startup:
    """The profile's numbers, each replaced by the spec's ``schedule.startup`` value where given."""
    prof = load_startup_profile()
    load = (spec_startup.load_gbps if spec_startup and spec_startup.load_gbps is not None
            else prof.load_gbps.value)
    warm = (spec_startup.warmup_s if spec_startup and spec_startup.warmup_s is not None
            else prof.warmup_s.value)
    src = ", ".join(
        f"{k}: {'spec' if spec_startup and getattr(spec_startup, k) is not None else 'profiles/online.yaml'}"
        for k in ("load_gbps", "warmup_s"))
    return Startup(float(load), float(warm), src)


def replica_startup_s(st: Startup, ir, model: str, gpu: str, dtype: str, gpus: int) -> float:
    """Start-up seconds of one replica of ``model`` on ``gpus`` GPUs of type ``gpu``: what a schedule starts
    ahead of its window and what ``trimtab emit``'s start-up probe allows a multiple of (docs/deploy.md)."""
    per_node = int(ir.gpu(gpu).profile.gpus_per_node.value)
    return st.seconds(ir.models[model].params_billion.value, dtype, gpus, per_node)


def candidate_startup_s(st: Startup, ir, c) -> float:
    """Start-up seconds of one replica of candidate ``c`` (``trimtab.deployment.shape.Candidate``)."""
    return replica_startup_s(st, ir, c.model, c.gpu, c.dtype, c.gpus)
