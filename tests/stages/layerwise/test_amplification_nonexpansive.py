"""Amplification ranks by the error a layer adds; a Relu that zeroes most of its input cannot add error, though its
output's relative error exceeds its input's (the same difference over a smaller output). Found on a 5,018-node
model, where amplification ranked a Relu above the planted MatMul and isolate did not; here the same shape in four
nodes: MatMul (planted: its weight x1.5), Add of a large negative bias, Relu (most values zeroed), MatMul."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.stages.layerwise.test_layerwise import run_layerwise, suite_text


def _model(path: Path, scale: float) -> None:
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((16, 32)) * scale).astype(np.float32)
    bias = np.full(32, -1.2, np.float32)  # most pre-activations negative: the Relu keeps few of them
    w2 = rng.standard_normal((32, 8)).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (bias, "bias"), (w2, "w2"))]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1/MatMul"),
        helper.make_node("Add", ["h", "bias"], ["pre"], name="fc1/Add"),
        helper.make_node("Relu", ["pre"], ["act"], name="act/Relu"),
        helper.make_node("MatMul", ["act", "w2"], ["y"], name="fc2/MatMul"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def test_a_relu_adds_no_error_and_the_planted_matmul_ranks_first(tmp_path: Path):
    _model(tmp_path / "ref.onnx", 0.25)
    _model(tmp_path / "cand.onnx", 0.25 * 1.5)
    inputs = "  samples: 2\n  generate:\n    x: {shape: [4, 16], range: [-1, 1]}\n"
    extra = "    root_cause_method: amplification\n    checks: [{metric: rel_l2, max: 0.01}]\n"
    stage = run_layerwise(tmp_path, suite_text("ref.onnx", {"planted": "cand.onnx"}, inputs, extra))
    cand = stage["candidates"][0]
    rows = {r["node"]: r for r in cand["rows"]}
    # the shape of the trap: the Relu's relative error is larger than its input's, its mean |difference| is not
    relu, add = rows["act/Relu"], rows["fc1/Add"]
    assert relu["metrics"]["rel_l2"] > add["metrics"]["rel_l2"] + 0.2
    assert relu["metrics"]["mean_abs"] <= add["metrics"]["mean_abs"]
    causes = {rc["node"]: rc for rc in cand["root_causes"]}
    assert cand["root_causes"][0]["node"] == "fc1/MatMul", cand["root_causes"][:3]
    assert causes["act/Relu"]["score"] == 0.0 and causes["act/Relu"]["added_rel_l2"] > 0.2
