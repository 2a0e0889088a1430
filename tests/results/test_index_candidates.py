"""Which candidate can ship: a real run of a folder holding one suite with two candidates, the FP16 demo's
collapsed FP16 model (onnxruntime.transformers.float16 of a torch-trained CNN, demo/fp16_repair/make_demo.py) and
its repair. The index gives a verdict per candidate; the suite's report opens with its failing checks, the lint
after them; and the run prints no numpy RuntimeWarning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli

DEMO = ROOT / "demo"
SUITE = f"""\
name: fp16_ship
models:
  reference: {DEMO}/fp16_repair/fashion_bn_fp32.onnx
  candidates:
    fp16: {DEMO}/fp16_repair/fashion_bn_fp16.onnx
    fp16_repaired: {DEMO}/fp16_repair/fashion_bn_fp16_repaired.onnx
inputs:
  file: {DEMO}/fashion_mnist/data/test_subset.npz
  batch_size: 8
  samples: 1
  arrays:
    input: {{key: images, dtype: float32, scale: 0.00392156862745098}}
stages:
  layerwise: {{}}
"""


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The folder run (its suite in a process of its own, every RuntimeWarning printed to its run.log) and what
    it printed."""
    base = tmp_path_factory.mktemp("ship")
    (base / "suites").mkdir()
    (base / "suites" / "fp16_ship.yaml").write_text(SUITE, encoding="utf-8")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONWARNINGS", "always::RuntimeWarning")  # shown every time, not once per place
        r = run_cli("run", "suites", "--out", "out", cwd=base)
    assert r.code == 1, r.out + r.err
    assert "RuntimeWarning" not in r.out + r.err
    return base / "out", r.out


@pytest.mark.slow  # the fixture runs a suite in a process of its own
def test_the_index_says_which_candidate_can_ship(gate):
    out, printed = gate
    index = json.loads((out / "index.json").read_text())
    rows = {c["candidate"]: c for c in index["candidates"]}
    assert list(rows) == ["fp16", "fp16_repaired"]
    assert rows["fp16"]["verdict"] == "failed" and rows["fp16"]["failed"] >= 1 and rows["fp16"]["suite"] == "fp16_ship"
    assert rows["fp16"]["worst_check"]["passed"] is False and rows["fp16"]["worst_check"]["candidate"] == "fp16"
    assert rows["fp16_repaired"]["verdict"] == "passed" and rows["fp16_repaired"]["failed"] == 0
    assert rows["fp16_repaired"]["checks"] >= 1 and rows["fp16_repaired"]["worst_check"]["passed"] is True
    html = (out / "index.html").read_text()
    ship = html[html.index("Which candidate can ship") : html.index("<h2>Suites</h2>")]
    assert ship.index(">fp16<") < ship.index(">fp16_repaired<") and 'href="fp16_ship/report.html"' in ship
    assert "FAILED      fp16_ship/fp16: fp16: " in printed and "PASSED      fp16_ship/fp16_repaired" in printed


@pytest.mark.slow  # the fixture runs a suite in a process of its own
def test_the_suite_report_opens_with_its_failing_checks_then_the_lint(gate):
    html = (gate[0] / "fp16_ship" / "report.html").read_text()
    why, lint = html.index('aria-label="why"'), html.index('aria-label="high lint findings"')
    assert why < lint < html.index("<th>stage</th><th>status</th>")
    assert "constant_saturated" in html[lint:]  # the lint the FP16 model has: the BatchNorm variance of 1e8


@pytest.mark.slow  # the fixture runs a suite in a process of its own
def test_the_run_prints_no_runtime_warning(gate):
    log = (gate[0] / "fp16_ship" / "run.log").read_text()
    assert "FAILED: suite 'fp16_ship'" in log  # the suite's own output is there
    assert "RuntimeWarning" not in log, log


def test_a_candidate_none_of_whose_checks_failed_is_not_passed_where_a_stage_could_not_run():
    """A stage error (or a stopped run) may have left a candidate unchecked: its verdict is error, not passed."""
    from trtverify.compare.checks import limit_check
    from trtverify.results.index import candidate_rows
    from trtverify.results.models import Results
    from trtverify.stages.base import StageError, StageResult

    good = limit_check("b: rel_l2 <= 0.01", "layerwise", "rel_l2", 0.001, 0.01, "<=", candidate="b")
    bad = limit_check("a: rel_l2 <= 0.01", "layerwise", "rel_l2", 0.5, 0.01, "<=", candidate="a")
    layerwise = StageResult(name="layerwise", status="failed", checks=[bad, good])
    ran = Results.model_construct(stages=[layerwise], complete=True)
    assert [(r.candidate, r.verdict) for r in candidate_rows("s", ran)] == [("a", "failed"), ("b", "passed")]
    crashed = StageResult(name="e2e", status="error", error=StageError(kind="crash", message="killed", exit_code=4))
    for results in (
        Results.model_construct(stages=[layerwise, crashed], complete=True),
        Results.model_construct(stages=[layerwise], complete=False),
    ):
        rows = candidate_rows("s", results)
        assert [(r.candidate, r.verdict) for r in rows] == [("a", "failed"), ("b", "error")]
        assert rows[0].worst_check is bad and rows[1].failed == 0 and rows[1].checks == 1
