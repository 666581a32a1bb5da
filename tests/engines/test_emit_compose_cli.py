"""`trimtab emit --to compose` (validated against the compose-spec JSON Schema) and the `emit` command's
exit codes and messages."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from trimtab.cli.main import app
from trimtab.deploy import render

jsonschema = pytest.importorskip("jsonschema")
SCHEMA = json.loads((Path(__file__).resolve().parent / "schemas" / "compose-spec.json").read_text())
ROOT = Path(__file__).resolve().parents[2]


def test_compose_files_validate_and_pin_the_placed_gpus(example_plans, example_specs):
    for name, (plan, _) in example_plans.items():
        if name == "big405b":
            continue  # spans nodes: refused below
        files, _ = render(plan, example_specs[name], "compose", allow_experimental=True)
        pinned = {}
        for fname, text in files.items():
            if not fname.startswith("compose-"):
                continue
            doc = yaml.safe_load(text)
            jsonschema.Draft7Validator(SCHEMA).validate(doc)
            node = fname[len("compose-"):-len(".yaml")]
            ports = [s["ports"][0].split(":")[0] for s in doc["services"].values()]
            assert len(set(ports)) == len(ports)
            for svc in doc["services"].values():
                if "trimtab.dev/prefill" in svc.get("labels", {}):
                    assert "deploy" not in svc  # a P/D router (test_emit_compose_pd_router) needs no GPU
                    continue
                ids = svc["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"]
                pinned.setdefault(node, []).extend(ids)
        for node, ids in pinned.items():
            assert len(ids) == len(set(ids)), (name, node)  # no GPU given twice on a node
        want = {}
        for d in plan.deployments:
            for p in d.placement:
                want.setdefault(p.node, []).extend(str(g) for g in p.gpus)
        assert {n: sorted(v) for n, v in pinned.items()} == {n: sorted(v) for n, v in want.items()}


def test_compose_refuses_a_replica_spanning_nodes(tmp_path):
    r = CliRunner().invoke(app, ["plan", str(ROOT / "tests/engines/big405b.yaml"), "-o",
                                 str(tmp_path / "p.yaml")])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["emit", str(tmp_path / "p.yaml"), "--spec",
                                 str(ROOT / "tests/engines/big405b.yaml"),
                                 "--to", "compose", "-o", str(tmp_path / "out")])
    assert r.exit_code == 1 and "spans 2 nodes" in r.output and "Traceback" not in r.output


def test_emit_takes_a_prefix_tier_plan_without_experimental(example_plans, tmp_path):
    """The long-context example's host-memory prefix tier is what engines do: emitted as is (the refusal of an
    experimental live tier is tested in tests/kvtiers/test_kv_tiers.py)."""
    plan, _ = example_plans["long-context"]
    assert any(d.kv is not None and d.kv.offload_gib > 0 and not d.kv.live for d in plan.deployments)
    path = tmp_path / "plan.yaml"
    from trimtab.contract.write import emit

    path.write_text(emit(plan))
    args = ["emit", str(path), "--spec", str(ROOT / "examples/long-context.yaml"), "--to", "k8s", "-o",
            str(tmp_path / "out")]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "--kv-offloading-size=" in "".join(p.read_text() for p in (tmp_path / "out").glob("*.yaml"))


def test_emit_of_a_plan_from_another_spec_names_the_field(example_plans, tmp_path):
    from trimtab.contract.write import emit

    path = tmp_path / "plan.yaml"
    path.write_text(emit(example_plans["quickstart"][0]))
    r = CliRunner().invoke(app, ["emit", str(path), "--spec", str(ROOT / "examples/shared-prefix.yaml"),
                                 "--to", "k8s", "-o", str(tmp_path / "out")])
    assert r.exit_code == 1 and "another spec" in r.output and "Traceback" not in r.output
