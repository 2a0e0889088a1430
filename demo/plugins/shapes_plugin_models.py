"""The shapes detector (demo/shapes) wrapped the ways TensorRT users export detectors (imports only torch).

Three modules, each a `ShapesCenterNet` subclass, so `demo/shapes/shapes_centernet.pt` loads into them as it is
(`load_state_dict(strict=True)`):

- `ShapesYoloRaw`: a YOLO-style raw head `[B, 4 + C, N]`, an export without NMS: rows 0-3 the box
  (cx, cy, w, h) in input pixels, rows 4.. the class scores (sigmoid probabilities), one column per heatmap
  position (N = 32 x 32 for a 128 x 128 input). Every position predicts a box; NMS after the model removes
  the duplicates (the CenterNet decoder's 3x3 peak search is not in the graph).
- `ShapesEfficientNMS`: the raw head, then `EfficientNMS_TRT` (box_coding 1: centre and size), the way YOLO
  exporters end their graphs for TensorRT: outputs `num_dets` [B, 1] int32, `det_boxes` [B, M, 4]
  (x1, y1, x2, y2), `det_scores` [B, M], `det_classes` [B, M] int32 (0-based class index).
- `ShapesPluginNMS`: a user's own plugin mid-graph: `ShapesBoxDecode` (domain "shapes") turns the raw `wh` and
  `offset` maps into corner boxes [B, N, 4], then `EfficientNMS_TRT` (box_coding 0) with the heatmap as scores.

Both plugins are `torch.autograd.Function`s whose `symbolic` writes the plugin node (TorchScript exporter,
`dynamo=False`) and whose `forward` computes in torch what the plugin computes, so the PyTorch module's
detections are real ones: `efficient_nms` follows NVIDIA's EfficientNMS_TRT (plugin/efficientNMSPlugin in
github.com/NVIDIA/TensorRT: score >= score_threshold, descending score, at most 4096 candidates, greedy
suppression at IoU >= iou_threshold within a class unless class_agnostic, zero padding).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "shapes"))
from shapes_model import NUM_CLASSES, STRIDE, ShapesCenterNet  # noqa: E402

GRID = 32  # heatmap positions per side for the demo's 128 x 128 input
NMS_TOP_K = 4096  # EfficientNMS_TRT runs NMS on the 4096 highest scores at most
NMS_OUTPUTS = ("num_dets", "det_boxes", "det_scores", "det_classes")

# the demo's NMS settings (also written into the plugin node)
NMS_ATTRIBUTES = {
    "background_class": -1,
    "box_coding": 1,
    "class_agnostic": 0,
    "iou_threshold": 0.5,
    "max_output_boxes": 100,
    "score_activation": 0,
    "score_threshold": 0.05,
}


def _corners(boxes: torch.Tensor, box_coding: int) -> torch.Tensor:
    if box_coding == 0:
        return boxes
    cx, cy, w, h = boxes.unbind(-1)
    return torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], dim=-1)


def _iou(box: torch.Tensor, others: torch.Tensor) -> torch.Tensor:
    """IoU of one corner box with each of `others` [K, 4]; corners reordered first, an empty union gives 0."""

    def ordered(b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x1, y1, x2, y2 = b.unbind(-1)
        return torch.minimum(x1, x2), torch.minimum(y1, y2), torch.maximum(x1, x2), torch.maximum(y1, y2)

    ax1, ay1, ax2, ay2 = ordered(box)
    bx1, by1, bx2, by2 = ordered(others)
    iw = (torch.minimum(ax2, bx2) - torch.maximum(ax1, bx1)).clamp(min=0)
    ih = (torch.minimum(ay2, by2) - torch.maximum(ay1, by1)).clamp(min=0)
    inter = iw * ih
    union = (ax2 - ax1) * (ay2 - ay1) + (bx2 - bx1) * (by2 - by1) - inter
    iou = torch.where(union > 0, inter / union.clamp(min=1e-30), torch.zeros_like(inter))
    return torch.where(inter > 0, iou, torch.zeros_like(inter))


def efficient_nms(
    boxes: torch.Tensor,
    scores: torch.Tensor,
    *,
    background_class: int = -1,
    box_coding: int = 0,
    class_agnostic: int = 0,
    iou_threshold: float = 0.5,
    max_output_boxes: int = 100,
    score_activation: int = 0,
    score_threshold: float = 0.05,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """EfficientNMS_TRT in torch: boxes [B, N, 4] or [B, N, C, 4], scores [B, N, C] ->
    (num_dets [B, 1] int32, det_boxes [B, M, 4] corners, det_scores [B, M], det_classes [B, M] int32)."""
    b, n, c = scores.shape
    m = int(max_output_boxes)
    num = torch.zeros(b, 1, dtype=torch.int32)
    out_boxes = torch.zeros(b, m, 4, dtype=boxes.dtype)
    out_scores = torch.zeros(b, m, dtype=scores.dtype)
    out_classes = torch.zeros(b, m, dtype=torch.int32)
    probs = torch.sigmoid(scores) if score_activation else scores
    for i in range(b):
        keep = probs[i] >= score_threshold
        if 0 <= background_class < c:
            keep[:, background_class] = False
        anchor, cls = keep.nonzero(as_tuple=True)  # element order: anchor-major, as the plugin indexes them
        cand = probs[i][anchor, cls]
        order = torch.sort(cand, descending=True, stable=True).indices[:NMS_TOP_K]
        anchor, cls, cand = anchor[order], cls[order], cand[order]
        per_class = boxes.dim() == 4
        box = _corners(boxes[i][anchor, cls] if per_class else boxes[i][anchor], box_coding)
        alive = torch.ones(len(cand), dtype=torch.bool)
        kept: list[int] = []
        for k in range(len(cand)):
            if not bool(alive[k]):
                continue
            if len(kept) == m:
                break
            kept.append(k)
            rest = torch.arange(k + 1, len(cand))
            if len(rest) == 0:
                continue
            same = torch.ones_like(rest, dtype=torch.bool) if class_agnostic else cls[rest] == cls[k]
            hit = same & (_iou(box[k], box[rest]) >= iou_threshold)
            alive[rest[hit]] = False
        sel = torch.tensor(kept, dtype=torch.long)
        num[i, 0] = len(kept)
        out_boxes[i, : len(kept)] = box[sel]
        out_scores[i, : len(kept)] = cand[sel]
        out_classes[i, : len(kept)] = cls[sel].to(torch.int32)
    return num, out_boxes, out_scores, out_classes


class EfficientNMSTRT(torch.autograd.Function):
    """Real NMS in torch; exported as TensorRT's EfficientNMS_TRT plugin node (domain TRT)."""

    @staticmethod
    def forward(ctx, boxes, scores, background_class, box_coding, class_agnostic, iou_threshold, max_output_boxes,
                score_activation, score_threshold):  # fmt: skip
        return efficient_nms(
            boxes,
            scores,
            background_class=background_class,
            box_coding=box_coding,
            class_agnostic=class_agnostic,
            iou_threshold=iou_threshold,
            max_output_boxes=max_output_boxes,
            score_activation=score_activation,
            score_threshold=score_threshold,
        )

    @staticmethod
    def symbolic(g, boxes, scores, background_class, box_coding, class_agnostic, iou_threshold, max_output_boxes,
                 score_activation, score_threshold):  # fmt: skip
        return g.op(
            "TRT::EfficientNMS_TRT",
            boxes,
            scores,
            background_class_i=background_class,
            box_coding_i=box_coding,
            class_agnostic_i=class_agnostic,
            iou_threshold_f=iou_threshold,
            max_output_boxes_i=max_output_boxes,
            plugin_version_s="1",
            score_activation_i=score_activation,
            score_threshold_f=score_threshold,
            outputs=4,
        )


