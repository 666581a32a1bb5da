"""What ``trimtab watch`` reports (docs/online.md, "Watching a deployment"): one ``Observation`` per step, and
the ``Proposal`` it makes, each with its ``--format json`` form."""
from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Proposal:
    number: int
    round: int
    reasons: list[str]
    rates_rps: dict[str, float]  # per workload: the rates the re-plan was made for
    failures: list[str]
    moves: dict[str, tuple[int, int]]  # deployment -> (started, stopped)
    replicas: dict[str, tuple[int, int]]  # deployment -> (running now, failed ones gone; proposed)
    cost_usd_per_hour: tuple[float, float]  # (now, proposed)
    transition_usd: float
    check_ok: bool
    check_violations: list[str]
    protects: list[str]  # workloads at risk, changed or on a failed deployment, whose SLOs the check passed
    folder: str
    calibration: list[dict] = field(default_factory=list)  # trimtab.online.recalibrate.Update.to_dict()
    applied: str = ""  # kubectl's outcome with --apply
    manifests: str = "k8s"  # the folder's subfolder holding them, or why none were written

    def to_dict(self) -> dict:
        return {"proposal": self.number, "round": self.round, "reasons": self.reasons,
                "rates_rps": {k: round(v, 4) for k, v in self.rates_rps.items()}, "failures": self.failures,
                "moves": {d: {"started": a, "stopped": b} for d, (a, b) in self.moves.items()},
                "replicas": {d: {"now": a, "proposed": b} for d, (a, b) in self.replicas.items()},
                "cost_usd_per_hour": {"now": round(self.cost_usd_per_hour[0], 4),
                                      "proposed": round(self.cost_usd_per_hour[1], 4)},
                "transition_usd": self.transition_usd, "check": {"ok": self.check_ok,
                                                                 "violations": self.check_violations},
                "protects": self.protects, "folder": self.folder, "manifests": self.manifests,
                "calibration": self.calibration, "applied": self.applied}


@dataclass
class Observation:
    """One step: what was measured and decided."""

    round: int
    t: float
    groups: dict[str, dict] = field(default_factory=dict)
    deployments: dict[str, dict] = field(default_factory=dict)
    workloads: dict[str, dict] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)  # replica=DEP/INDEX
    errors: dict[str, str] = field(default_factory=dict)  # url -> last scrape error
    notes: list[str] = field(default_factory=list)
    proposal: Proposal | None = None

    def to_dict(self) -> dict:
        return {"round": self.round, "t": round(self.t, 3), "groups": self.groups,
                "deployments": self.deployments, "workloads": self.workloads, "failed": self.failed,
                "errors": self.errors, "notes": self.notes,
                "proposal": self.proposal.to_dict() if self.proposal else None}


def kubectl_apply(folder: Path) -> str:
    """``watch --apply``: ``kubectl apply -f`` a proposal's manifests; its outcome, said."""
    try:
        res = subprocess.run(["kubectl", "apply", "-f", str(folder)], capture_output=True, text=True,
                             timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"kubectl failed: {exc}"
    if res.returncode == 0:
        return "applied"
    return f"kubectl exit {res.returncode}: {res.stderr.strip()[:300]}"
