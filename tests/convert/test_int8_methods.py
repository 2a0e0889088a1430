"""INT8 calibration methods (`convert --precision int8 --method ...`): each of ONNX Runtime's calibrators really used,
`auto` choosing on held-out rows, and the methods a tool lacks refused. Real torch export, real ONNX Runtime."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import numpy_helper  # noqa: E402

from trtverify.convert.int8 import quantize  # noqa: E402


@pytest.fixture(scope="module")
def cnn(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A small CNN exported with TorchScript (dynamo=False) and 48 calibration rows in [0, 1]: dim pixels (<= 0.2)
    and one bright one (1.0), the long tail where max, KL and percentile (99.999 %: > 100000 values) clips differ."""
    d = tmp_path_factory.mktemp("int8m")
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 48 * 48, 10),
    ).eval()
    x = torch.zeros(1, 1, 48, 48)
    path = d / "cnn.onnx"
    torch.onnx.export(net, (x,), str(path), input_names=["x"], output_names=["y"], opset_version=17, dynamo=False)
    rng = np.random.default_rng(0)
    rows = (rng.random((48, 1, 48, 48)) * 0.2).astype(np.float32)
    rows[5, 0, 20, 20] = 1.0
    calib = d / "calib.npz"
    np.savez(calib, x=rows)
    return path, calib


def _scales(path: Path) -> dict[str, float]:
    g = onnx.load(str(path)).graph
    out = {}
    for init in g.initializer:
        a = numpy_helper.to_array(init)
        if init.name.endswith("_scale") and a.size == 1:  # activation scales (weights are per channel)
            out[init.name] = float(a.ravel()[0])
    return out


def _rows(calib: Path) -> list[dict[str, np.ndarray]]:
    x = np.load(calib)["x"]
    return [{"x": x[i : i + 1]} for i in range(len(x))]


def test_each_method_calibrates_differently(cnn: tuple[Path, Path], tmp_path: Path) -> None:
    ref, calib = cnn
    scales = {m: _scales(quantize(ref, tmp_path / f"{m}.onnx", _rows(calib), method=m)) for m in
              ("minmax", "entropy", "percentile")}  # fmt: skip
    assert scales["minmax"].keys() == scales["entropy"].keys() == scales["percentile"].keys() != set()
    for a, b in (("minmax", "entropy"), ("minmax", "percentile"), ("entropy", "percentile")):
        assert any(abs(scales[a][t] - scales[b][t]) > 1e-3 * scales[a][t] for t in scales[a]), (a, b, scales)
    # entropy and percentile clip the long tail: never a wider range than the largest value seen
    for t, s in scales["minmax"].items():
        assert scales["entropy"][t] <= s * 1.0001 and scales["percentile"][t] <= s * 1.0001


def test_cli_method_is_used(cnn: tuple[Path, Path], tmp_path: Path) -> None:
    ref, calib = cnn
    r = run_cli("convert", str(ref), "--precision", "int8", "--calibration", str(calib), "--method", "entropy",
                "-o", str(tmp_path / "e.onnx"))  # fmt: skip
    assert r.code == 0, r.err
    assert "Collecting tensor data" not in r.out  # ONNX Runtime's calibrator prints are not trtverify's output
    assert _scales(tmp_path / "e.onnx") == _scales(
        quantize(ref, tmp_path / "direct.onnx", _rows(calib), method="entropy")
    )


def test_auto_prints_each_figure_and_keeps_the_smallest(cnn: tuple[Path, Path], tmp_path: Path) -> None:
    ref, calib = cnn
    out = tmp_path / "auto.onnx"
    r = run_cli("convert", str(ref), "--precision", "int8", "--calibration", str(calib), "-o", str(out))
    assert r.code == 0, r.err
    line = next(x for x in r.err.splitlines() if x.startswith("int8 calibration method:"))
    figures = {m: float(v) for m, v in re.findall(r"(minmax|entropy|percentile) ([0-9.e+-]+|inf)", line)}
    assert set(figures) == {"minmax", "entropy", "percentile"}, line
    chosen = line.split(":")[1].split()[0]
    assert figures[chosen] == min(figures.values()), line
    assert "12 held-out rows, calibrated on 36" in line  # the last quarter held out
    for m in figures:  # progress as each method runs
        assert f"int8 auto: calibrating with {m} on rows 0-35" in r.err
    # recorded in the model: the choice and each figure
    props = {p.key: p.value for p in onnx.load(str(out)).metadata_props}
    record = json.loads(props["trtverify.int8_calibration"])
    assert record["method"] == chosen and record["chosen_by"] == "auto" and record["held_out_rows"] == 12
    assert record["figures"] == pytest.approx(figures, rel=1e-3)
    # a classifier has no post-processing to cut: its (float) output is what is judged
    assert record["judged"] == ["y"] and record["judged_why"] == "its float outputs"
    # the final model: the chosen method on all rows
    assert _scales(out) == _scales(quantize(ref, tmp_path / "direct.onnx", _rows(calib), method=chosen))