def _grid(h: int, w: int) -> tuple[torch.Tensor, torch.Tensor]:
    ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32), indexing="ij")
    return xs, ys


def box_decode(wh: torch.Tensor, offset: torch.Tensor, stride: int) -> torch.Tensor:
    """ShapesBoxDecode in torch: wh, offset [B, 2, H, W] (grid cells) -> corner boxes [B, H*W, 4] in input pixels,
    position p = row * W + col; the numpy reference is shapes_plugins.decode."""
    b, _, h, w = wh.shape
    xs, ys = _grid(h, w)
    cx = (xs + offset[:, 0]) * stride
    cy = (ys + offset[:, 1]) * stride
    bw = wh[:, 0].clamp(min=0) * stride
    bh = wh[:, 1].clamp(min=0) * stride
    return torch.stack([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], dim=-1).reshape(b, h * w, 4)


class ShapesBoxDecode(torch.autograd.Function):
    """A user's plugin: CenterNet maps -> boxes; exported as the custom op shapes::ShapesBoxDecode."""

    @staticmethod
    def forward(ctx, wh, offset, stride):
        return box_decode(wh, offset, stride)

    @staticmethod
    def symbolic(g, wh, offset, stride):
        return g.op("shapes::ShapesBoxDecode", wh, offset, stride_i=stride, plugin_version_s="1")


