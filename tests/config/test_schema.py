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
