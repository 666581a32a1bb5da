"""What every deployment target shares: the plan re-read against its spec, names, and the numbers the
manifests carry (start-up budget, autoscaling threshold, replica ceiling), each computed once here with its
provenance.

Entry point: ``prepare(plan, spec, allow_experimental) -> Bundle`` (raises ``InputError`` for a plan that no
engine can run as planned, or one made from another spec).
"""
from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path

import trimtab.profiles as _bundled
from trimtab.engines.base import DeploymentFacts, Launch, engine_table
from trimtab.errors import InputError, Problem
from trimtab.util.yamlio import read_yaml_file
from trimtab.contract.realise import launches, live_kv_summary, plan_routes, realise
from trimtab.cost.startup import replica_startup_s, startup_for
from trimtab.deployment.shape import replica_model_of
from trimtab.gate.analytic import plan_references
from trimtab.ir.lower import lower

GIB = 1024 ** 3
# Start-up budget (startupProbe): a multiple of the one start-up model (trimtab.cost.startup: weights / load
# bandwidth + warm-up, what a schedule starts replicas ahead by). The model assumes a warm node-local cache; a
# first start downloads from the hub or reads a network volume, several times slower, and a probe that fires
# early restarts a healthy replica, while one that fires late only delays restarting a hung one.
PROBE_SLACK = 5
PROBE_PERIOD_S = 10
PORT = 8000
# /dev/shm for NCCL and the engine's shared-memory broadcast between TP workers (vLLM docs: >= 1 GiB)
SHM_GIB = 16
CACHE_CLAIM = "trimtab-model-cache"
# The one secret convention of every target (docs/deploy.md, "Secrets"): Secret `hf-token` whose key is
# HF_TOKEN. The key is the variable's name because llm-d's chart reads key HF_TOKEN of its authSecretName and
# Dynamo's envFrom exports each key as a variable of that name; Kubernetes objects reference the same key.
HF_SECRET = "hf-token"
HF_TOKEN = "HF_TOKEN"  # the Secret's key and the variable the engines' Hugging Face client reads
HF_HOME = "/models/hf"  # the Hugging Face cache on the model-cache volume


@dataclass(frozen=True)
class Cluster:
    """What a plan cannot say about the cluster it runs on (``trimtab emit`` options; docs/deploy.md, "Cluster
    knobs"). The defaults are the conventions docs/deploy.md lists as prerequisites."""

    namespace: str | None = None  # every object's metadata.namespace (None: kubectl's current namespace)
    image: str | None = None  # the engine container image (None: profiles/engine_flags.yaml, or Dynamo's)
    storage_class: str | None = None  # the model cache claim's storageClassName (None: the cluster default)
    access_mode: str = "ReadWriteMany"  # every replica mounts the one model cache claim
    prometheus: str = "http://prometheus-operated.monitoring.svc:9090"  # KEDA's Prometheus serverAddress
    gateway: str = "trimtab-gateway"  # the Gateway the HTTPRoutes attach to: NAME or NAMESPACE/NAME
    rdma_resource: str | None = None  # extended resource of an RDMA device, one per P/D pod (None: warn)
    pod_monitor: bool = False  # also a prometheus-operator PodMonitor for the engine pods (k8s)


@dataclass(frozen=True)
class Target:
    """One plan deployment as every target sees it."""

    name: str  # DNS-1035 label: Kubernetes object and compose service name
    dep: object  # trimtab.contract.schema.Deployment
    facts: DeploymentFacts
    launch: Launch
    weight_bytes: int  # whole replica, from the cost model's memory fit
    startup_s: float  # the start-up model's seconds (trimtab.cost.startup), the schedule's lead
    startup_budget_s: int  # what the start-up probe allows: PROBE_SLACK x startup_s
    # waiting requests per replica above which to add one (None: engine has no gauge)
    queue_threshold: int | None
    max_replicas: int  # the GPU inventory of its type allows this many replicas
    gpu_k8s: dict  # resource, label, value (profiles/k8s_gpus.yaml)


@dataclass(frozen=True)
class Bundle:
    plan: object
    ir: object
    engine: dict  # profiles/engine_flags.yaml entry of the plan's engine
    targets: list[Target]
    warnings: list[str]
    cluster: Cluster = Cluster()

    def image(self, default: str | None = None) -> str:
        """The engine container's image: the --image knob, else the target's default, else the profile's."""
        return self.cluster.image or default or self.engine["image"]["ref"]


