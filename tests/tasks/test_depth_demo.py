"""The depth demo (demo/depth, suites/depth.yaml): the FP16 candidate passes, the INT8 candidate calibrated on near
scenes fails on delta1 and abs_rel, and trtverify's figures equal those make_demo.py wrote with its own
implementation of the published formulas (metrics.json)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from tests.conftest import ROOT, main_in_process
from trtverify.config.loader import load_suite
from trtverify.config.stages import E2EStage
from trtverify.results.io import load_results
from trtverify.results.record import write_results
from trtverify.tasks.batches import Batch
from trtverify.tasks.depth import DepthTask
from trtverify.util.errors import SuiteError

SUITE = ROOT / "suites" / "depth.yaml"
DEMO = ROOT / "demo" / "depth"
SCHEMA = json.loads((ROOT / "trtverify" / "results" / "results.schema.json").read_text())


def test_the_demo_passes_fp16_and_fails_the_near_calibrated_int8(tmp_path: Path, capsys, monkeypatch):
    r = main_in_process(["run", str(SUITE), "--out", str(tmp_path / "out")], capsys, monkeypatch)
    assert r.code == 1, r.out + r.err
    stage = json.loads((tmp_path / "out" / "results.json").read_text())["stages"][0]
    verdict = {c["name"]: c["passed"] for c in stage["checks"]}
    assert verdict["fp16: delta1 drop <= 0.01"] and verdict["fp16: abs_rel rise <= 0.005"]
    assert not verdict["int8_near: delta1 drop <= 0.01"] and not verdict["int8_near: abs_rel rise <= 0.005"]
    assert "FAIL int8_near: delta1 drop <= 0.01" in r.out
    by_name = {c["name"]: c["metrics"] for c in stage["candidates"]}
    written = json.loads((DEMO / "metrics.json").read_text())
    figures = next(v for k, v in written.items() if k.startswith("metrics_val"))
    for ours, theirs in ((stage["reference"], figures["fp32"]), (by_name["int8_near"], figures["int8_near"])):
        for k, v in theirs.items():
            assert ours[k] == pytest.approx(v, abs=6e-5), k  # metrics.json rounds to 4 digits
    assert stage["reference"]["invalid_pixels"] > 0  # the sensor holes are masked out
    results = tmp_path / "out" / "results.json"
    jsonschema.validate(json.loads(results.read_text()), SCHEMA)
    write_results(tmp_path / "again.json", load_results(results))  # the typed records read back as written
    assert (tmp_path / "again.json").read_text() == results.read_text()
    far = next(c for c in stage["candidates"] if c["name"] == "int8_near")["per_class"][-1]  # the far third
    assert far["depth_range"] == "[16.667, 25]" and far["candidate_delta1"] < 0.1 < 0.9 < far["reference_delta1"]


def test_a_drop_limit_on_an_error_metric_is_refused_naming_the_gate(tmp_path: Path):
    text = SUITE.read_text().replace("{metric: abs_rel, max_rise: 0.005}", "{metric: abs_rel, max_drop: 0.005}")
    path = tmp_path / "depth.yaml"
    path.write_text(text.replace("../demo/depth", str(DEMO)))
    with pytest.raises(SuiteError, match="'abs_rel' is lower-is-better: give max_rise, max_rel_rise, max"):
        load_suite(path)


def test_a_disparity_output_becomes_depth():
    cfg = E2EStage.model_validate(
        {
            "task": "depth",
            "dataset": {"npz": str(DEMO / "val.npz"), "labels_key": "depth"},
            "options": {"output": "disparity", "disparity_scale": 2.0},
            "gates": [{"metric": "delta1", "max_drop": 0.01}],
        }
    )
    task = DepthTask.open(cfg)
    disparity = np.array([[[[4.0, 0.0], [np.nan, 0.5]]]], np.float32)  # [1, 1, 2, 2]
    batch = Batch(index=[0], inputs=np.zeros((1, 3, 2, 2), np.float32), labels=[None], sizes=[(2, 2)])
    (depth,) = task.postprocess({"depth": disparity}, batch, "m")
    np.testing.assert_array_equal(depth, [[0.5, np.inf], [np.nan, 4.0]])
    assert len(task.reader.ids) == 48
