"""Shape-baking lint on models exported by torch.onnx.export with dynamic axes: traced Python ints become constants
(trtverify/lint/shapes.py). Each baked model is also run at another size in ONNX Runtime, to show the finding is
real: it fails or answers with the wrong shape there, while the model computed from the input does not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from trtverify.lint.linter import lint_candidate


class ViewOne(torch.nn.Module):  # x.view(1, -1): the batch traced as 1
    def forward(self, x):
        return torch.relu(x).view(1, -1)


class ViewBatch(torch.nn.Module):  # x.view(x.size(0), -1): computed from the input
    def forward(self, x):
        return torch.relu(x).view(x.size(0), -1)


class SliceFixed(torch.nn.Module):  # x[:, :16] on a dynamic sequence axis traced at 16
    def forward(self, x):
        return x[:, :16] * 2


class ExpandFixed(torch.nn.Module):  # expand to the traced batch
    def forward(self, x):
        return x.expand(4, -1) + 1


def _export(model: torch.nn.Module, example: torch.Tensor, path: Path, axes: dict[int, str]) -> Path:
    torch.onnx.export(
        model, (example,), str(path), input_names=["x"], output_names=["y"], dynamic_axes={"x": axes},
        opset_version=17, dynamo=False,
    )  # fmt: skip
    return path


def _baked(path: Path) -> list:
    return [f for f in lint_candidate(path, target="fp32") if f.kind == "shape_baked"]


def _runs_at(path: Path, x: np.ndarray) -> tuple[int, ...] | None:
    try:
        return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0].shape
    except Exception:  # ONNX Runtime refuses the shape: the baked constant no longer fits
        return None


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::torch.jit.TracerWarning")
def test_a_batch_traced_into_a_reshape_is_named_and_wrong_at_another_batch(tmp_path):
    baked = _export(ViewOne(), torch.randn(1, 3, 4), tmp_path / "one.onnx", {0: "batch"})
    fine = _export(ViewBatch(), torch.randn(1, 3, 4), tmp_path / "batch.onnx", {0: "batch"})
    (f,) = _baked(baked)
    assert f.op_type == "Reshape" and f.detail["dimension"] == "batch" and f.detail["values"][0] == 1
    assert f.severity == "medium" and "batch" in f.message
    assert _baked(fine) == []
    x2 = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    assert _runs_at(fine, x2) == (2, 12)
    assert _runs_at(baked, x2) != (2, 12)  # (1, 24): batch 2 answered as one row


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::torch.jit.TracerWarning")
def test_a_fixed_slice_end_on_a_dynamic_axis(tmp_path):
    path = _export(SliceFixed(), torch.randn(1, 16, 8), tmp_path / "slice.onnx", {0: "batch", 1: "seq"})
    found = _baked(path)
    assert [(f.op_type, f.detail["dimension"]) for f in found] == [("Slice", "seq")]
    x = np.random.default_rng(0).standard_normal((1, 32, 8)).astype(np.float32)
    assert _runs_at(path, x) == (1, 16, 8)  # a 32-long sequence silently cut to 16


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::torch.jit.TracerWarning")
def test_an_expand_to_the_traced_batch(tmp_path):
    path = _export(ExpandFixed(), torch.randn(1, 8), tmp_path / "expand.onnx", {0: "batch"})
    found = _baked(path)
    assert [(f.op_type, f.detail["dimension"]) for f in found] == [("Expand", "batch")]


def test_a_static_model_has_no_shape_finding(tmp_path):
    path = _export(ViewOne(), torch.randn(1, 3, 4), tmp_path / "static.onnx", {})
    assert _baked(path) == []
