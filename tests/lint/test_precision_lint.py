"""Precision lint on real ONNX models: built here with onnx.helper, and the committed demo models."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from pydantic import ValidationError

from trtverify.lint.findings import LintFinding
from trtverify.lint.linter import lint_candidate, target_precision
from trtverify.util.errors import UsageError

DEMO = Path(__file__).resolve().parents[2] / "demo" / "fashion_mnist"
FP32 = DEMO / "fashion_cnn_fp32.onnx"
FP16 = DEMO / "fashion_cnn_fp16.onnx"
INT8 = DEMO / "fashion_cnn_int8_qdq.onnx"


def make_model(nodes: list, inputs: list, outputs: list, inits: list) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.checker.check_model(model)
    return model


def vi(name: str, shape: list, elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def init(name: str, arr: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(arr), name)


def kinds(findings: list[LintFinding]) -> list[tuple[str, str, str | None, int]]:
    return [(f.severity, f.kind, f.tensor, f.count) for f in findings]


def conv_model(w: np.ndarray, b: np.ndarray | None = None) -> onnx.ModelProto:
    c = w.shape[0]
    inputs = ["x", "w"] + (["b"] if b is not None else [])
    nodes = [
        helper.make_node("Conv", inputs, ["conv_out"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv_out"], ["y"], name="relu"),
    ]
    inits = [init("w", w)] + ([init("b", b)] if b is not None else [])
    return make_model(nodes, [vi("x", [1, w.shape[1], 8, 8])], [vi("y", [1, c, 8, 8])], inits)


# --- initializers -------------------------------------------------------------------------


def test_fp32_conv_weight_overflows_fp16_with_exact_count():
    w = np.full((4, 1, 3, 3), 0.25, dtype=np.float32)
    w[0, 0, 0, 0] = 1e5
    w[1, 0, 1, 1] = -7e4
    w[2, 0, 2, 2] = 65504.0  # the FP16 maximum itself is representable
    model = conv_model(w)
    findings = lint_candidate(model, target="fp16")
    assert kinds(findings) == [("high", "initializer_overflow", "w", 2)]
    f = findings[0]
    assert (f.node, f.op_type) == ("conv", "Conv")
    assert f.detail["total"] == 36 and f.detail["max_abs"] == 1e5
    assert f.detail["target"] == "fp16" and f.detail["limit"] == 65504
    assert "2 of 36" in f.message and "65504" in f.message
    # The same weights are fine where they stay FP32 or go to BF16.
    assert target_precision(model) == "fp32"
    assert lint_candidate(model) == []
    assert lint_candidate(model, target="bf16") == []


def test_subnormal_and_underflow_counts_are_exact():
    w = np.full(1000, 0.5, dtype=np.float32)
    w[:10] = 1e-6  # FP16 subnormal
    w[10] = 2.0**-24  # smallest FP16 subnormal: kept
    w[11] = 2.0**-14  # smallest FP16 normal: fine
    w[12:15] = 1e-9  # below half the smallest subnormal: 0 in FP16
    w[15] = 2.0**-25  # exactly half: round-to-nearest-even gives 0
    w[16:21] = 0.0  # zeros are not findings
    w = w.reshape(10, 1, 10, 10)
    eps = np.array(1e-12, dtype=np.float32)  # a LayerNorm-style epsilon that vanishes in FP16
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("Add", ["c", "eps"], ["y"], name="add_eps"),
    ]
    model = make_model(nodes, [vi("x", [1, 1, 10, 10])], [vi("y", [1, 10, 1, 1])], [init("w", w), init("eps", eps)])
    findings = lint_candidate(model, target="fp16")
    assert kinds(findings) == [
        ("medium", "initializer_subnormal", "w", 11),  # 1.1% of the tensor
        ("medium", "initializer_underflow", "eps", 1),  # all of it
        ("info", "initializer_underflow", "w", 4),  # 0.4% of the tensor
    ]
    sub, eps_f, under = findings
    assert sub.detail["total"] == 1000 and sub.detail["share"] == pytest.approx(0.011)
    assert (under.node, under.detail["nonzero"]) == ("conv", 995)
    assert (eps_f.node, eps_f.op_type) == ("add_eps", "Add")
    # The underflow count is exactly what a cast to FP16 turns into zeros.
    assert under.count == int(np.count_nonzero((w.astype(np.float16) == 0) & (w != 0)))


def test_underflow_matches_a_real_fp16_cast_on_random_magnitudes():
    rng = np.random.default_rng(0)
    w = (10.0 ** rng.uniform(-12, 2, size=(64, 1, 5, 5)) * rng.choice([-1, 1], size=(64, 1, 5, 5))).astype(np.float32)
    findings = {f.kind: f for f in lint_candidate(conv_model(w), target="fp16")}
    expected_zero = int(np.count_nonzero(w.astype(np.float16) == 0))
    assert findings["initializer_underflow"].count == expected_zero
    expected_sub = int(np.count_nonzero((np.abs(w) < 2.0**-14) & (np.abs(w) > 2.0**-25)))
    assert findings["initializer_subnormal"].count == expected_sub


def test_bf16_range_table():
    w = np.full((2, 1, 1, 1), 1.0, dtype=np.float32)
    w[0] = 1e-39  # BF16 subnormal (below 2**-126 = 1.18e-38)
    w[1] = 1e-41  # below 2**-134: 0 in BF16
    findings = lint_candidate(conv_model(w), target="bf16")
    assert kinds(findings) == [("medium", "initializer_subnormal", "w", 1), ("medium", "initializer_underflow", "w", 1)]
    assert findings[1].detail["zero_limit"] == 2.0**-134


def test_nonfinite_values_in_an_fp16_initializer_are_high():
    w = np.full((3, 1, 3, 3), 0.5, dtype=np.float16)
    w[0, 0, 0, 0] = np.nan
    w[1, 0, 0, 0] = np.inf
    w[2, 0, 0, 0] = -np.inf
    w[2, 0, 1, 1] = np.float16(2.0**-20)  # subnormal already stored as such
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="conv16", pads=[1, 1, 1, 1])]
    model = make_model(
        nodes,
        [vi("x", [1, 1, 4, 4], TensorProto.FLOAT16)],
        [vi("y", [1, 3, 4, 4], TensorProto.FLOAT16)],
        [init("w", w)],
    )
    assert target_precision(model) == "fp16"
    findings = lint_candidate(model)
    assert kinds(findings) == [("high", "nonfinite_initializer", "w", 3), ("medium", "initializer_subnormal", "w", 1)]
    assert findings[0].detail["nan"] == 1 and findings[0].detail["inf"] == 2


def test_integer_and_shape_like_initializers_are_skipped():
    shape = np.array([1, 4000], dtype=np.int64)  # int: never a weight
    scales = np.array([1.0, 1.0, 1e5, 1e5], dtype=np.float32)  # Resize scales are float but not weights
    nodes = [
        helper.make_node("Resize", ["x", "", "scales"], ["r"], name="resize"),
        helper.make_node("Reshape", ["r", "shape"], ["y"], name="reshape"),
    ]
    model = make_model(
        nodes, [vi("x", [1, 1, 1, 1])], [vi("y", [1, 4000])], [init("scales", scales), init("shape", shape)]
    )
    assert lint_candidate(model, target="fp16") == []


# --- activations --------------------------------------------------------------------------


def test_activation_overflow_names_the_producer():
    w = np.full((2, 1, 3, 3), 0.1, dtype=np.float32)
    model = conv_model(w)
    amax = {"conv_out": 1.2e5, "y": 40000.0, "x": 3.0, "not_in_graph": 1.0}
    findings = lint_candidate(model, target="fp16", activation_max=amax)
    assert [(f.severity, f.kind, f.tensor, f.node, f.op_type) for f in findings] == [
        ("high", "activation_overflow", "conv_out", "conv", "Conv"),
        ("medium", "activation_close_to_range", "y", "relu", "Relu"),
        ("info", "activation_unknown", None, None, None),
    ]
    assert findings[0].detail == {"max_abs": 1.2e5, "target": "fp16", "limit": 65504.0}
    assert "1.2e+05" in findings[0].message and "65504" in findings[0].message
    assert findings[2].detail["names"] == ["not_in_graph"]
    # BF16 has the FP32 exponent range: nothing overflows.
    assert kinds(lint_candidate(model, target="bf16", activation_max=amax)) == [("info", "activation_unknown", None, 1)]


def test_nonfinite_reference_activation_is_high():
    model = conv_model(np.full((2, 1, 3, 3), 0.1, dtype=np.float32))
    findings = lint_candidate(model, target="fp16", activation_max={"conv_out": float("inf")})
    assert kinds(findings) == [("high", "activation_overflow", "conv_out", 1)]


# --- Q/DQ ---------------------------------------------------------------------------------


def qdq_mlp(second_input_quantised: bool, scale: float = 0.02) -> onnx.ModelProto:
    """x -Q/DQ-> MatMul(mm1, weight DQ -> Transpose) -> Relu -> [Q/DQ?] -> MatMul(mm2, weight DQ) -> y."""
    rng = np.random.default_rng(1)
    q1 = rng.integers(-127, 128, size=(16, 8), dtype=np.int8)  # stored transposed
    q2 = rng.integers(-127, 128, size=(16, 4), dtype=np.int8)
    inits = [
        init("x_scale", np.array(scale, np.float32)),
        init("x_zp", np.array(0, np.int8)),
        init("w1_q", q1),
        init("w1_scale", np.array(0.01, np.float32)),
        init("w1_zp", np.array(0, np.int8)),
        init("w2_q", q2),
        init("w2_scale", np.array(0.01, np.float32)),
        init("w2_zp", np.array(0, np.int8)),
        init("h_scale", np.array(0.05, np.float32)),
        init("h_zp", np.array(0, np.int8)),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["x_q"], name="x_Q"),
        helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zp"], ["x_dq"], name="x_DQ"),
        helper.make_node("DequantizeLinear", ["w1_q", "w1_scale", "w1_zp"], ["w1_dq"], name="w1_DQ"),
        helper.make_node("Transpose", ["w1_dq"], ["w1_t"], name="w1_T", perm=[1, 0]),
        helper.make_node("MatMul", ["x_dq", "w1_t"], ["h"], name="mm1"),
        helper.make_node("Relu", ["h"], ["h_relu"], name="relu"),
        helper.make_node("DequantizeLinear", ["w2_q", "w2_scale", "w2_zp"], ["w2_dq"], name="w2_DQ"),
    ]
    if second_input_quantised:
        nodes += [
            helper.make_node("QuantizeLinear", ["h_relu", "h_scale", "h_zp"], ["h_q"], name="h_Q"),
            helper.make_node("DequantizeLinear", ["h_q", "h_scale", "h_zp"], ["h_dq"], name="h_DQ"),
        ]
    nodes.append(
        helper.make_node("MatMul", ["h_dq" if second_input_quantised else "h_relu", "w2_dq"], ["y"], name="mm2")
    )
    if not second_input_quantised:
        inits = [i for i in inits if not i.name.startswith("h_")]
    return make_model(nodes, [vi("x", [2, 8])], [vi("y", [2, 4])], inits)


def test_matmul_without_dq_on_its_input_is_uncovered():
    model = qdq_mlp(second_input_quantised=False)
    assert target_precision(model) == "int8"
    findings = lint_candidate(model)
    assert kinds(findings) == [("medium", "qdq_uncovered", "h_relu", 1)]
    f = findings[0]
    assert (f.node, f.op_type) == ("mm2", "MatMul")
    assert f.detail["missing"] == ["data input (input 0)"]
    assert "data input" in f.message and "INT8" in f.message
    # Fully quantised (and the DQ -> Transpose -> MatMul weight of mm1 counts as covered): nothing.
    assert lint_candidate(qdq_mlp(second_input_quantised=True)) == []


def test_int8_activation_saturation_and_fp16_fallback():
    model = qdq_mlp(second_input_quantised=True, scale=0.01)  # x: int8, |x| <= 128 * 0.01 = 1.28
    findings = lint_candidate(model, activation_max={"x": 3.0, "h": 1e5, "h_relu": 1.5})
    assert [(f.severity, f.kind, f.tensor) for f in findings] == [
        ("high", "activation_overflow", "h"),  # Relu input: not quantised, FP16 when enabled next to INT8
        ("medium", "activation_saturation", "x"),  # 3.0 / 1.28 = 2.3x the range
    ]
    assert findings[0].detail["fallback_for"] == "int8" and findings[0].node == "mm1"
    assert findings[1].detail["limit"] == pytest.approx(1.28) and findings[1].detail["quantize_node"] == "x_Q"
    # h_relu: 1.5 over 128 * 0.05 = 6.4 is within range; a small overshoot would be "info".
    info = lint_candidate(model, activation_max={"x": 1.5})
    assert kinds(info) == [("info", "activation_saturation", "x", 1)]


def test_zero_and_inf_scales_are_high():
    scales = np.array([0.1, 0.0, -1.0, np.inf], dtype=np.float32)
    zp = np.zeros(4, dtype=np.int8)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s_bad", "zp"], ["xq"], name="q_channel", axis=1),
        helper.make_node("DequantizeLinear", ["xq", "s_bad", "zp"], ["xd"], name="dq_channel", axis=1),
        helper.make_node("QuantizeLinear", ["xd", "s_zero", "zp0"], ["xq2"], name="q_zero"),
        helper.make_node("DequantizeLinear", ["xq2", "s_zero", "zp0"], ["y"], name="dq_zero"),
    ]
    inits = [
        init("s_bad", scales),
        init("zp", zp),
        init("s_zero", np.array(0.0, np.float32)),
        init("zp0", np.array(0, np.int8)),
    ]
    model = make_model(nodes, [vi("x", [1, 4])], [vi("y", [1, 4])], inits)
    findings = lint_candidate(model)
    assert kinds(findings) == [("high", "qdq_invalid_scale", "s_bad", 3), ("high", "qdq_invalid_scale", "s_zero", 1)]
    bad, zero = findings
    assert (bad.node, bad.op_type) == ("q_channel", "QuantizeLinear")
    assert (bad.detail["zero"], bad.detail["negative"], bad.detail["nonfinite"]) == (1, 1, 1)
    assert bad.detail["users"] == ["dq_channel", "q_channel"]
    assert zero.node == "q_zero" and zero.detail["zero"] == 1
    # Scales are never range-checked as weights, even for an FP16 target.
    assert [f.kind for f in lint_candidate(model, target="fp16")] == ["qdq_invalid_scale", "qdq_invalid_scale"]


def test_nonzero_zero_point_is_high():
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"], name="q"),
        helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["y"], name="dq"),
    ]
    inits = [init("s", np.array(0.1, np.float32)), init("zp", np.array(128, np.uint8))]
    model = make_model(nodes, [vi("x", [1, 4])], [vi("y", [1, 4])], inits)
    assert kinds(lint_candidate(model)) == [("high", "qdq_nonzero_zero_point", "zp", 1)]


def test_fp8_detection():
    zp = helper.make_tensor("zp", TensorProto.FLOAT8E4M3FN, [], [0.0])
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"], name="q"),
        helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["y"], name="dq"),
    ]
    model = make_model(nodes, [vi("x", [1, 4])], [vi("y", [1, 4])], [init("s", np.array(0.1, np.float32)), zp])
    assert target_precision(model) == "fp8"
    findings = lint_candidate(model, activation_max={"x": 100.0})  # 100 / 0.1 = 1000 > 448
    assert kinds(findings) == [("medium", "activation_saturation", "x", 1)]
    assert findings[0].detail["limit"] == pytest.approx(44.8)


def quantised_weight_model(w: np.ndarray, scale: np.ndarray, zp: onnx.TensorProto, axis: int = 1) -> onnx.ModelProto:
    """x -> MatMul(x, DQ(Q(w))): the pytorch-quantization/modelopt layout with FP32 weights in the file."""
    zp_x = helper.make_tensor("zp_x", zp.data_type, [], [0])
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s_x", "zp_x"], ["xq"], name="x_Q"),
        helper.make_node("DequantizeLinear", ["xq", "s_x", "zp_x"], ["xd"], name="x_DQ"),
        helper.make_node("QuantizeLinear", ["w", "s_w", "zp_w"], ["wq"], name="w_Q", axis=axis),
        helper.make_node("DequantizeLinear", ["wq", "s_w", "zp_w"], ["wd"], name="w_DQ", axis=axis),
        helper.make_node("MatMul", ["xd", "wd"], ["y"], name="mm"),
    ]
    inits = [init("w", w), init("s_w", scale), zp, init("s_x", np.array(0.1, np.float32)), zp_x]
    return make_model(nodes, [vi("x", [1, w.shape[0]])], [vi("y", [1, w.shape[1]])], inits)


def test_fp8_weight_clipped_or_zeroed_by_its_scale():
    w = np.full((8, 4), 0.5, dtype=np.float32)
    w[0, 0] = 5.0  # 500 steps > 448: clipped
    w[1, 1] = -4.6  # -460: clipped
    w[3, 3] = 4.48  # 448: the E4M3 maximum itself
    w[2, 2] = 1e-6  # 1e-4 steps <= 2**-10: 0 in FP8
    zp = helper.make_tensor("zp_w", TensorProto.FLOAT8E4M3FN, [], [0.0])
    model = quantised_weight_model(w, np.array(0.01, np.float32), zp)
    assert target_precision(model) == "fp8"
    findings = lint_candidate(model)
    assert kinds(findings) == [("medium", "weight_saturation", "w", 2), ("medium", "weight_underflow", "w", 1)]
    assert findings[0].node == "w_Q" and findings[0].detail["total"] == 32
    # FP32 weights quantised by their own Q are not range-checked as FP16 weights.
    assert not [f for f in lint_candidate(model, target="fp16") if f.kind.startswith("initializer_")]


def test_int8_per_channel_weight_clipping():
    w = np.array([[1.0, 100.0], [1.27, 100.0], [1.3, 100.0], [-1.29, -100.0]], dtype=np.float32)
    zp = init("zp_w", np.zeros(2, np.int8))
    model = quantised_weight_model(w, np.array([0.01, 1.0], np.float32), zp, axis=1)
    assert kinds(lint_candidate(model)) == [("medium", "weight_saturation", "w", 2)]  # 130 and -129 steps


# --- odd models ---------------------------------------------------------------------------


def branch(name: str, const: str) -> onnx.GraphProto:
    add = helper.make_node("Add", ["x", const], [f"{name}_out"], name=f"{name}_add")
    return helper.make_graph([add], name, [], [vi(f"{name}_out", [1, 4])])


def test_if_subgraphs_do_not_crash_and_are_reported_once():
    nodes = [
        helper.make_node(
            "If", ["cond"], ["a"], name="if1", then_branch=branch("t1", "big"), else_branch=branch("e1", "small")
        ),
        helper.make_node(
            "If", ["cond"], ["b"], name="if2", then_branch=branch("t2", "small"), else_branch=branch("e2", "small")
        ),
        helper.make_node("Add", ["a", "b"], ["y"], name="sum"),
    ]
    inits = [init("big", np.full((1, 4), 1e6, np.float32)), init("small", np.full((1, 4), 0.5, np.float32))]
    model = make_model(nodes, [vi("x", [1, 4]), vi("cond", [], TensorProto.BOOL)], [vi("y", [1, 4])], inits)
    findings = lint_candidate(model, target="fp16", activation_max={"a": 1.0})
    assert kinds(findings) == [("high", "initializer_overflow", "big", 4), ("info", "subgraph_skipped", None, 1)]
    assert findings[0].node == "if1"  # the weight is read inside if1's branch
    assert findings[1].detail == {"nodes": ["if1", "if2"], "subgraph_nodes": 4}


def test_external_data_not_loaded_is_reported_not_read(tmp_path: Path):
    w = np.full((4, 1, 3, 3), 0.25, dtype=np.float32)
    w[0, 0, 0, 0] = 1e5
    path = tmp_path / "m.onnx"
    onnx.save(
        conv_model(w),
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="m.data",
        size_threshold=0,
    )
    bare = onnx.load(str(path), load_external_data=False)
    assert kinds(lint_candidate(bare, target="fp16")) == [("info", "external_data_not_loaded", None, 1)]
    assert kinds(lint_candidate(path, target="fp16")) == [("high", "initializer_overflow", "w", 1)]
    (tmp_path / "m.data").unlink()  # the data file is gone: lint what is there
    assert kinds(lint_candidate(path, target="fp16")) == [("info", "external_data_not_loaded", None, 1)]


def test_findings_sorted_by_severity_then_graph_order_and_serialisable():
    w = np.full((2, 1, 1, 1), 1e5, dtype=np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w_late"], ["c1"], name="first"),
        helper.make_node("Conv", ["c1", "w_early"], ["y"], name="second"),
    ]
    # Initializers listed in the opposite order of their use: graph order wins.
    w2 = np.full((2, 2, 1, 1), 1e-6, dtype=np.float32)
    w2[0, 0, 0, 0] = 1e5
    model = make_model(
        nodes, [vi("x", [1, 1, 2, 2])], [vi("y", [1, 2, 2, 2])], [init("w_early", w2), init("w_late", w)]
    )
    findings = lint_candidate(model, target="fp16", activation_max={"c1": 5e4})
    assert [(f.severity, f.kind, f.node) for f in findings] == [
        ("high", "initializer_overflow", "first"),
        ("high", "initializer_overflow", "second"),
        ("medium", "activation_close_to_range", "first"),
        ("medium", "initializer_subnormal", "second"),
    ]
    for f in findings:
        d = json.loads(json.dumps(f.dump()))
        assert set(d) == {"kind", "severity", "node", "op_type", "tensor", "message", "count", "detail", "tensorrt"}
        assert LintFinding.model_validate(d) == f  # read back from results.json as it was written
    with pytest.raises(ValidationError, match="frozen"):
        findings[0].count = 2


def test_unknown_target_is_a_usage_error():
    with pytest.raises(UsageError, match="did you mean 'fp16'"):
        lint_candidate(FP32, target="fp61")


# --- the committed demo models ------------------------------------------------------------


def test_demo_target_detection():
    assert target_precision(FP32) == "fp32"
    assert target_precision(FP16) == "fp16"
    assert target_precision(INT8) == "int8"


def test_demo_fp16_has_only_info_subnormals():
    findings = lint_candidate(FP16)
    assert not [f for f in findings if f.severity == "high"]
    # Exact counts, checked against the stored FP16 weights themselves.
    model = onnx.load(str(FP16))
    expected = {}
    for t in model.graph.initializer:
        a = np.abs(numpy_helper.to_array(t).astype(np.float32))
        n = int(np.count_nonzero((a > 0) & (a < 2.0**-14)))
        if n:
            expected[t.name] = n
    assert expected == {
        "features.block2.conv.weight_bnfolded": 3,
        "features.block3.conv.weight_bnfolded": 13,
        "features.block4.conv.weight_bnfolded": 32,
        "classifier.fc1.weight": 37,
    }
    assert [(f.severity, f.kind) for f in findings] == [("info", "initializer_subnormal")] * 4
    assert {f.tensor: f.count for f in findings} == expected
    assert [f.node for f in findings] == [
        "/features/block2/conv/Conv",
        "/features/block3/conv/Conv",
        "/features/block4/conv/Conv",
        "/classifier/fc1/Gemm",
    ]


def test_demo_fp32_is_clean_as_fp32_and_as_fp16_shows_the_same_subnormals():
    assert lint_candidate(FP32) == []
    as_fp16 = lint_candidate(FP32, target="fp16")
    assert kinds(as_fp16) == [
        ("info", "initializer_subnormal", "features.block2.conv.weight_bnfolded", 3),
        ("info", "initializer_subnormal", "features.block3.conv.weight_bnfolded", 13),
        ("info", "initializer_subnormal", "features.block4.conv.weight_bnfolded", 32),
        ("info", "initializer_subnormal", "classifier.fc1.weight", 37),
    ]


def test_demo_int8_covers_conv_and_gemm():
    findings = lint_candidate(INT8)
    assert not [f for f in findings if f.kind == "qdq_uncovered"]
    assert findings == []  # float biases are in FP16 range, scales positive, zero points 0
    # The FP32 model linted as INT8 has all four Conv and both Gemm uncovered.
    uncovered = [(f.node, f.op_type) for f in lint_candidate(FP32, target="int8") if f.kind == "qdq_uncovered"]
    assert [op for _, op in uncovered] == ["Conv"] * 4 + ["Gemm"] * 2


def test_lint_is_fast_on_millions_of_parameters():
    rng = np.random.default_rng(0)
    inits = [init(f"w{k}", (rng.standard_normal((1000, 1000)) * 0.02).astype(np.float32)) for k in range(5)]
    nodes, x = [], "x"
    for k in range(5):
        nodes.append(helper.make_node("MatMul", [x, f"w{k}"], [f"y{k}"], name=f"mm{k}"))
        x = f"y{k}"
    model = make_model(nodes, [vi("x", [1, 1000])], [vi(x, [1, 1000])], inits)
    lint_candidate(model, target="fp16")  # warm imports
    t0 = time.perf_counter()
    findings = lint_candidate(model, target="fp16")
    assert time.perf_counter() - t0 < 0.5  # 5M parameters; about 0.02 s in practice
    assert {f.kind for f in findings} <= {"initializer_subnormal", "initializer_underflow"}


def test_demo_models_with_activation_maxima_of_the_fp32_reference():
    """Maxima from ONNX Runtime on the committed test subset: FP16 has headroom, INT8 calibration clips a little."""
    import onnxruntime as ort

    x = np.load(DEMO / "data" / "test_subset.npz")["images"].astype(np.float32) / 255.0
    model = onnx.load(str(FP32))
    names = [o for n in model.graph.node for o in n.output]
    del model.graph.output[:]
    model.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    amax = {n: float(np.abs(o).max()) for n, o in zip(names, session.run(None, {"input": x}))}
    amax["input"] = float(np.abs(x).max())
    assert max(amax.values()) < 100  # far from 0.5 * 65504
    assert not [f for f in lint_candidate(FP32, target="fp16", activation_max=amax) if f.kind.startswith("activation")]
    assert not [f for f in lint_candidate(FP16, activation_max=amax) if f.kind.startswith("activation")]
    sat = [f for f in lint_candidate(INT8, activation_max=amax) if f.kind.startswith("activation")]
    assert {f.tensor for f in sat} == {
        "/features/pool1/MaxPool_output_0",
        "/features/pool2/MaxPool_output_0",
        "/features/block3/relu/Relu_output_0",
        "/classifier/flatten/Flatten_output_0",
        "/classifier/relu/Relu_output_0",
    }
    assert all(f.kind == "activation_saturation" and f.severity == "info" and 1 < f.detail["ratio"] < 1.5 for f in sat)


def test_lint_kinds_registry_matches_what_the_rules_emit():
    """config.findings.LINT_KINDS (what suites may name in lint.fail_on) lists exactly the kinds the rules emit."""
    import ast
    import re

    from tests.conftest import ROOT
    from trtverify.config.findings import LINT_KINDS

    kind_like = re.compile(r"^[a-z0-9]+(_[a-z0-9]+)+$")

    emitted = set()
    for path in (ROOT / "trtverify" / "lint").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("at", "add") and len(node.args) >= 1:
                arg = node.args[1] if getattr(node.func, "id", None) == "at" else node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    emitted.add(arg.value)
            # kinds picked in a tuple before the call: (kind, message) = ("qdq_...", ...), and loops over kinds
            if isinstance(node, ast.Tuple) and node.elts and isinstance(node.elts[0], ast.Constant):
                value = node.elts[0].value
                if isinstance(value, str) and kind_like.match(value):
                    emitted.add(value)
    assert emitted == set(LINT_KINDS), emitted ^ set(LINT_KINDS)


def test_no_finding_on_a_node_the_candidate_keeps_in_fp32(tmp_path):
    """Issue 27: the lint judged every FP32 constant and activation against FP16 because the model is 'fp16', and
    failed trtverify's own repaired model under --fail-on-lint high (initializer_overflow at the BatchNormalization
    the repair kept in FP32). Strongly typed, as ONNX Runtime and TensorRT 11 run it, only what the graph lowers is
    judged: the repaired model passes the gate, the broken one still fails it at that node."""
    import json

    import numpy as np

    from tests.conftest import ROOT, run_cli

    demo = ROOT / "demo" / "fp16_repair"
    images = np.load(ROOT / "demo" / "fashion_mnist" / "data" / "test_subset.npz", allow_pickle=False)["images"]
    np.savez(tmp_path / "in.npz", input=images[:8].astype(np.float32) / 255.0)
    verdicts = {}
    for cand in ("fashion_bn_fp16_repaired", "fashion_bn_fp16"):
        out = tmp_path / cand
        r = run_cli("layerwise", str(demo / "fashion_bn_fp32.onnx"), str(demo / f"{cand}.onnx"),
                    "--inputs", str(tmp_path / "in.npz"), "--fail-on-lint", "high", "--out", str(out))  # fmt: skip
        stage = json.loads((out / "results.json").read_text())["stages"][0]
        verdicts[cand] = (
            r.code,
            {(f["kind"], f["node"]) for f in stage["candidates"][0]["lint"] if f["severity"] == "high"},
        )
    assert verdicts["fashion_bn_fp16_repaired"] == (0, set())
    code, high = verdicts["fashion_bn_fp16"]
    assert code == 1 and ("constant_saturated", "/features/post_bn/BatchNormalization") in high


def test_a_light_model_is_shape_inferred_once_for_the_lint_and_its_node_precisions(monkeypatch):
    """Each node's types are read once per run: the lint (types, narrow tensors, shape lint) and the precision mix
    of the report share one shape inference of the candidate's graph."""
    from tests.conftest import ROOT
    from trtverify.graph.lightmodel import LightModel
    from trtverify.lint.linter import node_precisions

    calls = []
    real = onnx.shape_inference.infer_shapes
    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", lambda m, **kw: calls.append(1) or real(m, **kw))
    light = LightModel(ROOT / "demo" / "fashion_mnist" / "fashion_cnn_fp16.onnx")
    findings = lint_candidate(light, strongly_typed=True)
    mix = node_precisions(light)
    assert len(calls) == 1
    assert set(mix.values()) == {"FP16"} and all(isinstance(f, LintFinding) for f in findings)
