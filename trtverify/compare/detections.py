"""Detections compared as detections: boxes matched one to one by class and IoU, never index by index.

A detector's outputs are a set of boxes per image in an order that depends on near-equal scores: FP16 or INT8 can
swap two boxes whose scores differ in the fourth digit, which an elementwise comparison reads as two wrong boxes.
Here each image's valid boxes (the padding of fixed-size layouts left out, `trtverify.compare.detlayout` says which
tensors hold them) are matched greedily, the COCO evaluation's rule: reference boxes in descending score order, each
taking the unmatched candidate box of its class with the highest IoU, if that is at least `iou`. Scores only order
the reference, so however the candidate orders its boxes the result is the same. (Hungarian matching, which maximises
the summed IoU, differs only where one candidate box overlaps two reference boxes of its class above the threshold,
boxes that the NMS before it let through side by side; greedy is what mAP counts, and needs no solver.)

Pure functions of numpy arrays: used by the layerwise stage, and usable by any stage comparing detections.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


class DetectionError(ValueError):
    """The arrays do not hold the layout they were recognised as (another shape at this sample, another batch)."""


@dataclass(frozen=True)
class Boxes:
    """The valid detections of one image: boxes [n, 4] (x1, y1, x2, y2), scores [n], classes [n] (integers)."""

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray

    def __len__(self) -> int:
        return int(self.scores.shape[0])

    @classmethod
    def of(cls, boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray) -> Boxes:
        b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        s = np.asarray(scores, dtype=np.float64).reshape(-1)
        c = np.asarray(classes, dtype=np.float64).reshape(-1)
        if not (b.shape[0] == s.shape[0] == c.shape[0]):
            raise DetectionError(f"{b.shape[0]} boxes, {s.shape[0]} scores and {c.shape[0]} classes")
        labels = np.where(np.isfinite(c), np.rint(c), -1).astype(np.int64)  # a non-finite class matches nothing
        return cls(b, s, labels)


def valid_rows(scores: np.ndarray, classes: np.ndarray | None = None) -> np.ndarray:
    """The rows of a fixed-size layout without a count that hold detections: padding is every row whose score is
    <= 0 or whose class is < 0 (EfficientNMS-style zeros, mmdeploy's label -1), wherever it sits, so that a
    candidate ordering its rows otherwise reads the same. A NaN score is not padding: a broken candidate's NaN
    boxes are counted, and match nothing."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    pad = s <= 0
    if classes is not None:
        pad |= np.asarray(classes, dtype=np.float64).reshape(-1) < 0
    return np.flatnonzero(~pad)


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of `a` [n, 4] with every box of `b` [m, 4] (corners; a box with x2 < x1 has no area).
    Two boxes without area are at IoU 1 if equal, else 0; a non-finite box is at NaN with every other."""
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)[:, None, :]
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)[None, :, :]
    with np.errstate(invalid="ignore"):
        iw = np.clip(np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0]), 0, None)
        ih = np.clip(np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1]), 0, None)
        inter = iw * ih
        area_a = np.clip(a[..., 2] - a[..., 0], 0, None) * np.clip(a[..., 3] - a[..., 1], 0, None)
        area_b = np.clip(b[..., 2] - b[..., 0], 0, None) * np.clip(b[..., 3] - b[..., 1], 0, None)
        union = area_a + area_b - inter
        out = np.where(union > 0, inter / np.where(union > 0, union, 1.0), np.all(a == b, axis=-1).astype(np.float64))
    bad = ~(np.isfinite(a).all(-1) & np.isfinite(b).all(-1))
    out[bad] = np.nan
    return out


@dataclass(frozen=True)
class ImageMatch:
    """One image's matching: the pairs (reference index, candidate index, IoU) and what stayed unmatched."""

    reference: int
    candidate: int
    pairs: list[tuple[int, int, float]]
    score_changes: list[float]  # |reference score - candidate score| of each pair
    class_changes: int  # unmatched reference boxes overlapping an unmatched candidate box of another class

    @property
    def matched(self) -> int:
        return len(self.pairs)

    @property
    def fraction(self) -> float:
        """Matched boxes over the union of both sides' boxes (1 where both are empty)."""
        union = self.reference + self.candidate - self.matched
        return self.matched / union if union else 1.0


def _greedy(iou: np.ndarray, order: np.ndarray, cand_scores: np.ndarray, ref_scores: np.ndarray, thr: float) -> list[
    tuple[int, int, float]
]:  # fmt: skip
    """Reference rows in `order`, each taking the free candidate column of highest IoU >= thr (ties: the closest
    score, then the first)."""
    free = np.ones(iou.shape[1], dtype=bool)
    pairs = []
    for i in order:
        row = iou[i]
        ok = free & (row >= thr)  # NaN compares False
        if not ok.any():
            continue
        js = np.flatnonzero(ok)
        best = row[js].max()
        js = js[row[js] == best]
        if js.size > 1:
            js = js[np.argsort(np.abs(cand_scores[js] - ref_scores[i]), kind="stable")]
        j = int(js[0])
        free[j] = False
        pairs.append((int(i), j, float(best)))
    return pairs


def match(ref: Boxes, cand: Boxes, iou: float = 0.5) -> ImageMatch:
    """Reference and candidate boxes of one image matched one to one, by class and IoU >= `iou`."""
    n, m = len(ref), len(cand)
    if not n or not m:
        return ImageMatch(n, m, [], [], 0)
    overlap = iou_matrix(ref.boxes, cand.boxes)
    same = ref.classes[:, None] == cand.classes[None, :]
    keyed = np.where(same, overlap, np.nan)
    # descending score, NaN last, ties in the reference's own order
    order = np.argsort(np.where(np.isnan(ref.scores), np.inf, -ref.scores), kind="stable")
    pairs = _greedy(keyed, order, cand.scores, ref.scores, iou)
    changes = [abs(float(ref.scores[i]) - float(cand.scores[j])) for i, j, _ in pairs]
    # class flips: what stayed unmatched on both sides, overlapping at the threshold with another class
    left_r = np.setdiff1d(np.arange(n), [p[0] for p in pairs])
    left_c = np.setdiff1d(np.arange(m), [p[1] for p in pairs])
    flips = 0
    if left_r.size and left_c.size:
        sub = overlap[np.ix_(left_r, left_c)]
        sub_order = np.argsort(np.where(np.isnan(ref.scores[left_r]), np.inf, -ref.scores[left_r]), kind="stable")
        flips = len(_greedy(sub, sub_order, cand.scores[left_c], ref.scores[left_r], iou))
    return ImageMatch(n, m, pairs, changes, flips)


def weight(scores: np.ndarray) -> np.ndarray:
    """How much a box counts in the score-weighted figures: its score as a confidence, clipped to [0, 1]; a NaN
    score counts fully (a broken candidate's NaN boxes are not free)."""
    s = np.asarray(scores, dtype=np.float64)
    return np.where(np.isnan(s), 1.0, np.clip(s, 0.0, 1.0))


@dataclass
class DetectionStats:
    """Matches of one detection output over every image of every sample, as they stream by.

    Count figures treat every box alike; the score-weighted ones (`matched_by_score`, `mean_iou_by_score`) weigh
    each box by its score (a matched pair by the larger of its two), as average precision in effect does: the
    boxes just above the score threshold, which a lower precision moves in and out, count least."""

    iou: float = 0.5
    images: int = 0
    reference_boxes: int = 0
    candidate_boxes: int = 0
    matched: int = 0
    class_changes: int = 0
    nonfinite: int = 0  # boxes (either side) with a non-finite coordinate or score
    count_diff_max: int = 0
    count_diff_total: int = 0
    iou_sum: float = 0.0
    iou_min: float = math.inf
    score_change_max: float = 0.0
    matched_weight: float = 0.0
    unmatched_weight: float = 0.0
    weighted_iou: float = 0.0
    unmatched_score_max: float | None = None  # the highest score of a box left unmatched (either side)
    worst: tuple[float, int, int] | None = None  # (matched fraction, sample, image) of the worst image

    def add(self, sample: int, ref: Sequence[Boxes], cand: Sequence[Boxes]) -> None:
        if len(ref) != len(cand):
            raise DetectionError(f"{len(ref)} images in the reference, {len(cand)} in the candidate")
        for image, (r, c) in enumerate(zip(ref, cand)):
            got = match(r, c, self.iou)
            self.images += 1
            self.reference_boxes += got.reference
            self.candidate_boxes += got.candidate
            self.matched += got.matched
            self.class_changes += got.class_changes
            self.nonfinite += _nonfinite(r) + _nonfinite(c)
            diff = abs(got.reference - got.candidate)
            self.count_diff_max = max(self.count_diff_max, diff)
            self.count_diff_total += diff
            wr, wc = weight(r.scores), weight(c.scores)
            left_r = np.ones(len(r), dtype=bool)
            left_c = np.ones(len(c), dtype=bool)
            for i, j, v in got.pairs:
                w = max(wr[i], wc[j])
                self.iou_sum += v
                self.iou_min = min(self.iou_min, v)
                self.matched_weight += w
                self.weighted_iou += w * v
                left_r[i] = left_c[j] = False
            self.unmatched_weight += float(wr[left_r].sum() + wc[left_c].sum())
            left = np.concatenate([r.scores[left_r], c.scores[left_c]])
            if left.size:
                top = float(np.nanmax(left)) if not np.isnan(left).all() else math.nan
                old = self.unmatched_score_max
                self.unmatched_score_max = top if old is None or not top <= old else old
            self.score_change_max = max([self.score_change_max, *got.score_changes])
            if self.worst is None or got.fraction < self.worst[0]:
                self.worst = (got.fraction, sample, image)

    @property
    def matched_fraction(self) -> float:
        """Matched boxes over the union of valid reference and candidate boxes, over every image (1 where both
        sides have none): a dropped box and an added one count alike."""
        union = self.reference_boxes + self.candidate_boxes - self.matched
        return self.matched / union if union else 1.0

    @property
    def matched_by_score(self) -> float:
        """`matched_fraction` with each box weighed by its score (the count-based figure where every score is
        <= 0: logits, not confidences)."""
        total = self.matched_weight + self.unmatched_weight
        return self.matched_weight / total if total > 0 else self.matched_fraction

    @property
    def mean_iou(self) -> float:
        """Mean IoU of the matched pairs; 1 where neither side has a box, 0 where boxes matched none."""
        if self.matched:
            return self.iou_sum / self.matched
        return 1.0 if self.reference_boxes + self.candidate_boxes == 0 else 0.0

    @property
    def mean_iou_by_score(self) -> float:
        """Mean IoU of the matched pairs, each weighed by its score."""
        return self.weighted_iou / self.matched_weight if self.matched_weight > 0 else self.mean_iou

    def metrics(self) -> dict[str, float]:
        return {
            "matched_fraction": self.matched_fraction,
            "matched_by_score": self.matched_by_score,
            "mean_iou": self.mean_iou,
            "mean_iou_by_score": self.mean_iou_by_score,
            "min_iou": self.iou_min if self.matched else self.mean_iou,
            "max_score_change": self.score_change_max,
            "count_diff_max": float(self.count_diff_max),
            "count_diff_total": float(self.count_diff_total),
        }


def _nonfinite(b: Boxes) -> int:
    if not len(b):
        return 0
    return int(np.count_nonzero(~(np.isfinite(b.boxes).all(axis=1) & np.isfinite(b.scores))))
