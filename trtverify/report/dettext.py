"""Terminal lines of the layerwise stage's detection rows (docs/stages/layerwise.md#detections)."""

from __future__ import annotations

from trtverify.report.format import fmt
from trtverify.stages.layerwise.detmodels import DetectionRow
from trtverify.stages.layerwise.models import LayerwiseCandidate
from trtverify.util.words import count


def detection_text(d: DetectionRow) -> str:
    """'40 of 41 reference boxes matched (40 candidate boxes; 0.95 of the union, 0.99 by score), mean IoU ...'."""
    m = d.metrics
    if d.reference_boxes + d.candidate_boxes == 0:
        return f"no box on either side in {count(d.images, 'image')}: nothing to match (feed images with objects)"
    parts = [
        f"{d.matched} of {count(d.reference_boxes, 'reference box')} matched "
        f"({count(d.candidate_boxes, 'candidate box')} in {count(d.images, 'image')}; "
        f"{fmt(m['matched_fraction'])} of the union, {fmt(m['matched_by_score'])} by score)",
        f"mean IoU {fmt(m['mean_iou'])} (by score {fmt(m['mean_iou_by_score'])})",
        f"largest score change {fmt(m['max_score_change'])}",
    ]
    if m["count_diff_max"]:
        diff, total = fmt(m["count_diff_max"]), fmt(m["count_diff_total"])
        parts.append(f"count differs by up to {diff} an image ({total} in all)")
    if d.unmatched_score_max is not None:
        parts.append(f"highest unmatched score {fmt(d.unmatched_score_max)}")
    if d.class_changes:
        parts.append(f"{count(d.class_changes, 'box')} changed class")
    if d.nonfinite:
        parts.append(f"{count(d.nonfinite, 'box')} non-finite")
    return ", ".join(parts)


def detection_lines(cand: LayerwiseCandidate) -> list[str]:
    out = []
    for d in cand.detections or []:
        what = ", ".join(d.tensors)
        verdict = "" if d.passed else f"; fails {', '.join(d.failed or [])}"
        out.append(f"          {cand.name}: boxes in {what} ({d.layout}): {detection_text(d)}{verdict}")
        if d.errors:
            out.append(f"          {cand.name}: boxes in {what}: {d.errors[0]}")
    return out
