"""What a runtime would run from `trimtab emit`'s output: every container's effective argv and environment,
computed by the runtime's own rules, not by trimtab's. Used by tests/engines/test_emit_runtime.py and
test_emit_routes.py.

- docker compose: a service's ``entrypoint`` replaces the image's ENTRYPOINT and clears its CMD; without one
  the image's ENTRYPOINT runs with ``command`` appended (docs.docker.com compose file reference,
  ``entrypoint`` and ``command``); ``${VAR:-default}`` in ``environment`` comes from the host's environment.
- Kubernetes: ``command`` replaces the image's ENTRYPOINT and ``args`` its CMD (an image CMD is dropped when
  ``command`` is set); ``$(VAR)`` in command and args expands from the container's env (kubernetes.io, "Define
  a command and arguments for a container"); ``secretKeyRef`` reads one key (a missing key fails the pod
  unless ``optional``); ``envFrom`` a Secret exports every key as a variable of that name; ``fieldRef`` reads
  the pod's fields (downward API); LeaderWorkerSet sets LWS_LEADER_ADDRESS and LWS_WORKER_INDEX.
- Dynamo (v1beta1): each component's ``podTemplate`` is a pod spec read by the Kubernetes rules.
- llm-d modelservice chart (v0.4.x templates/_helpers.tpl): ``modelCommand: custom`` runs ``command`` +
  ``args``; the env is the container's ``env``, DP_SIZE/TP_SIZE/DP_SIZE_LOCAL, HF_HOME (hf:// with the model
  volume) and HF_TOKEN from ``secretKeyRef {name: modelArtifacts.authSecretName, key: HF_TOKEN}`` (not
  optional); pods carry ``modelArtifacts.labels`` and ``llm-d.ai/role``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

# The image's ENTRYPOINT (vllm docker/Dockerfile, vllm-openai stage: ENTRYPOINT ["vllm", "serve"]).
IMAGE_ENTRYPOINT = {"vllm/vllm-openai": ["vllm", "serve"]}
TOKEN = "hf_test_token"
SECRETS = {"hf-token": {"HF_TOKEN": TOKEN}}  # the documented secret (docs/deploy.md, "Secrets")
HOST_ENV = {"HF_TOKEN": TOKEN}  # the documented compose invocation: HF_TOKEN=... docker compose up
POD_IP = "10.1.2.3"
NAMESPACE = "serving"  # the namespace `kubectl apply -n` puts an object without metadata.namespace in
LWS_ENV = {"LWS_LEADER_ADDRESS": "leader.example", "LWS_WORKER_INDEX": "1"}


class PodFails(Exception):
    """The runtime would not start the container (CreateContainerConfigError)."""


@dataclass
class Proc:
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    ports: list[int] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)


def _entrypoint(image: str) -> list[str]:
    return list(IMAGE_ENTRYPOINT.get(image.rsplit(":", 1)[0], []))


PD_ROUTER_LABEL = "trimtab.dev/prefill"  # what marks a compose P/D router service (its pair's prefill side)


def compose(doc: dict, host_env: dict | None = None, engines_only: bool = False) -> list[Proc]:
    """Each service's process; ``engines_only`` leaves out the P/D routers (labelled ``PD_ROUTER_LABEL``)."""
    host = HOST_ENV if host_env is None else host_env
    out = []
    for name, svc in doc["services"].items():
        if engines_only and PD_ROUTER_LABEL in (svc.get("labels") or {}):
            continue
        if "entrypoint" in svc:
            argv = list(svc["entrypoint"]) + list(svc.get("command") or [])
        else:
            argv = _entrypoint(svc["image"]) + list(svc.get("command") or [])
        env = {}
        for k, v in (svc.get("environment") or {}).items():
            m = re.fullmatch(r"\$\{(\w+)(?::-(.*))?\}", str(v))
            env[k] = (host.get(m.group(1)) or (m.group(2) or "")) if m else str(v)
        out.append(Proc(name, argv, env, [int(p.split(":")[-1]) for p in svc.get("ports", [])]))
    return out


