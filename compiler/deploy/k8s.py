"""Kubernetes manifests for a plan: per deployment a Deployment (a LeaderWorkerSet when a replica spans
nodes), a Service, and a KEDA ScaledObject on the engine's queue gauge; a model-cache claim (with
``--pod-monitor``, a PodMonitor for the engine pods); Gateway API HTTPRoutes, a routing table for the plan's
routes, and a P/D router per prefill/decode pair (``trimtab.deploy.pdrouter``).

Entry point: ``manifests(bundle) -> dict[file name, list[object]]``. tests/engines/ validate every object:
built-in kinds with kubernetes-validate, the CRDs (LeaderWorkerSet, ScaledObject, HTTPRoute, PodMonitor)
against their published schemas. docs/deploy.md says what each object needs on the cluster.
"""
from __future__ import annotations

import math

from trimtab.deploy.common import (CACHE_CLAIM, GIB, HF_HOME, HF_SECRET, HF_TOKEN, PORT, PROBE_PERIOD_S,
                                    SHM_GIB, Bundle, Target, engine_process, gpu_prerequisite, image_warnings,
                                    k8s_name, network_kv, no_pd_router, pd_workloads, prompt_ranges,
                                    secret_prerequisite, side_channel, side_channel_env)
from trimtab.engines.base import LEADER_ENV, RANK_ENV
from trimtab.deploy.autoscale import cron_triggers, min_replicas
from trimtab.deploy import pdrouter
from trimtab.deploy.pdrouter import pod_annotations
from trimtab.util.yamlio import dump_canonical

APP = "trimtab"
CONFIG_DIR = "/etc/trimtab"  # the TensorRT-LLM extra options file, from a ConfigMap; the container's workdir
WORKLOAD_HEADER = "x-trimtab-workload"  # which workload a request belongs to (the client or gateway sets it)
ROUTER_WEIGHT_SCALE = 10_000  # route shares become integer HTTPRoute weights


def _labels(t: Target) -> dict:
    return {"app.kubernetes.io/name": APP, "app.kubernetes.io/instance": t.name,
            "trimtab.dev/model": k8s_name(t.dep.model), "trimtab.dev/role": t.dep.role}


def _k8s_vars(argv) -> list[str]:
    """Shell-style ${LEADER_ADDRESS}/${NODE_RANK} as Kubernetes $(VAR) references to the variables LWS
    sets."""
    return [a.replace("${" + LEADER_ENV + "}", "$(LWS_LEADER_ADDRESS)").replace("${" + RANK_ENV + "}",
                                                                                  "$(LWS_WORKER_INDEX)")
            for a in argv]


def _container(b: Bundle, t: Target, argv, gpus: int, serving: bool) -> dict:
    # optional: a model that is not gated starts without the Secret
    secret = {"name": HF_SECRET, "key": HF_TOKEN, "optional": True}
    env = [{"name": HF_TOKEN, "valueFrom": {"secretKeyRef": secret}},
           {"name": "HF_HOME", "value": HF_HOME}]
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "model-cache", "mountPath": "/models"}]
    program, args = engine_process(b, argv)
    sc = side_channel(b, t)
    env += side_channel_env(b, t)
    res = {t.gpu_k8s["resource"]: gpus}
    if sc and b.cluster.rdma_resource:  # KV over the NICs: GPUDirect RDMA, not TCP
        res[b.cluster.rdma_resource] = 1
    c = {"name": "engine", "image": b.image(), "command": program, "args": args, "env": env,
         "resources": {"limits": dict(res), "requests": dict(res)}, "volumeMounts": mounts}
    if sc:
        c["ports"] = [{"name": "nixl", "containerPort": sc["port"]}]
    if t.facts.offload_gib > 0:  # the prefix cache's host tier: pinned host memory the scheduler must find
        c["resources"]["requests"]["memory"] = (
            f"{math.ceil(t.facts.offload_gib / t.facts.nodes_per_replica)}Gi")
    if t.launch.files:
        mounts.append({"name": "engine-files", "mountPath": CONFIG_DIR, "readOnly": True})
        c["workingDir"] = CONFIG_DIR
    if serving:
        health = {"httpGet": {"path": b.engine["health_path"], "port": PORT}}
        c["ports"] = [{"name": "http", "containerPort": PORT}, *c.get("ports", [])]
        c["startupProbe"] = {**health, "periodSeconds": PROBE_PERIOD_S,
                             "failureThreshold": math.ceil(t.startup_budget_s / PROBE_PERIOD_S)}
        c["readinessProbe"] = {**health, "periodSeconds": 5, "failureThreshold": 3}
        c["livenessProbe"] = {**health, "periodSeconds": 10, "failureThreshold": 6}
    return c


