"""Lint against the reference: candidate constants beside their FP32 counterparts, on models converted by
`onnxruntime.transformers.float16` (the converter clips values to FP16's range and clamps tiny ones up)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.transformers.float16 import convert_float_to_float16

from tests.conftest import ROOT
from trtverify.graph.onnxgraph import GraphIndex
from trtverify.lint.linter import lint_candidate
from trtverify.lint.reference_constants import Matched, reference_constant_findings

DEMO = ROOT / "demo" / "fashion_mnist"


def fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    return convert_float_to_float16(model, keep_io_types=True)


def scaled_model(value: float, name: str = "") -> onnx.ModelProto:
    """y = x * c with c in an unnamed Constant node, then a MatMul by an initializer."""
    w = numpy_helper.from_array(np.full((4, 4), 0.5, np.float32), "w")
    nodes = [
        helper.make_node("Constant", [], ["c"], name=name, value=numpy_helper.from_array(np.float32(value))),
        helper.make_node("Mul", ["x", "c"], ["m"], name="scale"),
        helper.make_node("MatMul", ["m", "w"], ["y"], name="mm"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def findings(ref: onnx.ModelProto, cand: onnx.ModelProto) -> tuple[list, Matched]:
    matched = Matched()
    found = reference_constant_findings(GraphIndex.from_model(ref), GraphIndex.from_model(cand), matched)
    return [f for _, f in found], matched


def test_tiny_constant_of_an_unnamed_node_clamped_by_the_converter():
    ref = scaled_model(1e-9)
    cand = fp16(ref)
    found, matched = findings(ref, cand)
    assert matched.compared == 2 and not matched.unmatched  # c and w
    assert [f.kind for f in found] == ["constant_changed"]
    f = found[0]
    assert f.node == "scale" and f.op_type == "Mul" and f.tensor == "c" and f.severity == "high"
    assert f.detail["reference_max"] == np.float32(1e-9).item()
    assert f.detail["became"]["max"] > 5e-8  # clamped up to FP16's smallest subnormal: 60 times the value


def test_saturated_constant_and_a_clean_conversion():
    ref = scaled_model(1e6)
    found, _ = findings(ref, fp16(ref))
    assert [(f.kind, f.tensor, f.count) for f in found] == [("constant_saturated", "c", 1)]
    assert "saturated to 65504 in float16" in found[0].message
    clean = scaled_model(0.25)
    assert findings(clean, fp16(clean))[0] == []


def test_renamed_constant_is_matched_by_consumer_and_slot_and_a_change_is_found(tmp_path: Path):
    ref = onnx.load(str(DEMO / "fashion_cnn_fp32.onnx"))
    cand = fp16(ref)
    conv = next(n for n in cand.graph.node if n.op_type == "Conv")
    init = next(i for i in cand.graph.initializer if i.name == conv.input[1])
    values = numpy_helper.to_array(init).copy()
    values.flat[0] *= np.float16(1.5)
    init.CopyFrom(numpy_helper.from_array(values, "renamed_weight"))
    conv.input[1] = "renamed_weight"
    found, matched = findings(ref, cand)
    assert "renamed_weight" not in matched.unmatched
    hits = [f for f in found if f.tensor == "renamed_weight"]
    assert [(f.kind, f.count, f.node) for f in hits] == [("constant_changed", 1, conv.name)]
    assert len(found) == 1  # every other weight converts within FP16 rounding
    # and through the linter, given the reference
    onnx.save(cand, str(tmp_path / "cand.onnx"))
    kinds = {f.kind for f in lint_candidate(tmp_path / "cand.onnx", reference=DEMO / "fashion_cnn_fp32.onnx")}
    assert "constant_changed" in kinds
    assert "constant_changed" not in {f.kind for f in lint_candidate(tmp_path / "cand.onnx")}


BERT = ROOT / "tests" / "data" / "bert_mask"


def test_the_references_own_inf_mask_fill_kept_in_fp32_is_not_the_candidates():
    """The Hugging Face BERT's TorchScript export (tests/data/bert_mask) in FP16 with its mask's Where nodes kept
    in FP32 (what repair used to keep): their -inf fill is the reference's, as it is there; only a lint of the
    candidate alone, which cannot tell, reports it."""
    from trtverify.convert.fp16 import to_fp16

    ref = onnx.load(str(BERT / "bert_ts.onnx"))
    wheres = [n.name for n in ref.graph.node if n.op_type == "Where" and "/attention/self/" in n.name]
    cand = to_fp16(ref, keep=wheres)
    alone = lint_candidate(cand)
    assert sum(f.kind == "nonfinite_initializer" for f in alone) == 2  # one -inf per layer
    against = lint_candidate(cand, reference=ref)
    assert not [f for f in against if f.kind == "nonfinite_initializer"]
    # a non-finite constant the candidate made (NaN where the reference has its -inf) is still reported
    nan = onnx.ModelProto()
    nan.CopyFrom(cand)
    const = next(n for n in nan.graph.node if n.op_type == "Constant" and n.output[0].endswith("Constant_10_output_0"))
    const.attribute[0].t.CopyFrom(numpy_helper.from_array(np.array([np.nan], np.float32)))
    found = [f for f in lint_candidate(nan, reference=ref) if f.kind == "nonfinite_initializer"]
    assert [f.tensor for f in found] == [const.output[0]]


def test_a_finfo_min_mask_fill_saturated_to_65504_is_what_the_conversion_meant():
    """The dynamo export's fill, finfo(float32).min, becomes -65504 in FP16 (ours and ONNX Runtime's converter):
    still the type's extreme, no constant_saturated; a weight beyond 65504 is still reported."""
    from trtverify.convert.fp16 import to_fp16

    ref = onnx.load(str(BERT / "bert_dynamo.onnx"))
    for cand in (to_fp16(ref), fp16(ref)):
        kinds = {f.kind for f in lint_candidate(cand, reference=ref)}
        assert "constant_saturated" not in kinds, kinds
    gamma = next(t for t in ref.graph.initializer if t.name == "bert.embeddings.LayerNorm.weight")
    gamma.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(gamma) * np.float32(1e5), gamma.name))
    found = [f for f in lint_candidate(to_fp16(ref), reference=ref) if f.kind == "constant_saturated"]
    assert [f.detail["reference"] for f in found] == ["bert.embeddings.LayerNorm.weight"]
