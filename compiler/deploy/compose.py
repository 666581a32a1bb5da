"""docker compose files for a plan, one per node of its placement: each replica a service pinned to the GPU
indices the placement gave it, on its own host port; per prefill/decode pair a P/D router service
(``trimtab.deploy.pdrouter``), the pair's entry point, on the next host port of its decode side's node.

Entry point: ``compose_files(bundle) -> dict[file name, document]``. A replica spanning nodes has no
single-host form: ``InputError`` naming it (emit ``--to k8s`` instead, which uses a LeaderWorkerSet).
"""
from __future__ import annotations

from trimtab.deploy.common import (HF_HOME, HF_TOKEN, PORT, SHM_GIB, Bundle, engine_process, network_kv,
                                    image_warnings, no_pd_router, pd_workloads, side_channel)
from trimtab.errors import InputError, Problem
from trimtab.deploy import pdrouter

CONFIG_DIR = "/etc/trimtab"


def compose_files(b: Bundle) -> dict[str, dict]:
    problems = [Problem("deployments "
                        f"({t.dep.name})", f"a replica spans {t.facts.nodes_per_replica} nodes; docker "
                        "compose runs one host: emit --to k8s (LeaderWorkerSet)")
                for t in b.targets if t.facts.nodes_per_replica > 1]
    if problems:
        raise InputError(problems, "plan")
    nodes: dict[str, dict] = {}
    placed: dict[str, list[tuple[str, str, int]]] = {}  # target -> (node, service, host port) per replica
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
            placed.setdefault(t.name, []).append((node, f"{t.name}-r{r}", port))
    for name, node, svc in routers(b, placed):  # after every engine: the engines keep their host ports
        doc = nodes[node]
        svc["ports"] = [f"{PORT + len(doc['services'])}:{b.engine['pd_router']['port']}"]
        doc["services"][name] = svc
    return {f"compose-{node}.yaml": nodes[node] for node in sorted(nodes)}


def routers(b: Bundle, placed: dict[str, list[tuple[str, str, int]]]) -> list[tuple[str, str, dict]]:
    """(service name, node, service without ports) of the P/D router of each pair (``placed``: per target,
    the node, service name and host port of each replica). A router runs on the node of its decode side's
    first replica, beside the long-lived decode streams it relays; it reaches a replica on its own node by
    service name and engine port (the project's network), one on another node by that node's plan name and
    published port (compose names resolve within one project only: ``warnings``). It starts once its node's
    engines of the pair are healthy and waits for the others itself (``pdrouter.static_args``)."""
    if "pd_router" not in b.engine:
        return []
    pr = b.engine["pd_router"]
    workloads: dict[tuple[str, str], set[str]] = {}
    names = {t.dep.name: t.name for t in b.targets}
    for r in b.plan.routes:
        if r.prefill:
            workloads.setdefault((names[r.prefill], names[r.decode]), set()).add(r.workload)
    out = []
    for p, d in pdrouter.pairs(b):
        sides = {t.name: placed[t.name] for t in (p, d)}
        home = sides[d.name][0][0]

        def url(node: str, svc: str, port: int) -> str:
            return f"http://{svc}:{PORT}" if node == home else f"http://{node}:{port}"

        peers = pdrouter.static_args(b, [url(*x) for x in sides[p.name]], [url(*x) for x in sides[d.name]],
                                        max(p.startup_budget_s, d.startup_budget_s))
        local = sorted(svc for reps in sides.values() for node, svc, _ in reps if node == home)
        svc = {"image": pr["image"]["ref"], "entrypoint": list(pr["program"]),
               "command": pdrouter.router_args(b, peers),
               "depends_on": {s: {"condition": "service_healthy"} for s in local},
               # what the router fronts, for whoever reads the file to find a workload's entry point
               "labels": {"trimtab.dev/prefill": p.name, "trimtab.dev/decode": d.name,
                          "trimtab.dev/workloads": ",".join(sorted(workloads[(p.name, d.name)]))},
               "restart": "unless-stopped"}
        out.append((pdrouter.router_name(p, d), home, svc))
    return out


def warnings(b: Bundle) -> list[str]:
    nodes = {t.dep.name: {p.node for p in t.dep.placement} for t in b.targets}
    apart = sorted({f"{r.prefill} -> {r.decode}" for r in b.plan.routes if r.prefill
                    and nodes[r.prefill] != nodes[r.decode]})
    sc = b.engine.get("kv_side_channel") or {}
    split = [f"--to compose: P/D pairs across nodes ({'; '.join(apart)}) reach each other by compose service "
             f"name, which resolves within one node's project only: publish port {sc.get('port')} and set "
             f"{sc.get('host_env')} to the node's address, or emit --to k8s"] if apart and sc else []
    pr = b.engine.get("pd_router") or {}
    if apart and pr:  # routers()'s URLs of replicas on other nodes
        split.append("--to compose: the P/D routers reach their pairs' replicas on other nodes at "
                     "http://<node>:<published port>, with the plan's node names: each must resolve to that "
                     "node's address where the router runs (DNS or /etc/hosts), or edit the --prefill and "
                     "--decode URLs")
    if apart and "bootstrap" in pr:  # the decoder dials the host of the router's prefill URL
        split.append(f"--to compose: P/D pairs across nodes ({'; '.join(apart)}): a decoder fetches KV from "
                     f"the prefiller's bootstrap server at the host of the router's prefill URL, port "
                     f"{pr['bootstrap']['port']}, which compose does not publish (nor could two prefill "
                     "replicas of a node both publish it): run such pairs with emit --to k8s")
    return no_pd_router(b, "compose") + network_kv(b) + split + image_warnings(b)


def prerequisites(b: Bundle) -> list[str]:
    entry = [f"{svc} on {fname[len('compose-'):-len('.yaml')]}, host port {s['ports'][0].split(':')[0]}"
             for fname, doc in compose_files(b).items() for svc, s in doc["services"].items()
             if "trimtab.dev/workloads" in s.get("labels", {})]
    router = [f"clients of P/D workloads ({', '.join(pd_workloads(b))}) send to the P/D router of their "
              f"prefill/decode pair ({'; '.join(entry)}), image {b.engine['pd_router']['image']['ref']}"
              ] if entry else []
    return ["on each node: Docker Compose v2 and the NVIDIA Container Toolkit (the services reserve GPUs by "
            "device_ids)", f"{HF_TOKEN} in the environment of docker compose for gated models: "
            f"{HF_TOKEN}=... docker compose -f compose-<node>.yaml up -d"] + router