def _pod(b: Bundle, t: Target, argv, gpus: int, serving: bool) -> dict:
    vols = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{SHM_GIB}Gi"}},
            {"name": "model-cache", "persistentVolumeClaim": {"claimName": CACHE_CLAIM}}]
    if t.launch.files:
        vols.append({"name": "engine-files", "configMap": {"name": f"{t.name}-engine-files"}})
    return {"nodeSelector": {t.gpu_k8s["label"]: t.gpu_k8s["value"]},
            "containers": [_container(b, t, argv, gpus, serving)], "volumes": vols}


def scrape_annotations(b: Bundle) -> dict:
    """Prometheus' pod discovery convention (the kubernetes-pods job of the Prometheus community chart):
    scrape the engine's /metrics, whose queue gauge the ScaledObject reads. prometheus-operator ignores
    annotations: ``--pod-monitor`` adds the PodMonitor that selects the same pods."""
    return {"prometheus.io/scrape": "true", "prometheus.io/port": str(PORT),
            "prometheus.io/path": b.engine["metrics_path"]}


def pod_monitor(b: Bundle) -> dict:
    """prometheus-operator's PodMonitor (monitoring.coreos.com/v1) for the engine pods (``--pod-monitor``):
    the operator ignores the prometheus.io annotations, so without it KEDA's query has no series. It selects
    every engine pod of the plan by the label they share and scrapes their named port ``http``."""
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
            "metadata": {"name": "trimtab-engines", "labels": {"app.kubernetes.io/name": APP}},
            "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": APP}},
                     "podMetricsEndpoints": [{"port": "http", "path": b.engine["metrics_path"]}]}}


def _workload_object(b: Bundle, t: Target) -> dict:
    labels = _labels(t)

    # with a prefill pod's bootstrap port where its P/D router looks for it (SGLang)
    scrape = {**scrape_annotations(b), **pod_annotations(b, t)}
    gpus = t.dep.tensor_parallel * t.dep.pipeline_parallel * t.dep.data_parallel
    meta = {"name": t.name, "labels": labels}
    if t.facts.nodes_per_replica == 1:
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
                "spec": {"replicas": t.dep.replicas, "selector": {"matchLabels": labels},
                         "template": {"metadata": {"labels": labels, "annotations": scrape},
                                      "spec": _pod(b, t, t.launch.command, gpus, True)}}}
    per = t.facts.gpus_per_node
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": meta,
            "spec": {"replicas": t.dep.replicas, "startupPolicy": "LeaderCreated",
                     "leaderWorkerTemplate": {
                         "size": t.facts.nodes_per_replica,
                         "leaderTemplate": {"metadata": {"labels": {**labels, "trimtab.dev/node": "leader"},
                                                         "annotations": scrape},
                                            "spec": _pod(b, t, _k8s_vars(t.launch.command), per, True)},
                         "workerTemplate": {"metadata": {"labels": labels},
                                            "spec": _pod(b, t, _k8s_vars(t.launch.worker_command), per,
                                                         False)}}}}


def serving_selector(t: Target) -> dict:
    """The labels of ``t``'s pods that serve HTTP (an LWS's leaders, not its headless workers): what its
    Service and a P/D router select."""
    sel = dict(_labels(t))
    if t.facts.nodes_per_replica > 1:
        sel["trimtab.dev/node"] = "leader"
    return sel


def _service(t: Target) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": t.name, "labels": _labels(t)},
            "spec": {"selector": serving_selector(t),
                     "ports": [{"name": "http", "port": PORT, "targetPort": PORT}]}}


def pod_pattern(t: Target) -> str:
    """The names of the serving pods of ``t`` and no other deployment's, as PromQL's anchored regex: a
    Deployment's pods are NAME-<ReplicaSet hash>-<suffix>, a LeaderWorkerSet's leaders NAME-<group index>.
    ``NAME-.*`` also matched the pods of a deployment whose name extends it (multi-lora: ...-t2k and
    ...-t2k-l2), summing their queues into this one's."""
    return f"{t.name}-[0-9]+" if t.facts.nodes_per_replica > 1 else f"{t.name}-[a-z0-9]+-[a-z0-9]+"


