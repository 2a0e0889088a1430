"""The keypoints demo suite: its FP16 candidate passes, its planted FP16 overflow fails on keypoint AP and PCK
(exit 1), and trtverify's figures equal those the demo script computed with its own numpy code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT, main_in_process

DEMO = ROOT / "demo" / "keypoints"
SUITE = ROOT / "suites" / "keypoints.yaml"


def _run(tmp_path: Path, capsys, monkeypatch, extra: str = "") -> tuple[int, dict]:
    (tmp_path / "suites").mkdir()
    for name in ("demo", "reference_outputs"):
        (tmp_path / name).symlink_to(ROOT / name)
    suite = tmp_path / "suites" / SUITE.name
    suite.write_text(SUITE.read_text().replace("      pck_alpha: 0.2\n", "      pck_alpha: 0.2\n" + extra))
    r = main_in_process(["run", str(suite), "--out", str(tmp_path / "out")], capsys, monkeypatch)
    stages = json.loads((tmp_path / "out" / "results.json").read_text())["stages"]
    return r.code, next(s for s in stages if s["name"] == "e2e")


def test_the_fp16_candidate_passes_and_the_planted_overflow_fails_on_ap_and_pck(tmp_path: Path, capsys, monkeypatch):
    code, e2e = _run(tmp_path, capsys, monkeypatch)
    assert code == 1 and e2e["task"] == "keypoints" and e2e["samples"] == 60
    ref, (fp16, bad) = e2e["reference"], e2e["candidates"]
    assert ref["map"] > 0.95 and ref["pck"] > 0.95 and ref["nonfinite_keypoints"] == 0
    assert fp16["name"] == "fp16" and fp16["passed"]
    assert bad["name"] == "fp16_overflow" and not bad["passed"]
    failed = {c["metric"] for c in e2e["checks"] if not c["passed"]}
    assert failed == {"map_drop", "pck_drop"}
    assert bad["deltas"]["map"] < -0.5 and bad["deltas"]["pck"] < -0.2
    assert bad["metrics"]["nonfinite_keypoints"] > 0  # the inf heatmaps are counted
    assert bad["worst"][0]["oks_drop"] > 0.5 and [r["name"] for r in bad["per_class"]][0] == "head"


def test_pck_and_oks_equal_the_demo_scripts_own_reading(tmp_path: Path, capsys, monkeypatch):
    """Without the quarter-pixel refinement trtverify reads the heatmaps as the script's plain arg-max did."""
    code, e2e = _run(tmp_path, capsys, monkeypatch, "      refine: none\n")
    assert code == 1
    shipped = json.loads((DEMO / "metrics.json").read_text())["metrics"]
    by = {"reference": e2e["reference"], **{c["name"]: c["metrics"] for c in e2e["candidates"]}}
    for name, key in [("reference", "ort_fp32"), ("fp16", "trtverify_emulated_fp16"),
                      ("fp16_overflow", "trtverify_emulated_fp16_overflow")]:  # fmt: skip
        assert by[name]["pck"] == pytest.approx(shipped[key]["pck@0.2_argmax"], abs=5e-5), name
        assert by[name]["mean_oks"] == pytest.approx(shipped[key]["mean_oks_argmax"], abs=1e-3), name


def test_worst_samples_are_fed_as_the_person_crops_the_model_saw():
    """`--samples worst` feeds the layerwise stage the e2e samples: for this task the preprocessed crops."""
    import numpy as np
    from PIL import Image

    from trtverify.config.loader import load_suite
    from trtverify.stages.e2e.stage import worst_feeds
    from trtverify.tasks.keypoints import crop, crop_box

    feeds = worst_feeds(load_suite(SUITE), [2])
    ann = json.loads((DEMO / "val" / "person_keypoints.json").read_text())["annotations"][2]
    image = np.asarray(Image.open(DEMO / "val" / "images" / "0003.png").convert("RGB"))
    want = np.asarray(Image.fromarray(crop(image, crop_box(ann["bbox"], 1.0, 1.25))).resize((64, 64), Image.BILINEAR))
    assert feeds[0]["images"].shape == (1, 3, 64, 64)
    np.testing.assert_allclose(feeds[0]["images"][0], want.transpose(2, 0, 1) / np.float32(255), atol=1e-6)