def _expand(s: str, env: dict) -> str:
    return re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), s)


def _field(path: str, meta: dict) -> str:
    if path == "status.podIP":
        return POD_IP
    if path == "metadata.namespace":  # the object's, else where kubectl -n put it
        return meta.get("namespace", NAMESPACE)
    if path.startswith("metadata.labels['"):
        return meta.get("labels", {})[path[len("metadata.labels['"):-2]]
    raise AssertionError(f"fieldRef {path} not modelled")


def k8s_env(items: list[dict], secrets: dict, meta: dict, base: dict | None = None) -> dict:
    env = dict(base or {})
    for e in items or []:
        if "value" in e:
            env[e["name"]] = _expand(str(e["value"]), env)
            continue
        ref = e["valueFrom"]
        if "secretKeyRef" in ref:
            r = ref["secretKeyRef"]
            val = secrets.get(r["name"], {}).get(r["key"])
            if val is None:
                if not r.get("optional"):
                    raise PodFails(f"secret {r['name']} has no key {r['key']}")
                continue
            env[e["name"]] = val
        elif "fieldRef" in ref:
            env[e["name"]] = _field(ref["fieldRef"]["fieldPath"], meta)
        else:
            raise AssertionError(f"env source {ref} not modelled")
    return env


def pod(spec: dict, meta: dict, secrets: dict | None = None, injected: dict | None = None) -> list[Proc]:
    secrets = SECRETS if secrets is None else secrets
    out = []
    for c in spec["containers"]:
        env = dict(injected or {})
        for src in c.get("envFrom", []):
            env.update(secrets[src["secretRef"]["name"]])
        env = k8s_env(c.get("env", []), secrets, meta, env)
        argv = list(c["command"]) if c.get("command") else _entrypoint(c["image"])
        argv = [_expand(a, env) for a in argv + list(c.get("args") or [])]
        out.append(Proc(c["name"], argv, env, [p["containerPort"] for p in c.get("ports", [])],
                        dict(meta.get("labels", {}))))
    return out


def k8s(objs: list[dict], secrets: dict | None = None) -> dict[str, list[Proc]]:
    """Workload object name (``/leader``, ``/worker`` for a LeaderWorkerSet) -> its containers' processes."""
    out = {}
    for o in objs:
        name = o["metadata"]["name"]
        ns = {"namespace": o["metadata"].get("namespace", NAMESPACE)}
        if o["kind"] == "Deployment":
            t = o["spec"]["template"]
            out[name] = pod(t["spec"], {**ns, **t["metadata"]}, secrets)
        elif o["kind"] == "LeaderWorkerSet":
            lw = o["spec"]["leaderWorkerTemplate"]
            for role, key, idx in (("leader", "leaderTemplate", "0"), ("worker", "workerTemplate", "1")):
                t = lw[key]
                out[f"{name}/{role}"] = pod(t["spec"], t["metadata"], secrets,
                                            {**LWS_ENV, "LWS_WORKER_INDEX": idx})
    return out


def dynamo(graph: dict, secrets: dict | None = None) -> dict[str, Proc]:
    """Component name -> its main container's process (v1beta1: a component's podTemplate is a pod spec)."""
    assert graph["apiVersion"] == "nvidia.com/v1beta1", graph["apiVersion"]
    return {c["name"]: pod(c["podTemplate"]["spec"], c["podTemplate"].get("metadata", {}), secrets)[0]
            for c in graph["spec"]["components"]}