def engine_process(b: "Bundle", argv) -> tuple[list[str], list[str]]:
    """A launch command as (program, arguments): the program (``vllm serve``) is the container's entrypoint,
    set explicitly by every target, so an image's own ENTRYPOINT never runs in front of it (docker compose
    appends ``command`` to the image's ENTRYPOINT; Kubernetes ``command`` replaces it). The one place a
    command is cut."""
    argv, program = list(argv), list(b.engine["program"])
    n = len(program)
    # a launcher may come first (TensorRT-LLM's multi-node trtllm-llmapi-launch): it belongs to the program
    at = next((i for i in range(len(argv) - n + 1) if argv[i:i + n] == program), None)
    if at is None:
        raise ValueError(f"command {argv[:n + 1]} does not run the engine's {program}")
    return argv[:at + n], argv[at + n:]


def k8s_name(name: str) -> str:
    """A DNS-1035 label (lowercase letters, digits, '-', at most 63, starting with a letter): plan deployment
    names may carry dots (model names such as llama-3.1-8b); long names keep a hash suffix so they stay
    distinct."""
    s = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    if not s or not s[0].isalpha():
        s = "d-" + s
    if len(s) > 63:
        s = s[:54].rstrip("-") + "-" + hashlib.sha256(name.encode()).hexdigest()[:8]
    return s


def gpu_labels() -> dict:
    data, _ = read_yaml_file(Path(_bundled.data_dir()) / "k8s_gpus.yaml")
    return data["gpus"]


def queue_threshold(plan, ir, dep) -> int:
    """Waiting requests per replica worth another replica: the requests that arrive at the replica's planned
    rate within the tightest TTFT SLO it serves. A queue that long means arrivals outpace what the plan sized
    the replica for, and a new request would wait about one TTFT budget before its prefill starts."""
    ttft_s = min((ir.workload(r.workload).slo.ttft_ms for r in plan_routes(plan)
                  if dep.name in (r.deployment, r.prefill, r.decode) and ir.workload(r.workload) is not None),
                 default=1000.0) / 1000
    return max(1, math.floor(dep.load_rps_per_replica * ttft_s))


def prepare(plan, spec, allow_experimental: bool = False, cluster: Cluster | None = None) -> Bundle:
    """Re-lower the spec, refuse what no engine runs, and compute each deployment's target numbers."""
    ir = lower(spec)
    foreign = plan_references(plan, ir)
    if foreign:
        raise InputError(foreign, "plan")
    problems = []
    for i, d in enumerate(plan.deployments):
        live = d.kv is not None and (d.kv.live or d.kv.borrowed_gib > 0 or d.kv.lent_gib > 0)
        if live and not allow_experimental:
            problems.append(Problem(f"deployments[{i}] ({d.name}).kv",
                                    f"experimental live KV tier ({live_kv_summary(d.kv)}): no engine flag "
                                    "realises live-KV spill or cross-instance borrowing (docs/kv-tiers.md); "
                                    "re-plan with defaults.kv_tiers: auto (the prefix cache's host tier) or "
                                    "off, or pass --allow-experimental"))
    if problems:
        raise InputError(problems, "plan")
    warnings = []
    if plan.input_hash != ir.input_hash:
        warnings.append(f"the plan's input_hash {plan.input_hash} differs from the spec's {ir.input_hash}: "
                        "it was made from another version of the spec or profiles; commands are re-derived "
                        "from the spec")
    # Commands are re-derived from plan + spec, so a plan written before engines were recorded emits the same
    # way, and a hand-edited command cannot drift from the deployment it claims to run.
    plan = realise(plan, ir)
    labels = gpu_labels()
    used: dict[str, int] = {}
    for d in plan.deployments:
        used[d.gpu] = used.get(d.gpu, 0) + d.replicas * d.gpus_per_replica
    eng = engine_table(ir.engine.name)
    sched = getattr(plan, "schedule", None)
    st = startup_for(spec.schedule.startup if getattr(spec, "schedule", None) is not None else None)
    targets = []
    for d, (f, ln, w) in zip(plan.deployments, launches(plan, ir)):
        mem = replica_model_of(ir, replace(f.shape, kv_lent_gib=0.0)).memory
        gpus = d.gpus_per_replica
        weight_bytes = int(mem.weights_gib_per_gpu * GIB * gpus)
        # the plan's own number where its schedule recorded one (the same model, with the spec's overrides)
        startup = (sched.startup_s[d.name] if sched is not None and d.name in sched.startup_s else
                   replica_startup_s(st, ir, d.model, d.gpu, d.dtype, gpus))
        pool = ir.gpu(d.gpu)
        spare = (pool.count - used.get(d.gpu, 0)) // gpus if pool is not None else 0
        if d.gpu not in labels:
            raise InputError([Problem(f"deployments ({d.name}).gpu", f"no Kubernetes resource/label for GPU "
                                      f"{d.gpu!r} in profiles/k8s_gpus.yaml")], "plan")
        targets.append(Target(
            name=k8s_name(d.name), dep=d, facts=f, launch=ln, weight_bytes=weight_bytes, startup_s=startup,
            startup_budget_s=math.ceil(PROBE_SLACK * startup),
            queue_threshold=queue_threshold(plan, ir, d) if eng.get("queue_metric") else None,
            max_replicas=d.replicas + max(spare, 0), gpu_k8s=labels[d.gpu]))
        warnings += [x for x in w if x not in warnings]
    return Bundle(plan, ir, eng, targets, warnings, cluster or Cluster())


