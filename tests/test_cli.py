import json
from pathlib import Path

from tests.conftest import ROOT, run_cli


def test_missing_suite_file_is_exit_2():
    r = run_cli("run", "no/such/suite.yaml")
    assert r.code == 2 and "no/such/suite.yaml: file not found" in r.err and "Traceback" not in r.err


def test_unknown_option_is_exit_2():
    r = run_cli("run", "--frobnicate")
    assert r.code == 2 and "No such option" in r.err


def test_validate_reports_each_file(tmp_path: Path):
    bad = ROOT / "tests" / "data" / "bad_suites" / "unknown_metric.yaml"
    r = run_cli("validate", str(ROOT / "suites" / "fashion_mnist.yaml"), str(bad))
    assert r.code == 2 and "ok: " in r.out and "unknown metric 'cosin'" in r.err


def test_report_rerenders_from_results(tmp_path: Path, tiny_suite: Path):
    out = tmp_path / "o"
    assert run_cli("run", str(tiny_suite), "--out", str(out), "-q").code == 0
    (out / "report.html").unlink()
    r = run_cli("report", str(out / "results.json"), "--out", str(tmp_path / "again.html"))
    assert r.code == 0 and "PASSED" in (tmp_path / "again.html").read_text()
    (tmp_path / "broken.json").write_text("{not json")
    r = run_cli("report", str(tmp_path / "broken.json"))
    assert r.code == 2 and "not valid JSON" in r.err


def test_quiet_prints_only_the_verdict(tmp_path: Path, tiny_suite: Path):
    r = run_cli("run", str(tiny_suite), "--out", str(tmp_path / "o"), "-q")
    assert r.out.strip() == "PASSED: suite 'tiny' (exit 0)"
    assert json.loads((tmp_path / "o" / "results.json").read_text())["passed"] is True
