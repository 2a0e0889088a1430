"""`stages.e2e.postprocess`: a hook, or the built-in reading of the model outputs, detection layouts included."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import Field

from trtverify.config.types import HookSpec, Strict

# Detection layouts: the output roles each reads, in the order the model usually lists them.
LAYOUT_ROLES: dict[str, tuple[str, ...]] = {
    "rows": ("detections",),
    "nms": ("count", "boxes", "scores", "classes"),
    "yolo": ("head",),
    "mmdeploy": ("dets", "labels"),
    "torchvision": ("boxes", "scores", "labels"),
    "yolov5": ("head",),
    "batch_rows": ("detections",),
}
RAW_HEADS = ("yolo", "yolov5")  # decoded here, with the NMS settings
# Output names per layout, as exporters write them: YOLO exporters' EfficientNMS_TRT ending (YOLOv6/v7/v8
# end2end), TensorRT's EfficientNMS_TRT documentation, TensorRT's BatchedNMS_TRT documentation; mmdeploy; torchvision.
KNOWN_NAMES: dict[str, tuple[tuple[str, ...], ...]] = {
    "nms": (
        ("num_dets", "det_boxes", "det_scores", "det_classes"),
        ("num_detections", "detection_boxes", "detection_scores", "detection_classes"),
        ("num_detections", "nmsed_boxes", "nmsed_scores", "nmsed_classes"),
    ),
    "mmdeploy": (("dets", "labels"),),
    "torchvision": (("boxes", "scores", "labels"),),
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
        "the raw head of layouts yolo and yolov5, the [N, 7] rows of batch_rows; segmentation: logits [B, C, H, W] "
        "(or class indices [B, H, W])",
    )
    layout: Literal[LAYOUTS] | None = Field(  # type: ignore[valid-type]
        default=None,
        description="detection: how the outputs hold the boxes. rows (the default): [B, K, 6] or one image's [K, 6] "
        "(x1, y1, x2, y2, score, class); nms: the four outputs of TensorRT's NMS plugins (EfficientNMS_TRT, "
        "BatchedNMS_TRT): count [B, 1], boxes [B, K, 4] (x1, y1, x2, y2), scores [B, K], classes [B, K], the first "
        "count rows valid; yolo: the raw head of an export without NMS, [B, 4 + C, N] (cx, cy, w, h, then C class "
        "scores), decoded with class-wise NMS; yolov5: YOLOv5's raw head [B, N, 5 + C] (cx, cy, w, h, objectness, "
        "then C class scores; score = objectness x class score), decoded the same way; mmdeploy: dets [B, K, 5] "
        "(x1, y1, x2, y2, score) and labels [B, K] (-1: padding); torchvision: boxes [K, 4] (x1, y1, x2, y2), scores "
        "[K], labels [K] (category ids) of one image, as torchvision's detection models return them (or [B, K, ...]); "
        "batch_rows: [N, 7] (batch index, x1, y1, x2, y2, class, score), every image's rows in one output (YOLOv7's "
        "end2end export with ONNX's NonMaxSuppression)",
    )
    outputs: dict[str, str] | None = Field(
        default=None,
        description="layouts nms, mmdeploy and torchvision: role -> model output name; nms roles count, boxes, "
        "scores, classes; mmdeploy roles dets, labels; torchvision roles boxes, scores, labels. Default: the names "
        "YOLO exporters, TensorRT, mmdeploy and torchvision give them (num_dets/det_boxes/det_scores/det_classes, "
        "num_detections/detection_*, num_detections/nmsed_*; dets/labels; boxes/scores/labels), else the model's "
        "outputs in that order when it has exactly that many",
    )
    classes: list[int] | None = Field(
        default=None,
        min_length=1,
        description="detection: the category id of each class index the model outputs (index k -> classes[k]). "
        "Default: nms, yolo, yolov5, batch_rows and mmdeploy give 0-based indices, mapped to the dataset's category "
        "ids in ascending order (COCO's 80 classes to its ids 1..90); rows and torchvision give category ids as they "
        "are",
    )
    normalized: bool = Field(
        default=False,
        description="detection: box coordinates are fractions of the input size (0..1), as BatchedNMS_TRT "
        "writes them with isNormalized, not input pixels",
    )
    score_threshold: Annotated[float, Field(ge=0, le=1)] | None = Field(
        default=None, description="layouts yolo, yolov5: keep class scores >= this (default 0.001)"
    )
    iou_threshold: Annotated[float, Field(gt=0, le=1)] | None = Field(
        default=None,
        description="layouts yolo, yolov5: NMS drops a box whose IoU with a kept box of its class is >= this "
        "(default 0.7)",
    )
    max_detections: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="layouts yolo, yolov5: boxes kept per image, highest scores first (default 300)"
    )
    class_agnostic: bool | None = Field(
        default=None,
        description="layouts yolo, yolov5: NMS across classes instead of within each class (default false)",
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
    if layout not in RAW_HEADS:
        for key in YOLO_NMS_DEFAULTS:
            if key in given:
                out.append(((key,), f"the NMS settings apply to layouts yolo and yolov5 (raw heads), not {layout}"))
    return out


# what each detection layout reads of an output: its rank(s) and last dimension (None: any)
_LAYOUT_SHAPES: dict[tuple[str, str], tuple[tuple[int, ...], int | None, str]] = {
    ("rows", "detections"): ((2, 3), 6, "[B, K, 6] or [K, 6]"),
    ("nms", "boxes"): ((3,), 4, "[B, K, 4]"),
    ("yolo", "head"): ((3,), None, "[B, 4 + C, N]"),
    ("yolov5", "head"): ((3,), None, "[B, N, 5 + C]"),
    ("mmdeploy", "dets"): ((3,), 5, "[B, K, 5]"),
    ("torchvision", "boxes"): ((2, 3), 4, "[K, 4] or [B, K, 4]"),
    ("torchvision", "scores"): ((1, 2), None, "[K] or [B, K]"),
    ("torchvision", "labels"): ((1, 2), None, "[K] or [B, K]"),
    ("batch_rows", "detections"): ((2,), 7, "[N, 7]"),
}


def layout_problems(
    pp: Postprocess, outputs: Sequence[tuple[str, tuple[int | str | None, ...] | None]], model: str
) -> list[tuple[tuple[str, ...], str]]:
    """Why the built-in detection layout cannot read `model`'s outputs (name, shape; a dimension int when fixed),
    as (key path under postprocess, message): a rank or a fixed last dimension the layout does not read."""
    if pp.hook is not None:
        return []
    layout = pp.effective_layout()
    roles = LAYOUT_ROLES[layout]
    shapes = dict(outputs)
    names = [n for n, _ in outputs]
    if len(roles) == 1:
        chosen = [pp.output or (names[0] if names else None)]
    elif pp.outputs is not None:
        chosen = [pp.outputs.get(r) for r in roles]
    else:
        chosen = next((list(k) for k in KNOWN_NAMES.get(layout, ()) if all(n in shapes for n in k)), [])
        if not chosen and len(names) == len(roles):
            chosen = names
        if not chosen:
            which = ", ".join(f"{r}: NAME" for r in roles)
            return [(("layout",), f"layout {layout} reads {len(roles)} outputs ({', '.join(roles)}); {model} has "
                     f"{len(names)} ({', '.join(names)}) and not the usual names: give postprocess.outputs: "
                     f"{{{which}}}")]  # fmt: skip
    out: list[tuple[tuple[str, ...], str]] = []
    for role, name in zip(roles, chosen):
        rule = _LAYOUT_SHAPES.get((layout, role))
        shape = shapes.get(name) if name is not None else None
        if rule is None or shape is None:
            continue
        ranks, last, text = rule
        last_dim = shape[-1] if shape else None
        if len(shape) not in ranks or (last is not None and isinstance(last_dim, int) and last_dim != last):
            dims = "[" + ", ".join(str(d) for d in shape) + "]"
            out.append((("layout",), f"layout {layout} reads {role} {text}, but output '{name}' of {model} is {dims}: "
                        "choose the layout of its outputs (docs/stages/e2e.md, Detection layouts) or give a "
                        "postprocess.hook"))  # fmt: skip
    return out
