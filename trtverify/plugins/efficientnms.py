"""EfficientNMS_TRT in numpy, as TensorRT's plugin computes it (TensorRT OSS plugin/efficientNMSPlugin).

Inputs: boxes [B, N, 4] (one box per anchor), [B, N, 1, 4] or [B, N, C, 4] (a box per class); scores [B, N, C]
(or [B, N, C, 1]); optional anchors [1, N, 4] or [B, N, 4], which switch on the fused box decoder.
Outputs: num_detections int32 [B, 1], detection_boxes [B, max_output_boxes, 4] (always corners), detection_scores
[B, max_output_boxes], detection_classes int32 [B, max_output_boxes]; rows past num_detections are zeros.

What the plugin does, step by step (docs/plugins.md has the sources):
1. Candidates: every (anchor, class) score >= score_threshold, background class left out. With score_activation the
   raw scores are compared with logit(score_threshold) and only the kept scores go through the sigmoid.
   Below a threshold of 0.007 (its logit with score_activation) the plugin switches to a dense path: every element
   is a candidate, those under the threshold or of the background class with the score -32768. They sort last but
   can still be output when fewer real detections than max_output_boxes survive; this is reproduced.
2. Candidates sorted by score descending (stable: equal scores in (anchor, class) order), the first 5000 kept.
3. Greedy NMS in that order: a candidate is dropped when its IoU with a kept one (of the same class, unless
   class_agnostic) is >= iou_threshold; it stops at max_output_boxes kept.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trtverify.plugins.attrs import PluginError, float_input, get_bool, get_float, get_int
from trtverify.plugins.nms import greedy_nms, iou_efficient, top_stable

OP = "EfficientNMS_TRT"
SELECTED_BOXES = 5000  # mParam.numSelectedBoxes on GPUs with 64K registers per block (2000 on Jetson TX1/TX2)
DENSE_BELOW = 0.007  # the score threshold under which the plugin scores every element (EfficientNMSDenseIndex)
SENTINEL = -32768.0  # -(1 << 15): the dense path's score for elements under the threshold or of the background


def _to_corners(boxes: np.ndarray, coding: int) -> np.ndarray:
    """Boxes [..., 4] in the plugin's coding as corners (the same axis order as the input)."""
    if coding == 0:
        return boxes
    half = np.float32(0.5)
    centre, size = boxes[..., :2], boxes[..., 2:]
    return np.concatenate([centre - size * half, centre + size * half], axis=-1)


def _decode(deltas: np.ndarray, anchors: np.ndarray, coding: int) -> np.ndarray:
    """The fused box decoder: corners add (after ordering both corner pairs), centre-size scales by the anchor."""
    if coding == 0:
        lo = np.minimum(deltas[..., :2], deltas[..., 2:]) + np.minimum(anchors[..., :2], anchors[..., 2:])
        hi = np.maximum(deltas[..., :2], deltas[..., 2:]) + np.maximum(anchors[..., :2], anchors[..., 2:])
        return np.concatenate([lo, hi], axis=-1)
    centre = deltas[..., :2] * anchors[..., 2:] + anchors[..., :2]
    with np.errstate(over="ignore"):
        size = anchors[..., 2:] * np.exp(deltas[..., 2:])
    return _to_corners(np.concatenate([centre, size], axis=-1), 1)


def _logit(p: np.float32) -> np.float32:
    return np.float32(np.log(np.float32(p) / (np.float32(1) - np.float32(p))))


def _thresholds(score_threshold: float, activation: bool) -> tuple[np.float32, bool]:
    """The threshold the raw scores are compared with, and whether the dense path runs."""
    threshold = np.float32(score_threshold)
    select = np.float32(DENSE_BELOW)
    if activation:
        threshold = np.float32(SENTINEL) if threshold <= 0 else _logit(threshold)
        select = _logit(select)
    return threshold, bool(threshold < select)