@dataclass(frozen=True)
class PromptRange:
    """One routing rule of a workload: prompts of ``lo <= tokens < hi`` go to ``backends`` (target names: a
    service, or a (prefill, decode) pair) with ``weights`` summing to 1. ``bucket`` is the plan's length
    bucket whose routes it follows."""

    workload: str
    lo: int
    hi: int
    bucket: str
    backends: tuple[tuple[str, ...], ...]
    weights: tuple[float, ...]


def prompt_ranges(b: Bundle) -> dict[str, list[PromptRange]]:
    """The plan's routes as contiguous half-open prompt ranges, per workload from 0 to the largest
    ``--max-model-len`` among its backends, so that every prompt an engine admits has exactly one rule.

    The plan's buckets hold the prompts it sampled (``input_tokens_min..max``), with gaps between them (chat
    ``45-999``, ``1001-3140``); a range runs from its bucket's start to the next one's, so a gap goes to the
    bucket below it, as the simulator routes (and ``check`` judges), and the first starts at 0. A rule keeps
    only backends whose ``--max-model-len`` exceeds its longest prompt (an engine rejects a prompt of
    max-model-len tokens or more), so a rule ends where a backend's context does and the last bucket's range
    reaches the longest context among its backends; where none of a bucket's backends admits a prompt, the
    workload's other backends that do take it, at their plan shares."""
    names = {t.dep.name: t.name for t in b.targets}
    ctx = {t.dep.name: t.facts.context_tokens for t in b.targets}
    buckets = {(w, x.name): x for w, xs in b.plan.buckets.items() for x in xs}
    by_bucket: dict[str, dict[str, list]] = {}
    for r in b.plan.routes:
        deps = (r.deployment,) if r.deployment else (r.prefill, r.decode)
        by_bucket.setdefault(r.workload, {}).setdefault(r.bucket, []).append(
            (tuple(names[d] for d in deps), min(ctx[d] for d in deps), r.share))
    out: dict[str, list[PromptRange]] = {}
    for w, routed in sorted(by_bucket.items()):
        order = sorted(routed, key=lambda k: buckets[(w, k)].input_tokens_min)
        top = max(c for rs in routed.values() for _, c, _ in rs)
        # a range ends where the next bucket starts: the simulator's router (sim.scenario.bucket_of_values)
        # puts a prompt between two buckets in the lower one, and check judges the plan by that router
        ends = [min(buckets[(w, k)].input_tokens_min, top) for k in order[1:]] + [top]
        cuts = sorted({0, *ends, *(c for rs in routed.values() for _, c, _ in rs if c <= top)})
        rules: list[PromptRange] = []
        for lo, hi in zip(cuts, cuts[1:]):
            k = next(k for k, e in zip(order, ends) if hi <= e)
            pick = [(be, s) for be, c, s in routed[k] if c >= hi] or \
                [(be, s) for rs in routed.values() for be, c, s in rs if c >= hi]
            merged: dict[tuple, float] = {}
            for be, s in pick:
                merged[be] = merged.get(be, 0.0) + s
            total = sum(merged.values())
            bes = tuple(sorted(merged))
            wts = tuple(merged[x] / total for x in bes)
            if rules and (rules[-1].bucket, rules[-1].backends, rules[-1].weights) == (k, bes, wts):
                rules[-1] = replace(rules[-1], hi=hi)  # the same rule continues
            else:
                rules.append(PromptRange(w, lo, hi, k, bes, wts))
        out[w] = rules
    return out


