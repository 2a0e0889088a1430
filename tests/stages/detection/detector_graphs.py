"""Detection outputs on the shapes demo's CenterNet, in standard ONNX ops that ONNX Runtime runs.

The demo's models end in `heatmap` [B, 3, 32, 32] (sigmoid), `wh` and `offset` [B, 2, 32, 32] (stride 4). `append`
adds a decode the way detector exports do it: 3x3 max-pool peaks, boxes from the centre cell + offset and wh, ONNX's
own `NonMaxSuppression` (per class), then the kept boxes gathered into one of the layouts TensorRT detectors emit:

- `det6`: `detections` [B, K, 6] (x1, y1, x2, y2, score, class), K fixed, padding rows all zero (score 0);
- `nms4`: `num_dets` [B, 1] int32, `det_boxes` [B, K, 4], `det_scores` [B, K], `det_classes` [B, K] int32, as
  EfficientNMS_TRT gives them (padding after `num_dets`);
- `rows6`: `detections` [M, 6], the NMS's own order (by class, then score), one image (batch 1).

The fixed-K layouts take the top K of the kept scores (TopK), so near-equal scores can come out in another order in
an FP16 or INT8 candidate: what `compare/detections.py` matches box to box. Used by tests/stages/test_layerwise_
detections.py and bench/detections.py (the measured defaults of docs/stages/layerwise.md#detections).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

STRIDE = 4
CLASSES = 3
GRID = 32
K = 50  # boxes per image in the fixed layouts (the demo's decode keeps 50)


def _const(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name))


def decode_nodes(layout: str, *, iou: float = 0.5, score: float = 0.05, k: int = K, prefix: str = "det/") -> tuple[
    list[onnx.NodeProto], list[onnx.ValueInfoProto]
]:  # fmt: skip
    """Nodes reading `heatmap`, `wh` and `offset`, and the graph outputs of `layout` they write."""
    p = prefix
    n = GRID * GRID
    ys, xs = np.meshgrid(np.arange(GRID, dtype=np.float32), np.arange(GRID, dtype=np.float32), indexing="ij")
    nodes = [
        _const(p + "xs", xs[None, None]),
        _const(p + "ys", ys[None, None]),
        _const(p + "stride", np.float32(STRIDE)),
        _const(p + "half", np.float32(STRIDE / 2)),
        _const(p + "zero", np.float32(0.0)),
        _const(p + "lo", np.float32(0.0)),
        _const(p + "hi", np.float32(GRID * STRIDE)),
        _const(p + "shape_scores", np.array([0, CLASSES, n], dtype=np.int64)),
        _const(p + "shape_boxes", np.array([0, 4, n], dtype=np.int64)),
        _const(p + "max_out", np.array([k], dtype=np.int64)),
        _const(p + "iou", np.array([iou], dtype=np.float32)),
        _const(p + "score", np.array([score], dtype=np.float32)),
        # peaks: positions equal to their 3x3 neighbourhood's maximum
        helper.make_node("MaxPool", ["heatmap"], [p + "pooled"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Equal", ["heatmap", p + "pooled"], [p + "is_peak"]),
        helper.make_node("Where", [p + "is_peak", "heatmap", p + "zero"], [p + "peaks"]),
        helper.make_node("Reshape", [p + "peaks", p + "shape_scores"], [p + "scores"]),  # [B, C, N]
        # boxes: centre = (cell + offset) * stride, size = relu(wh) * stride
        _const(p + "halves", np.array([1, 1], dtype=np.int64)),
        helper.make_node("Split", ["offset", p + "halves"], [p + "ox", p + "oy"], axis=1),
        helper.make_node("Split", ["wh", p + "halves"], [p + "w", p + "h"], axis=1),
        helper.make_node("Add", [p + "xs", p + "ox"], [p + "cx0"]),
        helper.make_node("Add", [p + "ys", p + "oy"], [p + "cy0"]),
        helper.make_node("Mul", [p + "cx0", p + "stride"], [p + "cx"]),
        helper.make_node("Mul", [p + "cy0", p + "stride"], [p + "cy"]),
        helper.make_node("Relu", [p + "w"], [p + "w0"]),
        helper.make_node("Relu", [p + "h"], [p + "h0"]),
        helper.make_node("Mul", [p + "w0", p + "half"], [p + "hw"]),
        helper.make_node("Mul", [p + "h0", p + "half"], [p + "hh"]),
        helper.make_node("Sub", [p + "cx", p + "hw"], [p + "x1"]),
        helper.make_node("Sub", [p + "cy", p + "hh"], [p + "y1"]),
        helper.make_node("Add", [p + "cx", p + "hw"], [p + "x2"]),
        helper.make_node("Add", [p + "cy", p + "hh"], [p + "y2"]),
        helper.make_node("Concat", [p + "x1", p + "y1", p + "x2", p + "y2"], [p + "corners"], axis=1),
        helper.make_node("Clip", [p + "corners", p + "lo", p + "hi"], [p + "clipped"]),
        helper.make_node("Reshape", [p + "clipped", p + "shape_boxes"], [p + "boxes_t"]),
        helper.make_node("Transpose", [p + "boxes_t"], [p + "boxes"], perm=[0, 2, 1]),  # [B, N, 4]
        helper.make_node(
            "NonMaxSuppression",
            [p + "boxes", p + "scores", p + "max_out", p + "iou", p + "score"],
            [p + "selected"],  # [M, 3]: (image, class, box)
            name=p + "nms",
        ),
    ]
    if layout == "rows6":
        nodes += [
            _const(p + "cols_box", np.array([0, 2], dtype=np.int64)),
            _const(p + "col_cls", np.array([1], dtype=np.int64)),
            helper.make_node("Gather", [p + "selected", p + "cols_box"], [p + "sel_box"], axis=1),
            helper.make_node("Gather", [p + "selected", p + "col_cls"], [p + "sel_cls"], axis=1),
            helper.make_node("GatherND", [p + "boxes", p + "sel_box"], [p + "kept_boxes"]),  # [M, 4]
            helper.make_node("GatherND", [p + "scores", p + "selected"], [p + "kept_scores"]),  # [M]
            _const(p + "axis1", np.array([1], dtype=np.int64)),
            helper.make_node("Unsqueeze", [p + "kept_scores", p + "axis1"], [p + "kept_scores1"]),
            helper.make_node("Cast", [p + "sel_cls"], [p + "kept_cls"], to=TensorProto.FLOAT),
            helper.make_node("Concat", [p + "kept_boxes", p + "kept_scores1", p + "kept_cls"], ["detections"], axis=1),
        ]
        return nodes, [helper.make_tensor_value_info("detections", TensorProto.FLOAT, ["m", 6])]
    # fixed K: the kept scores (NMS's selection scattered back as a mask), top K over classes and positions
    nodes += [
        helper.make_node("Shape", [p + "selected"], [p + "sel_shape"]),
        _const(p + "i0", np.array([0], dtype=np.int64)),
        helper.make_node("Gather", [p + "sel_shape", p + "i0"], [p + "m"]),
        helper.make_node(
            "ConstantOfShape", [p + "m"], [p + "ones"], value=numpy_helper.from_array(np.ones(1, np.float32))
        ),
        helper.make_node("Mul", [p + "scores", p + "zero"], [p + "zeros"]),
        helper.make_node("ScatterND", [p + "zeros", p + "selected", p + "ones"], [p + "mask"]),
        helper.make_node("Mul", [p + "scores", p + "mask"], [p + "kept"]),
        _const(p + "flat", np.array([0, -1], dtype=np.int64)),
        helper.make_node("Reshape", [p + "kept", p + "flat"], [p + "kept_flat"]),  # [B, C*N]
        _const(p + "k", np.array([k], dtype=np.int64)),
        helper.make_node("TopK", [p + "kept_flat", p + "k"], [p + "top", p + "top_idx"], axis=1),
        _const(p + "n", np.array(n, dtype=np.int64)),
        helper.make_node("Div", [p + "top_idx", p + "n"], [p + "cls"]),
        helper.make_node("Mod", [p + "top_idx", p + "n"], [p + "box_idx"]),
        _const(p + "last", np.array([-1], dtype=np.int64)),
        helper.make_node("Unsqueeze", [p + "box_idx", p + "last"], [p + "box_idx1"]),
        _const(p + "four", np.array([1, 1, 4], dtype=np.int64)),
        helper.make_node("Tile", [p + "box_idx1", p + "four"], [p + "gather_idx"]),
        helper.make_node("GatherElements", [p + "boxes", p + "gather_idx"], [p + "top_boxes"], axis=1),
        helper.make_node("Greater", [p + "top", p + "zero"], [p + "valid"]),
        helper.make_node("Cast", [p + "valid"], [p + "validf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", [p + "validf", p + "last"], [p + "validf1"]),
        helper.make_node("Mul", [p + "top_boxes", p + "validf1"], [p + "boxes_out"]),
    ]
    if layout == "det6":
        nodes += [
            helper.make_node("Cast", [p + "cls"], [p + "clsf"], to=TensorProto.FLOAT),
            helper.make_node("Mul", [p + "clsf", p + "validf"], [p + "clsv"]),
            helper.make_node("Unsqueeze", [p + "top", p + "last"], [p + "top1"]),
            helper.make_node("Unsqueeze", [p + "clsv", p + "last"], [p + "cls1"]),
            helper.make_node("Concat", [p + "boxes_out", p + "top1", p + "cls1"], ["detections"], axis=2),
        ]
        return nodes, [helper.make_tensor_value_info("detections", TensorProto.FLOAT, ["batch", k, 6])]
    assert layout == "nms4", layout
    nodes += [
        helper.make_node("Cast", [p + "valid"], [p + "valid_i"], to=TensorProto.INT32),
        _const(p + "axes1", np.array([1], dtype=np.int64)),
        helper.make_node("ReduceSum", [p + "valid_i", p + "axes1"], ["num_dets"], keepdims=1),
        helper.make_node("Identity", [p + "boxes_out"], ["det_boxes"]),
        helper.make_node("Identity", [p + "top"], ["det_scores"]),
        helper.make_node("Cast", [p + "cls"], ["det_classes"], to=TensorProto.INT32),
    ]
    return nodes, [
        helper.make_tensor_value_info("num_dets", TensorProto.INT32, ["batch", 1]),
        helper.make_tensor_value_info("det_boxes", TensorProto.FLOAT, ["batch", k, 4]),
        helper.make_tensor_value_info("det_scores", TensorProto.FLOAT, ["batch", k]),
        helper.make_tensor_value_info("det_classes", TensorProto.INT32, ["batch", k]),
    ]


def _head_conv(m: onnx.ModelProto, output: str) -> onnx.NodeProto:
    """The last Conv before a head output (through Sigmoid / Cast)."""
    prod = {o: n for n in m.graph.node for o in n.output}
    n = prod[output]
    while n.op_type != "Conv":
        n = prod[n.input[0]]
    return n


def planted(src: Path, dst: Path, head: str, *, scale: float = 1.0, shift: float = 0.0) -> Path:
    """`src` (the FP32 demo model) with the last Conv of `head` (heatmap, wh, offset) computing `scale` x its output
    + `shift`: boxes too large (wh x1.1), scores too high (heatmap logits +0.5), boxes moved (offset +0.25 cells)."""
    m = onnx.load(str(src))
    conv = _head_conv(m, head)
    inits = {i.name: i for i in m.graph.initializer}
    w, b = inits[conv.input[1]], inits[conv.input[2]]
    w.CopyFrom(numpy_helper.from_array((numpy_helper.to_array(w) * scale).astype(np.float32), w.name))
    b.CopyFrom(numpy_helper.from_array((numpy_helper.to_array(b) * scale + shift).astype(np.float32), b.name))
    onnx.save(m, str(dst))
    return dst


def permuted(src: Path, dst: Path, output: str = "detections") -> Path:
    """`src` with the rows of its [B, K, 6] `output` in reverse order (padding first): the same detections."""
    m = onnx.load(str(src))
    inner = output + "/in_order"
    for n in m.graph.node:
        n.output[:] = [inner if o == output else o for o in n.output]
    k = next(o for o in m.graph.output if o.name == output).type.tensor_type.shape.dim[1].dim_value
    m.graph.node.extend(
        [
            _const(output + "/reverse", np.arange(k - 1, -1, -1, dtype=np.int64)),
            helper.make_node("Gather", [inner, output + "/reverse"], [output], axis=1),
        ]
    )
    onnx.checker.check_model(m)
    onnx.save(m, str(dst))
    return dst


def append(src: Path, dst: Path, layout: str, *, keep_heads: bool = False, **kw: float) -> Path:
    """`src` (a shapes demo model: FP32, FP16 with FP32 outputs, or INT8 Q/DQ) with the decode of `layout` after its
    heads, its outputs replaced by the layout's (`keep_heads`: the heads stay outputs too)."""
    m = onnx.load(str(src))
    nodes, outputs = decode_nodes(layout, **kw)  # type: ignore[arg-type]
    m.graph.node.extend(nodes)
    heads = list(m.graph.output) if keep_heads else []
    del m.graph.output[:]
    m.graph.output.extend(heads + outputs)
    onnx.checker.check_model(m)
    onnx.save(m, str(dst))
    return dst
