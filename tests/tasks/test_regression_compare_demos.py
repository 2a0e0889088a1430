"""The regression and compare demos (`make demo`): each suite passes its good FP16 candidate and fails its planted
one on the metric a user would look at, so it exits 1."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.conftest import ROOT, main_in_process
from trtverify.results.io import load_results
from trtverify.results.record import write_results


def _e2e(tmp_path: Path, suite: str, capsys, monkeypatch) -> tuple[dict, str]:
    out = tmp_path / "out"
    r = main_in_process(["run", str(ROOT / "suites" / suite), "--stage", "e2e", "--out", str(out)], capsys, monkeypatch)
    assert r.code == 1, r.out + r.err
    stage = next(s for s in json.loads((out / "results.json").read_text())["stages"] if s["name"] == "e2e")
    write_results(out / "again.json", load_results(out / "results.json"))  # its records read back as written
    assert (out / "again.json").read_text() == (out / "results.json").read_text()
    return stage, r.out


def test_regression_demo_fails_the_naive_fp16_on_mae(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch):
    stage, out = _e2e(tmp_path, "regression.yaml", capsys, monkeypatch)
    ref = stage["reference"]
    assert ref["samples"] == 1000 and ref["mae"] < 0.1 and ref["nonfinite"] == 0
    fp16, naive = stage["candidates"]
    assert fp16["name"] == "fp16" and fp16["passed"] and abs(fp16["deltas"]["mae"]) < 0.01
    assert naive["name"] == "fp16_naive" and not naive["passed"]
    assert naive["deltas"]["mae"] > 1.0 and naive["metrics"]["nonfinite"] == 0  # finite, and wrong
    assert naive["per_class"][0]["output"] == "sound_m_s"
    assert "FAIL fp16_naive: mae rise <= 0.01" in out and "FAIL fp16:" not in out


def test_compare_demo_fails_the_overflowing_fp16_on_p95(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
):
    stage, out = _e2e(tmp_path, "compare.yaml", capsys, monkeypatch)
    assert stage["reference"]["rel_l2_max"] == 0 and stage["reference"]["rows"] == 500
    fp16, scaled = stage["candidates"]
    assert fp16["passed"] and fp16["metrics"]["rel_l2_p95"] < 0.01 and fp16["metrics"]["inf_rows"] == 0
    assert not scaled["passed"] and 0 < scaled["metrics"]["inf_rows"] < 250
    assert scaled["metrics"]["rel_l2_p50"] < 0.01  # most rows are right: only the overflowing ones are not
    assert math.isinf(float(scaled["metrics"]["rel_l2_p95"]))
    assert all(math.isinf(float(w["rel_l2"])) for w in scaled["worst"])
    assert "FAIL fp16_scaled: rel_l2_p95 rise <= 0.01" in out and "FAIL fp16:" not in out