def served_spans(b: Bundle) -> dict[str, tuple[int, int]]:
    """Per target name, the prompts its rules cover over all workloads, as one half-open hull [lo, hi): what a
    router that sees lengths but not workloads (llm-d's context-length-aware scorer) can be told."""
    out: dict[str, tuple[int, int]] = {}
    for rules in prompt_ranges(b).values():
        for r in rules:
            for name in {n for be in r.backends for n in be}:
                lo, hi = out.get(name, (r.lo, r.hi))
                out[name] = (min(lo, r.lo), max(hi, r.hi))
    return dict(sorted(out.items()))


def side_channel(b: Bundle, t: Target) -> dict | None:
    """A P/D side's KV hand-off listener (profiles/engine_flags.yaml ``kv_side_channel``: host and port
    variables and the port), or None for a unified deployment or an engine that finds its own address."""
    return b.engine.get("kv_side_channel") if t.dep.role in ("prefill", "decode") else None


def side_channel_env(b: Bundle, t: Target) -> list[dict]:
    """Kubernetes env of a P/D side's NIXL listener on the pod's own IP (downward API), which its peers reach;
    vLLM's default, localhost, would tell a decoder to pull KV from itself."""
    sc = side_channel(b, t)
    if sc is None:
        return []
    return [{"name": sc["host_env"], "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": sc["port_env"], "value": str(sc["port"])}]


def pd_workloads(b: Bundle) -> list[str]:
    return sorted({r.workload for r in b.plan.routes if r.prefill})


def no_pd_router(b: Bundle, target: str) -> list[str]:
    """P/D pairs of an engine whose profile has no P/D router (``pd_router``; --to k8s and compose emit one
    per pair otherwise, ``trimtab.deploy.pdrouter``): nothing sends a request to a prefiller and then to a
    decoder with the prefiller's KV transfer parameters, so these workloads get no answer."""
    wl = pd_workloads(b)
    if not wl or "pd_router" in b.engine:
        return []
    return [f"--to {target} has no P/D router for {b.plan.engine.name}: workload(s) {', '.join(wl)} are "
            "routed to prefill/decode pairs, whose servers start but accept no end-to-end request until a "
            "P/D proxy sends each request to a prefiller, then to a decoder with its KV transfer parameters; "
            "deploy one, or emit --to llm-d (routing sidecar and endpoint picker) or --to dynamo (frontend), "
            "which route pairs"]


def network_kv(b: Bundle) -> list[str]:
    """P/D pairs not co-located hand KV over the nodes' NICs at the bandwidth the plan assumed: without an
    RDMA device in the pod NIXL (UCX) falls back to TCP, far slower."""
    far = sorted(t.name for t in b.targets if side_channel(b, t) and t.dep.colocated_with is None)
    if not far or b.cluster.rdma_resource:
        return []
    return [f"{', '.join(far)} hand KV to their P/D peers over the network at the NIC bandwidth the plan "
            "assumed (spec nodes[].nic_gbps or the GPU profile's node_network_gbps); pass --rdma-resource "
            "<your RDMA device's extended resource> so each pod requests one, or NIXL falls back to TCP and "
            "TTFT exceeds the plan's"]


