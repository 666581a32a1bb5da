"""P/D routers: per prefill/decode pair of the plan, the engine project's own router
(profiles/engine_flags.yaml ``pd_router``). For vLLM ``vllm-router`` in its NIXL P/D mode, which sends each
request to a prefill engine (one token, ``kv_transfer_params.do_remote_decode``) and then to a decode engine
with the prefiller's KV transfer parameters, so the decoder pulls the KV over NIXL; for SGLang
``sglang-router`` (sgl-router, of which vllm-router is a fork) in its P/D mode, which sends each request to
both at once, each told the prefiller's bootstrap server (``bootstrap``), where the decoder finds the KV.
One command line for every target and engine (``router_args``, the engine's ``mode``); only how it finds the
pair's engines differs:

- ``--to k8s`` (``objects``): a Deployment and Service per pair that finds the pair's pods by Kubernetes
  service discovery (``discovery_args``: the labels the pair's Services select; SGLang's bootstrap port from
  the prefill pods' annotation, ``pod_annotations``), so replicas added by KEDA join without a restart; a
  ServiceAccount with a Role to read pods lets it.
- ``--to compose`` (``trimtab.deploy.compose``): a service per pair given each replica's URL
  (``static_args``), since compose has no discovery and its replicas are fixed.

Entry points: ``objects(bundle, selector_of) -> (objects, {(prefill, decode): router service name})``,
``pairs``, ``router_name``, ``router_args``, ``static_args``, ``pod_annotations``; none for an engine
without a P/D router in its profile (TensorRT-LLM: ``emit`` then warns, ``common.no_pd_router``).
"""
from __future__ import annotations

from trimtab.deploy.common import PORT, Bundle, Target, k8s_name

ACCOUNT = "trimtab-pd-router"  # ServiceAccount, Role and RoleBinding shared by every router of a plan
APP = "trimtab-pd-router"  # app.kubernetes.io/name of the router pods (the engine pods' is "trimtab")
# The simulator (and so check) balances replicas within a deployment as a least-request pick of two sampled
# replicas (docs/routing.md); the router's power_of_two is that pick, for each side.
POLICY = "power_of_two"
NAMESPACE_ENV = "POD_NAMESPACE"  # the router watches pods in its own namespace (downward API)


def pairs(b: Bundle) -> list[tuple[Target, Target]]:
    """The plan's distinct (prefill, decode) pairs, in name order."""
    by_dep = {t.dep.name: t for t in b.targets}
    seen = sorted({(r.prefill, r.decode) for r in b.plan.routes if r.prefill})
    return [(by_dep[p], by_dep[d]) for p, d in seen]


def router_name(prefill: Target, decode: Target) -> str:
    return k8s_name(f"pd-{prefill.name}-{decode.name}")


def router_args(b: Bundle, peers: list[str]) -> list[str]:
    """The router's arguments (after its program): its P/D mode on the profile's port, then ``peers``
    (how it finds and picks each side's engines: ``discovery_args`` or ``static_args``)."""
    pr = b.engine["pd_router"]
    return ["--host", "0.0.0.0", "--port", str(pr["port"]), *pr["mode"], *peers,
            # its own metrics (port 29000) reachable from Prometheus, not only from inside the container
            "--prometheus-host", "0.0.0.0"]


def discovery_args(prefill_sel: dict, decode_sel: dict) -> list[str]:
    """Each side's pods by their labels, in the router's own namespace, on the port their engines serve."""
    return ["--service-discovery", "--service-discovery-namespace", f"$({NAMESPACE_ENV})",
            "--service-discovery-port", str(PORT),
            "--prefill-selector", *(f"{k}={v}" for k, v in sorted(prefill_sel.items())),
            "--decode-selector", *(f"{k}={v}" for k, v in sorted(decode_sel.items())),
            "--prefill-policy", POLICY, "--decode-policy", POLICY]


