"""Repair's INT8 (issue 38, items 1 and 3): the calibration method of the INT8 model repair makes (`repair --method`,
`stages.repair.method`, auto by default) and the range report as the search's ranking input (an activation whose
calibrated range clips the reference's values is the first thing kept). Real torch export, real ONNX Runtime."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from tests.conftest import run_cli
from trtverify.config.checks import Check
from trtverify.convert.int8 import CALIBRATION_KEY, quantize
from trtverify.repair.search import search

torch = pytest.importorskip("torch")
from tests.stages.layerwise.test_layerwise_real_tools import ConvReluNet, export  # noqa: E402


def _feeds(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)} for _ in range(n)]


def _shrink_range(model: onnx.ModelProto, conv: str, factor: float) -> str:
    """Divide the activation scale of `conv`'s input (its QuantizeLinear's and DequantizeLinear's) by `factor`;
    the tensor quantized."""
    producer = {o: n for n in model.graph.node for o in n.output}
    dq = producer[next(n for n in model.graph.node if n.name == conv).input[0]]
    q = producer[dq.input[0]]
    for name in {q.input[1], dq.input[1]}:
        init = next(i for i in model.graph.initializer if i.name == name)
        init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) / np.float32(factor), name))
    return q.input[0]


def test_the_activation_with_the_worst_range_is_ranked_first(tmp_path: Path) -> None:
    torch.manual_seed(0)
    export(ConvReluNet(), (1, 3, 32, 32), tmp_path / "ref.onnx")
    quantize(tmp_path / "ref.onnx", tmp_path / "int8.onnx", _feeds(16, 1))
    model = onnx.load(str(tmp_path / "int8.onnx"))
    worst = _shrink_range(model, "/c3/Conv", 100)  # 100x too small: clips most of its values
    milder = _shrink_range(model, "/c2/Conv", 3)  # 3x too small: clips some
    onnx.save(model, str(tmp_path / "bad.onnx"))
    checks = [Check(metric="rel_l2", max=0.05), Check(metric="cosine", min=0.999)]
    result = search(tmp_path / "ref.onnx", "int8", _feeds(4, 0), checks, candidate=tmp_path / "bad.onnx")
    assert not result.before.passed
    # the readers of the worst range first (/c3/Conv, and the residual /Add reads the same dequantized tensor), then
    # those of the milder one
    seeds = list(result.seeds.items())
    assert [n for n, _ in seeds[:3]] == ["/c3/Conv", "/Add", "/c2/Conv"], result.seeds
    assert seeds[0][1].startswith(f"calibrated range of {worst} (±") and "% of the reference's values" in seeds[0][1]
    assert seeds[2][1].startswith(f"calibrated range of {milder} (±")
    assert result.passed and "/c3/Conv" in result.keep, (result.keep, result.seeds)
    # the search's first evaluation already kept them: where the ranges point is where the error is
    assert set(result.steps[1].keep) >= {"/c3/Conv", "/c2/Conv"}


def test_a_range_an_outlier_stretched_is_ranked_first(tmp_path: Path) -> None:
    """The issue's corrupted calibration row (one value 1000x the others) makes a range 1000x too wide: nothing clips,
    but the INT8 step dwarfs the typical value."""
    torch.manual_seed(0)
    export(ConvReluNet(), (1, 3, 32, 32), tmp_path / "ref.onnx")
    quantize(tmp_path / "ref.onnx", tmp_path / "int8.onnx", _feeds(16, 1))
    model = onnx.load(str(tmp_path / "int8.onnx"))
    stretched = _shrink_range(model, "/c3/Conv", 1 / 1000)
    onnx.save(model, str(tmp_path / "bad.onnx"))
    checks = [Check(metric="rel_l2", max=0.05), Check(metric="cosine", min=0.999)]
    result = search(tmp_path / "ref.onnx", "int8", _feeds(4, 0), checks, candidate=tmp_path / "bad.onnx")
    assert not result.before.passed
    node, why = next(iter(result.seeds.items()))
    assert node == "/c3/Conv" and why.startswith(f"calibrated range of {stretched} (±") and "INT8 step is" in why, why
    assert result.passed and "/c3/Conv" in result.keep


def test_the_issues_corrupted_calibration_row_points_at_the_ranges_it_stretched(tmp_path: Path) -> None:
    """Issue 38's calibration set: rows in [0, 1], one pixel of row 7 at 1000. MinMax stretches the input's range and
    every range after it; the model input's range is judged too (its values are the feeds)."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d
    net = torch.nn.Sequential(conv(3, 16, 3, padding=1), torch.nn.ReLU(), conv(16, 16, 3, padding=1), torch.nn.ReLU(),
                              conv(16, 8, 3, padding=1)).eval()  # fmt: skip
    torch.onnx.export(net, (torch.rand(1, 3, 32, 32),), str(tmp_path / "m.onnx"), input_names=["x"],
                      output_names=["y"], opset_version=17, dynamo=False)  # fmt: skip
    rng = np.random.default_rng(0)
    calib = [{"x": rng.random((1, 3, 32, 32), dtype=np.float32)} for _ in range(32)]
    calib[7]["x"][0, 0, 10, 10] = 1000.0
    samples = [{"x": rng.random((1, 3, 32, 32), dtype=np.float32)} for _ in range(8)]
    result = search(tmp_path / "m.onnx", "int8", samples, [Check(metric="rel_l2", max=0.25)], calibration=calib,
                    method="minmax")  # fmt: skip
    assert not result.before.passed and result.calibration == {"method": "minmax", "calibration_rows": 32}
    node, why = next(iter(result.seeds.items()))
    assert node == "/0/Conv" and why.startswith("calibrated range of x (±1") and "INT8 step is" in why, result.seeds
    assert set(result.seeds) == {"/0/Conv", "/2/Conv", "/4/Conv"}  # the input's range and both ReLU outputs'
    assert result.passed


