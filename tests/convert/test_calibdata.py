"""The calibration-data lint (issue 38 item 2): a corrupted calibration row is named and left out of INT8
calibration, so `convert --precision int8` gives a candidate that holds on normal inputs.

Real PyTorch export (TorchScript exporter), real ONNX Runtime quantization, the real CLI; nothing faked."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli
from trtverify.convert.calibdata import MIN_ROWS, check_rows

torch = pytest.importorskip("torch")


def _cnn(path: Path) -> Path:
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.c2 = torch.nn.Conv2d(8, 16, 3, padding=1)
            self.c3 = torch.nn.Conv2d(16, 8, 3, padding=1)

        def forward(self, x):  # type: ignore[no-untyped-def]
            return self.c3(torch.relu(self.c2(torch.relu(self.c1(x)))))

    with warnings.catch_warnings():  # the TorchScript exporter's deprecation notice
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            Net().eval(), (torch.rand(1, 3, 32, 32),), str(path), input_names=["input"], output_names=["output"],
            dynamo=False,
        )  # fmt: skip
    return path


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("calib")
    rng = np.random.default_rng(0)
    cal = rng.random((32, 3, 32, 32), dtype=np.float32)
    cal[7, 0, 5, 5] = 1000.0  # one corrupted pixel in row 7: the case
    np.savez(d / "calib.npz", input=cal)
    np.savez(d / "normal.npz", input=rng.random((8, 3, 32, 32), dtype=np.float32))
    return {"ref": _cnn(d / "ref.onnx"), "calib": d / "calib.npz", "normal": d / "normal.npz", "dir": d}


def _feeds(arr: np.ndarray) -> list[dict[str, np.ndarray]]:
    return [{"input": arr[i : i + 1]} for i in range(len(arr))]


def test_the_corrupted_row_is_named_and_left_out(case: dict[str, Path]) -> None:
    feeds = _feeds(np.load(case["calib"])["input"])
    check = check_rows(case["ref"], feeds, keep_outliers=False)
    assert [o.row for o in check.outliers] == [7]
    assert check.outliers[0].tensors >= 5  # the input and the tensors after it (measured: 6 of 6)
    assert check.outliers[0].factor > 100
    assert 7 not in check.kept and len(check.kept) == 31
    assert any(w.startswith("calibration row 7 sets the range of") for w in check.warnings())
    assert [x.row for x in check.outside] == [7]
    kept = check_rows(case["ref"], feeds, keep_outliers=True)
    assert [o.row for o in kept.outliers] == [7] and len(kept.kept) == 32


def test_normal_variation_is_not_flagged(case: dict[str, Path]) -> None:
    # rows as different as real images get: brightness from 0.2 to 1, a few nearly blank, some saturated
    rng = np.random.default_rng(1)
    scale = np.linspace(0.2, 1.0, 32, dtype=np.float32)[:, None, None, None]
    arr = rng.random((32, 3, 32, 32), dtype=np.float32) * scale
    arr[3] *= 0.3
    arr[9] = np.clip(arr[9] * 3, 0, 1)
    check = check_rows(case["ref"], _feeds(arr), keep_outliers=False)
    assert check.outliers == () and check.outside == () and check.constant == () and not check.skipped
    assert len(check.kept) == 32 and check.warnings() == []


def test_too_few_rows_and_a_constant_row(case: dict[str, Path]) -> None:
    arr = np.random.default_rng(2).random((8, 3, 32, 32), dtype=np.float32)
    arr[5] = 0.5
    check = check_rows(case["ref"], _feeds(arr), keep_outliers=False)
    assert check.too_few and check.rows < MIN_ROWS
    text = "\n".join(check.warnings())
    assert "8 calibration rows: fewer than 16" in text
    assert check.constant == (5,) and "calibration row 5 is constant" in text


def test_convert_leaves_the_row_out_and_the_candidate_holds(case: dict[str, Path]) -> None:
    d, ref = case["dir"], case["ref"]
    calib = ("--precision", "int8", "--calibration", str(case["calib"]))
    r = run_cli("convert", str(ref), *calib, "-o", str(d / "a.onnx"))
    assert r.code == 0, r.err
    assert "warning: calibration row 7 sets the range of" in r.err and "left out of calibration" in r.err
    lw = run_cli("layerwise", str(ref), str(d / "a.onnx"), "--inputs", str(case["normal"]), "--out", str(d / "ra"))
    assert lw.code == 0, lw.out + lw.err  # INT8 defaults hold on normal inputs (measured worst rel_l2 0.011)

    r = run_cli("convert", str(ref), *calib, "--keep-outlier-rows", "-o", str(d / "b.onnx"))
    assert r.code == 0, r.err
    assert "kept (--keep-outlier-rows)" in r.err
    lw = run_cli("layerwise", str(ref), str(d / "b.onnx"), "--inputs", str(case["normal"]), "--out", str(d / "rb"))
    assert lw.code == 1, lw.out + lw.err  # the failure (measured rel_l2 0.85 at the output)
    assert "FAIL b: rel_l2 <= 0.25" in lw.out


def test_two_corrupted_rows_are_both_named(case: dict[str, Path]) -> None:
    # against the other rows' *largest* value each would hide the other; against their median both stand out
    arr = np.load(case["calib"])["input"].copy()
    arr[20, 2, 9, 9] = -800.0
    check = check_rows(case["ref"], _feeds(arr), keep_outliers=False)
    assert [o.row for o in check.outliers] == [7, 20]
    assert 7 not in check.kept and 20 not in check.kept and len(check.kept) == 30
