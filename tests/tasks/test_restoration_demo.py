"""The restoration demo (suites/restoration.yaml): the FP16 candidate that keeps the rescaled convolution in FP32
passes, the plain FP16 conversion (the planted overflow) fails on PSNR and SSIM, so the suite exits 1, with the
figures demo/restoration/make_demo.py measured with its own numpy code."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, main_in_process

SUITE = ROOT / "suites" / "restoration.yaml"
MEASURED = json.loads((ROOT / "demo" / "restoration" / "metrics.json").read_text())["psnr_y_crop2_db"]


def test_the_demo_passes_the_good_fp16_and_fails_the_planted_overflow_on_psnr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    r = main_in_process(["run", str(SUITE), "--stage", "e2e", "--out", str(tmp_path)], capsys, monkeypatch)
    assert r.code == 1, r.out + r.err
    assert "FAIL fp16_overflow: psnr drop <= 0.1: 12.3" in r.out and "FAIL fp16:" not in r.out
    stage = json.loads((tmp_path / "results.json").read_text())["stages"][0]
    assert stage["task"] == "restoration" and stage["samples"] == 24
    ref, (good, bad) = stage["reference"], stage["candidates"]
    assert ref["psnr"] == pytest.approx(MEASURED["sr_fp32_ort_native"], abs=1e-4)
    assert good["passed"] and good["metrics"]["psnr"] == pytest.approx(MEASURED["sr_fp16_emulated"], abs=1e-4)
    assert not bad["passed"] and bad["metrics"]["psnr"] == pytest.approx(
        MEASURED["sr_fp16_overflow_emulated"], abs=1e-4
    )
    assert bad["metrics"]["nonfinite"] == MEASURED["sr_fp16_overflow_emulated_nonfinite"] > 0
    assert bad["worst"][0]["psnr_drop"] > 5 and [c["name"] for c in bad["per_class"]] == ["R", "G", "B"]
    assert ref["ssim"] - bad["metrics"]["ssim"] > 0.05 and not stage["reference_sanity"]["degenerate"]


def _suite(tmp_path: Path, options: str, npz: Path) -> Path:
    text = SUITE.read_text().replace("../demo/", f"{ROOT}/demo/").replace(f"{ROOT}/demo/restoration/val.npz", str(npz))
    text = text.replace("options: {channels: y, data_range: 255}", f"options: {options}")
    path = tmp_path / "suite.yaml"
    path.write_text(text)
    return path


def test_lpips_without_its_package_is_skipped_and_said_in_the_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    if importlib.util.find_spec("lpips") is not None:
        pytest.skip("lpips is installed here")
    suite = _suite(tmp_path, "{lpips: true}", ROOT / "demo" / "restoration" / "val.npz")
    r = main_in_process(["run", str(suite), "--stage", "e2e", "--out", str(tmp_path / "out")], capsys, monkeypatch)
    assert r.code == 1, r.out + r.err  # the planted candidate still fails on PSNR
    ref = json.loads((tmp_path / "out" / "results.json").read_text())["stages"][0]["reference"]
    assert "lpips" not in ref and ref["skipped"][0].startswith("lpips: the lpips package cannot be imported")


def test_targets_of_another_size_stop_the_stage_naming_the_image(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    with np.load(ROOT / "demo" / "restoration" / "val.npz", allow_pickle=False) as z:
        np.savez(tmp_path / "val.npz", images=z["images"], labels=z["labels"][:, ::2, ::2])  # x1 targets for an x2 net
    suite = _suite(tmp_path, "{channels: rgb}", tmp_path / "val.npz")
    r = main_in_process(["run", str(suite), "--stage", "e2e", "--out", str(tmp_path / "out")], capsys, monkeypatch)
    assert r.code == 2, r.out + r.err
    assert "restoration: image 0: output of shape [64, 64, 3] (as HWC) for a target of shape [32, 32, 3]" in r.out
    assert "Traceback" not in r.out + r.err
