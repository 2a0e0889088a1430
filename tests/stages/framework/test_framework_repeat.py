"""Stage `framework` refuses a PyTorch model that is no reference (issue 45, item 9): a YOLOv7-style end-to-end
detector whose export-only NMS `autograd.Function` returns random tensors from forward (tests/models/yolov7_end2end,
made with torch.onnx.export by make_model.py there), and one whose stand-in returns zeros whatever the input.
Real PyTorch, real ONNX Runtime (EfficientNMS_TRT by trtverify's built-in reference)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import write_suite

pytest.importorskip("torch")

MODEL = Path(__file__).resolve().parents[2] / "models" / "yolov7_end2end"

SUITE = """\
name: yolo
python_path: [.]
reference_dir: refs
models:
  reference: model.onnx
  pytorch:
    factory: "yolo_end2end:build"
    weights: weights.pt
    kwargs: {{stand_in: {stand_in}}}
    output_names: [num_dets, det_boxes, det_scores, det_classes]
inputs:
  samples: 3
  generate:
    images: {{shape: [1, 3, 64, 64], range: [0, 1]}}
stages:
  framework: {{}}
"""


def _run(tmp_path: Path, stand_in: str):
    from trtverify.cli.run import run_and_record
    from trtverify.config.loader import load_suite

    folder = tmp_path / "m"
    shutil.copytree(MODEL, folder, ignore=shutil.ignore_patterns("__pycache__"))
    suite = write_suite(folder, SUITE.format(stand_in=stand_in))
    results = run_and_record(load_suite(suite), tmp_path / "out")
    return results.stages[0], folder


def test_a_yolov7_nms_stand_in_returning_random_tensors_is_refused_with_the_reason(tmp_path: Path):
    stage, folder = _run(tmp_path, "random")
    assert stage.status == "error" and stage.error.exit_code == 1 and stage.error.kind == "user"
    message = stage.error.message
    assert message.startswith("the PyTorch model is not deterministic: run twice on the same input (sample 0)")
    for output in ("num_dets", "det_boxes", "det_scores", "det_classes"):
        assert f"'{output}': " in message
    assert "max |diff|" in message and "autograd.Function" in message and "batched_nms" in message
    assert not stage.checks  # nothing compared: not "0 of N boxes matched"
    assert not (folder / "refs").exists()  # random outputs are not stored as the reference


def test_a_stand_in_whose_outputs_do_not_depend_on_the_input_is_named(tmp_path: Path):
    stage, _ = _run(tmp_path, "zeros")
    assert stage.status == "failed"  # deterministic, so compared: ONNX Runtime's boxes against none
    note = next(n for n in stage.notes if n.startswith("PyTorch gave the same outputs for all 3 samples"))
    assert "do not depend on its input" in note and "ONNX Runtime's outputs differ" in note
    assert {"pytorch_s", "pytorch_repeat_s"} <= set(stage.timings)  # the second run is of one sample


def test_float_noise_between_runs_is_not_nondeterminism():
    from trtverify.stages.framework_repeat import check_deterministic, difference

    rng = np.random.default_rng(0)
    a = rng.normal(size=(4, 100)).astype(np.float32)
    noise = a * np.float32(1 + 1e-7)  # a GPU reduction's order changing: last-bit differences
    assert difference(a, noise) is None
    assert difference(a, a + np.float32(1e-3)) is not None
    assert difference(np.array([1, 2], np.int32), np.array([1, 3], np.int32)) == "1 of 2 values differs"
    assert difference(np.array([np.nan, 1.0]), np.array([np.nan, 1.0])) is None
    assert difference(np.zeros((1, 5)), np.zeros((1, 7))) is not None
    check_deterministic({"x": a}, {"x": noise})  # no error
