"""A Cast the model itself computes (a mask cast to float in a detector's decode) pairs with the candidate's: it was
called 'rewritten' once, the candidate's Cast read as one a converter inserted after the Greater before it."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from trtverify.compare.pairing import pair_names
from trtverify.compare.semantic import resolve
from trtverify.graph.onnxgraph import GraphIndex


def graph(scale: float) -> GraphIndex:
    w = numpy_helper.from_array(np.full((4,), scale, np.float32), "w")
    zero = numpy_helper.from_array(np.zeros((), np.float32), "zero")
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["scores"]),
        helper.make_node("Greater", ["scores", "zero"], ["valid"]),
        helper.make_node("Cast", ["valid"], ["validf"], to=TensorProto.FLOAT),  # unnamed, as onnx helper users write
        helper.make_node("Mul", ["scores", "validf"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [w, zero],
    )
    return GraphIndex.from_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))


def test_the_models_own_cast_pairs():
    ref, cand = graph(1.0), graph(1.1)
    names = ref.value_tensors()
    resolved = resolve(pair_names(names, names), ref, cand)
    assert resolved.rewritten == {}
    assert ("validf", "validf") in resolved.pairing.pairs
    assert resolved.matches["validf"].how is None  # by name and producer, nothing inserted
