"""Shared inputs and ONNX Runtime second opinions for the plugin reference tests."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

# Four anchors, two classes (worked by hand in the tests):
#   b0 = [0, 0, 10, 10]; b1 = [1, 1, 11, 11] (IoU with b0: 81 / 119 = 0.68); b2 = [20, 20, 30, 30] (disjoint);
#   b3 = b0 (IoU 1 with b0)
FOUR_BOXES = np.array([[[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [0, 0, 10, 10]]], dtype=np.float32)
FOUR_SCORES = np.array([[[0.9, 0.1], [0.8, 0.7], [0.6, 0.2], [0.3, 0.95]]], dtype=np.float32)


@pytest.fixture
def four():
    return FOUR_BOXES.copy(), FOUR_SCORES.copy()


def random_detections(seed: int, batch: int, count: int, classes: int, size: float = 100.0):
    """Boxes [B, N, 4] as corners in a size x size image, clustered so NMS has work, and distinct scores [B, N, C]."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, size, (batch, count, 2))
    centres = np.round(centres / 20) * 20 + rng.normal(0, 3, centres.shape)  # anchors crowd a few spots
    sizes = rng.uniform(10, 30, (batch, count, 2))
    boxes = np.concatenate([centres - sizes / 2, centres + sizes / 2], axis=-1).astype(np.float32)
    scores = rng.permutation(batch * count * classes).reshape(batch, count, classes).astype(np.float32)
    return boxes, (scores + 1) / scores.size


def ort_nms(boxes: np.ndarray, scores: np.ndarray, iou: float, score_threshold: float) -> set[tuple[int, int, int]]:
    """ONNX's NonMaxSuppression in ONNX Runtime (per class): {(image, class, anchor)} kept.

    boxes [B, N, 4] corners, scores [B, N, C]. ONNX Runtime keeps scores > threshold and drops IoU > iou.
    """
    node = helper.make_node(
        "NonMaxSuppression", ["boxes", "scores", "max", "iou", "thr"], ["selected"], center_point_box=0
    )
    graph = helper.make_graph(
        [node],
        "nms",
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("max", TensorProto.INT64, [1]),
            helper.make_tensor_value_info("iou", TensorProto.FLOAT, [1]),
            helper.make_tensor_value_info("thr", TensorProto.FLOAT, [1]),
        ],
        [helper.make_tensor_value_info("selected", TensorProto.INT64, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=8)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (selected,) = session.run(
        None,
        {
            "boxes": boxes.astype(np.float32),
            "scores": np.ascontiguousarray(scores.transpose(0, 2, 1)).astype(np.float32),
            "max": np.array([boxes.shape[1]], dtype=np.int64),
            "iou": np.array([iou], dtype=np.float32),
            "thr": np.array([score_threshold], dtype=np.float32),
        },
    )
    return {tuple(int(v) for v in row) for row in selected}