def test_a_right_calibration_seeds_nothing_by_range(tmp_path: Path) -> None:
    torch.manual_seed(0)
    export(ConvReluNet(), (1, 3, 32, 32), tmp_path / "ref.onnx")
    quantize(tmp_path / "ref.onnx", tmp_path / "int8.onnx", _feeds(16, 1))
    model = onnx.load(str(tmp_path / "int8.onnx"))
    conv = next(n for n in model.graph.node if n.name == "/c2/Conv")
    dq = next(n for n in model.graph.node if n.output[0] == conv.input[1])  # its weight's scale: ranges say nothing
    scale = next(i for i in model.graph.initializer if i.name == dq.input[1])
    scale.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(scale) * np.float32(8), scale.name))
    onnx.save(model, str(tmp_path / "bad.onnx"))
    checks = [Check(metric="rel_l2", max=0.05), Check(metric="cosine", min=0.999)]
    result = search(tmp_path / "ref.onnx", "int8", _feeds(4, 0), checks, candidate=tmp_path / "bad.onnx")
    assert not result.before.passed
    assert not any(why.startswith("calibrated range") for why in result.seeds.values()), result.seeds


def test_repair_method_is_used_and_recorded(tmp_path: Path) -> None:
    torch.manual_seed(0)
    export(ConvReluNet(), (1, 3, 32, 32), tmp_path / "ref.onnx")
    np.savez(tmp_path / "in.npz", x=np.concatenate([f["x"] for f in _feeds(8, 0)]))
    base = ["repair", str(tmp_path / "ref.onnx"), "--precision", "int8", "--inputs", str(tmp_path / "in.npz")]
    r = run_cli(*base, "--method", "entropy", "--out", str(tmp_path / "e"))
    assert r.code in (0, 1), r.out + r.err
    rec = json.loads((tmp_path / "e" / "repair-int8" / "repair.json").read_text())
    assert rec["calibration"] == {"method": "entropy", "calibration_rows": 6}  # the search's rows (2 held out)
    assert "entropy calibration: 6/6 rows" in r.out + r.err
    meta = {p.key: p.value for p in onnx.load(rec["repaired_model"]).metadata_props}
    assert json.loads(meta[CALIBRATION_KEY])["method"] == "entropy"
    results = json.loads((tmp_path / "e" / "results.json").read_text())
    assert results["stages"][0]["calibration"]["method"] == "entropy"
    # auto, the default: each method judged on held-out calibration rows, the choice recorded with its figures
    r = run_cli(*base, "--out", str(tmp_path / "a"))
    assert r.code in (0, 1), r.out + r.err
    rec = json.loads((tmp_path / "a" / "repair-int8" / "repair.json").read_text())
    assert rec["calibration"]["chosen_by"] == "auto" and set(rec["calibration"]["figures"]) == {
        "minmax", "entropy", "percentile"}  # fmt: skip
    assert f"int8 calibration method: {rec['calibration']['method']}" in r.out + r.err
    # a method where nothing is calibrated here: exit 2 before anything runs
    r = run_cli(*base, "--method", "minmax", "--candidate", str(tmp_path / "e" / "repair-int8" / "ref_int8.onnx"))
    assert r.code == 2 and "--candidate is calibrated already" in r.err
    r = run_cli(*base[:3], "fp16", "--method", "minmax")
    assert r.code == 2 and "calibration methods are for --precision int8" in r.err
