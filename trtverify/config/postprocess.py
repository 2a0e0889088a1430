"""`stages.e2e.postprocess`: a hook, or the built-in reading of the model outputs, detection layouts included."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from trtverify.config.types import HookSpec, Strict

# Detection layouts: the output roles each reads, in the order the model usually lists them.
LAYOUT_ROLES: dict[str, tuple[str, ...]] = {
    "rows": ("detections",),
    "nms": ("count", "boxes", "scores", "classes"),
    "yolo": ("head",),
    "mmdeploy": ("dets", "labels"),
}
LAYOUTS = tuple(LAYOUT_ROLES)
# the raw head's NMS when the suite sets none: Ultralytics' validation settings (conf 0.001, iou 0.7, max_det 300)
YOLO_NMS_DEFAULTS = {"score_threshold": 0.001, "iou_threshold": 0.7, "max_detections": 300, "class_agnostic": False}


class Postprocess(Strict):
    """Model outputs -> the task's predictions."""

    hook: HookSpec | None = Field(
        default=None,
        description="'module:callable'(outputs: dict, image_sizes: list[(h, w)], input_size: (h, w)) -> "
        "classification: scores [B, C]; detection: list of [K, 6] arrays (x1, y1, x2, y2, score, class) in image "
        "pixels; segmentation: list of [H, W] class-index masks at the image's size",
    )
    output: str | None = Field(
        default=None,
        description="model output to read (default: the first); detection: the rows [B, K, 6] of layout rows or "
        "the raw head of layout yolo; segmentation: logits [B, C, H, W] (or class indices [B, H, W])",
    )
    layout: Literal[LAYOUTS] | None = Field(  # type: ignore[valid-type]
        default=None,
        description="detection: how the outputs hold the boxes. rows (the default): [B, K, 6] (x1, y1, x2, y2, "
        "score, class); nms: the four outputs of TensorRT's NMS plugins (EfficientNMS_TRT, BatchedNMS_TRT): count "
        "[B, 1], boxes [B, K, 4] (x1, y1, x2, y2), scores [B, K], classes [B, K], the first count rows valid; yolo: "
        "the raw head of an export without NMS, [B, 4 + C, N] (cx, cy, w, h, then C class scores), decoded with "
        "class-wise NMS; mmdeploy: dets [B, K, 5] (x1, y1, x2, y2, score) and labels [B, K] (-1: padding)",
    )
    outputs: dict[str, str] | None = Field(
        default=None,
        description="layouts nms and mmdeploy: role -> model output name; nms roles count, boxes, scores, classes; "
        "mmdeploy roles dets, labels. Default: the names YOLO exporters, TensorRT and mmdeploy give them "
        "(num_dets/det_boxes/det_scores/det_classes, num_detections/detection_*, num_detections/nmsed_*; dets/labels), "
        "else the model's outputs in that order when it has exactly that many",
    )
    classes: list[int] | None = Field(
        default=None,
        min_length=1,
        description="detection: the category id of each class index the model outputs (index k -> classes[k]). "
        "Default: nms, yolo and mmdeploy give 0-based indices, mapped to the dataset's category ids in ascending "
        "order (COCO's 80 classes to its ids 1..90); rows give category ids as they are",
    )
    normalized: bool = Field(
        default=False,
        description="detection: box coordinates are fractions of the input size (0..1), as BatchedNMS_TRT "
        "writes them with isNormalized, not input pixels",
    )
    score_threshold: Annotated[float, Field(ge=0, le=1)] | None = Field(
        default=None, description="layout yolo: keep class scores >= this (default 0.001)"
    )
    iou_threshold: Annotated[float, Field(gt=0, le=1)] | None = Field(
        default=None,
        description="layout yolo: NMS drops a box whose IoU with a kept box of its class is >= this (default 0.7)",
    )
    max_detections: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="layout yolo: boxes kept per image, highest scores first (default 300)"
    )
    class_agnostic: bool | None = Field(
        default=None, description="layout yolo: NMS across classes instead of within each class (default false)"
    )

    def effective_layout(self) -> str:
        """The detection layout read (rows when none is set)."""
        return self.layout or "rows"

    def nms_setting(self, key: str) -> float | int | bool:
        """A yolo NMS setting: the suite's, or the default."""
        value = getattr(self, key)
        return YOLO_NMS_DEFAULTS[key] if value is None else value


def postprocess_problems(pp: Postprocess, task: str) -> list[tuple[tuple[str, ...], str]]:
    """Rules across the keys of `postprocess` (and the task): (key path under postprocess, message) for each."""
    out: list[tuple[tuple[str, ...], str]] = []
    given = pp.model_fields_set
    detection_keys = ("layout", "outputs", "classes", "normalized", *YOLO_NMS_DEFAULTS)
    if task != "detection":
        for key in detection_keys:
            if key in given:
                out.append(((key,), f"applies to task detection, not {task}"))
        return out
    if pp.hook is not None:
        for key in detection_keys:
            if key in given:
                out.append(((key,), "a postprocess.hook decodes the outputs itself: give the hook or the built-in "
                            "layout's keys, not both"))  # fmt: skip
        return out
    layout = pp.effective_layout()
    roles = LAYOUT_ROLES[layout]
    if len(roles) == 1 and pp.outputs is not None:
        out.append((("outputs",), f"layout {layout} reads one output: name it with postprocess.output"))
    if len(roles) > 1 and pp.output is not None:
        names = ", ".join(f"{r}: NAME" for r in roles)
        out.append((("output",), f"layout {layout} reads {len(roles)} outputs: name them with outputs: {{{names}}}"))
    if len(roles) > 1 and pp.outputs is not None:
        for role in pp.outputs:
            if role not in roles:
                out.append((("outputs", role), f"layout {layout} has no output role '{role}'; its roles: "
                            f"{', '.join(roles)}"))  # fmt: skip
        missing = [r for r in roles if r not in pp.outputs]
        if missing:
            out.append((("outputs",), f"layout {layout}: name every output, missing {', '.join(missing)}"))
    if layout != "yolo":
        for key in YOLO_NMS_DEFAULTS:
            if key in given:
                out.append(((key,), f"the NMS settings apply to layout yolo (the raw head), not {layout}"))
    return out
