"""Progress of ONNX Runtime's INT8 calibration (issue 38, item 6): `convert --precision int8` says on stderr which
method calibrates and how many rows are done, at the start, every few seconds and at the end (not once per row), then
the histogram methods' histograms and entropy's threshold search (issue 45, item 5), and `auto` does so for each
method it tries. Real torch export, real ONNX Runtime."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from trtverify.convert import calibranges, int8  # noqa: E402

ROWS = 40


@pytest.fixture(scope="module")
def cnn(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("calprog")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(4, 2, 3)).eval()
    path = d / "cnn.onnx"
    torch.onnx.export(net, (torch.zeros(1, 1, 16, 16),), str(path), input_names=["x"], output_names=["y"],
                      opset_version=17, dynamo=False)  # fmt: skip
    calib = d / "calib.npz"
    np.savez(calib, x=np.random.default_rng(0).random((ROWS, 1, 16, 16), dtype=np.float32))
    return path, calib


def _progress(err: str) -> list[str]:
    return [line for line in err.splitlines() if re.search(r"calibration: \d+/\d+ rows", line)]


@pytest.mark.parametrize("method", ["minmax", "entropy", "percentile"])
def test_a_method_shows_its_rows(cnn: tuple[Path, Path], tmp_path: Path, method: str) -> None:
    ref, calib = cnn
    r = run_cli("convert", str(ref), "--precision", "int8", "--calibration", str(calib), "--method", method,
                "-o", str(tmp_path / "q.onnx"))  # fmt: skip
    assert r.code == 0, r.err
    lines = _progress(r.err)
    assert lines[0] == f"int8 {method} calibration: 0/{ROWS} rows", r.err
    assert re.fullmatch(rf"int8 {method} calibration: {ROWS}/{ROWS} rows \([0-9.]+ s\)", lines[-1]), r.err
    assert len(lines) <= 4, r.err  # a fast calibration: its start and end, not a line per row
    # after the rows, the histogram methods' own phases say what they do (convert/calibranges.py)
    histograms = re.findall(rf"^int8 {method} calibration: histograms of (\d+)/(\d+) tensors", r.err, re.M)
    thresholds = re.findall(rf"^int8 {method} calibration: thresholds of (\d+)/(\d+) tensors", r.err, re.M)
    if method == "minmax":  # its ranges are reduced as the rows run: nothing after them
        assert not histograms and not thresholds, r.err
    else:
        assert histograms[0][0] == "0" and histograms[-1][0] == histograms[-1][1] != "0", r.err
    if method == "entropy":  # its KL search, over the tensors a Q/DQ reads: the input and the ReLU's output
        assert thresholds[0] == ("0", "2") and thresholds[-1] == ("2", "2"), r.err


def test_auto_shows_each_methods_rows(cnn: tuple[Path, Path], tmp_path: Path) -> None:
    ref, calib = cnn
    r = run_cli("convert", str(ref), "--precision", "int8", "--calibration", str(calib), "-o", str(tmp_path / "a.onnx"))
    assert r.code == 0, r.err
    fit = ROWS - ROWS // 4  # auto holds the last quarter out
    done = _progress(r.err)
    for m in ("minmax", "entropy", "percentile"):
        assert any(line.startswith(f"int8 auto: {m} calibration: {fit}/{fit} rows (") for line in done), r.err
    # the chosen method again on every row
    assert re.search(rf"int8 auto: (minmax|entropy|percentile) calibration: {ROWS}/{ROWS} rows \(", r.err), r.err


def test_rows_are_reported_every_few_seconds_not_every_row(
    cnn: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ref, calib = cnn
    x = np.load(calib)["x"]
    rows = [{"x": x[i : i + 1]} for i in range(ROWS)]
    lines: list[str] = []
    int8.quantize(ref, tmp_path / "q.onnx", rows, progress=lines.append)
    assert len(lines) == 2  # well under PROGRESS_EVERY_S: the start and the end
    # every moment is "a few seconds later": each row has a line
    monkeypatch.setattr(calibranges, "PROGRESS_EVERY_S", 0.0)
    lines.clear()
    int8.quantize(ref, tmp_path / "q.onnx", rows, progress=lines.append)
    assert [int(re.search(r": (\d+)/", line).group(1)) for line in lines] == list(range(ROWS + 1))  # type: ignore[union-attr]