def pools(b: Bundle, lengths: bool = True) -> dict[str, list[Target]]:
    """The deployments a pooling target (Dynamo's frontend, llm-d's InferencePool) puts behind one router,
    split so that none merges what the plan keeps apart: one pool per model and tenant set (a dedicated
    tenant's replicas are its own), and with ``lengths`` (a router that cannot keep a prompt on the workers
    that admit it) per ``--max-model-len`` too, so that no worker receives prompts it rejects (quickstart's
    autocomplete workers admit 4,120 tokens, summarize's 6,199). A model with one pool keeps the model's name;
    others add the context length (``-len4120``) and the tenants (``-acme``, ``-shared``)."""
    groups: dict[tuple, list[Target]] = {}
    for t in b.targets:
        key = (t.dep.model, t.facts.context_tokens if lengths else 0, tuple(sorted(t.dep.tenants)))
        groups.setdefault(key, []).append(t)
    out: dict[str, list[Target]] = {}
    for (model, ctx, tenants), ts in sorted(groups.items()):
        peers = [k for k in groups if k[0] == model]
        name = model
        if len({k[1] for k in peers}) > 1:
            name += f"-len{ctx}"
        if len({k[2] for k in peers}) > 1:
            name += "-" + ("-".join(tenants) or "shared")
        out[k8s_name(name)] = ts
    return out


def pool_workloads(b: Bundle, ps: dict[str, list[Target]]) -> dict[str, dict[str, float]]:
    """Per workload, the share of its planned requests each pool receives (the plan's routes)."""
    pool_of = {t.dep.name: name for name, ts in ps.items() for t in ts}
    out: dict[str, dict[str, float]] = {}
    for r in b.plan.routes:
        shares = out.setdefault(r.workload, {})
        p = pool_of[r.deployment or r.decode]
        shares[p] = shares.get(p, 0.0) + r.share
    return {w: dict(sorted(v.items())) for w, v in sorted(out.items())}


def split_workloads(b: Bundle, ps: dict[str, list[Target]], target: str, what: str) -> list[str]:
    """Workloads the plan spreads over several pools: the target routes within a pool, so the split between
    pools (by prompt length, ``routes.yaml`` of --to k8s) is the clients' or an upstream gateway's to make."""
    out = []
    ranges = prompt_ranges(b)
    for w, shares in pool_workloads(b, ps).items():
        if len(shares) < 2:
            continue
        pool_of = {t.name: name for name, ts in ps.items() for t in ts}
        runs: list[list] = []  # consecutive rules sending to the same pools, merged
        for r in ranges.get(w, ()):
            to = ", ".join(sorted({pool_of[be[-1]] for be in r.backends}))
            if runs and runs[-1][2] == to:
                runs[-1][1] = r.hi
            else:
                runs.append([r.lo, r.hi, to])
        rules = "; ".join(f"{lo}-{hi - 1} tokens to {to}" for lo, hi, to in runs)
        said = ", ".join(f"{p} {100 * v:.0f} %" for p, v in shares.items())
        out.append(f"--to {target}: workload {w} is planned over {len(shares)} {what}s ({said}), which "
                   f"route only within themselves: send its prompts by length ({rules}) from the client or "
                   "an upstream gateway, or emit --to k8s (routes.yaml)")
    return out


def secret_prerequisite(b: Bundle) -> str:
    models = ", ".join(sorted({t.facts.model.model_id for t in b.targets}))
    ns = f" -n {b.cluster.namespace}" if b.cluster.namespace else ""
    return (f"Secret {HF_SECRET} with key {HF_TOKEN} (a Hugging Face token allowed to download {models}): "
            f"kubectl create secret generic {HF_SECRET} --from-literal={HF_TOKEN}=$HF_TOKEN{ns}")


def gpu_prerequisite(b: Bundle) -> str:
    labels = sorted({f"{t.gpu_k8s['label']}={t.gpu_k8s['value']}" for t in b.targets})
    return (f"GPU nodes labelled {', '.join(labels)} (NVIDIA GPU Operator: device plugin and GPU Feature "
            f"Discovery) offering {', '.join(sorted({t.gpu_k8s['resource'] for t in b.targets}))}")


def image_warnings(b: Bundle) -> list[str]:
    """--image with a tag that does not name the plan's engine version: the flags may not be that image's."""
    img, ver = b.image(), str(b.engine["version"])
    if b.cluster.image and ver not in img.rsplit(":", 1)[-1]:
        return [f"--image {img}: the commands use {b.plan.engine.name} {ver}'s flags (profiles/engine_flags"
                ".yaml) and the image's tag does not name that version; an engine of another version may "
                "reject them"]
    return []
