"""Structural pairing's rules on small graphs written with onnx.helper, where each rule can be seen alone: weights
equal up to the precision they are stored in, Q/DQ pairs that clamp (a folded Relu) or pass a value on, and the
ambiguities that must leave tensors unpaired. The real exports are in tests/stages/layerwise/test_pairing_exports.py."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from trtverify.compare.constants import Constants, equal
from trtverify.compare.graphview import View
from trtverify.compare.structure import pair_by_structure
from trtverify.graph.onnxgraph import GraphIndex

RNG = np.random.default_rng(0)
W = RNG.standard_normal((8, 4)).astype(np.float32)


def graph(nodes: list, inits: list, outputs: list[str] = ("y",), inputs: tuple[str, ...] = ("x",)) -> GraphIndex:
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(i, TensorProto.FLOAT, None) for i in inputs],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        inits,
    )
    return GraphIndex.from_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))


def view(g: GraphIndex, shape: tuple[int, ...] = (2, 4)) -> View:
    live = set(g.value_tensors()) | set(g.inputs)
    return View(g, live, {t: shape for t in live})


def init(name: str, arr: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(arr, name)


def const_of(nodes: list, inits: list, name: str):
    return Constants(graph(nodes, inits, outputs=[], inputs=())).get(name)


def test_weights_are_equal_up_to_the_precision_they_are_stored_in():
    ref = const_of([], [init("w", W)], "w")
    fp16 = const_of([], [init("w", W.astype(np.float16))], "w")
    off = const_of([], [init("w", W * 1.01)], "w")  # a weight 1% away: another model
    assert equal(ref, fp16) and not equal(ref, off)
    # INT8 per channel, as quantizers store weights: values within half a step of the FP32 ones
    scale = np.abs(W).max(axis=1) / 127
    q = np.clip(np.rint(W / scale[:, None]), -127, 127).astype(np.int8)
    dq = helper.make_node("DequantizeLinear", ["q", "s", "z"], ["w"], axis=0)
    int8 = [init("q", q), init("s", scale.astype(np.float32)), init("z", np.zeros(8, np.int8))]
    per_channel = const_of([dq], int8, "w")
    assert equal(ref, per_channel) and not equal(off, per_channel)
    # a weight shared behind an Identity, quantised again as an activation (uint8, asymmetric): both steps allowed
    s2, z2 = np.float32((W.max() - W.min()) / 255), np.uint8(round(-W.min() / ((W.max() - W.min()) / 255)))
    twice = [
        dq,
        helper.make_node("Identity", ["w"], ["shared"]),
        helper.make_node("QuantizeLinear", ["shared", "s2", "z2"], ["q2"]),
        helper.make_node("DequantizeLinear", ["q2", "s2", "z2"], ["w2"]),
    ]
    requantised = const_of(twice, [*int8, init("s2", np.array(s2)), init("z2", np.array(z2))], "w2")
    assert equal(ref, requantised) and not equal(off, requantised)


def _qdq(src: str, dst: str, zp: np.ndarray, tag: str) -> tuple[list, list]:
    nodes = [
        helper.make_node("QuantizeLinear", [src, f"s{tag}", f"z{tag}"], [f"q{tag}"]),
        helper.make_node("DequantizeLinear", [f"q{tag}", f"s{tag}", f"z{tag}"], [dst]),
    ]
    return nodes, [init(f"s{tag}", np.array(0.02, np.float32)), init(f"z{tag}", zp)]


def test_a_clamping_qdq_is_a_relu_after_a_matmul_and_passes_a_softmax_on():
    """quantize_static's defaults fold the Relu after a MatMul into the Q/DQ after it (uint8, zero point 0): that
    pair is the Relu. The same Q/DQ after a Softmax (never negative) changes nothing: it passes the value on. A
    symmetric int8 pair (zero point 0 of -128..127) never clamps."""
    q1, i1 = _qdq("m", "m_dq", np.array(0, np.uint8), "1")
    q2, i2 = _qdq("p", "p_dq", np.array(0, np.uint8), "2")
    q3, i3 = _qdq("p_dq", "y", np.array(0, np.int8), "3")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), *q1, helper.make_node("Softmax", ["m_dq"], ["p"]), *q2, *q3]
    v = view(graph(nodes, [init("w", W[:4]), *i1, *i2, *i3]))
    clamps = {v.g.nodes[i].output[0] for i in v.clamps}
    assert clamps == {"m_dq"} and v.op(v.producer("m_dq")) == "Relu"
    assert v.of("p_dq") == "p" and v.of("y") == "p"  # looked through


def _pairs(ref: GraphIndex, cand: GraphIndex, seeds: dict[str, str]) -> dict[str, str]:
    rv, cv = view(ref), view(cand)
    wanted = [t for t in ref.value_tensors() if t not in seeds]
    exposed = set(cand.value_tensors()) - set(seeds.values())
    return {f.reference: f.candidate for f in pair_by_structure(rv, cv, seeds, wanted, exposed)}


def test_inputs_of_a_commutative_op_pair_either_way_round():
    ref = graph([helper.make_node("Add", ["x", "b"], ["s"]), helper.make_node("Tanh", ["s"], ["y"])],
                [init("b", W[0])])  # fmt: skip
    cand = graph([helper.make_node("Add", ["b2", "x"], ["t"]), helper.make_node("Tanh", ["t"], ["y"])],
                 [init("b2", W[0].astype(np.float16))])  # fmt: skip
    assert _pairs(ref, cand, {"x": "x", "y": "y"}) == {"s": "t"}
    other = graph([helper.make_node("Add", ["b2", "x"], ["t"]), helper.make_node("Tanh", ["t"], ["y"])],
                  [init("b2", W[1])])  # fmt: skip
    assert _pairs(ref, other, {"x": "x"}) == {}  # another bias: nothing computed from it pairs


def test_two_nodes_that_fit_one_leave_both_unpaired():
    """Two identical branches read one input: either could be either; neither is paired."""
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["x"], ["b"]),
             helper.make_node("Mul", ["a", "b"], ["y"])]  # fmt: skip
    cand = [helper.make_node("Relu", ["x"], ["a2"]), helper.make_node("Relu", ["x"], ["b2"]),
            helper.make_node("Mul", ["a2", "b2"], ["y"])]  # fmt: skip
    assert _pairs(graph(nodes, []), graph(cand, []), {"x": "x", "y": "y"}) == {}


def test_the_input_of_a_shift_invariant_op_is_not_paired_backward():
    """Softmax(x + c) and Softmax(x - d) are one value: their inputs are not. The input of a Tanh, an op whose
    output tells its input, is paired backward even where the two sides compute it differently."""

    def make(first: str, last: str, c: np.ndarray) -> GraphIndex:
        return graph([helper.make_node(first, ["x", "c"], ["h"]), helper.make_node(last, ["h"], ["y"])],
                     [init("c", c)])  # fmt: skip

    one, two = np.array(1.0, np.float32), np.array(3.0, np.float32)
    assert _pairs(make("Add", "Softmax", one), make("Sub", "Softmax", two), {"x": "x", "y": "y"}) == {}
    assert _pairs(make("Add", "Tanh", one), make("Sub", "Tanh", two), {"x": "x", "y": "y"}) == {"h": "h"}


def test_shape_arithmetic_is_compared_as_the_shapes_compute_it():
    """TorchScript computes an attention's scale from Shape nodes (1 / sqrt(d)), dynamo stores it: equal where the
    shapes make them equal, and a stored scale that is not the computed one pairs nothing computed from it."""
    ref = graph(
        [
            helper.make_node("Shape", ["x"], ["shape"]),
            helper.make_node("Gather", ["shape", "one"], ["d"], axis=0),
            helper.make_node("Cast", ["d"], ["df"], to=TensorProto.FLOAT),
            helper.make_node("Sqrt", ["df"], ["root"]),
            helper.make_node("Reciprocal", ["root"], ["scale"]),
            helper.make_node("Mul", ["x", "scale"], ["s"]),
            helper.make_node("Softmax", ["s"], ["y"]),
        ],
        [init("one", np.array(1, np.int64))],
    )

    def cand(scale: float) -> GraphIndex:
        nodes = [helper.make_node("Mul", ["x", "c"], ["t"]), helper.make_node("Softmax", ["t"], ["y"])]
        return graph(nodes, [init("c", np.array(scale, np.float16))])

    assert _pairs(ref, cand(0.5), {"x": "x", "y": "y"}) == {"s": "t"}  # d = 4: 1 / sqrt(4), stored in FP16
    assert _pairs(ref, cand(0.25), {"x": "x", "y": "y"}) == {}
