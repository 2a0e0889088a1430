"""The range report of a quantized candidate (issue 38, item 3): each quantized activation's calibrated range
against the reference's values. A CNN quantized by ONNX Runtime's quantize_static on rows 10x smaller than the
inputs compared clips; the same model calibrated on rows like the inputs does not."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli

torch = pytest.importorskip("torch")


def _cnn(path: Path) -> Path:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3, padding=1),
                              torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3, padding=1)).eval()  # fmt: skip
    torch.onnx.export(net, (torch.rand(1, 3, 16, 16),), str(path), input_names=["x"], output_names=["y"],
                      opset_version=17, dynamo=False)  # fmt: skip
    return path


@pytest.mark.parametrize(("scale", "clips"), [(0.1, True), (1.0, False)])
def test_ranges_name_what_the_calibration_clips(tmp_path: Path, scale: float, clips: bool) -> None:
    from trtverify.convert.int8 import quantize

    ref = _cnn(tmp_path / "cnn.onnx")
    rng = np.random.default_rng(0)
    calib = [{"x": (rng.random((1, 3, 16, 16), dtype=np.float32) * scale)} for _ in range(8)]
    cand = quantize(ref, tmp_path / "int8.onnx", calib)
    np.savez(tmp_path / "eval.npz", x=np.random.default_rng(1).random((2, 3, 16, 16), dtype=np.float32))
    r = run_cli("layerwise", str(ref), str(cand), "--inputs", str(tmp_path / "eval.npz"), "--out", str(tmp_path / "o"))
    assert r.code in (0, 1), r.out + r.err
    cand_result = json.loads((tmp_path / "o" / "results.json").read_text())["stages"][0]["candidates"][0]
    rows = cand_result["ranges"]
    assert len(rows) >= 2 and all(row["samples"] == 2 for row in rows)
    worst = rows[0]
    if clips:
        assert worst["clipped_fraction"] > 0.05 and worst["reference_max_abs"] > 2 * worst["limit"]
        assert "clip the reference's values (worst" in r.out
    else:
        assert all(row["clipped_fraction"] < 0.01 for row in rows)
    assert "Calibrated ranges" in (tmp_path / "o" / "report.html").read_text()
