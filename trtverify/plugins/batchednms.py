"""BatchedNMS_TRT and BatchedNMSDynamic_TRT in numpy (TensorRT OSS plugin/batchedNMSPlugin and the SSD kernels of
plugin/common/kernels), and the per-class pipeline they share with mmdeploy's TRTBatchedNMS (trtbatchednms.py).

The pipeline, per image:
1. Per class: scores > scoreThreshold (strict) are candidates, the background class has none; a stable sort by score
   descending (equal scores in anchor order) and the first topK (at most the number of anchors) go on.
2. Per class, greedy NMS in that order: a box is dropped when its IoU with a kept box of the class is > iouThreshold
   (strict).
3. The kept entries of all classes (classes * topK slots, class-major, dropped slots scoring 0) are sorted again by
   score (stable: equal scores in class order, then rank) and the first keepTopK are output; empty slots are padding.
   When keepTopK > topK the plugins' gather kernel writes nothing; the reference then gives only padding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from trtverify.plugins.attrs import PluginError, float_input, get_bool, get_float, get_int
from trtverify.plugins.nms import Suppress, greedy_nms, iou_ssd, top_stable

CLIP = np.float16(1 + 1 - 1 / 1024)  # the largest half under 2: where shifted fp16 scores are clipped


@dataclass(frozen=True)
class Pipeline:
    """The parameters of the per-class NMS of the SSD-family plugins."""

    background: int
    top_k: int  # > 0: the slots per class (may exceed the anchors; the extra slots stay empty)
    keep_top_k: int
    score_threshold: float
    suppress: Suppress
    score_bits: int = 0  # fp16 inputs only: sort on this many mantissa bits of score + 1 (0: full precision)


@dataclass(frozen=True)
class Selected:
    """The first keep_top_k slots of each image: anchor (-1 for padding), class (-1 for padding), output score."""

    anchor: np.ndarray
    klass: np.ndarray
    score: np.ndarray


def _keys(scores: np.ndarray, valid: np.ndarray, score_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Sort keys and output scores [N, C]; invalid slots get the key of the plugin's cleared score."""
    if scores.dtype == np.float16 and 0 < score_bits <= 10:
        with np.errstate(over="ignore"):
            shifted = (scores + np.float16(1)).astype(np.float16)
        shifted = np.where(shifted >= CLIP, CLIP, shifted)
        shifted = np.where(valid, shifted, np.float16(1))
        keys = (shifted.view(np.uint16) >> np.uint16(10 - score_bits)) & np.uint16((1 << score_bits) - 1)
        return keys.astype(np.int64), (shifted - np.float16(1)).astype(np.float32)
    keys = np.where(valid, scores.astype(np.float32), np.float32(0))
    return keys, keys


def run_pipeline(boxes: np.ndarray, scores: np.ndarray, p: Pipeline) -> Selected:
    """boxes [B, N, 1 or C, 4], scores [B, N, C] -> the selected slots of every image."""
    batch, count, classes = scores.shape
    slots = p.top_k
    top_k = min(slots, count)
    anchor = np.full((batch, p.keep_top_k), -1, dtype=np.int64)
    klass = np.full((batch, p.keep_top_k), -1, dtype=np.int64)
    out = np.zeros((batch, p.keep_top_k), dtype=np.float32)
    if p.keep_top_k > p.top_k or count == 0:
        return Selected(anchor, klass, out)
    threshold = np.float32(p.score_threshold)
    not_background = np.arange(classes) != p.background
    for b in range(batch):
        valid = (scores[b].astype(np.float32) > threshold) & not_background[None, :]
        keys, scored = _keys(scores[b], valid, p.score_bits)
        wide = keys.astype(np.int64 if keys.dtype.kind in "ui" else np.float64)
        order = np.argsort(-wide, axis=0, kind="stable")[:top_k]
        after = np.full((classes, slots), keys.dtype.type(0), dtype=keys.dtype)
        after_anchor = np.full((classes, slots), -1, dtype=np.int64)
        for c in np.flatnonzero(valid.any(axis=0)):
            ranked = order[:, c]
            live = np.flatnonzero(valid[ranked, c])
            if not live.size:
                continue
            cand = ranked[live]
            keep = greedy_nms(boxes[b, cand, c if boxes.shape[2] > 1 else 0], p.suppress)
            after[c, live[keep]] = keys[cand[keep], c]
            after_anchor[c, live[keep]] = cand[keep]
        first = top_stable(after.reshape(-1), p.keep_top_k)
        picked = after_anchor.reshape(-1)[first]
        filled = picked >= 0
        anchor[b, : first.size] = picked
        cls = first // slots
        klass[b, : first.size] = np.where(filled, cls, -1)
        out[b, : first.size] = np.where(filled, scored[np.maximum(picked, 0), cls], np.float32(0))
    return Selected(anchor, klass, out)


