"""docker compose files for a plan, one per node of its placement: each replica a service pinned to the GPU
indices the placement gave it, on its own host port.

Entry point: ``compose_files(bundle) -> dict[file name, document]``. A replica spanning nodes has no
single-host form: ``InputError`` naming it (emit ``--to k8s`` instead, which uses a LeaderWorkerSet).
"""
from __future__ import annotations

from trimtab.deploy.common import (HF_HOME, HF_TOKEN, PORT, SHM_GIB, Bundle, engine_process, network_kv,
                                    image_warnings, no_pd_router, side_channel)
from trimtab.errors import InputError, Problem

CONFIG_DIR = "/etc/trimtab"


def compose_files(b: Bundle) -> dict[str, dict]:
    problems = [Problem("deployments "
                        f"({t.dep.name})", f"a replica spans {t.facts.nodes_per_replica} nodes; docker "
                        "compose runs one host: emit --to k8s (LeaderWorkerSet)")
                for t in b.targets if t.facts.nodes_per_replica > 1]
    if problems:
        raise InputError(problems, "plan")
    nodes: dict[str, dict] = {}
    health = b.engine["health_path"]
    for t in b.targets:
        program, args = engine_process(b, t.launch.command)
        reps: dict[int, tuple[str, list[int]]] = {}
        for p in t.dep.placement:
            node, gpus = reps.get(p.replica, (p.node, []))
            reps[p.replica] = (node, gpus + list(p.gpus))
        for r, (node, gpus) in sorted(reps.items()):
            svc = {"image": b.image(), "entrypoint": program, "command": args,
                   # the host's HF_TOKEN (docs/deploy.md, "Secrets"); empty for a model that is not gated
                   "environment": {HF_TOKEN: "${" + HF_TOKEN + ":-}", "HF_HOME": HF_HOME},
                   "shm_size": f"{SHM_GIB}gb", "ipc": "host",
                   "volumes": ["model-cache:/models"],
                   "healthcheck": {"test": ["CMD", "python3", "-c", "import urllib.request; urllib.request."
                                            f"urlopen('http://localhost:{PORT}{health}')"],
                                   "interval": "10s", "retries": 3, "start_period": f"{t.startup_budget_s}s"},
                   "deploy": {"resources": {"reservations": {"devices": [
                       {"driver": "nvidia", "device_ids": [str(g) for g in sorted(gpus)],
                        "capabilities": ["gpu"]}]}}},
                   "restart": "unless-stopped"}
            if t.launch.files:
                svc["working_dir"] = CONFIG_DIR
                svc["volumes"] = svc["volumes"] + [f"./{f}:{CONFIG_DIR}/{f}:ro"
                                                   for f in sorted(t.launch.files)]
            sc = side_channel(b, t)
            if sc:  # peers reach a P/D side by its service name on the project's network (one node's file)
                svc["environment"].update({sc["host_env"]: f"{t.name}-r{r}", sc["port_env"]: str(sc["port"])})
            doc = nodes.setdefault(node, {"services": {}, "volumes": {"model-cache": {}}})
            port = PORT + len(doc["services"])
            svc["ports"] = [f"{port}:{PORT}"]
            doc["services"][f"{t.name}-r{r}"] = svc
    return {f"compose-{node}.yaml": nodes[node] for node in sorted(nodes)}


def warnings(b: Bundle) -> list[str]:
    nodes = {t.dep.name: {p.node for p in t.dep.placement} for t in b.targets}
    apart = sorted({f"{r.prefill} -> {r.decode}" for r in b.plan.routes if r.prefill
                    and nodes[r.prefill] != nodes[r.decode]})
    sc = b.engine.get("kv_side_channel") or {}
    split = [f"--to compose: P/D pairs across nodes ({'; '.join(apart)}) reach each other by compose service "
             f"name, which resolves within one node's project only: publish port {sc.get('port')} and set "
             f"{sc.get('host_env')} to the node's address, or emit --to k8s"] if apart and sc else []
    return no_pd_router(b, "compose") + network_kv(b) + split + image_warnings(b)


def prerequisites(b: Bundle) -> list[str]:
    return ["on each node: Docker Compose v2 and the NVIDIA Container Toolkit (the services reserve GPUs by "
            "device_ids)", f"{HF_TOKEN} in the environment of docker compose for gated models: "
            f"{HF_TOKEN}=... docker compose -f compose-<node>.yaml up -d"]