def llmd(values: dict, secrets: dict | None = None) -> list[Proc]:
    secrets = SECRETS if secrets is None else secrets
    art = values["modelArtifacts"]
    out = []
    for role in ("prefill", "decode"):
        sec = values[role]
        if not sec.get("create"):
            continue
        par = sec.get("parallelism", {})
        for c in sec["containers"]:
            assert c.get("modelCommand", "custom") == "custom" and c.get("command"), "the chart fails without"
            env = k8s_env(c.get("env", []), secrets, {})
            env.update({"DP_SIZE": str(par.get("data", 1)), "TP_SIZE": str(par.get("tensor", 1)),
                        "DP_SIZE_LOCAL": str(par.get("dataLocal", 1))})
            if art["uri"].startswith("hf://") and c.get("mountModelVolume"):
                env["HF_HOME"] = art.get("mountPath", "/model-cache")
            if art.get("authSecretName"):
                env.update(k8s_env([{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
                    "name": art["authSecretName"], "key": "HF_TOKEN"}}}], secrets, {}))
            labels = {**art.get("labels", {}), "llm-d.ai/role": role}
            argv = [_expand(a, env) for a in c["command"] + c["args"]]
            out.append(Proc(f"{role}/{c.get('name', 'vllm')}", argv, env,
                            [p["containerPort"] for p in c.get("ports", [])], labels))
    return out


# ---------------------------------------------------------------------------------------------- routing
# Where one request goes, by each target's own routing objects (the tests/e2e run sends it there): each
# function returns the processes that may receive it (the router picks one of them) and the port the request
# is addressed to on that process, which its argv must listen on.

def listen_port(p: Proc, default: int = 8000) -> int | None:
    """The port a process's HTTP server listens on, from its argv (vLLM: ``--port``, default 8000; Dynamo's
    frontend: ``--http-port``); None for a process that serves no HTTP (a Dynamo worker: it registers with the
    frontend instead)."""
    for flag in ("--port", "--http-port"):
        for i, a in enumerate(p.argv):
            if a == flag:
                return int(p.argv[i + 1])
            if a.startswith(flag + "="):
                return int(a.split("=", 1)[1])
    return default if p.argv[:2] == ["vllm", "serve"] else None


@dataclass
class Route:
    """One request's way through a target: the processes that may receive it (``name -> Proc``) and the port
    the last hop addresses on them."""

    target: str
    procs: dict[str, Proc]
    port: int
    hops: list[str] = field(default_factory=list)  # what was followed, for a failure message


def route_compose(docs: dict[str, dict], workload_backends: set[str]) -> Route:
    """compose has no router for unified deployments: a client sends to a published host port of a service
    that serves its workload (``workload_backends``: the plan's deployment names, as service names
    ``<deployment>-r<replica>``). A P/D pair's entry point is its router service
    (test_emit_compose_pd_router)."""
    procs, port, hops = {}, None, []
    for fname, doc in docs.items():
        for p in compose(doc):
            svc = doc["services"][p.name]
            if p.name.rsplit("-r", 1)[0] not in {b.replace(".", "-") for b in workload_backends}:
                continue
            for published in svc.get("ports", []):
                host, container = published.split(":")[-2:]
                hops.append(f"{fname}: {p.name} host {host} -> container {container}")
                procs[p.name], port = p, int(container)
    return Route("compose", procs, port, hops)