def test_auto_with_one_row_falls_back_to_minmax(cnn: tuple[Path, Path], tmp_path: Path) -> None:
    ref, calib = cnn
    one = tmp_path / "one.npz"
    np.savez(one, x=np.load(calib)["x"][:1])
    r = run_cli("convert", str(ref), "--precision", "int8", "--calibration", str(one), "-o", str(tmp_path / "o.onnx"))
    assert r.code == 0, r.err
    assert "int8 calibration method: minmax (1 calibration row(s): too few to hold any out" in r.err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--method", "bogus"), "'bogus' is not one of 'auto', 'minmax', 'entropy', 'percentile', 'mse'"),
        (("--method", "mse"), "ONNX Runtime's quantize_static has no MSE calibrator; use one of minmax, entropy"),
        (("--tool", "modelopt", "--method", "percentile"), "ModelOpt calibrates int8 with minmax or entropy"),
        (("--tool", "modelopt", "--method", "mse"), "ModelOpt calibrates int8 with minmax or entropy"),
        (("--precision", "fp16", "--method", "minmax"), "calibration methods are for --precision int8"),
        (("--tool", "modelopt", "--precision", "fp16", "--method", "entropy"), "fp16 lowering takes no calibration"),
    ],
)
def test_methods_a_tool_lacks_are_usage_errors(
    cnn: tuple[Path, Path], tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    ref, calib = cnn
    out = tmp_path / "x.onnx"
    r = run_cli("convert", str(ref), "--precision", "int8", "--calibration", str(calib), *args, "-o", str(out))
    assert r.code == 2, r.err
    assert message in r.err
    assert not out.exists()


def test_modelopt_names() -> None:
    from trtverify.convert.modelopt import _method

    assert _method("minmax", "int8") == "max"
    assert _method("entropy", "fp8") == "entropy"
    assert _method("auto", "int8") is None and _method(None, "int8") is None


SUITE = """\
name: methods
reference_dir: refs
models:
  reference: {ref}
  candidates:
    int8_auto: {{from: reference, precision: int8, calibration: {{samples: 16}}}}
    int8_entropy: {{from: reference, precision: int8, calibration: {{samples: 16}}, method: entropy}}
inputs:
  file: {calib}
  samples: 16
stages:
  layerwise: {{}}
"""


def test_suite_recipe_method(cnn: tuple[Path, Path], tmp_path: Path) -> None:
    ref, calib = cnn
    (tmp_path / "suite.yaml").write_text(SUITE.format(ref=ref, calib=calib))
    r = run_cli("run", str(tmp_path / "suite.yaml"), "--out", str(tmp_path / "o"))
    assert r.code in (0, 1), r.out + r.err
    made = {p.name.split("-")[0]: p for p in (tmp_path / "o" / "candidates").glob("*.onnx")}
    records = {
        n: json.loads({q.key: q.value for q in onnx.load(str(p)).metadata_props}["trtverify.int8_calibration"])
        for n, p in made.items()
    }
    assert records["int8_entropy"] == {"method": "entropy", "calibration_rows": 16}
    auto = records["int8_auto"]
    assert (
        auto["chosen_by"] == "auto"
        and auto["held_out_rows"] == 4
        and set(auto["figures"])
        == {
            "minmax",
            "entropy",
            "percentile",
        }
    )
    assert auto["method"] == min(auto["figures"], key=lambda m: auto["figures"][m])
    rows = _rows(calib)[:16]
    assert _scales(made["int8_entropy"]) == _scales(quantize(ref, tmp_path / "e.onnx", rows, method="entropy"))
    # an INT8 option on an FP16 recipe is a suite error
    bad = SUITE.format(ref=ref, calib=calib).replace(
        "precision: int8, calibration: {samples: 16}, method", "precision: fp16, method"
    )
    (tmp_path / "bad.yaml").write_text(bad)
    r = run_cli("run", str(tmp_path / "bad.yaml"), "--out", str(tmp_path / "b"))
    assert r.code == 2 and "method are INT8 recipe options" in r.err, r.err


def test_auto_on_a_graph_whose_plugin_has_no_reference_falls_back_to_minmax(tmp_path: Path) -> None:
    """A plugin node ONNX Runtime cannot run and trtverify has no reference for: quantize_static calibrates the part
    before it (convert/around_plugins.py), but no candidate can be compared: minmax, saying why."""
    from onnx import TensorProto, helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 1, 3, 3)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("MyScale_TRT", ["r"], ["y"], name="plugin", domain="trt.plugins"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("trt.plugins", 1)]
    onnx.save(
        helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w]), opset_imports=opsets, ir_version=8),
        tmp_path / "p.onnx",
    )
    np.savez(tmp_path / "c.npz", x=np.random.default_rng(1).random((8, 1, 8, 8)).astype(np.float32))
    out = tmp_path / "q.onnx"
    r = run_cli("convert", str(tmp_path / "p.onnx"), "--precision", "int8", "--calibration", str(tmp_path / "c.npz"),
                "-o", str(out))  # fmt: skip
    assert r.code == 0, r.err
    assert "int8 calibration method: minmax (the reference cannot run here to compare methods" in r.err
    assert "MyScale_TRT" in r.err and r.err.count("cannot run here") == 1
    assert [n.op_type for n in onnx.load(str(out)).graph.node].count("QuantizeLinear") >= 1