def efficient_nms(boxes: Any, scores: Any, anchors: Any = None, **attributes: Any) -> tuple[np.ndarray, ...]:
    """EfficientNMS_TRT: (num_detections, detection_boxes, detection_scores, detection_classes)."""
    score_threshold = get_float(OP, attributes, "score_threshold", 0.5)
    iou_threshold = np.float32(get_float(OP, attributes, "iou_threshold", 0.5))
    max_out = get_int(OP, attributes, "max_output_boxes", 100)
    background = get_int(OP, attributes, "background_class", -1)
    activation = get_bool(OP, attributes, "score_activation", False)
    agnostic = get_bool(OP, attributes, "class_agnostic", False)
    coding = get_int(OP, attributes, "box_coding", 0)
    if coding not in (0, 1):
        raise PluginError(f"{OP}: box_coding must be 0 (corners) or 1 (centre and size), got {coding}")
    if max_out <= 0:
        raise PluginError(f"{OP}: max_output_boxes must be > 0 (TensorRT refuses {max_out})")

    boxes = float_input(OP, "boxes", boxes, (3, 4))
    scores = float_input(OP, "scores", scores, (3, 4))
    if scores.ndim == 4:
        if scores.shape[3] != 1:
            raise PluginError(f"{OP}: 4-D scores must be [B, N, C, 1], got {list(scores.shape)}")
        scores = scores[..., 0]
    batch, count, classes = scores.shape
    if boxes.ndim == 3:
        boxes = boxes[:, :, None, :]
    if boxes.shape[:2] != (batch, count) or boxes.shape[3] != 4 or boxes.shape[2] not in (1, classes):
        raise PluginError(
            f"{OP}: boxes {list(boxes.shape)} do not fit scores {list(scores.shape)}: "
            f"expected [{batch}, {count}, 4], [{batch}, {count}, 1, 4] or [{batch}, {count}, {classes}, 4]"
        )
    if anchors is not None:
        anchors = float_input(OP, "anchors", anchors, (3,))
        if anchors.shape[0] not in (1, batch) or anchors.shape[1:] != (count, 4):
            want = f"[1, {count}, 4] or [{batch}, {count}, 4]"
            raise PluginError(f"{OP}: anchors must be {want}, got {list(anchors.shape)}")

    dtype = scores.dtype
    threshold, dense = _thresholds(score_threshold, activation)
    out_num = np.zeros((batch, 1), dtype=np.int32)
    out_boxes = np.zeros((batch, max_out, 4), dtype=boxes.dtype)
    out_scores = np.zeros((batch, max_out), dtype=dtype)
    out_classes = np.zeros((batch, max_out), dtype=np.int32)
    class_of = np.tile(np.arange(classes), count)
    drop = class_of == background
    for b in range(batch):
        flat = scores[b].reshape(-1)
        if dense:
            keys = flat.copy()
            keys[(flat < threshold.astype(dtype)) | drop] = dtype.type(SENTINEL)
            chosen = top_stable(keys, SELECTED_BOXES)
        else:
            candidates = np.flatnonzero((flat >= threshold.astype(dtype)) & ~drop)
            chosen = candidates[top_stable(flat[candidates], SELECTED_BOXES)]
            keys = flat
        anchor_of, cls = chosen // classes, class_of[chosen]
        picked = boxes[b, anchor_of, cls if boxes.shape[2] > 1 else 0].astype(np.float32)
        if anchors is not None:
            picked = _decode(picked, anchors[0 if anchors.shape[0] == 1 else b, anchor_of].astype(np.float32), coding)
        else:
            picked = _to_corners(picked, coding)

        def suppress(a: np.ndarray, c: np.ndarray) -> np.ndarray:
            return iou_efficient(a, c) >= iou_threshold

        keep = greedy_nms(picked, suppress, groups=None if agnostic else cls, max_keep=max_out)
        found = keep.size
        out_num[b, 0] = found
        out_boxes[b, :found] = picked[keep].astype(boxes.dtype)
        kept_scores = keys[chosen[keep]].astype(np.float32)
        if activation:
            with np.errstate(over="ignore"):
                kept_scores = np.float32(1) / (np.float32(1) + np.exp(-kept_scores))
        out_scores[b, :found] = kept_scores.astype(dtype)
        out_classes[b, :found] = cls[keep]
    return out_num, out_boxes, out_scores, out_classes
