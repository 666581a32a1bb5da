"""The spec's JSON Schema (``trimtab schema spec``) is what editors complete from: it names itself (``$id``,
``$schema``), describes every field, and accepts every example spec (docs/spec-reference.md)."""
from __future__ import annotations

import json

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from trimtab.cli.main import app
from trimtab.spec.schema import SPEC_SCHEMA_ID
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def spec_schema() -> dict:
    res = CliRunner().invoke(app, ["schema", "spec"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def properties(node, where: str = "#"):
    """Every (JSON pointer, property schema) under any ``properties`` of ``node``, nested definitions
    included."""
    if isinstance(node, dict):
        for name, sub in (node.get("properties") or {}).items():
            yield f"{where}/properties/{name}", sub
        for k, v in node.items():
            yield from properties(v, f"{where}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from properties(v, f"{where}/{i}")


def test_schema_has_an_id_and_a_dialect(spec_schema):
    assert spec_schema["$id"] == SPEC_SCHEMA_ID == "urn:trimtab:schema:spec:v1"
    assert spec_schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_every_field_has_a_description(spec_schema):
    props = list(properties(spec_schema))
    assert len(props) >= 87  # the walk reaches the nested definitions, not only the top level
    missing = [p for p, sub in props if not str(sub.get("description", "")).strip()]
    assert not missing, "fields without a description:\n" + "\n".join(missing)


def test_the_walk_would_catch_a_missing_description(spec_schema):
    """The check above can fail: strip one nested description and it is reported by its pointer."""
    broken = json.loads(json.dumps(spec_schema))
    del broken["$defs"]["Slo"]["properties"]["tpot_ms"]["description"]
    missing = [p for p, sub in properties(broken) if not sub.get("description")]
    assert missing == ["#/$defs/Slo/properties/tpot_ms"]


@pytest.mark.parametrize("example", sorted(p.name for p in (ROOT / "examples").glob("*.yaml")))
def test_examples_validate_against_the_schema(spec_schema, example):
    """An editor using the schema accepts every example (and rejects an unknown key, as the loader does)."""
    data = yaml.safe_load((ROOT / "examples" / example).read_text())
    jsonschema.Draft202012Validator(spec_schema).validate(data)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(spec_schema).validate({**data, "surprise": 1})