def _scaler(b: Bundle, t: Target, kind: str, api: str) -> dict:
    metric = b.engine["queue_metric"]["name"]
    sched = getattr(b.plan, "schedule", None)
    crons = cron_triggers(sched, t.dep.name, t.startup_s) if sched is not None else None
    obj = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            "metadata": {"name": t.name, "labels": _labels(t)},
            "spec": {"scaleTargetRef": {"apiVersion": api, "kind": kind, "name": t.name},
                     # The plan's replica count meets the SLO at the planned load: never scale below it.
                     "minReplicaCount": t.dep.replicas, "maxReplicaCount": t.max_replicas,
                     "triggers": [{"type": "prometheus", "metadata": {
                         "serverAddress": b.cluster.prometheus,
                         "query": f'sum({metric}{{pod=~"{pod_pattern(t)}"}})',
                         # no series (Prometheus not scraping the pods) is an error KEDA reports on the
                         # ScaledObject, not a queue of 0 that holds the minimum under any load
                         "ignoreNullValues": "false",
                         "threshold": str(t.queue_threshold)}}]}}
    # a schedule (docs/online.md): the windows' replicas, started ahead by the start-up time
    if crons is not None:
        obj["spec"]["minReplicaCount"] = min_replicas(sched, t.dep.name)
        obj["spec"]["triggers"] = crons + obj["spec"]["triggers"]
    return obj


def _engine_files(t: Target) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{t.name}-engine-files",
                                                                 "labels": _labels(t)},
            "data": dict(sorted(t.launch.files.items()))}


def _cache_claim(b: Bundle) -> dict:
    """One ReadWriteMany claim for every replica's Hugging Face cache: each model's weights once, twice over
    (download staging), from the cost model's weight bytes."""
    per_model: dict[str, int] = {}
    for t in b.targets:
        per_model[t.dep.model] = max(per_model.get(t.dep.model, 0), t.weight_bytes)
    gib = math.ceil(2 * sum(per_model.values()) / GIB) + 10
    spec = {"accessModes": [b.cluster.access_mode], "resources": {"requests": {"storage": f"{gib}Gi"}}}
    if b.cluster.storage_class:
        spec["storageClassName"] = b.cluster.storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": CACHE_CLAIM},
            "spec": spec}


def route_table(b: Bundle) -> dict:
    """The plan's routes as a router needs them: per workload, contiguous half-open prompt-length ranges from
    0 to the longest --max-model-len of its backends (``prompt_ranges``), each with its backends (a service,
    or a prefill/decode pair with the Service of its P/D router) and their weights within the range."""
    routers = pd_routers(b)[1]

    def backend(be: tuple[str, ...]) -> dict:
        if len(be) == 1:
            return {"service": be[0]}
        return {"prefill": be[0], "decode": be[1], **({"router": routers[be]} if be in routers else {})}

    out = {}
    for w, rules in prompt_ranges(b).items():
        out[w] = [{"prompt_tokens_min": r.lo, "prompt_tokens_below": r.hi, "bucket": r.bucket,
                   "backends": [{**backend(be), "weight": round(wt, 6)}
                                for be, wt in zip(r.backends, r.weights)]}
                  for r in rules]
    return out


def gateway_ref(gateway: str) -> dict:
    """--gateway NAME or NAMESPACE/NAME as an HTTPRoute parentRef."""
    ns, _, name = gateway.rpartition("/")
    return {"name": name, **({"namespace": ns} if ns else {})}


def pd_routers(b: Bundle) -> tuple[list[dict], dict[tuple[str, str], str]]:
    """The P/D routers' objects and each pair's router Service (``trimtab.deploy.pdrouter``)."""
    return pdrouter.objects(b, serving_selector)


