"""The typed record of a detection output compared box to box in the layerwise stage."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from trtverify.util.record import Record, optional


class WorstImage(Record):
    sample: int
    image: int = Field(description="its index in the sample's batch")
    matched_fraction: float


class DetectionRow(Record):
    """A detection output (one layout's tensors) of the reference against the candidate's, boxes matched one to one
    by class and IoU (docs/stages/layerwise.md#detections); it replaces those tensors' elementwise rows."""

    tensors: list[str] = Field(description="the reference tensors holding the detections, in the layout's role order")
    candidate_tensors: list[str] | None = optional("the candidate's tensors, where named otherwise")
    layout: Literal["nms4", "dets5", "det6", "torchvision", "batch7"] = Field(
        description="nms4: count, boxes [B, K, 4], scores, classes; dets5: dets [B, K, 5] and labels [B, K]; det6: "
        "[B, K, 6] or [K, 6] rows (x1, y1, x2, y2, score, class); torchvision: boxes [K, 4], scores [K], labels [K] "
        "of one image; batch7: [N, 7] rows (batch index, x1, y1, x2, y2, class, score)"
    )
    roles: dict[str, str] = Field(
        description="role (count, boxes, scores, classes, dets, labels, detections) -> reference tensor"
    )
    recognised: str = Field(description="how the layout was recognised: the plugin node, or graph outputs by shape")
    covers: list[str] = Field(
        default_factory=list,
        description="reference tensors between the selection (NMS, TopK) and these outputs, ordered by it and so "
        "compared through this row, not element by element",
    )
    node: str | None = Field(description="the reference node producing the first tensor")
    op_type: str | None
    topo_index: int
    iou: float = Field(description="the matching threshold: a candidate box matches at IoU >= this")
    samples: int
    images: int
    reference_boxes: int = Field(description="valid reference boxes, over every image")
    candidate_boxes: int
    matched: int = Field(description="pairs matched one to one")
    class_changes: int = Field(
        description="unmatched reference boxes that overlap an unmatched candidate box of another class at IoU >= iou"
    )
    nonfinite: int = Field(description="boxes (either side) with a non-finite coordinate or score")
    unmatched_score_max: float | None = optional("the highest score of a box left unmatched (either side)")
    worst_image: WorstImage | None = optional("the image of the lowest matched fraction")
    metrics: dict[str, float] = Field(
        description="matched_fraction, matched_by_score, mean_iou, mean_iou_by_score, min_iou, max_score_change, "
        "count_diff_max, count_diff_total"
    )
    errors: list[str] | None = optional("why samples could not be compared")
    passed: bool
    failed: list[str] | None = optional("the checks it fails, e.g. 'mean_iou_by_score >= 0.95'")