def static_args(b: Bundle, prefill_urls: list[str], decode_urls: list[str], startup_s: int) -> list[str]:
    """Each side's engines by URL, a prefill URL with the engine's bootstrap port where it has one (SGLang;
    vLLM's NIXL side-channel address travels in the prefiller's answer instead). The router waits for every
    URL to answer its health check before it serves and exits after ``--worker-startup-timeout-secs`` (600 s
    by default): ``startup_s``, the pair's start-up budget, so a first model download does not stop it
    before its engines are up. A side of one engine gets ``round_robin``: the router refuses
    ``power_of_two`` over fewer than two static workers, and with one there is nothing to pick."""
    boot = [str(b.engine["pd_router"]["bootstrap"]["port"])] if "bootstrap" in b.engine["pd_router"] else []

    def policy(urls: list[str]) -> str:
        return POLICY if len(urls) > 1 else "round_robin"

    return [*(a for u in prefill_urls for a in ("--prefill", u, *boot)),
            *(a for u in decode_urls for a in ("--decode", u)),
            "--worker-startup-timeout-secs", str(startup_s),
            "--prefill-policy", policy(prefill_urls), "--decode-policy", policy(decode_urls)]


def pod_annotations(b: Bundle, t: Target) -> dict:
    """A prefill pod's bootstrap port as the annotation the engine's router reads it from under service
    discovery (SGLang: ``sglang.ai/bootstrap-port``); none for other pods and engines."""
    boot = b.engine.get("pd_router", {}).get("bootstrap")
    return {boot["annotation"]: str(boot["port"])} if boot and t.dep.role == "prefill" else {}


def _rbac(b: Bundle) -> list[dict]:
    subject = {"kind": "ServiceAccount", "name": ACCOUNT}
    if b.cluster.namespace:  # else the RoleBinding's own namespace, where kubectl -n puts both
        subject["namespace"] = b.cluster.namespace
    labels = {"app.kubernetes.io/name": APP}
    return [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ACCOUNT, "labels": labels}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": ACCOUNT, "labels": labels},
             "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": ACCOUNT, "labels": labels},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ACCOUNT},
             "subjects": [subject]}]


def _router(b: Bundle, name: str, args: list[str]) -> list[dict]:
    pr = b.engine["pd_router"]
    labels = {"app.kubernetes.io/name": APP, "app.kubernetes.io/instance": name}
    c = {"name": "router", "image": pr["image"]["ref"], "command": list(pr["program"]), "args": args,
         "env": [{"name": NAMESPACE_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
         "ports": [{"name": "http", "containerPort": pr["port"]}],
         # a proxy that holds each request twice (prefill, then the decode stream): requests keep it off
         # nodes with no CPU to spare, where it would add to every TTFT
         "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
         "readinessProbe": {"httpGet": {"path": pr["readiness_path"], "port": "http"}, "periodSeconds": 5},
         "livenessProbe": {"httpGet": {"path": pr["liveness_path"], "port": "http"}, "periodSeconds": 10,
                           "failureThreshold": 6}}
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
           "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels},
                                 "spec": {"serviceAccountName": ACCOUNT, "containers": [c]}}}}
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": labels},
           "spec": {"selector": labels, "ports": [{"name": "http", "port": PORT, "targetPort": "http"}]}}
    return [dep, svc]


def objects(b: Bundle, selector_of) -> tuple[list[dict], dict[tuple[str, str], str]]:
    """The routers of every P/D pair (``selector_of(target)``: the labels of its serving pods) with their
    ServiceAccount and Role, and each pair's router Service name by (prefill, decode) target names."""
    ps = pairs(b)
    if not ps or "pd_router" not in b.engine:
        return [], {}
    objs, names = _rbac(b), {}
    for p, d in ps:
        name = router_name(p, d)
        names[(p.name, d.name)] = name
        objs += _router(b, name, router_args(b, discovery_args(selector_of(p), selector_of(d))))
    return objs, names
