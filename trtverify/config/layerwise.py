"""Options of the layerwise stage beside its own record: per-tensor checks, and `stages.layerwise.detections`
(detection outputs compared box to box: their metrics and default checks).

Defaults per precision, measured (docs/stages/layerwise.md#detections, bench/detections.py): the shapes demo's
CenterNet with ONNX's NonMaxSuppression appended, 200 validation images, one image a sample. Correct candidates: FP16
matched_by_score 0.9998 (worst single image 0.94), mean_iou_by_score 0.9995, max_score_change 0.0011; INT8 0.997
(worst image 0.93), 0.988 (worst image 0.92), 0.059. Planted faults: boxes 5 % too large, mean_iou_by_score 0.907;
heatmap logits +0.25, max_score_change 0.062; +1, 0.24.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field, field_validator, model_validator

from trtverify.config.checks import Check
from trtverify.config.types import Name, Strict
from trtverify.util.errors import unknown


class TensorOverride(Strict):
    checks: list[Check] = Field(min_length=1, description="checks for this tensor, replacing the candidate's")


@dataclass(frozen=True)
class DetectionMetric:
    name: str
    better: str  # lower | higher
    doc: str
    high: float | None = None


DETECTION_METRICS: dict[str, DetectionMetric] = {
    m.name: m
    for m in [
        DetectionMetric(
            "matched_fraction", "higher", "matched boxes / the union of valid reference and candidate boxes", 1.0
        ),
        DetectionMetric("matched_by_score", "higher", "matched_fraction with each box weighed by its score", 1.0),
        DetectionMetric("mean_iou", "higher", "mean IoU of the matched pairs", 1.0),
        DetectionMetric("mean_iou_by_score", "higher", "mean IoU of the matched pairs, each weighed by its score", 1.0),
        DetectionMetric("min_iou", "higher", "the lowest IoU of a matched pair", 1.0),
        DetectionMetric("max_score_change", "lower", "the largest |score change| of a matched pair"),
        DetectionMetric("count_diff_max", "lower", "the largest |reference boxes - candidate boxes| of one image"),
        DetectionMetric("count_diff_total", "lower", "|reference boxes - candidate boxes| summed over the images"),
    ]
}

# (matched_by_score >=, mean_iou_by_score >=, max_score_change <=) per candidate precision, where a suite gives none
DETECTION_CHECKS: dict[str, tuple[float, float, float]] = {
    "fp32": (0.9, 0.95, 0.05),
    "tf32": (0.9, 0.95, 0.05),
    "fp16": (0.9, 0.95, 0.05),
    "bf16": (0.9, 0.95, 0.05),
    "int8": (0.9, 0.9, 0.15),
    "fp8": (0.9, 0.9, 0.15),
    "int4": (0.9, 0.9, 0.15),
}


class DetectionCheck(Strict):
    """One threshold on one detection metric, e.g. {metric: mean_iou_by_score, min: 0.95}."""

    metric: str = Field(description=f"one of: {', '.join(DETECTION_METRICS)}")
    min: float | None = Field(default=None, description="lowest passing value (higher-is-better metrics)")
    max: float | None = Field(default=None, description="highest passing value (lower-is-better metrics)")

    @field_validator("metric")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in DETECTION_METRICS:
            raise ValueError(unknown("detection metric", v, DETECTION_METRICS))
        return v

    @model_validator(mode="after")
    def _threshold(self) -> DetectionCheck:
        spec = DETECTION_METRICS[self.metric]
        want, other = ("min", "max") if spec.better == "higher" else ("max", "min")
        if getattr(self, other) is not None:
            raise ValueError(f"'{self.metric}' is {spec.better}-is-better: give '{want}', not '{other}'")
        value = getattr(self, want)
        if value is None or value != value:
            raise ValueError(f"'{self.metric}' needs a threshold: {{metric: {self.metric}, {want}: VALUE}}")
        if value < 0 or (spec.high is not None and value > spec.high):
            top = f" and <= {spec.high:g}" if spec.high is not None else ""
            raise ValueError(f"threshold {want}: {value} is out of range for {self.metric} (must be >= 0{top})")
        return self

    @property
    def op(self) -> str:
        return "<=" if self.max is not None else ">="

    @property
    def threshold(self) -> float:
        return float(self.max if self.max is not None else self.min)  # type: ignore[arg-type]

    @property
    def condition(self) -> str:
        return f"{self.metric} {self.op} {self.threshold:g}"

    def passes(self, value: float) -> bool:
        if value != value:
            return False
        return value <= self.threshold if self.max is not None else value >= self.threshold


def detection_checks(precision: str) -> list[DetectionCheck]:
    matched, iou, score = DETECTION_CHECKS[precision]
    return [
        DetectionCheck(metric="matched_by_score", min=matched),
        DetectionCheck(metric="mean_iou_by_score", min=iou),
        DetectionCheck(metric="max_score_change", max=score),
    ]


class LayerwiseDetections(Strict):
    """Detection outputs (NMS plugins' outputs, [B, K, 6], the four-output layout) compared box to box."""

    compare: bool = Field(
        default=True,
        description="compare the detection outputs recognised (docs/stages/layerwise.md#detections) as detections: "
        "boxes matched by class and IoU; false: element by element, as every other tensor",
    )
    iou: float = Field(default=0.5, gt=0, le=1, description="a candidate box matches a reference box of its class "
                       "at IoU >= this")  # fmt: skip
    checks: list[DetectionCheck] | None = Field(
        default=None,
        min_length=1,
        description="on every detection output (default: by the candidate's precision: matched_by_score >= 0.9, "
        "mean_iou_by_score >= 0.95 and max_score_change <= 0.05 for FP32/TF32/FP16/BF16; 0.9, 0.9 and 0.15 for "
        "INT8/FP8/INT4)",
    )
    candidate_checks: dict[Name, list[DetectionCheck]] = Field(
        default_factory=dict, description="per-candidate `checks`"
    )