def _http_routes(b: Bundle) -> list[dict]:
    """Gateway API HTTPRoutes: per workload (matched on a header), weighted backends summing the plan's shares
    over its length buckets: a deployment's Service, or for a P/D pair its router's. Gateway API cannot match
    on prompt length: routes.yaml holds the full table for a router that can (docs/deploy.md)."""
    names = {t.dep.name: t.name for t in b.targets}
    routers = pd_routers(b)[1]
    shares: dict[str, dict[str, float]] = {}
    for r in b.plan.routes:
        svc = names[r.deployment] if r.deployment else routers.get((names[r.prefill], names[r.decode]))
        if svc is not None:
            ws = shares.setdefault(r.workload, {})
            ws[svc] = ws.get(svc, 0.0) + r.share
    out = []
    for w, weights in sorted(shares.items()):
        refs = [{"name": s, "port": PORT, "weight": max(1, round(v * ROUTER_WEIGHT_SCALE))}
                for s, v in sorted(weights.items())]
        out.append({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                    "metadata": {"name": k8s_name(f"{w}-route"), "labels": {"app.kubernetes.io/name": APP}},
                    "spec": {"parentRefs": [gateway_ref(b.cluster.gateway)],
                             "rules": [{"matches": [{"headers": [{"name": WORKLOAD_HEADER, "value": w}]}],
                                        "backendRefs": refs}]}})
    return out


def manifests(b: Bundle) -> dict[str, list[dict]]:
    """File name -> objects. One file per deployment, plus shared.yaml (cache claim) and router.yaml."""
    files: dict[str, list[dict]] = {"shared.yaml": [_cache_claim(b)]}
    for t in b.targets:
        objs = [_workload_object(b, t), _service(t)]
        if t.launch.files:
            objs.insert(0, _engine_files(t))
        if t.queue_threshold is not None:
            multi = t.facts.nodes_per_replica > 1
            objs.append(_scaler(b, t, "LeaderWorkerSet" if multi else "Deployment",
                                "leaderworkerset.x-k8s.io/v1" if multi else "apps/v1"))
        files[f"{t.name}.yaml"] = objs
    table = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "trimtab-routes"},
             "data": {"routes.yaml": dump_canonical(route_table(b))}}
    files["router.yaml"] = [table, *pd_routers(b)[0], *_http_routes(b)]
    if b.cluster.pod_monitor:
        files["shared.yaml"].append(pod_monitor(b))
    if b.cluster.namespace:
        for objs in files.values():
            for o in objs:
                o["metadata"]["namespace"] = b.cluster.namespace
    return files


def warnings(b: Bundle) -> list[str]:
    return no_pd_router(b, "k8s") + network_kv(b) + image_warnings(b)


def prerequisites(b: Bundle) -> list[str]:
    """What the manifests need on the cluster (docs/deploy.md, "--to k8s")."""
    out = [gpu_prerequisite(b), secret_prerequisite(b),
           f"a StorageClass ({b.cluster.storage_class or 'the cluster default'}) that provisions "
           f"{b.cluster.access_mode} volumes, for the claim {CACHE_CLAIM} (--storage-class, --access-mode)"]
    if any(t.facts.nodes_per_replica > 1 for t in b.targets):
        out.append("the LeaderWorkerSet controller (lws, leaderworkerset.x-k8s.io/v1) for replicas spanning "
                   "nodes")
    if any(t.queue_threshold is not None for t in b.targets):
        scrape = ("the PodMonitor trimtab-engines (prometheus-operator, monitoring.coreos.com/v1; its "
                  "Prometheus' podMonitorSelector must select it)" if b.cluster.pod_monitor else
                  "the prometheus.io annotations (or --pod-monitor with prometheus-operator)")
        out.append(f"KEDA (keda.sh/v1alpha1 ScaledObject) and Prometheus at {b.cluster.prometheus} "
                   f"(--prometheus) scraping the engine pods: {scrape}")
    if _http_routes(b):
        out.append(f"Gateway API CRDs and a Gateway {b.cluster.gateway} (--gateway) whose listeners admit "
                   "the HTTPRoutes; clients set the header x-trimtab-workload")
    if b.cluster.rdma_resource:
        out.append(f"an RDMA device plugin offering {b.cluster.rdma_resource} on the nodes of P/D pods")
    if pd_routers(b)[1]:
        img = b.engine["pd_router"]["image"]["ref"]
        out.append(f"the P/D routers' image {img} and RBAC rights to create a ServiceAccount, Role and "
                   "RoleBinding (each router lists the pods of its prefill/decode pair)")
    elif pd_workloads(b):
        out.append("a P/D router in front of the prefill/decode pairs (routes.yaml): none is emitted")
    return out