def gather_boxes(boxes: np.ndarray, sel: Selected, clip: bool) -> np.ndarray:
    """The selected boxes [B, K, 4] (zeros for padding), clamped to [0, 1] when the plugin clips."""
    batch = boxes.shape[0]
    if boxes.shape[1] == 0:
        return np.zeros((*sel.anchor.shape, 4), dtype=np.float32)
    per_class = boxes.shape[2] > 1
    b_idx = np.arange(batch)[:, None]
    got = boxes[b_idx, np.maximum(sel.anchor, 0), np.maximum(sel.klass, 0) if per_class else 0].astype(np.float32)
    if clip:
        got = np.clip(got, 0, 1)
    return np.where((sel.anchor >= 0)[..., None], got, np.float32(0))


def trt_iou(normalized: bool, caffe: bool, threshold: float) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """TensorRT's allClassNMS test: IoU > threshold; Caffe's +1 on the intersection only for unnormalised boxes
    under caffeSemantics, +1 on every box size whenever the boxes are not normalised."""
    plus_one = not normalized and caffe
    area = 0.0 if normalized else 1.0
    limit = np.float32(threshold)

    def suppress(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return iou_ssd(a, b, caffe=plus_one, area_offset=area) > limit

    return suppress


def _batched(op: str, boxes: Any, scores: Any, attributes: dict[str, Any]) -> tuple[np.ndarray, ...]:
    share = get_bool(op, attributes, "shareLocation")
    num_classes = get_int(op, attributes, "numClasses")
    boxes = float_input(op, "boxes", boxes, (4,))
    scores = float_input(op, "scores", scores, (3, 4))
    if scores.ndim == 4:
        if scores.shape[3] != 1:
            raise PluginError(f"{op}: 4-D scores must be [B, N, C, 1], got {list(scores.shape)}")
        scores = scores[..., 0]
    if scores.shape[2] != num_classes:
        got = f"scores {list(scores.shape)} have {scores.shape[2]} classes"
        raise PluginError(f"{op}: {got}, numClasses is {num_classes}")
    want = 1 if share else num_classes
    if boxes.shape[:2] != scores.shape[:2] or boxes.shape[2:] != (want, 4):
        raise PluginError(
            f"{op}: boxes must be [{scores.shape[0]}, {scores.shape[1]}, {want}, 4] with shareLocation={int(share)}, "
            f"got {list(boxes.shape)}"
        )
    pipeline = Pipeline(
        background=get_int(op, attributes, "backgroundLabelId"),
        top_k=get_int(op, attributes, "topK"),
        keep_top_k=get_int(op, attributes, "keepTopK"),
        score_threshold=get_float(op, attributes, "scoreThreshold"),
        suppress=trt_iou(
            get_bool(op, attributes, "isNormalized", True),
            get_bool(op, attributes, "caffeSemantics", True),
            get_float(op, attributes, "iouThreshold"),
        ),
        score_bits=get_int(op, attributes, "scoreBits", 16),
    )
    if pipeline.top_k <= 0 or pipeline.keep_top_k <= 0:
        raise PluginError(f"{op}: topK and keepTopK must be > 0, got {pipeline.top_k} and {pipeline.keep_top_k}")
    sel = run_pipeline(boxes, scores, pipeline)
    dtype = boxes.dtype
    num = (sel.anchor >= 0).sum(axis=1).astype(np.int32)[:, None]
    out_boxes = gather_boxes(boxes, sel, get_bool(op, attributes, "clipBoxes", True)).astype(dtype)
    return num, out_boxes, sel.score.astype(dtype), sel.klass.astype(dtype)


def batched_nms_dynamic(boxes: Any, scores: Any, **attributes: Any) -> tuple[np.ndarray, ...]:
    """BatchedNMSDynamic_TRT: (num_detections int32 [B, 1], nmsed_boxes, nmsed_scores, nmsed_classes)."""
    return _batched("BatchedNMSDynamic_TRT", boxes, scores, attributes)


def batched_nms(boxes: Any, scores: Any, **attributes: Any) -> tuple[np.ndarray, ...]:
    """BatchedNMS_TRT: as the dynamic plugin, but num_detections is [B] (its getOutputDimensions gives no dims per
    image: TensorRT issue #1880)."""
    num, *rest = _batched("BatchedNMS_TRT", boxes, scores, attributes)
    return (num[:, 0], *rest)