class ShapesYoloRaw(ShapesCenterNet):
    """The raw head [B, 4 + C, N]: (cx, cy, w, h) in input pixels, then the C class probabilities."""

    def __init__(self) -> None:
        super().__init__()
        xs, ys = _grid(GRID, GRID)
        self.register_buffer("grid", torch.stack([xs, ys]).unsqueeze(0), persistent=False)  # [1, 2, H, W]

    def raw_head(self, images: torch.Tensor) -> torch.Tensor:
        heat, wh, offset = super().forward(images)
        centre = (self.grid + offset) * STRIDE
        size = wh.clamp(min=0) * STRIDE
        return torch.cat([centre, size, heat], dim=1).flatten(2)  # [B, 4 + C, H*W]

    def forward(self, images: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return self.raw_head(images)


class ShapesEfficientNMS(ShapesYoloRaw):
    """The raw head, then EfficientNMS_TRT (box_coding 1): num_dets, det_boxes, det_scores, det_classes."""

    def __init__(self, **nms: float) -> None:
        super().__init__()
        self.nms = {**NMS_ATTRIBUTES, **nms, "box_coding": 1}

    def forward(self, images: torch.Tensor):  # type: ignore[override]
        raw = self.raw_head(images)
        boxes = raw[:, :4].transpose(1, 2)  # [B, N, 4] cx, cy, w, h
        scores = raw[:, 4:].transpose(1, 2)  # [B, N, C]
        return EfficientNMSTRT.apply(boxes, scores, *(self.nms[k] for k in sorted(NMS_ATTRIBUTES)))


class ShapesPluginNMS(ShapesCenterNet):
    """The user's ShapesBoxDecode plugin mid-graph, then EfficientNMS_TRT (box_coding 0)."""

    def __init__(self, **nms: float) -> None:
        super().__init__()
        self.nms = {**NMS_ATTRIBUTES, **nms, "box_coding": 0}

    def forward(self, images: torch.Tensor):  # type: ignore[override]
        heat, wh, offset = super().forward(images)
        boxes = ShapesBoxDecode.apply(wh, offset, STRIDE)  # [B, N, 4] x1, y1, x2, y2
        scores = heat.flatten(2).transpose(1, 2)  # [B, N, C]
        return EfficientNMSTRT.apply(boxes, scores, *(self.nms[k] for k in sorted(NMS_ATTRIBUTES)))


def build_raw() -> ShapesYoloRaw:
    """Factories for trtverify's models.pytorch (untrained; load demo/shapes/shapes_centernet.pt)."""
    return ShapesYoloRaw()


def build_nms() -> ShapesEfficientNMS:
    return ShapesEfficientNMS()


def build_plugin() -> ShapesPluginNMS:
    return ShapesPluginNMS()


__all__ = ["NUM_CLASSES", "NMS_OUTPUTS", "build_nms", "build_plugin", "build_raw", "efficient_nms"]
