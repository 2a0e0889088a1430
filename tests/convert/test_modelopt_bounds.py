"""ModelOpt's INT8 through `convert --tool modelopt` on the issue's calibration set (32 rows in [0, 1], one pixel of
row 7 at 1000): the calibration-data lint leaves the row out and ModelOpt finishes in seconds; kept, ModelOpt's
entropy calibration runs away (it ran more than 15 minutes in the issue) and the bound stops it with its last log
line, which the run showed as it came."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli

torch = pytest.importorskip("torch")
pytest.importorskip("modelopt", reason="the [modelopt] extra")


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("mo_bounds")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3, padding=1),
                              torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3, padding=1)).eval()  # fmt: skip
    torch.onnx.export(net, (torch.rand(1, 3, 32, 32),), str(d / "cnn.onnx"), input_names=["x"], output_names=["y"],
                      opset_version=17, dynamo=False)  # fmt: skip
    x = np.random.default_rng(0).random((32, 3, 32, 32), dtype=np.float32)
    x[7, 0, 5, 5] = 1000
    np.savez(d / "calib.npz", x=x)
    np.savez(d / "normal.npz", x=np.random.default_rng(1).random((4, 3, 32, 32), dtype=np.float32))
    return d


def test_the_corrupted_row_is_left_out_and_modelopt_finishes(case: Path) -> None:
    t0 = time.monotonic()
    r = run_cli("convert", str(case / "cnn.onnx"), "--precision", "int8", "--tool", "modelopt", "--calibration",
                str(case / "calib.npz"), "-o", str(case / "mo.onnx"))  # fmt: skip
    assert r.code == 0, r.err
    assert time.monotonic() - t0 < 120
    assert "calibration row 7 sets the range of" in r.err and "  modelopt: " in r.err  # its log, as it came
    lw = run_cli("layerwise", str(case / "cnn.onnx"), str(case / "mo.onnx"), "--inputs", str(case / "normal.npz"),
                 "--out", str(case / "lw"))  # fmt: skip
    assert lw.code == 0, lw.out + lw.err


def test_a_runaway_calibration_is_stopped_by_the_bound_naming_its_last_line(case: Path) -> None:
    t0 = time.monotonic()
    args = ["--calibration", str(case / "calib.npz"), "--keep-outlier-rows", "--timeout", "8"]
    r = run_cli("convert", str(case / "cnn.onnx"), "--precision", "int8", "--tool", "modelopt", *args,
                "-o", str(case / "kept.onnx"))  # fmt: skip
    assert r.code == 2 and "ModelOpt did not finish within 8 s" in r.err and "its last line:" in r.err, r.err
    assert time.monotonic() - t0 < 60 and not (case / "kept.onnx").exists()
