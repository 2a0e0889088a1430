import json

import jsonschema
import yaml

from tests.conftest import ROOT, run_cli


def test_schema_command_matches_committed_file_and_accepts_the_demo():
    r = run_cli("schema")
    assert r.code == 0
    schema = json.loads(r.out)
    committed = json.loads((ROOT / "suites" / "suite.schema.json").read_text())
    assert schema == committed, "suites/suite.schema.json is out of date: trtverify schema > suites/suite.schema.json"
    jsonschema.Draft202012Validator.check_schema(schema)
    demo = yaml.safe_load((ROOT / "suites" / "fashion_mnist.yaml").read_text())
    jsonschema.validate(demo, schema)
    bad = dict(demo, surprise=1)
    assert list(jsonschema.Draft202012Validator(schema).iter_errors(bad))


def test_validate_accepts_the_demo_suite():
    r = run_cli("validate", str(ROOT / "suites" / "fashion_mnist.yaml"))
    assert r.code == 0 and r.out.startswith("ok:")


def test_the_suite_reference_is_generated_from_the_schema_and_describes_every_key():
    from trtverify.config.reference import markdown, missing_descriptions

    assert missing_descriptions() == []  # the reference would say nothing about such a key
    committed = (ROOT / "docs" / "suite-reference.md").read_text()
    assert committed == markdown(), "docs/suite-reference.md is out of date: trtverify schema --markdown > it"
    r = run_cli("schema", "--markdown")
    assert r.code == 0 and r.out == committed
    # every key of every section is listed, with the dotted place it goes
    for place in ("## `stages.e2e.dataset`", "## `stages.layerwise.checks[]`", "## `models.candidates.NAME`"):
        assert place in committed
    assert "| `masks` | path or null | `null` |" in committed and "| `ignore_index` |" in committed


def test_all_suites_validate_against_the_schema_and_the_loader():
    schema = json.loads((ROOT / "suites" / "suite.schema.json").read_text())
    suites = sorted((ROOT / "suites").glob("*.yaml"))
    assert len(suites) >= 3
    for path in suites:
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)
    r = run_cli("validate", *map(str, suites))
    assert r.code == 0 and r.out.count("ok:") == len(suites), r.err
