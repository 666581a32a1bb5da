"""Which endpoint is which replica (``trimtab watch --metrics``; docs/online.md, "Watching a deployment"): an
engine's metrics URL, or with ``--prometheus`` its ``instance`` label, per replica of a plan deployment."""
from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from trimtab.errors import InputError, Problem


@dataclass(frozen=True)
class Target:
    """One endpoint: the metrics URL (``--prometheus``: the instance label) of one replica of a plan
    deployment."""

    url: str
    deployment: str
    replica: int


def _metrics_url(url: str, where: str) -> str:
    u = urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise InputError([Problem(where, f"expected http://HOST:PORT[/metrics], got {url!r}")], "arguments")
    try:
        u.port
    except ValueError as exc:
        raise InputError([Problem(where, f"not a URL: {url!r} ({exc})")], "arguments") from None
    return url if u.path.strip("/") else url.rstrip("/") + "/metrics"


def _instance(value: str, where: str) -> str:
    if not value or "/" in value:
        raise InputError([Problem(where, f"expected an instance label (HOST:PORT), got {value!r}")],
                         "arguments")
    return value


def targets_for(plan, values: list[str], instances: bool = False) -> list[Target]:
    """``DEPLOYMENT=URL`` (repeated: its replicas in order) or bare URLs, taken in the plan's order of
    deployments and replicas (a deployment of 2 replicas takes two). Not both; more URLs than replicas is an
    input error. ``instances``: the values are a Prometheus server's ``instance`` labels (``--prometheus``),
    not URLs."""
    where = _instance if instances else _metrics_url
    reps = {d.name: d.replicas for d in plan.deployments if d.replicas > 0}
    named = [v for v in values if "=" in v.split("://", 1)[0]]
    if named and len(named) != len(values):
        raise InputError([Problem("--metrics", "give every endpoint as DEPLOYMENT=URL, or none")],
                         "arguments")
    out: list[Target] = []
    if named:
        seen: dict[str, int] = {}
        for v in values:
            name, _, url = v.partition("=")
            if name not in reps:
                raise InputError([Problem("--metrics", f"deployment {name!r} is not in the plan "
                                                       f"(deployments: {', '.join(reps)})")], "arguments")
            i = seen.get(name, 0)
            if i >= reps[name]:
                raise InputError([Problem("--metrics", f"{name} has {reps[name]} replica(s) in the plan; "
                                                       f"{i + 1} endpoints given")], "arguments")
            seen[name] = i + 1
            out.append(Target(where(url, f"--metrics {name}"), name, i))
    else:
        slots = [(d, i) for d, n in reps.items() for i in range(n)]
        if len(values) > len(slots):
            raise InputError([Problem("--metrics", f"{len(values)} endpoints for the plan's {len(slots)} "
                                                   "replicas")], "arguments")
        out = [Target(where(v, "--metrics"), d, i) for v, (d, i) in zip(values, slots)]
    if not out:
        raise InputError([Problem("--metrics", "give at least one endpoint")], "arguments")
    if len({t.url for t in out}) != len(out):
        raise InputError([Problem("--metrics", "an endpoint is given twice")], "arguments")
    return out
