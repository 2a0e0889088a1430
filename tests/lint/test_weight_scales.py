"""The lint names an INT8 weight quantized with one scale over output channels whose ranges differ by more than
100x (issue 38, item 5): ONNX Runtime's quantize_static with per_channel=False on a Conv whose channels differ
1000x, against the same model quantized per channel."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtverify.convert.int8 import quantize
from trtverify.lint.linter import lint_candidate


def _conv(path: Path, spread: float) -> Path:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    w[4:] /= spread  # half the output channels `spread` times smaller
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["y"], ["out"], name="relu")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 8, 8, 8])],
        [numpy_helper.from_array(w, "w")],
    )  # fmt: skip
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    return path


def _findings(path: Path) -> list:
    return [f for f in lint_candidate(path, strongly_typed=True) if f.kind == "weight_per_tensor_scale"]


def test_one_scale_over_channels_1000x_apart_is_named_and_per_channel_is_not(tmp_path: Path) -> None:
    ref = _conv(tmp_path / "conv.onnx", 1000.0)
    rows = [{"x": np.random.default_rng(i).random((1, 3, 8, 8), dtype=np.float32)} for i in range(4)]
    tensor = quantize(ref, tmp_path / "per_tensor.onnx", rows, per_channel=False)
    channel = quantize(ref, tmp_path / "per_channel.onnx", rows, per_channel=True)
    (f,) = _findings(tensor)
    assert f.severity == "medium" and f.tensor == "w_quantized" and f.detail["channels"] == 8
    # ONNX Runtime stores the weight quantized: the small channels became all zero (a range below half a step)
    assert f.detail["spread"] > 100 and f.detail["starved_channels"] == 4 and f.detail["zeroed"] == 4
    assert "axis=0" in f.message and "4 of them all zero" in f.message
    assert _findings(channel) == []


def test_channels_within_100x_under_one_scale_are_not_named(tmp_path: Path) -> None:
    ref = _conv(tmp_path / "conv.onnx", 10.0)
    rows = [{"x": np.random.default_rng(i).random((1, 3, 8, 8), dtype=np.float32)} for i in range(4)]
    assert _findings(quantize(ref, tmp_path / "per_tensor.onnx", rows, per_channel=False)) == []


def test_a_float_weight_quantized_by_one_scale_is_measured_on_its_float_channels(tmp_path: Path) -> None:
    """Weights kept in float and quantized in the graph (QuantizeLinear -> DequantizeLinear -> Conv, as Q/DQ
    exporters write them): the spread is read from the float channels."""
    w = np.ones((4, 2, 1, 1), np.float32)
    w[2:] = 1e-3
    scale = np.float32(1 / 127)
    g = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["w", "s", "z"], ["wq"], name="q"),
         helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["wd"], name="dq"),
         helper.make_node("Conv", ["x", "wd"], ["y"], name="conv")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(scale), "s"),
         numpy_helper.from_array(np.array(0, np.int8), "z")],
    )  # fmt: skip
    path = tmp_path / "qdq.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    (f,) = _findings(path)
    assert f.tensor == "w" and f.node == "q" and f.detail["spread"] == pytest.approx(1000, rel=1e-3)
    assert f.detail["starved_channels"] == 2


def _constant_weights(path: Path, opset: int) -> Path:
    """Paddle2ONNX's way (PP-OCRv4's recognizer: 420 Constant nodes, no initializer, opset 12): a Conv whose weight
    and bias are Constant nodes, channels 1000x apart, then a Squeeze (whose axes moved to an input at opset 13)."""
    w = np.random.default_rng(0).standard_normal((8, 3, 3, 3)).astype(np.float32)
    w[4:] /= 1000
    nodes = [
        helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(w)),
        helper.make_node("Constant", [], ["b"], value=numpy_helper.from_array(np.zeros(8, np.float32))),
        helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("ReduceMean", ["y"], ["m"], name="mean", axes=[2, 3], keepdims=1),
        helper.make_node("Squeeze", ["m"], ["out"], name="squeeze", axes=[2, 3]),
    ]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 8])])  # fmt: skip
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8), str(path))
    return path


def test_constant_node_weights_are_quantized_per_channel_and_old_opsets_upgraded(tmp_path: Path) -> None:
    import onnxruntime as ort

    from trtverify.convert.int8 import _quantize

    ref = _constant_weights(tmp_path / "const.onnx", 12)
    rows = [{"x": np.random.default_rng(i).random((1, 3, 8, 8), dtype=np.float32)} for i in range(4)]
    as_activation = _quantize(ref, tmp_path / "before.onnx", rows, symmetric=True, per_channel=True, exclude=())
    (f,) = _findings(as_activation)  # the quantizer's own path: one scale for the Constant node's output
    assert f.tensor == "w" and f.detail["starved_channels"] == 4
    out = quantize(ref, tmp_path / "after.onnx", rows)
    assert _findings(out) == []
    m = onnx.load(str(out))
    assert next(o.version for o in m.opset_import if o.domain == "") >= 13
    scales = [t for t in m.graph.initializer if t.name.startswith("w") and "scale" in t.name]
    assert scales and numpy_helper.to_array(scales[0]).size == 8  # one scale per output channel
    x = rows[0]["x"]
    want = ort.InferenceSession(str(ref), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 0.05


def test_modelopt_int8_of_constant_node_weights_is_per_channel(tmp_path: Path) -> None:
    """ModelOpt 0.47's INT8 gives a Constant node's weight one scale (the lint names it); `convert --tool modelopt`
    hands ModelOpt the weights as initializers, which it quantizes per channel."""
    pytest.importorskip("modelopt", reason="the [modelopt] extra")
    from tests.conftest import run_cli

    w = np.random.default_rng(0).standard_normal((8, 3, 3, 3)).astype(np.float32)
    w[4:] /= 1000
    nodes = [helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(w)),
             helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["y"], ["out"], name="relu")]  # fmt: skip
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 8, 8, 8])])  # fmt: skip
    ref = tmp_path / "constw.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(ref))
    np.savez(tmp_path / "calib.npz", x=np.random.default_rng(0).random((8, 3, 8, 8), dtype=np.float32))
    out = tmp_path / "int8.onnx"
    r = run_cli("convert", str(ref), "--precision", "int8", "--tool", "modelopt", "--calibration",
                str(tmp_path / "calib.npz"), "-o", str(out))  # fmt: skip
    assert r.code == 0, r.out + r.err
    assert _findings(out) == []
    assert any(n.op_type == "DequantizeLinear" for n in onnx.load(str(out)).graph.node)
