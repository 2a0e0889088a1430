"""results.json follows the committed JSON Schema; JUnit output names the failing checks with their numbers."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from tests.conftest import ROOT, run_cli

SCHEMA = json.loads((ROOT / "trtverify" / "results" / "results.schema.json").read_text())
JUNIT_XSD = ROOT / "tests" / "data" / "junit" / "junit.xsd"


def validate_junit(path: Path) -> ET.Element:
    """Valid against the JUnit schema CI systems read, and its counts add up."""
    import xmlschema

    xmlschema.XMLSchema(str(JUNIT_XSD)).validate(str(path))
    root = ET.parse(path).getroot()
    for ts in root.iter("testsuite"):
        cases = ts.findall("testcase")
        assert int(ts.get("tests")) == len(cases)
        for outcome, attr in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
            assert int(ts.get(attr)) == sum(tc.find(outcome) is not None for tc in cases)
    return root


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("schema") / "out"
    r = run_cli(
        "run", str(ROOT / "suites" / "fashion_mnist.yaml"), "--out", str(out), "--junit", str(out / "junit.xml")
    )
    assert r.code == 0, r.out + r.err
    return out


def test_the_committed_schema_is_generated_from_the_models():
    from trtverify.results.schema import SCHEMA_FILE, schema_text

    assert SCHEMA_FILE.read_text() == schema_text(), (
        "trtverify/results/results.schema.json is out of date: trtverify schema --results > it"
    )


def test_every_stage_of_the_demo_validates_and_reads_back(full_run: Path):
    from trtverify.results.io import load_results
    from trtverify.results.record import write_results

    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    results = json.loads((full_run / "results.json").read_text())
    assert [s["name"] for s in results["stages"]] == ["framework", "layerwise", "e2e", "buildlog"]
    jsonschema.validate(results, SCHEMA)
    typed = load_results(full_run / "results.json")  # the typed models read what they wrote, unchanged
    write_results(full_run / "again.json", typed)
    assert (full_run / "again.json").read_text() == (full_run / "results.json").read_text()


def test_the_schema_rejects_what_it_should(full_run: Path):
    results = json.loads((full_run / "results.json").read_text())
    broken = json.loads(json.dumps(results))
    broken["stages"][0]["checks"][0]["passed"] = "yes"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, SCHEMA)
    broken = json.loads(json.dumps(results))
    broken["stages"][0]["status"] = "ok"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, SCHEMA)
    broken = json.loads(json.dumps(results))
    broken["stages"][1]["candidates"][0]["rows"][0]["metrics"]["rel_l2"] = "small"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, SCHEMA)
    broken = json.loads(json.dumps(results))
    del broken["stages"][2]["checks"][0]["stage"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, SCHEMA)


def test_junit_of_a_passing_run(full_run: Path):
    root = validate_junit(full_run / "junit.xml")
    assert root.tag == "testsuites" and root.get("failures") == "0"
    results = json.loads((full_run / "results.json").read_text())
    assert int(root.get("tests")) == sum(len(s["checks"]) for s in results["stages"])
    assert [ts.get("name") for ts in root] == [
        f"fashion_mnist.{n}" for n in ("framework", "layerwise", "e2e", "buildlog")
    ]


def test_junit_of_a_failing_run_names_the_failing_checks(tmp_path: Path):
    shutil.copytree(ROOT / "suites", tmp_path / "suites")
    shutil.copytree(ROOT / "demo", tmp_path / "demo")
    suite = tmp_path / "suites" / "fashion_mnist.yaml"
    suite.write_text(
        suite.read_text().replace(
            "- {metric: accuracy, max_drop: 0.01, min: 0.85}", "- {metric: accuracy, max_drop: 0.0001, min: 0.85}"
        )
    )
    r = run_cli("run", str(suite), "--stage", "e2e", "--out", str(tmp_path / "o"), "--junit", str(tmp_path / "j.xml"))
    assert r.code == 1
    root = validate_junit(tmp_path / "j.xml")
    failures = [
        (tc.get("name"), tc.find("failure").get("message"))
        for tc in root.iter("testcase")
        if tc.find("failure") is not None
    ]
    # INT8 loses 0.0005 accuracy; FP16, emulated as a GPU rounds it, one sample too (natively on the CPU, none)
    assert root.get("failures") == str(len(failures)) and len(failures) >= 1
    assert ("int8: accuracy drop <= 0.0001", "accuracy_drop = 5.000e-04, limit <= 1.000e-04") in failures
    jsonschema.validate(json.loads((tmp_path / "o" / "results.json").read_text()), SCHEMA)


def test_errors_and_interrupted_runs_validate(tmp_path: Path, tiny_suite: Path):
    r = run_cli(
        "run", str(tiny_suite), "--out", str(tmp_path / "o"), "--junit", str(tmp_path / "j.xml"), block=("torch",)
    )
    assert r.code == 3
    results = json.loads((tmp_path / "o" / "results.json").read_text())
    jsonschema.validate(results, SCHEMA)
    root = validate_junit(tmp_path / "j.xml")
    assert root.get("errors") == "1" and next(root.iter("error")).get("type") == "dependency"


def test_the_junit_schema_rejects_what_ci_systems_would(full_run: Path, tmp_path: Path):
    import xmlschema

    text = (full_run / "junit.xml").read_text()
    for broken in (
        text.replace(' classname="', ' class="', 1),
        text.replace('failures="0"', 'failures="none"', 1),
        text.replace("<testcase ", "<case ", 1),
    ):
        (tmp_path / "bad.xml").write_text(broken)
        with pytest.raises(xmlschema.XMLSchemaValidationError):
            validate_junit(tmp_path / "bad.xml")
