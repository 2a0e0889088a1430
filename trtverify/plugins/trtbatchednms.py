"""mmdeploy's TRTBatchedNMS in numpy (mmdeploy csrc/mmdeploy/backend_ops/tensorrt/batched_nms and common_impl/nms).

A fork of TensorRT's BatchedNMS with its own outputs: dets [B, keep_topk, 5] (x1, y1, x2, y2, score), labels int32
[B, keep_topk] and, with return_index, index int32 [B, keep_topk]; padding rows are zeros with label and index -1.
Its differences from BatchedNMS_TRT: topk <= 0 or above the anchor count means every anchor; the IoU neither
reorders corners nor adds 1 to sizes (is_normalized changes nothing); float32 only; shareLocation follows the boxes
(dimension 2 is 1). The index is the anchor for shared boxes, class * N + anchor for per-class boxes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trtverify.plugins.attrs import PluginError, float_input, get_bool, get_float, get_int
from trtverify.plugins.batchednms import Pipeline, gather_boxes, run_pipeline
from trtverify.plugins.nms import iou_ssd

OP = "TRTBatchedNMS"


def trt_batched_nms(boxes: Any, scores: Any, **attributes: Any) -> tuple[np.ndarray, ...]:
    """mmdeploy::TRTBatchedNMS: (dets, labels) or (dets, labels, index) with return_index."""
    boxes = float_input(OP, "boxes", boxes, (4,)).astype(np.float32)
    scores = float_input(OP, "scores", scores, (3,)).astype(np.float32)
    batch, count, classes = scores.shape
    num_classes = get_int(OP, attributes, "num_classes")
    if num_classes != classes:
        raise PluginError(f"{OP}: scores {list(scores.shape)} have {classes} classes, num_classes is {num_classes}")
    if boxes.shape[:2] != (batch, count) or boxes.shape[2] not in (1, classes) or boxes.shape[3] != 4:
        raise PluginError(
            f"{OP}: boxes must be [{batch}, {count}, 1, 4] or [{batch}, {count}, {classes}, 4], got {list(boxes.shape)}"
        )
    top_k = get_int(OP, attributes, "topk", -1)
    keep_top_k = get_int(OP, attributes, "keep_topk")
    if keep_top_k < 0:
        keep_top_k = count  # the kernel's keepTopKVal; the exporter never writes a negative keep_topk
    limit = np.float32(get_float(OP, attributes, "iou_threshold"))

    def suppress(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return iou_ssd(a, b, caffe=False, area_offset=0.0, reorder=False) > limit

    pipeline = Pipeline(
        background=get_int(OP, attributes, "background_label_id", 0),
        top_k=top_k if 0 < top_k <= count else count,
        keep_top_k=keep_top_k,
        score_threshold=get_float(OP, attributes, "score_threshold"),
        suppress=suppress,
    )
    sel = run_pipeline(boxes, scores, pipeline)
    clipped = gather_boxes(boxes, sel, get_bool(OP, attributes, "clip_boxes", True))
    dets = np.concatenate([clipped, sel.score[..., None]], axis=2)
    labels = sel.klass.astype(np.int32)
    if not get_bool(OP, attributes, "return_index", False):
        return dets.astype(np.float32), labels
    index = sel.anchor if boxes.shape[2] == 1 else np.where(sel.anchor >= 0, sel.klass * count + sel.anchor, -1)
    return dets.astype(np.float32), labels, index.astype(np.int32)
