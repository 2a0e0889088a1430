"""A YOLOv7-style detector with its end-to-end export wrapper, written the way YOLOv7's `models/experimental.py`
writes `End2End` / `ONNX_TRT` / `TRT_NMS` (written anew here, not copied): the NMS is a `torch.autograd.Function`
whose `symbolic` emits TensorRT's `EfficientNMS_TRT` node and whose `forward` only makes tensors of the right shapes
and types for tracing: random ones (`torch.randint`, `torch.randn`), as YOLOv7's does. The exported ONNX graph is
the real model; the PyTorch module is not: two forwards on one input give different outputs.

`build()` is the suite's `models.pytorch.factory` (the module users export); weights: `weights.pt` beside it.
Made by `make_model.py` (the same folder). Imports torch only.
"""

from __future__ import annotations

import torch

CLASSES = 3
SIZE = 64  # input side; the head predicts one box per cell of an 8 x 8 grid, 3 anchors each
ANCHORS = 3
NMS = {"iou_threshold": 0.45, "max_output_boxes": 20, "score_threshold": 0.05}


class TinyYolo(torch.nn.Module):
    """Backbone of three strided convolutions and a YOLO head: [B, cells * anchors, 5 + C] rows (cx, cy, w, h in
    input pixels, objectness, class scores), sigmoid applied, as YOLOv7's Detect layer gives them in export mode."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, 2, 1), torch.nn.SiLU(),
            torch.nn.Conv2d(8, 16, 3, 2, 1), torch.nn.SiLU(),
            torch.nn.Conv2d(16, 16, 3, 2, 1), torch.nn.SiLU(),
        )  # fmt: skip
        self.head = torch.nn.Conv2d(16, ANCHORS * (5 + CLASSES), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.head(self.backbone(x))  # [B, A * (5 + C), H, W]
        b, _, h, w = p.shape
        p = p.view(b, ANCHORS, 5 + CLASSES, h, w).permute(0, 1, 3, 4, 2).sigmoid()  # [B, A, H, W, 5 + C]
        stride = SIZE / h
        gy, gx = torch.meshgrid(torch.arange(h, dtype=p.dtype), torch.arange(w, dtype=p.dtype), indexing="ij")
        cx = (p[..., 0] * 2 - 0.5 + gx) * stride
        cy = (p[..., 1] * 2 - 0.5 + gy) * stride
        anchor = torch.tensor([8.0, 16.0, 32.0]).view(1, ANCHORS, 1, 1)
        wh = (p[..., 2:4] * 2) ** 2 * anchor.unsqueeze(-1)
        rows = torch.cat([cx.unsqueeze(-1), cy.unsqueeze(-1), wh, p[..., 4:]], dim=-1)
        return rows.reshape(b, -1, 5 + CLASSES)


class EfficientNMSStandIn(torch.autograd.Function):
    """Export-only NMS (YOLOv7's TRT_NMS pattern): `symbolic` writes EfficientNMS_TRT; `forward` returns random
    tensors of the plugin's output shapes, enough for the tracer and nothing more."""

    @staticmethod
    def forward(ctx, boxes, scores, background_class=-1, box_coding=1, iou_threshold=0.45,  # noqa: ANN001, ANN205
                max_output_boxes=100, plugin_version="1", score_activation=0, score_threshold=0.25):  # fmt: skip
        batch, _, classes = scores.shape
        num_dets = torch.randint(0, max_output_boxes, (batch, 1), dtype=torch.int32)
        det_boxes = torch.randn(batch, max_output_boxes, 4)
        det_scores = torch.randn(batch, max_output_boxes)
        det_classes = torch.randint(0, classes, (batch, max_output_boxes), dtype=torch.int32)
        return num_dets, det_boxes, det_scores, det_classes

    @staticmethod
    def symbolic(g, boxes, scores, background_class=-1, box_coding=1, iou_threshold=0.45,  # noqa: ANN001, ANN205
                 max_output_boxes=100, plugin_version="1", score_activation=0, score_threshold=0.25):  # fmt: skip
        return g.op(
            "TRT::EfficientNMS_TRT", boxes, scores,
            background_class_i=background_class, box_coding_i=box_coding, iou_threshold_f=iou_threshold,
            max_output_boxes_i=max_output_boxes, plugin_version_s=plugin_version,
            score_activation_i=score_activation, score_threshold_f=score_threshold, outputs=4,
        )  # fmt: skip


class ZerosStandIn(EfficientNMSStandIn):
    """The same export-only NMS with a forward that returns zeros (no detections), as other exporters' stand-ins
    do: deterministic, but the same whatever the input."""

    @staticmethod
    def forward(ctx, boxes, scores, background_class=-1, box_coding=1, iou_threshold=0.45,  # noqa: ANN001, ANN205
                max_output_boxes=100, plugin_version="1", score_activation=0, score_threshold=0.25):  # fmt: skip
        batch = scores.shape[0]
        num_dets = torch.zeros(batch, 1, dtype=torch.int32)
        det_classes = torch.zeros(batch, max_output_boxes, dtype=torch.int32)
        return num_dets, torch.zeros(batch, max_output_boxes, 4), torch.zeros(batch, max_output_boxes), det_classes


class End2End(torch.nn.Module):
    """The detector and its NMS, as YOLOv7's export.py --end2end wraps a model for TensorRT: objectness times class
    scores, boxes as (cx, cy, w, h) (box_coding 1), EfficientNMS_TRT's four outputs."""

    def __init__(self, model: torch.nn.Module, stand_in: type[torch.autograd.Function] = EfficientNMSStandIn) -> None:
        super().__init__()
        self.model = model
        self.stand_in = stand_in

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        rows = self.model(x)
        boxes, conf, cls = rows[..., :4], rows[..., 4:5], rows[..., 5:]
        return self.stand_in.apply(boxes, cls * conf, -1, 1, NMS["iou_threshold"], NMS["max_output_boxes"],
                                         "1", 0, NMS["score_threshold"])  # fmt: skip


def build(stand_in: str = "random") -> torch.nn.Module:
    """The suite's factory: the module YOLOv7 users export (weights: weights.pt, keys under `model.`); `stand_in`:
    "random" (YOLOv7's) or "zeros" (the same graph, an NMS forward returning zeros)."""
    return End2End(TinyYolo(), {"random": EfficientNMSStandIn, "zeros": ZerosStandIn}[stand_in])