def route_k8s(objs: list[dict], workload: str, prompt_tokens: int, secrets: dict | None = None) -> Route:
    """Gateway API: the HTTPRoute whose rule matches ``x-trimtab-workload: <workload>``, its backendRefs
    narrowed to the backends of the length rule (``trimtab-routes``) that holds ``prompt_tokens``, each a
    Service whose port maps to a targetPort on the pods its selector picks."""
    rule = next(r for o in objs if o["kind"] == "HTTPRoute" for r in o["spec"]["rules"]
                if any(h == {"name": "x-trimtab-workload", "value": workload}
                       for m in r.get("matches", []) for h in m.get("headers", [])))
    table = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "trimtab-routes")
    rules = _yaml_load(table["data"]["routes.yaml"])[workload]
    length = next(r for r in rules if r["prompt_tokens_min"] <= prompt_tokens < r["prompt_tokens_below"])
    allowed = {n for be in length["backends"] for k, n in be.items() if k != "weight"}
    refs = [b for b in rule["backendRefs"] if b["name"] in allowed and b.get("weight", 1) > 0]
    assert refs, (rule, length)
    procs, hops, ports = {}, [], set()
    by_name = k8s(objs, secrets)
    for ref in refs:
        svc = next(o for o in objs if o["kind"] == "Service" and o["metadata"]["name"] == ref["name"])
        sp = next(p for p in svc["spec"]["ports"] if p["port"] == ref["port"])
        target = sp.get("targetPort", sp["port"])
        sel = svc["spec"]["selector"]
        picked = [o["metadata"]["name"] for o in objs if o["kind"] == "Deployment"
                  and all(o["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in sel.items())]
        assert len(picked) == 1, (ref["name"], picked)  # picking another deployment's pods would mix them
        p = by_name[picked[0]][0]
        if isinstance(target, str):  # a named port
            dep = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == picked[0])
            target = next(pp["containerPort"] for ct in dep["spec"]["template"]["spec"]["containers"]
                          for pp in ct.get("ports", []) if pp.get("name") == target)
        hops.append(f"HTTPRoute {workload} -> Service {ref['name']}:{ref['port']} -> {picked[0]}:{target}")
        procs[picked[0]] = p
        ports.add(int(target))
    assert len(ports) == 1, ports
    return Route("k8s", procs, ports.pop(), hops)


def route_llmd(values: dict[str, dict], model_label: str, prompt_tokens: int,
               secrets: dict | None = None) -> Route:
    """llm-d: the InferencePool of the model (pods labelled ``llm-d.ai/inference-serving: "true"`` and
    ``llm-d.ai/model``), the decode role (the endpoint picker's unified and decode pods), and the
    context-length-aware filter (``llm-d.ai/context-length-range: min-max``, both ends included); the request
    reaches the pod's ``routing.servicePort`` (vLLM's port without the P/D sidecar)."""
    procs, hops, ports = {}, [], set()
    for fname, v in values.items():
        for p in llmd(v, secrets):
            lab = p.labels
            if lab.get("llm-d.ai/inference-serving") != "true" or lab.get("llm-d.ai/model") != model_label:
                continue
            if lab.get("llm-d.ai/role") != "decode":
                continue
            lo, hi = map(int, lab["llm-d.ai/context-length-range"].split("-"))
            if not lo <= prompt_tokens <= hi:
                continue
            proxy = v["routing"].get("proxy", {})
            # with the P/D sidecar on the service port, vLLM listens on its target port (llm-d's sidecar)
            port = int(proxy["targetPort"] if proxy.get("enabled") else v["routing"]["servicePort"])
            hops.append(f"{fname}: pool {model_label}, {lo}-{hi} admits {prompt_tokens} -> {p.name}:{port}")
            procs[f"{fname}/{p.name}"] = p
            ports.add(port)
    assert len(ports) == 1, (ports, hops)
    return Route("llm-d", procs, ports.pop(), hops)


def route_dynamo(graph: dict, served_model: str, secrets: dict | None = None) -> tuple[Route, Proc]:
    """Dynamo: the frontend (``--http-port``) takes the request and sends it to a worker registered for the
    request's ``model`` (the worker's ``--served-model-name``). Returns the route to the workers and the
    frontend."""
    procs = dynamo(graph, secrets)
    front = next(p for n, p in procs.items() if _component(graph, n)["type"] == "frontend")
    workers = {n: p for n, p in procs.items() if _component(graph, n)["type"] in ("worker", "decode")
               and f"--served-model-name={served_model}" in p.argv}
    port = listen_port(front)
    return Route("dynamo", workers, port, [f"frontend :{port} -> {sorted(workers)}"]), front


def _component(graph: dict, name: str) -> dict:
    return next(c for c in graph["spec"]["components"] if c["name"] == name)


def _yaml_load(text: str):
    import yaml

    return yaml.safe_load(text)
